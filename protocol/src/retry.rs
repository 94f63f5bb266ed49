//! Waiting between retries: exponential backoff with a cap. The one policy
//! every retry loop uses.

use std::time::Duration;

/// `base * 2^attempt`, at most `cap` (attempt 0 waits `base`).
pub fn backoff(base: Duration, cap: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1u32 << attempt.min(20)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap() {
        let (b, c) = (Duration::from_millis(200), Duration::from_secs(10));
        assert_eq!(backoff(b, c, 0), b);
        assert_eq!(backoff(b, c, 3), Duration::from_millis(1600));
        assert_eq!(backoff(b, c, 9), c);
        assert_eq!(backoff(b, c, u32::MAX), c);
    }
}

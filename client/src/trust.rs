//! Fail closed: after the first verification failure no private query is
//! sent to that server again (until the user resets trust), and every
//! private read fails alike, whatever its address or block.

use std::sync::Mutex;

use crate::ReadError;

/// Whether the PIR server is still trusted.
#[derive(Debug, Default)]
pub struct Trust {
    /// The reason of the first verification failure, once there was one.
    stopped: Mutex<Option<String>>,
}

impl Trust {
    /// Why private reads are stopped, if they are.
    pub fn stopped(&self) -> Option<String> {
        self.stopped.lock().expect("trust lock").clone()
    }

    /// Records a verification failure (the first one is logged, naming
    /// `server`) and returns the error every private read gets from now on.
    pub fn distrust(&self, reason: String, server: &str) -> ReadError {
        let mut stopped = self.stopped.lock().expect("trust lock");
        if stopped.is_none() {
            tracing::warn!(reason = %protocol::redact::Redacted(&reason), server = %protocol::url::redact(server), "the PIR server failed verification: private reads are stopped until the proxy restarts or `ethpir-proxy trust-reset`");
            *stopped = Some(reason);
        }
        ReadError::Distrusted(stopped.clone().expect("just set"))
    }

    /// Trusts the server again; returns the reason that had stopped
    /// private reads, if any.
    pub fn reset(&self) -> Option<String> {
        let was = self.stopped.lock().expect("trust lock").take();
        if let Some(reason) = &was {
            tracing::warn!(reason = %protocol::redact::Redacted(reason), "trust in the PIR server reset by the user");
        }
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_sticks_until_reset() {
        let t = Trust::default();
        assert_eq!(t.stopped(), None);
        assert_eq!(
            t.distrust("first".into(), "http://s"),
            ReadError::Distrusted("first".into())
        );
        assert_eq!(
            t.distrust("second".into(), "http://s"),
            ReadError::Distrusted("first".into())
        );
        assert_eq!(t.reset(), Some("first".into()));
        assert_eq!(t.stopped(), None);
    }
}

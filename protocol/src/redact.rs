//! What a log line at `info` and above may hold of a wallet's reads:
//! nothing that names an address, a key, a slot or call data. The user's
//! side logs its errors and reasons through [`Redacted`], whose text has
//! every run of 16 or more hex digits (an address, a word, a slot, call
//! data, with or without `0x`) replaced by `…` (even a few digits pick a
//! wallet out of a list of candidates); `debug` logs keep them whole (and
//! the proxy says so loudly at start).

use std::fmt;

/// Runs shorter than this stay whole (numbers, short ids, a selector).
const SHORTEST_CUT: usize = 16;

/// `text` as it may be logged at `info`: every run of [`SHORTEST_CUT`] or
/// more hex digits replaced by `…`.
pub fn redacted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= SHORTEST_CUT {
            out.push('…');
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// A value displayed as [`redacted`] text: `error = %Redacted(&e)`.
pub struct Redacted<T>(pub T);

impl<T: fmt::Display> fmt::Display for Redacted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redacted(&self.0.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_words_and_call_data_are_cut() {
        let holder = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
        let line = format!(
            "the storage of {holder} is not in snapshot base-17 (slot 0x{})",
            "ab".repeat(32)
        );
        assert_eq!(
            redacted(&line),
            "the storage of 0x… is not in snapshot base-17 (slot 0x…)"
        );
        // Short numbers, selectors and words stay.
        assert_eq!(
            redacted("block 0x1f4 selector 0x70a08231 at 12"),
            "block 0x1f4 selector 0x70a08231 at 12"
        );
        assert_eq!(
            redacted("insufficient funds: address 70997970c51812dc3a010c7d01b50e0d17dc79c8"),
            "insufficient funds: address …"
        );
        assert_eq!(Redacted(format!("x {holder}")).to_string(), "x 0x…");
        assert_eq!(redacted(""), "");
    }
}

//! [`Sha3Digest`]: how manifests and the catalog name a file's contents.
//! A validated type, because a digest from a peer becomes a cache file's
//! name and a comparison key: exactly 64 lowercase hex digits, nothing a
//! path or a URL could make anything else of.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A SHA3-256 digest in hex (64 lowercase hex digits).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha3Digest(String);

/// Why a string is not a [`Sha3Digest`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a SHA3-256 digest (64 lowercase hex digits): {0} bytes")]
pub struct DigestError(pub usize);

impl Sha3Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha3::{Digest, Sha3_256};
        Self::from_bytes(&Sha3_256::digest(bytes).into())
    }

    /// The hex form of a raw 32-byte digest.
    pub fn from_bytes(digest: &[u8; 32]) -> Self {
        Sha3Digest(digest.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// All zeros: a placeholder (tests, manifests before their digest is
/// known); never the digest of real content in practice.
impl Default for Sha3Digest {
    fn default() -> Self {
        Sha3Digest("0".repeat(64))
    }
}

impl FromStr for Sha3Digest {
    type Err = DigestError;
    fn from_str(s: &str) -> Result<Self, DigestError> {
        let hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
        match s.len() == 64 && s.bytes().all(hex) {
            true => Ok(Sha3Digest(s.to_string())),
            false => Err(DigestError(s.len())),
        }
    }
}

impl fmt::Display for Sha3Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Sha3Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha3Digest({})", self.0)
    }
}

impl PartialEq<str> for Sha3Digest {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Sha3Digest {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl Serialize for Sha3Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Sha3Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_lowercase_hex_digits_are_digests() {
        let d = Sha3Digest::of(b"abc");
        assert_eq!(d.as_str().parse::<Sha3Digest>().unwrap(), d);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<Sha3Digest>(&json).unwrap(), d);
        for bad in [
            "",
            "../../etc/passwd",
            &d.as_str().to_uppercase(),
            &d.as_str()[1..],
            &format!("{d}0"),
            &format!("{}/", &d.as_str()[1..]),
        ] {
            assert!(bad.parse::<Sha3Digest>().is_err(), "{bad}");
            let quoted = serde_json::to_string(bad).unwrap();
            assert!(serde_json::from_str::<Sha3Digest>(&quoted).is_err());
        }
    }
}

//! Key digests: every key is hashed once; the filter positions and the
//! partition derive from it. Every record also carries a 64-bit tag of the
//! key *and* its value: a decoded record whose tag does not verify means
//! "not in this database" (or a response altered in transit), never a value.

use sha3::digest::{ExtendableOutput, Update, XofReader};
use sha3::{TurboShake128, TurboShake128Core};

/// TurboSHAKE128 domain separation byte of key digests.
pub const DOMAIN_KEY: u8 = 0x0B;
/// TurboSHAKE128 domain separation byte of record tags.
pub const DOMAIN_TAG: u8 = 0x0C;
/// Bytes of the tag stored in front of every record.
pub const TAG_BYTES: usize = 8;

/// What the engine needs to know about a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyDigest {
    /// 128 bits from which filter hashes and partitions are derived.
    pub base: [u64; 2],
}

impl KeyDigest {
    /// Hashes a key of any length.
    pub fn of(key: &[u8]) -> Self {
        let mut xof = TurboShake128::from_core(TurboShake128Core::new(DOMAIN_KEY));
        xof.update(key);
        let mut out = [0u8; 16];
        xof.finalize_xof().read(&mut out);
        let word = |i: usize| u64::from_le_bytes(out[i * 8..i * 8 + 8].try_into().unwrap());
        KeyDigest {
            base: [word(0), word(1)],
        }
    }

    /// The 64-bit hash a binary fuse filter with seed `seed` uses.
    pub fn filter_hash(&self, seed: u64) -> u64 {
        mix64(self.base[0] ^ mix64(self.base[1].wrapping_add(seed)))
    }

    /// The partition (0..k) this key belongs to under `seed`.
    pub fn partition(&self, seed: u64, partitions: u32) -> u32 {
        let h = mix64(self.base[1] ^ mix64(self.base[0] ^ seed));
        ((h as u128 * partitions as u128) >> 64) as u32
    }
}

/// The tag stored in front of `value` for `key`.
pub fn record_tag(key: &[u8], value: &[u8]) -> u64 {
    let mut xof = TurboShake128::from_core(TurboShake128Core::new(DOMAIN_TAG));
    xof.update(&(key.len() as u64).to_le_bytes());
    xof.update(key);
    xof.update(value);
    let mut out = [0u8; 8];
    xof.finalize_xof().read(&mut out);
    u64::from_le_bytes(out)
}

/// The splitmix64 / murmur3 finaliser: a bijective 64-bit mixer.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_differ_and_are_stable() {
        let a = KeyDigest::of(b"alice");
        assert_eq!(a, KeyDigest::of(b"alice"));
        assert_ne!(a, KeyDigest::of(b"alicf"));
        assert_ne!(a.filter_hash(1), a.filter_hash(2));
        assert_ne!(record_tag(b"ab", b"c"), record_tag(b"a", b"bc"));
    }

    #[test]
    fn partitions_are_in_range_and_balanced() {
        let mut counts = [0u32; 7];
        for i in 0u32..7000 {
            counts[KeyDigest::of(&i.to_le_bytes()).partition(42, 7) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}

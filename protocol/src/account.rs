//! Account records and their PIR value encoding.
//!
//! PIR key: keccak256(address), so that reth's `HashedAccounts` (which only
//! knows the hash) and every other source give the same key, and the proxy
//! computes it from the address it is asked about.
//!
//! PIR value: `nonce (u64 LE) || balance (LE)`. The balance takes 16 bytes
//! (24-byte values) when every balance of the snapshot is below 2^128, which
//! is every real one; otherwise the snapshot escapes to 32 bytes (40-byte
//! values). The width is in the snapshot's setup data, so decoding is never
//! ambiguous.

use alloy_primitives::{b256, keccak256, Address, B256, U256};

/// keccak256 of no bytes: the code hash of an account without code.
pub const EMPTY_CODE_HASH: B256 =
    b256!("c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");
/// The root of an empty trie: the storage root of an account without storage.
pub const EMPTY_STORAGE_ROOT: B256 =
    b256!("56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421");

/// Value width when every balance fits in 128 bits.
pub const COMPACT_VALUE_BYTES: usize = 24;
/// Value width when some balance needs the full 256 bits.
pub const WIDE_VALUE_BYTES: usize = 40;

/// One account as exported from a source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountRecord {
    /// The address, when the source knows it (reth's v2 layout only has its hash).
    pub address: Option<Address>,
    /// keccak256(address): the PIR key.
    pub key: B256,
    pub balance: U256,
    pub nonce: u64,
    /// keccak256 of the account's code ([`EMPTY_CODE_HASH`]: none).
    pub code_hash: B256,
    /// The root of the account's storage trie ([`EMPTY_STORAGE_ROOT`]: none).
    pub storage_root: B256,
    /// Not in the state at the snapshot's block: a delta's record of an
    /// account the chain removed (its value reads 0/0). The node's proof
    /// decides, not the values: an empty account may still be in the state.
    pub deleted: bool,
}

impl AccountRecord {
    /// An account without code or storage.
    pub fn new(address: Address, balance: U256, nonce: u64) -> Self {
        AccountRecord {
            address: Some(address),
            key: keccak256(address),
            balance,
            nonce,
            code_hash: EMPTY_CODE_HASH,
            storage_root: EMPTY_STORAGE_ROOT,
            deleted: false,
        }
    }

    /// A record known only by its hashed address.
    pub fn from_hashed(key: B256, balance: U256, nonce: u64) -> Self {
        AccountRecord {
            address: None,
            key,
            balance,
            nonce,
            code_hash: EMPTY_CODE_HASH,
            storage_root: EMPTY_STORAGE_ROOT,
            deleted: false,
        }
    }

    /// The same account with this code hash and storage root.
    pub fn with_trie(mut self, code_hash: B256, storage_root: B256) -> Self {
        self.code_hash = code_hash;
        self.storage_root = storage_root;
        self
    }

    /// The same account, its code hash and storage root unknown (zero,
    /// never a hash the chain has): a source that cannot read them.
    pub fn without_trie(self) -> Self {
        self.with_trie(B256::ZERO, B256::ZERO)
    }

    /// Whether the code hash and storage root are known.
    pub fn trie_known(&self) -> bool {
        !self.code_hash.is_zero() && !self.storage_root.is_zero()
    }

    /// The record of `address` removed from the state (or never in it).
    pub fn deleted(address: Address) -> Self {
        AccountRecord {
            deleted: true,
            ..AccountRecord::new(address, U256::ZERO, 0)
        }
    }

    /// Empty in EIP-161's sense: no nonce, balance, code or storage.
    pub fn is_empty(&self) -> bool {
        self.nonce == 0
            && self.balance.is_zero()
            && self.code_hash == EMPTY_CODE_HASH
            && self.storage_root == EMPTY_STORAGE_ROOT
    }
}

/// The PIR key of an address.
pub fn pir_key(address: &Address) -> B256 {
    keccak256(address)
}

/// The narrowest value width that holds every balance.
pub fn value_width(records: &[AccountRecord]) -> usize {
    if records.iter().all(|r| r.balance.bit_len() <= 128) {
        COMPACT_VALUE_BYTES
    } else {
        WIDE_VALUE_BYTES
    }
}

/// Encodes `(balance, nonce)` in `width` bytes (24 or 40).
pub fn encode_value(balance: U256, nonce: u64, width: usize) -> Vec<u8> {
    debug_assert!(width == COMPACT_VALUE_BYTES || width == WIDE_VALUE_BYTES);
    let mut out = Vec::with_capacity(width);
    out.extend_from_slice(&nonce.to_le_bytes());
    let le: [u8; 32] = balance.to_le_bytes();
    out.extend_from_slice(&le[..width - 8]);
    out
}

/// A value that is not an account encoding.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("an account value has 24 or 40 bytes, not {0}")]
pub struct ValueError(pub usize);

/// Decodes `(balance, nonce)`.
pub fn decode_value(bytes: &[u8]) -> Result<(U256, u64), ValueError> {
    if bytes.len() != COMPACT_VALUE_BYTES && bytes.len() != WIDE_VALUE_BYTES {
        return Err(ValueError(bytes.len()));
    }
    let nonce = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let mut le = [0u8; 32];
    le[..bytes.len() - 8].copy_from_slice(&bytes[8..]);
    Ok((U256::from_le_bytes(le), nonce))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_in_both_widths() {
        for (balance, nonce) in [
            (U256::ZERO, 0u64),
            (U256::from(10u64).pow(U256::from(26u64)), 7),
            (U256::MAX >> 128, u64::MAX),
        ] {
            let v = encode_value(balance, nonce, COMPACT_VALUE_BYTES);
            assert_eq!(decode_value(&v).unwrap(), (balance, nonce));
        }
        let v = encode_value(U256::MAX, 3, WIDE_VALUE_BYTES);
        assert_eq!(decode_value(&v).unwrap(), (U256::MAX, 3));
        assert_eq!(decode_value(&[0; 10]), Err(ValueError(10)));
    }

    #[test]
    fn empty_hashes_are_the_chains() {
        assert_eq!(keccak256([]), EMPTY_CODE_HASH);
        // RLP of the empty string, hashed: the empty trie's root.
        assert_eq!(keccak256([0x80]), EMPTY_STORAGE_ROOT);
        let a = AccountRecord::new(Address::repeat_byte(1), U256::ZERO, 0);
        assert!(a.is_empty());
        assert!(!a
            .clone()
            .with_trie(B256::repeat_byte(1), EMPTY_STORAGE_ROOT)
            .is_empty());
    }

    #[test]
    fn width_escapes_for_huge_balances() {
        let a = Address::repeat_byte(1);
        assert_eq!(
            value_width(&[AccountRecord::new(a, U256::from(1u64) << 127, 0)]),
            COMPACT_VALUE_BYTES
        );
        assert_eq!(
            value_width(&[AccountRecord::new(a, U256::from(1u64) << 128, 0)]),
            WIDE_VALUE_BYTES
        );
    }
}

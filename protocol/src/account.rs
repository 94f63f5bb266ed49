//! Account records and their PIR value encoding.
//!
//! PIR key: keccak256(address), so that reth's `HashedAccounts` (which only
//! knows the hash) and every other source give the same key, and the proxy
//! computes it from the address it is asked about.
//!
//! PIR value (manifest format 2, [`ValueLayout::WithCode`]): `nonce (LE)
//! || balance (LE) || code (u32 LE)`, where `code` says which code the
//! account has ([`CodeRef`]: none, or its place in the snapshot's public
//! table of distinct codes, see [`crate::codes`]). Compact, 24 bytes: a
//! 6-byte nonce and a 14-byte balance, when every nonce of the snapshot is
//! below 2^48 and every balance below 2^112 (5e15 ETH: every real one); so
//! the code reference costs the database nothing. Otherwise the snapshot
//! escapes to 44 bytes (8-byte nonce, 32-byte balance). The width is in the
//! snapshot's setup data, the layout in its manifest's format, so decoding
//! is never ambiguous.
//!
//! Manifest format 1 ([`ValueLayout::Plain`]) wrote `nonce (u64 LE) ||
//! balance (LE)` in 24 or 40 bytes, without code: still read.

use alloy_primitives::{b256, keccak256, Address, B256, U256};

/// keccak256 of no bytes: the code hash of an account without code.
pub const EMPTY_CODE_HASH: B256 =
    b256!("c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470");
/// The root of an empty trie: the storage root of an account without storage.
pub const EMPTY_STORAGE_ROOT: B256 =
    b256!("56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421");

/// Value width when every nonce fits in 48 bits and every balance in 112.
pub const COMPACT_VALUE_BYTES: usize = 24;
/// Value width when some nonce or balance does not.
pub const WIDE_VALUE_BYTES: usize = 44;
/// The wide width of manifest format 1's values (no code reference).
pub const PLAIN_WIDE_VALUE_BYTES: usize = 40;

/// Bits of a nonce and of a balance in a compact value.
const COMPACT_NONCE_BITS: usize = 48;
const COMPACT_BALANCE_BITS: usize = 112;
/// Bytes of the code reference at the end of a value.
const CODE_REF_BYTES: usize = 4;

/// How a snapshot's account values are laid out: by its manifest format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueLayout {
    /// Format 1: nonce and balance only.
    Plain,
    /// Format 2: nonce, balance and a code reference.
    WithCode,
}

impl ValueLayout {
    /// The layout of a snapshot whose manifest has `format`.
    pub fn of_format(format: u32) -> Self {
        if format >= 2 {
            ValueLayout::WithCode
        } else {
            ValueLayout::Plain
        }
    }
}

/// Which code an account has, as its PIR value says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodeRef {
    /// No code ([`EMPTY_CODE_HASH`]).
    None,
    /// Entry `n` (from 1) of the snapshot's code table.
    Table(u32),
    /// The snapshot does not say (its source could not read code hashes,
    /// or it was written before values carried code).
    Unknown,
}

impl CodeRef {
    const UNKNOWN: u32 = u32::MAX;

    fn to_u32(self) -> u32 {
        match self {
            CodeRef::None => 0,
            CodeRef::Table(n) => n,
            CodeRef::Unknown => Self::UNKNOWN,
        }
    }

    fn from_u32(n: u32) -> Self {
        match n {
            0 => CodeRef::None,
            Self::UNKNOWN => CodeRef::Unknown,
            n => CodeRef::Table(n),
        }
    }
}

/// An account's PIR value, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccountValue {
    pub balance: U256,
    pub nonce: u64,
    pub code: CodeRef,
}

impl AccountValue {
    pub fn balance_nonce(&self) -> (U256, u64) {
        (self.balance, self.nonce)
    }
}

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

/// Whether a compact value holds this account.
pub fn fits_compact(record: &AccountRecord) -> bool {
    record.balance.bit_len() <= COMPACT_BALANCE_BITS && (record.nonce >> COMPACT_NONCE_BITS) == 0
}

/// The narrowest value width that holds every account.
pub fn value_width(records: &[AccountRecord]) -> usize {
    if records.iter().all(fits_compact) {
        COMPACT_VALUE_BYTES
    } else {
        WIDE_VALUE_BYTES
    }
}

/// Bytes of the nonce in a value of `width` bytes (without the code
/// reference's).
fn nonce_bytes(width: usize) -> usize {
    if width == COMPACT_VALUE_BYTES {
        COMPACT_NONCE_BITS / 8
    } else {
        8
    }
}

/// Encodes an account in `width` bytes (24 or 44, the snapshot's): the
/// caller chose a width that holds it ([`value_width`]).
pub fn encode_value(value: &AccountValue, width: usize) -> Vec<u8> {
    assert!(width == COMPACT_VALUE_BYTES || width == WIDE_VALUE_BYTES);
    let nonce_len = nonce_bytes(width);
    let balance_len = width - nonce_len - CODE_REF_BYTES;
    let mut out = Vec::with_capacity(width);
    out.extend_from_slice(&value.nonce.to_le_bytes()[..nonce_len]);
    let le: [u8; 32] = value.balance.to_le_bytes();
    out.extend_from_slice(&le[..balance_len]);
    out.extend_from_slice(&value.code.to_u32().to_le_bytes());
    out
}

/// A value that is not an account encoding.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("an account value of this layout has 24 or {wide} bytes, not {len}")]
pub struct ValueError {
    pub len: usize,
    pub wide: usize,
}

/// Decodes a value of `layout` (the snapshot's manifest says which).
pub fn decode_value(bytes: &[u8], layout: ValueLayout) -> Result<AccountValue, ValueError> {
    let wide = match layout {
        ValueLayout::Plain => PLAIN_WIDE_VALUE_BYTES,
        ValueLayout::WithCode => WIDE_VALUE_BYTES,
    };
    if bytes.len() != COMPACT_VALUE_BYTES && bytes.len() != wide {
        return Err(ValueError {
            len: bytes.len(),
            wide,
        });
    }
    let (nonce_len, code_len, code) = match layout {
        ValueLayout::Plain => (8, 0, CodeRef::Unknown),
        ValueLayout::WithCode => {
            let (_, code) = bytes.split_at(bytes.len() - CODE_REF_BYTES);
            let code = u32::from_le_bytes(code.try_into().expect("4 bytes"));
            let nonce_len = nonce_bytes(bytes.len());
            (nonce_len, CODE_REF_BYTES, CodeRef::from_u32(code))
        }
    };
    let mut nonce = [0u8; 8];
    nonce[..nonce_len].copy_from_slice(&bytes[..nonce_len]);
    let mut le = [0u8; 32];
    let balance = &bytes[nonce_len..bytes.len() - code_len];
    le[..balance.len()].copy_from_slice(balance);
    Ok(AccountValue {
        balance: U256::from_le_bytes(le),
        nonce: u64::from_le_bytes(nonce),
        code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(balance: U256, nonce: u64, code: CodeRef, width: usize) {
        let value = AccountValue {
            balance,
            nonce,
            code,
        };
        let bytes = encode_value(&value, width);
        assert_eq!(bytes.len(), width);
        assert_eq!(decode_value(&bytes, ValueLayout::WithCode), Ok(value));
    }

    #[test]
    fn values_round_trip_in_both_widths() {
        for (balance, nonce) in [
            (U256::ZERO, 0u64),
            (U256::from(10u64).pow(U256::from(26u64)), 7),
            ((U256::from(1u8) << 112) - U256::from(1u8), (1 << 48) - 1),
        ] {
            for code in [CodeRef::None, CodeRef::Table(1), CodeRef::Unknown] {
                round_trip(balance, nonce, code, COMPACT_VALUE_BYTES);
            }
        }
        round_trip(
            U256::MAX,
            u64::MAX,
            CodeRef::Table(u32::MAX - 1),
            WIDE_VALUE_BYTES,
        );
        let err = decode_value(&[0; 10], ValueLayout::WithCode);
        assert_eq!(err, Err(ValueError { len: 10, wide: 44 }));
    }

    #[test]
    fn format_one_values_read_without_code() {
        // nonce u64 LE || balance LE, 24 or 40 bytes.
        let mut plain = 9u64.to_le_bytes().to_vec();
        plain.extend_from_slice(&U256::from(5u8).to_le_bytes::<32>()[..16]);
        let value = decode_value(&plain, ValueLayout::Plain).unwrap();
        assert_eq!((value.balance, value.nonce), (U256::from(5u8), 9));
        assert_eq!(value.code, CodeRef::Unknown);
        let mut wide = 1u64.to_le_bytes().to_vec();
        wide.extend_from_slice(&U256::MAX.to_le_bytes::<32>());
        assert_eq!(
            decode_value(&wide, ValueLayout::Plain).unwrap().balance,
            U256::MAX
        );
        assert!(decode_value(&wide, ValueLayout::WithCode).is_err());
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
    fn width_escapes_for_huge_balances_and_nonces() {
        let a = Address::repeat_byte(1);
        let width =
            |balance: U256, nonce: u64| value_width(&[AccountRecord::new(a, balance, nonce)]);
        assert_eq!(
            width(U256::from(1u64) << 111, (1 << 48) - 1),
            COMPACT_VALUE_BYTES
        );
        assert_eq!(width(U256::from(1u64) << 112, 0), WIDE_VALUE_BYTES);
        assert_eq!(width(U256::ZERO, 1 << 48), WIDE_VALUE_BYTES);
    }
}

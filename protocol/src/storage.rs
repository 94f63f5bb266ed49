//! Storage records: one storage slot of a listed contract, and its PIR
//! encoding beside the accounts (the same database, the same value width,
//! so that a lookup never says which kind it reads).
//!
//! PIR key: `keccak256(keccak256(contract) || keccak256(slot))`. Both
//! halves are what reth's hashed tables hold (`HashedStorages` is keyed by
//! the hashed address and the hashed slot), its plain tables and a genesis
//! file give the preimages, and the proxy computes both from the contract
//! and the slot it is asked about. A 64-byte preimage cannot give an
//! account's key (keccak256 of a 20-byte address) short of a collision.
//!
//! PIR value, in the snapshot's value width `w` (24 or 44 bytes, the
//! accounts' width): a flag byte, then the word little-endian in the
//! remaining `w - 1` bytes (at most 32 of them used, the rest zero). Flag
//! 0: the word is stored. Flag 2 (manifest format 4, 24-byte values
//! only): the word needs more than 23 bytes (an unlimited allowance, a
//! flagged balance, a hash, a packed struct): its low 23 bytes are here,
//! its high 9 in a record of their own at [`high_part_key`] (flag 0),
//! read after it. Widening every value of the database to 32 bytes for
//! the rare wide word would cost the accounts a third more; the escape
//! costs one record per wide word. Flag 1 (format 3 and before): the word
//! was too wide and not stored; the reader must not answer it.

use alloy_primitives::{keccak256, Address, B256, U256};
use serde::{Deserialize, Serialize};

use crate::tokens::TokenEntry;

/// The contracts whose storage a snapshot holds (every slot of each), as
/// its manifest lists them: the tokens, whose `balanceOf` the proxy answers
/// from their balances mapping, and other contracts, whose slots it
/// answers to `eth_getStorageAt`. Every level of a view lists what its
/// base lists: a contract enters a chain's private set with a new base,
/// which holds all of its storage.
///
/// `whole_state`: the snapshot holds every slot of every contract (the
/// snapshotter's `storage = "all"`), so a slot it lacks is zero, as the
/// EVM reads an unset slot. It is a claim of the manifest, covered by the
/// build seeds and by every attestation (both take this whole struct),
/// and checkable against the state root (`ethpir-snapshot verify
/// --state-root` recomputes each contract's storage root from the
/// records); only under it does a reader take a missing slot of an
/// unlisted contract as zero.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivateStorage {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<TokenEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contracts: Vec<Address>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub whole_state: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl PrivateStorage {
    /// The claim of a snapshot that holds every slot of every contract.
    pub fn whole_state() -> Self {
        PrivateStorage {
            whole_state: true,
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty() && self.contracts.is_empty() && !self.whole_state
    }

    /// Whether every slot of `contract` is held.
    pub fn holds(&self, contract: &Address) -> bool {
        self.whole_state || self.token(contract).is_some() || self.contracts.contains(contract)
    }

    /// A token entry of `contract` (any of its getters), if it is listed.
    pub fn token(&self, contract: &Address) -> Option<&TokenEntry> {
        self.tokens.iter().find(|t| &t.address == contract)
    }

    /// The entry of `contract`'s getter `selector`, if it is listed.
    pub fn getter(&self, contract: &Address, selector: [u8; 4]) -> Option<&TokenEntry> {
        self.tokens
            .iter()
            .find(|t| &t.address == contract && t.function.selector() == selector)
    }

    /// Every contract held, tokens first, each once.
    pub fn all_contracts(&self) -> Vec<Address> {
        let mut out: Vec<Address> = Vec::new();
        for c in self
            .tokens
            .iter()
            .map(|t| &t.address)
            .chain(&self.contracts)
        {
            if !out.contains(c) {
                out.push(*c);
            }
        }
        out
    }
}

/// A storage slot's content as exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRecord {
    /// The contract, when the source knows it (reth's hashed layout does not).
    pub contract: Option<Address>,
    /// keccak256(contract).
    pub hashed_contract: B256,
    /// keccak256(slot).
    pub hashed_slot: B256,
    /// The PIR key ([`storage_key`]).
    pub key: B256,
    pub value: U256,
}

impl StorageRecord {
    /// A slot known by its contract and slot number.
    pub fn new(contract: Address, slot: B256, value: U256) -> Self {
        Self::from_hashed(keccak256(contract), keccak256(slot), value).with_contract(contract)
    }

    /// A slot known only by the hashes (reth's hashed tables).
    pub fn from_hashed(hashed_contract: B256, hashed_slot: B256, value: U256) -> Self {
        StorageRecord {
            contract: None,
            hashed_contract,
            hashed_slot,
            key: storage_key(&hashed_contract, &hashed_slot),
            value,
        }
    }

    fn with_contract(mut self, contract: Address) -> Self {
        self.contract = Some(contract);
        self
    }
}

/// The PIR key of a slot from its two hashes.
pub fn storage_key(hashed_contract: &B256, hashed_slot: &B256) -> B256 {
    let mut input = [0u8; 64];
    input[..32].copy_from_slice(hashed_contract.as_slice());
    input[32..].copy_from_slice(hashed_slot.as_slice());
    keccak256(input)
}

/// The PIR key of `slot` of `contract`: what the proxy computes.
pub fn storage_key_of(contract: &Address, slot: &B256) -> B256 {
    storage_key(&keccak256(contract), &keccak256(slot))
}

/// A stored word.
const STORED: u8 = 0;
/// A word too wide for the snapshot's values, not stored (format 3).
const TOO_WIDE: u8 = 1;
/// A wide word's low part; its high part has a record of its own.
const LOW_PART: u8 = 2;

/// What a storage value says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredWord {
    Word(U256),
    /// The word is wider than the snapshot's values hold: ask elsewhere
    /// (format 3).
    TooWide,
    /// The low bytes of a wide word (as many as the value holds); the
    /// rest is the word at [`high_part_key`], shifted ([`join_word`]).
    Low(U256),
}

/// The PIR key of the record holding the high part of the wide word at
/// `key` (a slot's key): a preimage no account's or slot's key has.
pub fn high_part_key(key: &B256) -> B256 {
    let mut input = b"ethpir high part".to_vec();
    input.extend_from_slice(key.as_slice());
    keccak256(input)
}

/// Bits of a word a value of `width` bytes holds.
fn held_bits(width: usize) -> usize {
    8 * (width - 1).min(32)
}

/// A wide word's high part's record at `key`'s companion key, when the
/// word does not fit a value of `width` bytes.
pub fn high_part_record(
    key: &B256,
    value: U256,
    width: usize,
) -> Result<Option<(B256, Vec<u8>)>, StorageValueError> {
    check_width(width)?;
    if value.bit_len() <= held_bits(width) {
        return Ok(None);
    }
    let high = encode_word(value >> held_bits(width), width)?;
    Ok(Some((high_part_key(key), high)))
}

/// The word whose low part is `low` and high part `high`, in a value of
/// `width` bytes.
pub fn join_word(low: U256, high: U256, width: usize) -> U256 {
    low | (high << held_bits(width))
}

/// Why bytes are not a storage value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StorageValueError {
    #[error("a storage value has 24, 40 or 44 bytes, not {0}")]
    Width(usize),
    #[error("unknown storage value flag {0}")]
    Flag(u8),
    #[error("a too-wide marker carries a word")]
    MarkerWithWord,
    #[error("a stored word has non-zero bytes past its 32")]
    Padding,
}

fn check_width(width: usize) -> Result<(), StorageValueError> {
    match width {
        crate::account::COMPACT_VALUE_BYTES
        | crate::account::WIDE_VALUE_BYTES
        | crate::account::PLAIN_WIDE_VALUE_BYTES => Ok(()),
        other => Err(StorageValueError::Width(other)),
    }
}

/// Encodes a word in `width` bytes (24, or 44: format 1's 40 still read):
/// stored when it fits in `width - 1` bytes, else its low part (and
/// [`high_part_record`] the rest).
pub fn encode_word(value: U256, width: usize) -> Result<Vec<u8>, StorageValueError> {
    check_width(width)?;
    let mut out = vec![0u8; width];
    out[0] = match value.bit_len() > held_bits(width) {
        true => LOW_PART,
        false => STORED,
    };
    let le: [u8; 32] = value.to_le_bytes();
    let used = (width - 1).min(32);
    out[1..1 + used].copy_from_slice(&le[..used]);
    Ok(out)
}

/// Decodes what [`encode_word`] made.
pub fn decode_word(bytes: &[u8]) -> Result<StoredWord, StorageValueError> {
    check_width(bytes.len())?;
    match bytes[0] {
        STORED | LOW_PART => {
            // A 40-byte value has 39 bytes for a 32-byte word: the rest is 0.
            let (word, rest) = bytes[1..].split_at((bytes.len() - 1).min(32));
            if rest.iter().any(|&b| b != 0) {
                return Err(StorageValueError::Padding);
            }
            let mut le = [0u8; 32];
            le[..word.len()].copy_from_slice(word);
            let word = U256::from_le_bytes(le);
            match bytes[0] {
                STORED => Ok(StoredWord::Word(word)),
                _ if bytes.len() > crate::account::COMPACT_VALUE_BYTES => {
                    Err(StorageValueError::Flag(LOW_PART))
                }
                _ => Ok(StoredWord::Low(word)),
            }
        }
        TOO_WIDE if bytes[1..].iter().all(|&b| b == 0) => Ok(StoredWord::TooWide),
        TOO_WIDE => Err(StorageValueError::MarkerWithWord),
        flag => Err(StorageValueError::Flag(flag)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::{pir_key, COMPACT_VALUE_BYTES, WIDE_VALUE_BYTES};

    #[test]
    fn only_a_whole_state_claim_holds_every_contract() {
        let listed = Address::repeat_byte(1);
        let other = Address::repeat_byte(2);
        let some = PrivateStorage {
            contracts: vec![listed],
            ..Default::default()
        };
        assert!(some.holds(&listed) && !some.holds(&other));
        let all = PrivateStorage::whole_state();
        assert!(all.holds(&listed) && all.holds(&other));
        assert!(!all.is_empty());
        // The claim is in the serialised form (what seeds and signatures
        // take), and absent from a list that does not make it.
        let text = serde_json::to_string(&all).unwrap();
        assert_eq!(text, r#"{"whole_state":true}"#);
        assert_eq!(serde_json::from_str::<PrivateStorage>(&text).unwrap(), all);
        assert_eq!(serde_json::to_string(&some).unwrap().find("whole"), None);
    }

    #[test]
    fn keys_from_preimages_and_from_hashes_agree() {
        let contract = Address::repeat_byte(0x11);
        let slot = B256::with_last_byte(3);
        let plain = StorageRecord::new(contract, slot, U256::from(5u8));
        let hashed =
            StorageRecord::from_hashed(keccak256(contract), keccak256(slot), U256::from(5u8));
        assert_eq!(plain.key, hashed.key);
        assert_eq!(plain.key, storage_key_of(&contract, &slot));
        assert_eq!(plain.contract, Some(contract));
        assert_eq!(hashed.contract, None);
        // Another slot, another contract, and the contract's account key
        // all differ.
        assert_ne!(
            plain.key,
            storage_key_of(&contract, &B256::with_last_byte(4))
        );
        assert_ne!(
            plain.key,
            storage_key_of(&Address::repeat_byte(0x12), &slot)
        );
        assert_ne!(plain.key, pir_key(&contract));
    }

    #[test]
    fn words_round_trip_and_wide_ones_in_two_records() {
        // The widest word a 24-byte value stores: 23 bytes.
        let fits = (U256::from(1u8) << (8 * (COMPACT_VALUE_BYTES - 1))) - U256::from(1u8);
        let key = B256::repeat_byte(7);
        for width in [COMPACT_VALUE_BYTES, WIDE_VALUE_BYTES] {
            for word in [U256::ZERO, U256::from(10u64).pow(U256::from(24u8)), fits] {
                let bytes = encode_word(word, width).unwrap();
                assert_eq!(bytes.len(), width);
                assert_eq!(decode_word(&bytes), Ok(StoredWord::Word(word)), "{word}");
                assert_eq!(high_part_record(&key, word, width), Ok(None));
            }
        }
        // Wider: the low 23 bytes here, the rest in the high part's record.
        for wide in [fits + U256::from(1u8), U256::MAX, U256::from(1u8) << 255] {
            let bytes = encode_word(wide, COMPACT_VALUE_BYTES).unwrap();
            let Ok(StoredWord::Low(low)) = decode_word(&bytes) else {
                panic!("{wide}: not a low part")
            };
            let (at, high) = high_part_record(&key, wide, COMPACT_VALUE_BYTES)
                .unwrap()
                .unwrap();
            assert_eq!(at, high_part_key(&key));
            assert_ne!(at, key);
            let Ok(StoredWord::Word(high)) = decode_word(&high) else {
                panic!("{wide}: the high part is a plain word")
            };
            assert_eq!(join_word(low, high, COMPACT_VALUE_BYTES), wide);
        }
        // Every word fits the wide width (43 bytes hold 256 bits).
        assert_eq!(
            decode_word(&encode_word(U256::MAX, WIDE_VALUE_BYTES).unwrap()),
            Ok(StoredWord::Word(U256::MAX))
        );
        let mut low_in_wide = encode_word(U256::MAX, WIDE_VALUE_BYTES).unwrap();
        low_in_wide[0] = LOW_PART;
        assert_eq!(
            decode_word(&low_in_wide),
            Err(StorageValueError::Flag(LOW_PART))
        );
        // Format 3's marker is still read.
        let mut marker = vec![0u8; COMPACT_VALUE_BYTES];
        marker[0] = TOO_WIDE;
        assert_eq!(decode_word(&marker), Ok(StoredWord::TooWide));
    }

    #[test]
    fn malformed_values_are_refused() {
        assert_eq!(
            encode_word(U256::ZERO, 32),
            Err(StorageValueError::Width(32))
        );
        assert_eq!(decode_word(&[0; 10]), Err(StorageValueError::Width(10)));
        let mut bad = vec![0u8; COMPACT_VALUE_BYTES];
        bad[0] = 7;
        assert_eq!(decode_word(&bad), Err(StorageValueError::Flag(7)));
        bad[0] = TOO_WIDE;
        bad[5] = 1;
        assert_eq!(decode_word(&bad), Err(StorageValueError::MarkerWithWord));
        let mut padded = encode_word(U256::MAX, WIDE_VALUE_BYTES).unwrap();
        padded[WIDE_VALUE_BYTES - 1] = 1;
        assert_eq!(decode_word(&padded), Err(StorageValueError::Padding));
    }
}

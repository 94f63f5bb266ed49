//! `records.bin`: the exported accounts of a snapshot, sorted by PIR key,
//! then its storage slots, sorted by theirs.
//!
//! Header `"EPRC"`, version (3; 1 and 2 are read), 3 zero bytes, account
//! count (u64 LE), then 157 bytes per account: flags (bit 0: address
//! known; bit 1: deleted, a delta's record of an account not in the
//! state), address (20), key (32), balance (32, big-endian), nonce (u64
//! LE), code hash (32), storage root (32); then the slot count (u64 LE) and
//! 117 bytes per slot: flags (bit 0: contract known), contract (20),
//! keccak256(contract) (32), keccak256(slot) (32), word (32, big-endian).
//! A slot's PIR key is derived from its two hashes, not stored.
//!
//! The code hash and storage root are what the state trie needs
//! (`ethpir-snapshot verify --state-root`). Zero in either (never a hash
//! the chain has) means the source did not know it. Versions 1 and 2,
//! written before, have 93-byte accounts without the two (read as zero);
//! version 1 has no slot part.

use alloy_primitives::{Address, B256, U256};
use pir_core::encode::RecordSource;
use protocol::storage::{encode_word, high_part_record, StorageRecord};

use protocol::account::{encode_value, AccountRecord};
use protocol::account::{AccountValue, CodeRef};

const MAGIC: &[u8; 4] = b"EPRC";
const VERSION: u8 = 3;
pub(crate) const RECORD_BYTES: usize = 157;
/// An account of versions 1 and 2, without code hash and storage root.
const OLD_RECORD_BYTES: usize = 93;
pub(crate) const SLOT_BYTES: usize = 117;
const HEADER_BYTES: usize = 16;

/// Malformed `records.bin`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordsError {
    #[error("not a records file (bad magic or version)")]
    Header,
    #[error("records file holds {got} bytes, its header promises {expected}")]
    Length { expected: u64, got: u64 },
    #[error("records are not sorted by key, or a key repeats, at record {0}")]
    Order(usize),
    #[error("record {0} has a key that is not keccak256 of its address")]
    Key(usize),
    #[error("storage slot {0} has a contract hash that is not keccak256 of its contract")]
    ContractHash(usize),
    #[error("storage slots are not sorted by key, or a key repeats, at slot {0}")]
    SlotOrder(usize),
}

/// What a `records.bin` holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Records {
    pub accounts: Vec<AccountRecord>,
    pub storage: Vec<StorageRecord>,
}

/// Serialises records (each part sorted by key).
pub fn encode_records(records: &[AccountRecord], storage: &[StorageRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        HEADER_BYTES + RECORD_BYTES * records.len() + 8 + SLOT_BYTES * storage.len(),
    );
    write_records(records, storage, &mut out).expect("writing to memory");
    out
}

/// Writes what [`encode_records`] makes to `w`, record by record (a base
/// of 10^8 accounts is ~9 GB: never held a second time).
pub fn write_records(
    records: &[AccountRecord],
    storage: &[StorageRecord],
    w: &mut (impl std::io::Write + ?Sized),
) -> std::io::Result<()> {
    w.write_all(MAGIC)?;
    w.write_all(&[VERSION, 0, 0, 0])?;
    w.write_all(&(records.len() as u64).to_le_bytes())?;
    for r in records {
        w.write_all(&account_bytes(r))?;
    }
    w.write_all(&(storage.len() as u64).to_le_bytes())?;
    for s in storage {
        w.write_all(&slot_bytes(s))?;
    }
    Ok(())
}

pub(crate) fn account_bytes(r: &AccountRecord) -> [u8; RECORD_BYTES] {
    let mut one = [0u8; RECORD_BYTES];
    one[0] = r.address.is_some() as u8 | (r.deleted as u8) << 1;
    one[1..21].copy_from_slice(r.address.unwrap_or_default().as_slice());
    one[21..53].copy_from_slice(r.key.as_slice());
    one[53..85].copy_from_slice(&r.balance.to_be_bytes::<32>());
    one[85..93].copy_from_slice(&r.nonce.to_le_bytes());
    one[93..125].copy_from_slice(r.code_hash.as_slice());
    one[125..157].copy_from_slice(r.storage_root.as_slice());
    one
}

pub(crate) fn slot_bytes(s: &StorageRecord) -> [u8; SLOT_BYTES] {
    let mut one = [0u8; SLOT_BYTES];
    one[0] = s.contract.is_some() as u8;
    one[1..21].copy_from_slice(s.contract.unwrap_or_default().as_slice());
    one[21..53].copy_from_slice(s.hashed_contract.as_slice());
    one[53..85].copy_from_slice(s.hashed_slot.as_slice());
    one[85..117].copy_from_slice(&s.value.to_be_bytes::<32>());
    one
}

/// What the writer of a `records.bin` tells the build about it.
#[derive(Clone, Copy, Debug)]
pub struct RecordsSummary {
    pub accounts: u64,
    pub slots: u64,
    /// Bytes of every PIR value (24, or 44 for a nonce over 2^48 or a
    /// balance over 2^112: `protocol::account::value_width`).
    pub width: usize,
}

/// Writes a `records.bin` without storage slots of exactly `count`
/// accounts handed over one at a time in key order, as an export too
/// large to hold makes them (reth's hashed accounts come in this order);
/// refuses another count or order.
pub fn write_account_stream(
    count: u64,
    accounts: impl Iterator<Item = AccountRecord>,
    w: &mut (impl std::io::Write + ?Sized),
) -> std::io::Result<RecordsSummary> {
    write_record_stream(count, accounts, 0, std::iter::empty(), w)
}

/// Writes a `records.bin` of exactly `accounts` accounts and `slots`
/// storage slots, each part handed over one at a time in key order (what
/// [`write_records`] writes, never held: a fold of a mainnet base);
/// refuses other counts or orders.
pub fn write_record_stream(
    accounts: u64,
    account_records: impl Iterator<Item = AccountRecord>,
    slots: u64,
    slot_records: impl Iterator<Item = StorageRecord>,
    w: &mut (impl std::io::Write + ?Sized),
) -> std::io::Result<RecordsSummary> {
    w.write_all(MAGIC)?;
    w.write_all(&[VERSION, 0, 0, 0])?;
    w.write_all(&accounts.to_le_bytes())?;
    let mut wide = false;
    write_in_order(
        accounts,
        account_records,
        "account",
        |r| r.key,
        |r| {
            wide |= !protocol::account::fits_compact(r);
            w.write_all(&account_bytes(r))
        },
    )?;
    w.write_all(&slots.to_le_bytes())?;
    write_in_order(
        slots,
        slot_records,
        "storage slot",
        |s| s.key,
        |s| w.write_all(&slot_bytes(s)),
    )?;
    let width = match wide {
        true => protocol::account::WIDE_VALUE_BYTES,
        false => protocol::account::COMPACT_VALUE_BYTES,
    };
    Ok(RecordsSummary {
        accounts,
        slots,
        width,
    })
}

/// Hands `items` to `write` one at a time, refusing any out of key order
/// and any count but `count`.
fn write_in_order<T>(
    count: u64,
    items: impl Iterator<Item = T>,
    what: &str,
    key: impl Fn(&T) -> B256,
    mut write: impl FnMut(&T) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    let (mut written, mut last) = (0u64, None::<B256>);
    for item in items {
        let k = key(&item);
        if last.is_some_and(|l| l >= k) {
            return Err(refuse(format!("{what} {written} is out of key order")));
        }
        if written == count {
            return Err(refuse(format!("more than the {count} {what}s promised")));
        }
        write(&item)?;
        (written, last) = (written + 1, Some(k));
    }
    if written != count {
        return Err(refuse(format!("{written} {what}s, {count} promised")));
    }
    Ok(())
}

/// The length a part of `count` items of `size` bytes must have after
/// `prefix` bytes, checked against the bytes there are.
fn expect_length(bytes: &[u8], prefix: usize, count: u64, size: usize) -> Result<(), RecordsError> {
    let expected = (prefix as u64).saturating_add(count.saturating_mul(size as u64));
    if bytes.len() as u64 != expected {
        return Err(RecordsError::Length {
            expected,
            got: bytes.len() as u64,
        });
    }
    Ok(())
}

/// Where the two parts of a `records.bin` lie, its header and length
/// checked (not its records).
struct Layout {
    accounts: usize,
    slots: usize,
    /// Bytes per account (157; 93 in versions 1 and 2).
    account_bytes: usize,
    /// Where the slot count is (the end of the accounts).
    accounts_end: usize,
}

impl Layout {
    fn of(bytes: &[u8]) -> Result<Layout, RecordsError> {
        if bytes.len() < HEADER_BYTES || &bytes[..4] != MAGIC || bytes[5..8] != [0, 0, 0] {
            return Err(RecordsError::Header);
        }
        let (account_bytes, has_slots) = match bytes[4] {
            1 => (OLD_RECORD_BYTES, false),
            2 => (OLD_RECORD_BYTES, true),
            VERSION => (RECORD_BYTES, true),
            _ => return Err(RecordsError::Header),
        };
        let count = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
        let accounts_end =
            (HEADER_BYTES as u64).saturating_add(count.saturating_mul(account_bytes as u64));
        let slots = if has_slots {
            let at = usize::try_from(accounts_end).unwrap_or(usize::MAX);
            let Some(field) = bytes.get(at..at.saturating_add(8)) else {
                return Err(RecordsError::Length {
                    expected: accounts_end.saturating_add(8),
                    got: bytes.len() as u64,
                });
            };
            let slots = u64::from_le_bytes(field.try_into().unwrap());
            expect_length(bytes, at + 8, slots, SLOT_BYTES)?;
            slots
        } else {
            expect_length(bytes, HEADER_BYTES, count, account_bytes)?;
            0
        };
        // The lengths matched the bytes there are: the counts fit in usize.
        Ok(Layout {
            accounts: count as usize,
            slots: slots as usize,
            account_bytes,
            accounts_end: accounts_end as usize,
        })
    }

    fn account<'a>(&self, bytes: &'a [u8], i: usize) -> &'a [u8] {
        &bytes[HEADER_BYTES + i * self.account_bytes..][..self.account_bytes]
    }

    fn slot<'a>(&self, bytes: &'a [u8], i: usize) -> &'a [u8] {
        &bytes[self.accounts_end + 8 + i * SLOT_BYTES..][..SLOT_BYTES]
    }
}

/// Parses and checks `records.bin` (either version).
pub fn decode_records(bytes: &[u8]) -> Result<Records, RecordsError> {
    let file = RecordsFile::new(bytes)?;
    let mut accounts = Vec::with_capacity(file.accounts());
    let mut storage = Vec::with_capacity(file.slots());
    file.for_each_checked(|a| accounts.push(a), |s| storage.push(s))?;
    Ok(Records { accounts, storage })
}

/// A `records.bin` read in place (a memory map): its header and length
/// checked on opening, its records parsed one at a time, so that a base
/// of 10^8 accounts is checked and sampled without being held.
pub struct RecordsFile<'a> {
    bytes: &'a [u8],
    layout: Layout,
}

impl<'a> RecordsFile<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<Self, RecordsError> {
        Ok(RecordsFile {
            layout: Layout::of(bytes)?,
            bytes,
        })
    }

    pub fn accounts(&self) -> usize {
        self.layout.accounts
    }

    pub fn slots(&self) -> usize {
        self.layout.slots
    }

    /// Account `i` (< [`RecordsFile::accounts`]), as stored.
    pub fn account(&self, i: usize) -> AccountRecord {
        parse_account(self.layout.account(self.bytes, i))
    }

    /// The account whose key is `key`, if there is one (binary search).
    pub fn find_account(&self, key: &B256) -> Option<AccountRecord> {
        let key_at = |i: usize| &self.layout.account(self.bytes, i)[21..53];
        let (mut lo, mut hi) = (0, self.accounts());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match key_at(mid).cmp(key.as_slice()) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.account(mid)),
            }
        }
        None
    }

    /// The indices of the accounts whose key's first nibble is in
    /// `nibbles` (the keys are in order: two binary searches).
    pub fn accounts_of(&self, nibbles: std::ops::Range<u8>) -> std::ops::Range<usize> {
        // The first byte of account i's key (after flags and address).
        let nibble = |i: usize| self.layout.account(self.bytes, i)[21] >> 4;
        let first_at_least = |n: u8| {
            let (mut lo, mut hi) = (0, self.accounts());
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if nibble(mid) < n {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let start = first_at_least(nibbles.start);
        start..first_at_least(nibbles.end).max(start)
    }

    /// Storage slot `i` (< [`RecordsFile::slots`]), as stored.
    pub fn slot(&self, i: usize) -> StorageRecord {
        parse_slot(self.layout.slot(self.bytes, i))
    }

    /// The slot whose PIR key is `key`, if there is one (binary search:
    /// slots are in key order).
    pub fn find_slot(&self, key: &B256) -> Option<StorageRecord> {
        let (mut lo, mut hi) = (0, self.slots());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let slot = self.slot(mid);
            match slot.key.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(slot),
            }
        }
        None
    }

    /// Checks every record as [`decode_records`] does (key order, keys
    /// that are the hash of a known address, contract hashes), one at a
    /// time.
    pub fn check(&self) -> Result<(), RecordsError> {
        self.for_each_checked(|_| {}, |_| {})
    }

    fn for_each_checked(
        &self,
        mut account: impl FnMut(AccountRecord),
        mut slot: impl FnMut(StorageRecord),
    ) -> Result<(), RecordsError> {
        let mut last = None;
        for i in 0..self.accounts() {
            let record = self.account(i);
            if record
                .address
                .is_some_and(|a| protocol::account::pir_key(&a) != record.key)
            {
                return Err(RecordsError::Key(i));
            }
            if last.is_some_and(|k| k >= record.key) {
                return Err(RecordsError::Order(i));
            }
            last = Some(record.key);
            account(record);
        }
        let mut last = None;
        for i in 0..self.slots() {
            let record = self.slot(i);
            if record
                .contract
                .is_some_and(|c| alloy_primitives::keccak256(c) != record.hashed_contract)
            {
                return Err(RecordsError::ContractHash(i));
            }
            if last.is_some_and(|k| k >= record.key) {
                return Err(RecordsError::SlotOrder(i));
            }
            last = Some(record.key);
            slot(record);
        }
        Ok(())
    }
}

/// One account of `records.bin` (its key not checked); without code hash
/// and storage root (zero: unknown) in the 93 bytes of versions 1 and 2.
pub(crate) fn parse_account(chunk: &[u8]) -> AccountRecord {
    let hash_at = |at: usize| chunk.get(at..at + 32).map_or(B256::ZERO, B256::from_slice);
    AccountRecord {
        address: (chunk[0] & 1 == 1).then(|| Address::from_slice(&chunk[1..21])),
        key: B256::from_slice(&chunk[21..53]),
        balance: U256::from_be_slice(&chunk[53..85]),
        nonce: u64::from_le_bytes(chunk[85..93].try_into().unwrap()),
        code_hash: hash_at(93),
        storage_root: hash_at(125),
        deleted: chunk[0] & 2 == 2,
    }
}

/// One storage slot of `records.bin` (its contract hash not checked).
pub(crate) fn parse_slot(chunk: &[u8]) -> StorageRecord {
    let hashed_contract = B256::from_slice(&chunk[21..53]);
    let hashed_slot = B256::from_slice(&chunk[53..85]);
    let value = U256::from_be_slice(&chunk[85..117]);
    let mut record = StorageRecord::from_hashed(hashed_contract, hashed_slot, value);
    record.contract = (chunk[0] & 1 == 1).then(|| Address::from_slice(&chunk[1..21]));
    record
}

/// A `records.bin` read in place as the encoder's source of PIR keys and
/// values (accounts, then slots, each value in `width` bytes): a memory
/// map of the file the pipeline has just written.
pub struct RecordsView<'a> {
    file: RecordsFile<'a>,
    width: usize,
    /// The level's code table, which the values name codes by.
    codes: Vec<B256>,
    /// The places of the codes most accounts have.
    common: Vec<u32>,
    /// The slots whose words are wider than a value holds: each has a
    /// second record, its high part ([`protocol::storage::high_part_record`]),
    /// after every account and slot.
    wide: Vec<usize>,
}

impl<'a> RecordsView<'a> {
    /// Checks the header and length (the records were checked as they
    /// were written), and gathers the distinct codes of the accounts.
    pub fn new(bytes: &'a [u8], width: usize) -> Result<Self, RecordsError> {
        let file = RecordsFile::new(bytes)?;
        let mut counts: std::collections::HashMap<B256, u64> = Default::default();
        for i in 0..file.accounts() {
            let hash = file.account(i).code_hash;
            if hash != protocol::account::EMPTY_CODE_HASH {
                *counts.entry(hash).or_default() += 1;
            }
        }
        let codes = protocol::codes::table_of(counts.keys().copied());
        let places = codes.iter().enumerate();
        let common = protocol::codes::common_places(places.map(|(i, h)| (i as u32 + 1, counts[h])));
        let wide = (0..file.slots())
            .filter(|&i| {
                let s = file.slot(i);
                matches!(high_part_record(&s.key, s.value, width), Ok(Some(_)))
            })
            .collect();
        Ok(RecordsView {
            file,
            width,
            codes,
            common,
            wide,
        })
    }

    /// Slots whose words have a second record (their high part).
    pub fn wide_words(&self) -> usize {
        self.wide.len()
    }

    /// The level's code table: the sorted distinct code hashes.
    pub fn codes(&self) -> &[B256] {
        &self.codes
    }

    /// The places of the codes most of the level's accounts have.
    pub fn common_codes(&self) -> &[u32] {
        &self.common
    }
}

/// An account's PIR value in a level whose code table is `codes`.
pub fn account_value(a: &AccountRecord, codes: &[B256]) -> AccountValue {
    let code = if a.code_hash == protocol::account::EMPTY_CODE_HASH {
        CodeRef::None
    } else {
        protocol::codes::place_of(codes, &a.code_hash).map_or(CodeRef::Unknown, CodeRef::Table)
    };
    AccountValue {
        balance: a.balance,
        nonce: a.nonce,
        code,
    }
}

impl RecordSource for RecordsView<'_> {
    fn len(&self) -> usize {
        self.file.accounts() + self.file.slots() + self.wide.len()
    }

    fn value_bytes(&self) -> usize {
        self.width
    }

    fn read(&self, i: usize, key: &mut Vec<u8>, value: &mut [u8]) {
        key.clear();
        if i < self.file.accounts() {
            let a = self.file.account(i);
            key.extend_from_slice(a.key.as_slice());
            value.copy_from_slice(&encode_value(&account_value(&a, &self.codes), self.width));
        } else if i < self.file.accounts() + self.file.slots() {
            let s = self.file.slot(i - self.file.accounts());
            key.extend_from_slice(s.key.as_slice());
            let word = encode_word(s.value, self.width).expect("an account value width");
            value.copy_from_slice(&word);
        } else {
            let s = self
                .file
                .slot(self.wide[i - self.file.accounts() - self.file.slots()]);
            let (at, high) = high_part_record(&s.key, s.value, self.width)
                .expect("an account value width")
                .expect("a wide word");
            key.extend_from_slice(at.as_slice());
            value.copy_from_slice(&high);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-2 file as it was written before accounts carried their
    /// code hash and storage root: read, with both unknown (zero).
    #[test]
    fn older_versions_are_read_without_trie_fields() {
        let account = AccountRecord::new(Address::repeat_byte(1), U256::from(9), 2);
        let slot = StorageRecord::new(Address::repeat_byte(2), B256::ZERO, U256::from(5));
        for (version, with_slots) in [(1u8, false), (2, true)] {
            let mut old = b"EPRC".to_vec();
            old.extend_from_slice(&[version, 0, 0, 0]);
            old.extend_from_slice(&1u64.to_le_bytes());
            old.extend_from_slice(&account_bytes(&account)[..OLD_RECORD_BYTES]);
            if with_slots {
                old.extend_from_slice(&1u64.to_le_bytes());
                old.extend_from_slice(&slot_bytes(&slot));
            }
            let back = decode_records(&old).unwrap();
            let unknown = account.clone().with_trie(B256::ZERO, B256::ZERO);
            assert_eq!(back.accounts, vec![unknown]);
            assert_eq!(back.storage.len(), with_slots as usize);
            assert!(decode_records(&old[..old.len() - 1]).is_err());
        }
    }

    /// A slot whose word is wider than a compact value has a second
    /// record, its high part, after every account and slot; in a wide
    /// snapshot every word fits one.
    #[test]
    fn wide_words_have_a_record_for_their_high_part() {
        use protocol::storage::{decode_word, high_part_key, join_word, StoredWord};
        let accounts = vec![AccountRecord::new(
            Address::repeat_byte(1),
            U256::from(1),
            1,
        )];
        let contract = Address::repeat_byte(0xc0);
        let mut slots = vec![
            StorageRecord::new(contract, B256::with_last_byte(1), U256::from(5)),
            StorageRecord::new(contract, B256::with_last_byte(2), U256::MAX),
        ];
        slots.sort_by_key(|s| s.key);
        let bytes = encode_records(&accounts, &slots);
        let width = protocol::account::COMPACT_VALUE_BYTES;
        let view = RecordsView::new(&bytes, width).unwrap();
        assert_eq!(view.len(), 4);
        assert_eq!(view.wide_words(), 1);
        let mut entries = std::collections::HashMap::new();
        for i in 0..view.len() {
            let (mut key, mut value) = (Vec::new(), vec![0u8; width]);
            view.read(i, &mut key, &mut value);
            entries.insert(B256::from_slice(&key), value);
        }
        let wide = slots.iter().find(|s| s.value == U256::MAX).unwrap();
        let Ok(StoredWord::Low(low)) = decode_word(&entries[&wide.key]) else {
            panic!("the wide word's record holds its low part")
        };
        let Ok(StoredWord::Word(high)) = decode_word(&entries[&high_part_key(&wide.key)]) else {
            panic!("its high part has a record")
        };
        assert_eq!(join_word(low, high, width), U256::MAX);
        let whole = RecordsView::new(&bytes, protocol::account::WIDE_VALUE_BYTES).unwrap();
        assert_eq!((whole.len(), whole.wide_words()), (3, 0));
    }

    #[test]
    fn round_trip_and_damage() {
        let mut recs: Vec<AccountRecord> = (1u8..=5)
            .map(|i| AccountRecord::new(Address::repeat_byte(i), U256::from(i), i as u64))
            .collect();
        recs.push(AccountRecord::from_hashed(
            B256::repeat_byte(9),
            U256::MAX,
            1,
        ));
        recs[2] = recs[2]
            .clone()
            .with_trie(B256::repeat_byte(3), B256::repeat_byte(4));
        recs[3] = AccountRecord::deleted(Address::repeat_byte(4));
        recs.sort_by_key(|r| r.key);
        let bytes = encode_records(&recs, &[]);
        assert_eq!(bytes[4], VERSION);
        assert_eq!(decode_records(&bytes).unwrap().accounts, recs);
        assert!(decode_records(&bytes[..bytes.len() - 1]).is_err());
        assert_eq!(decode_records(b"nope"), Err(RecordsError::Header));
        let mut swapped = recs.clone();
        swapped.swap(0, 1);
        assert!(matches!(
            decode_records(&encode_records(&swapped, &[])),
            Err(RecordsError::Order(1))
        ));
    }

    #[test]
    fn storage_slots_round_trip_and_damage() {
        let accounts = vec![AccountRecord::new(
            Address::repeat_byte(1),
            U256::from(1),
            1,
        )];
        let contract = Address::repeat_byte(0xc0);
        let mut slots: Vec<StorageRecord> = (0u8..4)
            .map(|i| StorageRecord::new(contract, B256::with_last_byte(i), U256::from(i) << 200))
            .collect();
        slots.push(StorageRecord::from_hashed(
            B256::repeat_byte(7),
            B256::repeat_byte(8),
            U256::MAX,
        ));
        slots.sort_by_key(|s| s.key);
        let bytes = encode_records(&accounts, &slots);
        assert_eq!(bytes[4], VERSION);
        let back = decode_records(&bytes).unwrap();
        assert_eq!(back.accounts, accounts);
        assert_eq!(back.storage, slots);
        for cut in [1, SLOT_BYTES, SLOT_BYTES * slots.len() + 4] {
            assert!(matches!(
                decode_records(&bytes[..bytes.len() - cut]),
                Err(RecordsError::Length { .. })
            ));
        }
        let mut swapped = slots.clone();
        swapped.swap(0, 1);
        assert_eq!(
            decode_records(&encode_records(&accounts, &swapped)),
            Err(RecordsError::SlotOrder(1))
        );
        let mut lying = slots.clone();
        let known = lying.iter().position(|s| s.contract.is_some()).unwrap();
        lying[known].contract = Some(Address::repeat_byte(0xc1));
        assert_eq!(
            decode_records(&encode_records(&accounts, &lying)),
            Err(RecordsError::ContractHash(known))
        );
        let mut unknown_version = bytes.clone();
        unknown_version[4] = 4;
        assert_eq!(decode_records(&unknown_version), Err(RecordsError::Header));
    }
}

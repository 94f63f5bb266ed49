//! The `reth` source: a reth datadir, opened read-only with the `libmdbx`
//! bindings, account values decoded with reth's published `Compact` codecs.
//!
//! Two layouts exist, and the datadir's `Metadata` table says which:
//! - **v1** (reth 1.x, and 2.x with `--storage.v2=false`): accounts and
//!   storage by address in `PlainAccountState` and `PlainStorageState`,
//!   their earlier values in `AccountChangeSets` (block -> address +
//!   account before the block) and `StorageChangeSets` (block + address
//!   -> slot + word before the block).
//! - **v2** (reth 2.x default): accounts and storage by keccak256(address)
//!   in `HashedAccounts` and `HashedStorages` (slots hashed too), change
//!   sets in the `account-change-sets` and `storage-change-sets` static
//!   files (module `static_files`; slots plain there).
//!
//! Both give the full state, the state at an older block (undoing change
//! sets; code hashes and storage roots included), the active set, and the
//! storage of listed contracts at the head or an older block.
//!
//! Block hashes come from `HeaderNumbers`; state roots and timestamps from
//! the header static files (NippyJar: an offsets file, LZ4-compressed
//! values, three columns per block of which the first is the header in
//! reth's `Compact` encoding).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use alloy_primitives::{Address, B256, U256};
use libmdbx::{Database, DatabaseOptions, Mode, NoWriteMap};
use reth_codecs::Compact;

use protocol::storage::{PrivateStorage, StorageRecord};

use crate::account::AccountRecord;
use crate::manifest::SnapshotKind;
use crate::pipeline::{
    build_and_publish_streamed, BuildError, BuildOptions, ExportedState, RecordsSummary,
};
use crate::records::write_record_stream;
use crate::slot_sort::{SlotSorter, SortedSlots};
use crate::store::{SnapshotStore, StoredSnapshot};

mod static_files;
use static_files::Segment;

/// Storage layout of a datadir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    V1,
    V2,
}

/// What cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RethError {
    #[error("spilling sorted storage runs: {0}")]
    Spill(std::io::Error),
    #[error("{0}: not a reth datadir (no db/mdbx.dat)")]
    NotADatadir(PathBuf),
    #[error("{path}: cannot open the reth database read-only: {reason}")]
    Open { path: PathBuf, reason: String },
    #[error("reading table {table}: {reason}")]
    Read { table: &'static str, reason: String },
    #[error("table {table}: malformed entry: {reason}")]
    Malformed { table: &'static str, reason: String },
    #[error("block {block} is beyond the datadir's head {head}")]
    FutureBlock { block: u64, head: u64 },
    #[error("the datadir holds no headers")]
    Empty,
    #[error("not supported yet: {0}")]
    Unsupported(&'static str),
    #[error("listed contracts (--tokens/--contract) go with full snapshots, not an active set: drop --window")]
    ListedActiveSet,
}

/// What to export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RethMode {
    /// Every account at the head.
    Full,
    /// Accounts changed in the last `window` blocks, at the head.
    Active { window: u64 },
    /// Every account at an older block: the complete state there, so a
    /// full snapshot (an absent address has balance 0), like one at the head.
    FullAt { block: u64 },
}

/// Raw `(key, value)` pairs of a table.
type RawEntries = Vec<(Vec<u8>, Vec<u8>)>;
/// A storage table's entry (reth's `StorageEntry` in `Compact`): the slot
/// (or its hash), then the word big-endian without its leading zeros.
fn decode_storage_entry(bytes: &[u8]) -> Result<(B256, U256), String> {
    if bytes.len() < 32 || bytes.len() > 64 {
        return Err(format!("storage entry of {} bytes", bytes.len()));
    }
    Ok((
        B256::from_slice(&bytes[..32]),
        U256::from_be_slice(&bytes[32..]),
    ))
}

/// An account before a change.
#[derive(Clone, Copy, Debug)]
struct AccountBefore {
    nonce: u64,
    balance: U256,
    code_hash: B256,
}

/// One account change: block, address, the account before the block
/// (`None`: it did not exist).
type Change = (u64, Address, Option<AccountBefore>);

/// v1's MDBX table of storage change sets.
const V1_STORAGE_CHANGES: &str = "StorageChangeSets";

/// One storage change: the contract's word at `slot` before `block`.
#[derive(Debug)]
struct StorageChange {
    block: u64,
    contract: Address,
    /// The plain slot (reth 2.x writes plain slots in both layouts).
    slot: B256,
    before: U256,
}

/// reth 1.11's experimental v2 layout wrote storage change sets with
/// hashed slots, reth 2.x writes plain ones, in the same bytes and with
/// the same metadata. Changed slots whose words at the head are not zero
/// tell them apart: the head's hashed table holds keccak256(slot) for a
/// plain slot, the slot itself for a hashed one. Refused when the head
/// bears out hashed slots and never plain ones, so that older words are
/// never put under wrong keys. (A plain slot can equal some slot's hash,
/// e.g. a Solidity array's first element at keccak256(p): one such slot
/// alone does not decide.)
#[derive(Default)]
struct SlotEvidence {
    plain: bool,
    hashed: bool,
}

impl SlotEvidence {
    /// Weighs one account's `changes` against its `head` words (by hashed
    /// slot).
    fn weigh(&mut self, head: &BTreeMap<B256, U256>, changes: &[StorageChange]) {
        for c in changes {
            if head.contains_key(&alloy_primitives::keccak256(c.slot)) {
                self.plain = true;
                return;
            }
            self.hashed |= head.contains_key(&c.slot);
        }
    }

    fn check(&self) -> Result<(), RethError> {
        if self.hashed && !self.plain {
            return Err(RethError::Unsupported(
                "storage change sets with hashed slots (reth 1.11's experimental v2 layout)",
            ));
        }
        Ok(())
    }
}

/// An open datadir.
pub struct RethDatadir {
    db: Database<NoWriteMap>,
    path: PathBuf,
    pub layout: Layout,
}

fn read_err(table: &'static str) -> impl Fn(libmdbx::Error) -> RethError {
    move |e| RethError::Read {
        table,
        reason: e.to_string(),
    }
}

/// Decodes reth's `Compact` encoding of an account: a 2-byte bit-field
/// header (nonce length: 4 bits, balance length: 6 bits, code hash present:
/// 1 bit), then the nonce and the balance as big-endian integers of those
/// lengths, then the 32-byte code hash when present.
pub fn decode_account(bytes: &[u8]) -> Result<(u64, U256), String> {
    if bytes.len() < 2 {
        return Err(format!("{} bytes: shorter than the header", bytes.len()));
    }
    let flags = u16::from_le_bytes([bytes[0], bytes[1]]);
    let nonce_len = (flags & 0xF) as usize;
    let balance_len = ((flags >> 4) & 0x3F) as usize;
    let has_code = (flags >> 10) & 1 == 1;
    let need = 2 + nonce_len + balance_len + if has_code { 32 } else { 0 };
    if nonce_len > 8 || balance_len > 32 || bytes.len() != need {
        return Err(format!(
            "{} bytes, header promises {need} (nonce {nonce_len}, balance {balance_len})",
            bytes.len()
        ));
    }
    let (nonce, rest) = u64::from_compact(&bytes[2..], nonce_len);
    let (balance, _) = U256::from_compact(rest, balance_len);
    Ok((nonce, balance))
}

/// The code hash of a `Compact` account [`decode_account`] accepted: its
/// last 32 bytes when the header says it has code, else the empty code's.
fn account_code_hash(bytes: &[u8]) -> B256 {
    let flags = u16::from_le_bytes([bytes[0], bytes[1]]);
    match (flags >> 10) & 1 == 1 {
        true => B256::from_slice(&bytes[bytes.len() - 32..]),
        false => protocol::account::EMPTY_CODE_HASH,
    }
}

/// The code of a `Bytecodes` entry (reth's `Bytecode` in `Compact`: the
/// bytes' length (u32 big-endian) and bytes, then a kind byte; a legacy
/// analysed code's bytes are padded, its original length (u64
/// big-endian) follows the kind), when its keccak256 is the entry's key:
/// a layout read otherwise gives no code rather than a wrong one.
fn decode_bytecode(key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_be_bytes(value.get(..4)?.try_into().ok()?) as usize;
    let bytes = value.get(4..4usize.checked_add(len)?)?;
    let rest = &value[4 + len..];
    let original = match rest {
        [2, tail @ ..] => {
            let n = u64::from_be_bytes(tail.get(..8)?.try_into().ok()?) as usize;
            bytes.get(..n)
        }
        _ => Some(bytes),
    };
    [original, Some(bytes)]
        .into_iter()
        .flatten()
        .find(|code| alloy_primitives::keccak256(code).as_slice() == key)
        .map(<[u8]>::to_vec)
}

/// `table` of `txn`, or `None` when the datadir has no such table (a
/// chain that never wrote one).
fn open_optional<'t>(
    txn: &'t libmdbx::Transaction<'_, libmdbx::RO, NoWriteMap>,
    table: &'static str,
) -> Result<Option<libmdbx::Table<'t>>, RethError> {
    match txn.open_table(Some(table)) {
        Ok(t) => Ok(Some(t)),
        Err(libmdbx::Error::NotFound) => Ok(None),
        Err(e) => Err(read_err(table)(e)),
    }
}

/// Walks a storage table (v1 `PlainStorageState` by address, v2
/// `HashedStorages` by hashed address; both sorted by that key, entries
/// sorted by slot) beside an account walk in the same key order, handing
/// over each account's storage root: one pass over the table, never held.
struct StorageWalk<'t> {
    cursor: Option<libmdbx::Cursor<'t, libmdbx::RO>>,
    /// The entry read ahead of the account asked about.
    ahead: Option<(Vec<u8>, Vec<u8>)>,
    table: &'static str,
    /// Whether the slots are plain (v1) and so hashed here.
    plain_slots: bool,
}

impl<'t> StorageWalk<'t> {
    fn new(
        txn: &'t libmdbx::Transaction<'_, libmdbx::RO, NoWriteMap>,
        layout: Layout,
    ) -> Result<Self, RethError> {
        let table = layout.storage_table();
        let cursor = match open_optional(txn, table)? {
            Some(t) => Some(txn.cursor(&t).map_err(read_err(table))?),
            None => None,
        };
        let mut walk = StorageWalk {
            cursor,
            ahead: None,
            table,
            plain_slots: layout == Layout::V1,
        };
        walk.advance()?;
        Ok(walk)
    }

    fn advance(&mut self) -> Result<(), RethError> {
        self.ahead = match &mut self.cursor {
            Some(c) => c.next::<Vec<u8>, Vec<u8>>().map_err(read_err(self.table))?,
            None => None,
        };
        Ok(())
    }

    /// The storage root of the account whose table key is `key` (the keys
    /// asked must come in increasing order; entries of keys skipped over
    /// belong to no account and are passed).
    fn root_of(&mut self, key: &[u8]) -> Result<B256, RethError> {
        let mut words = Vec::new();
        while let Some((k, v)) = &self.ahead {
            match k.as_slice().cmp(key) {
                std::cmp::Ordering::Greater => break,
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    let (slot, word) =
                        decode_storage_entry(v).map_err(|reason| RethError::Malformed {
                            table: self.table,
                            reason,
                        })?;
                    let slot = match self.plain_slots {
                        true => alloy_primitives::keccak256(slot),
                        false => slot,
                    };
                    words.push((slot, word));
                }
            }
            self.advance()?;
        }
        // A slot twice (two entries of one slot with different words) is
        // no storage a node wrote: an error, not a trie of it.
        words.sort_unstable_by_key(|w| w.0);
        if words.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(RethError::Malformed {
                table: self.table,
                reason: "a storage slot listed twice for one account".into(),
            });
        }
        Ok(crate::state_root::storage_root(words))
    }
}

/// A change-set value: the address, then the account before the change in
/// `Compact` form (absent when the account did not exist).
fn parse_change(block: u64, v: &[u8], table: &'static str) -> Result<Change, RethError> {
    let bad = |reason: String| RethError::Malformed { table, reason };
    let (address, rest) = split_address(v, table)?;
    let before = match rest {
        [] => None,
        account => {
            let (nonce, balance) = decode_account(account).map_err(bad)?;
            Some(AccountBefore {
                nonce,
                balance,
                code_hash: account_code_hash(account),
            })
        }
    };
    Ok((block, address, before))
}

/// A change-set value's leading address and the rest (both layouts'
/// account and v2's storage change sets start so).
fn split_address<'v>(v: &'v [u8], table: &'static str) -> Result<(Address, &'v [u8]), RethError> {
    if v.len() < 20 {
        return Err(RethError::Malformed {
            table,
            reason: format!("change of {} bytes", v.len()),
        });
    }
    Ok((Address::from_slice(&v[..20]), &v[20..]))
}

/// reth's v2 table of accounts by keccak256(address).
const HASHED_ACCOUNTS: &str = "HashedAccounts";

impl Layout {
    /// The table of the head's storage: v1 `PlainStorageState` by address
    /// (entries `slot || word`), v2 `HashedStorages` by keccak256(address)
    /// (entries `keccak256(slot) || word`).
    fn storage_table(self) -> &'static str {
        match self {
            Layout::V1 => "PlainStorageState",
            Layout::V2 => "HashedStorages",
        }
    }

    /// The table of the head's accounts, and its keys' length: v1
    /// `PlainAccountState` by address, v2 `HashedAccounts` by
    /// keccak256(address).
    fn accounts_table(self) -> (&'static str, usize) {
        match self {
            Layout::V1 => ("PlainAccountState", 20),
            Layout::V2 => (HASHED_ACCOUNTS, 32),
        }
    }
}

/// One entry of the head's accounts table of `layout`, with its code hash
/// and its storage root (from `storage`, walked beside in key order); v2
/// knows the account by its key only.
fn head_account(
    layout: Layout,
    key: &[u8],
    value: &[u8],
    storage: &mut StorageWalk,
) -> Result<AccountRecord, RethError> {
    let (table, key_len) = layout.accounts_table();
    let malformed = |reason| RethError::Malformed { table, reason };
    if key.len() != key_len {
        return Err(malformed(format!("key of {} bytes", key.len())));
    }
    let (nonce, balance) = decode_account(value).map_err(malformed)?;
    let root = storage.root_of(key)?;
    let account = match layout {
        Layout::V1 => AccountRecord::new(Address::from_slice(key), balance, nonce),
        Layout::V2 => AccountRecord::from_hashed(B256::from_slice(key), balance, nonce),
    };
    Ok(account.with_trie(account_code_hash(value), root))
}

impl RethDatadir {
    /// Opens `<datadir>/db` read-only. Nothing is ever written to the
    /// node's files (MDBX only maintains its reader lock file).
    pub fn open(datadir: &Path) -> Result<Self, RethError> {
        let db_dir = datadir.join("db");
        if !db_dir.join("mdbx.dat").is_file() {
            return Err(RethError::NotADatadir(datadir.to_path_buf()));
        }
        let options = DatabaseOptions {
            mode: Mode::ReadOnly,
            max_tables: Some(256),
            ..Default::default()
        };
        let db = Database::<NoWriteMap>::open_with_options(&db_dir, options).map_err(|e| {
            RethError::Open {
                path: db_dir.clone(),
                reason: e.to_string(),
            }
        })?;
        let mut me = RethDatadir {
            db,
            path: datadir.to_path_buf(),
            layout: Layout::V1,
        };
        me.layout = me.detect_layout()?;
        Ok(me)
    }

    fn detect_layout(&self) -> Result<Layout, RethError> {
        let meta = self.entries("Metadata")?;
        let v2 = meta.iter().any(|(k, v)| {
            k == b"storage_settings" && String::from_utf8_lossy(v).contains("\"storage_v2\":true")
        });
        Ok(if v2 { Layout::V2 } else { Layout::V1 })
    }

    /// Every `(key, value)` of a table (empty if the table does not exist).
    fn entries(&self, table: &'static str) -> Result<RawEntries, RethError> {
        let mut out = Vec::new();
        self.for_each_entry(table, |k, v| {
            out.push((k, v));
            Ok(())
        })?;
        Ok(out)
    }

    /// Hands every `(key, value)` of a table to `f` in key order, one at a
    /// time (nothing if the table does not exist).
    fn for_each_entry(
        &self,
        table: &'static str,
        mut f: impl FnMut(Vec<u8>, Vec<u8>) -> Result<(), RethError>,
    ) -> Result<(), RethError> {
        let txn = self.db.begin_ro_txn().map_err(read_err(table))?;
        let Some(t) = open_optional(&txn, table)? else {
            return Ok(());
        };
        let mut cursor = txn.cursor(&t).map_err(read_err(table))?;
        while let Some((k, v)) = cursor.next::<Vec<u8>, Vec<u8>>().map_err(read_err(table))? {
            f(k, v)?;
        }
        Ok(())
    }

    /// Block hashes by number, from `HeaderNumbers`.
    pub fn block_hashes(&self) -> Result<BTreeMap<u64, B256>, RethError> {
        let mut out = BTreeMap::new();
        for (k, v) in self.entries("HeaderNumbers")? {
            if k.len() != 32 || v.len() != 8 {
                return Err(RethError::Malformed {
                    table: "HeaderNumbers",
                    reason: format!("key {} bytes, value {} bytes", k.len(), v.len()),
                });
            }
            out.insert(
                u64::from_le_bytes(v.try_into().unwrap()),
                B256::from_slice(&k),
            );
        }
        Ok(out)
    }

    /// `(state root, timestamp)` of every block in the header static files
    /// (three LZ4-compressed columns per block; the first is the header).
    pub fn headers(&self) -> Result<BTreeMap<u64, (B256, u64)>, RethError> {
        const COLUMNS: u64 = 3;
        let segment = Segment::Headers;
        let mut out = BTreeMap::new();
        for file in static_files::segment_files(&self.path, segment)? {
            file.for_each_value(0, file.values() / COLUMNS * COLUMNS, |i, value| {
                if i % COLUMNS != 0 {
                    return Ok(());
                }
                let raw = lz4_flex::block::decompress(value, 1 << 16).map_err(|e| {
                    RethError::Malformed {
                        table: segment.table(),
                        reason: format!("{} value {i}: {e}", file.path.display()),
                    }
                })?;
                let (header, _) = alloy_consensus::Header::from_compact(&raw, raw.len());
                out.insert(
                    file.first_block + i / COLUMNS,
                    (header.state_root, header.timestamp),
                );
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// The newest block the datadir has.
    pub fn head(&self) -> Result<u64, RethError> {
        self.block_hashes()?
            .keys()
            .next_back()
            .copied()
            .ok_or(RethError::Empty)
    }

    /// Hands every code of `Bytecodes` (checked against its hash) to
    /// `keep`, one at a time; how many entries did not decode (skipped:
    /// their accounts' `eth_getCode` gets "not kept").
    pub fn for_each_code(
        &self,
        mut keep: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<u64, RethError> {
        const TABLE: &str = "Bytecodes";
        let txn = self.db.begin_ro_txn().map_err(read_err(TABLE))?;
        let Some(t) = open_optional(&txn, TABLE)? else {
            return Ok(0);
        };
        let mut cursor = txn.cursor(&t).map_err(read_err(TABLE))?;
        let mut skipped = 0;
        while let Some((k, v)) = cursor.next::<Vec<u8>, Vec<u8>>().map_err(read_err(TABLE))? {
            match decode_bytecode(&k, &v) {
                Some(code) => keep(&code).map_err(|reason| RethError::Read {
                    table: TABLE,
                    reason,
                })?,
                None => skipped += 1,
            }
        }
        if skipped > 0 {
            tracing::warn!(
                skipped,
                "codes of the datadir not decoded: their eth_getCode is not served"
            );
        }
        Ok(skipped)
    }

    /// Every code of `Bytecodes`, held (for exports held in memory).
    fn codes(&self) -> Result<Vec<alloy_primitives::Bytes>, RethError> {
        let mut out = Vec::new();
        self.for_each_code(|c| {
            out.push(alloy_primitives::Bytes::copy_from_slice(c));
            Ok(())
        })?;
        Ok(out)
    }

    /// Every account at the head, with its code hash (from the account)
    /// and its storage root (from the storage table, walked beside).
    pub fn full_state(&self) -> Result<Vec<AccountRecord>, RethError> {
        let (table, _) = self.layout.accounts_table();
        // Accounts and storage from one read transaction: one state.
        let txn = self.db.begin_ro_txn().map_err(read_err(table))?;
        let mut storage = StorageWalk::new(&txn, self.layout)?;
        let Some(accounts) = open_optional(&txn, table)? else {
            return Ok(Vec::new());
        };
        let mut cursor = txn.cursor(&accounts).map_err(read_err(table))?;
        let mut out = Vec::new();
        while let Some((k, v)) = cursor.next::<Vec<u8>, Vec<u8>>().map_err(read_err(table))? {
            out.push(head_account(self.layout, &k, &v, &mut storage)?);
        }
        Ok(out)
    }

    /// Whether [`RethDatadir::write_full_state`] streams this datadir's
    /// head state: v2 keys `HashedAccounts` by keccak256(address), the PIR
    /// key, so one cursor walk hands the accounts over in key order (v1's
    /// plain state is in address order: it is exported whole and sorted).
    pub fn streams_full_state(&self) -> bool {
        self.layout == Layout::V2
    }

    /// The head's block, hash, root and time, without its accounts (a base
    /// whose accounts [`RethDatadir::write_full_state`] streams).
    pub fn head_metadata(&self, chain_id: u64) -> Result<ExportedState, RethError> {
        let head = self.head()?;
        self.exported(
            head,
            SnapshotKind::Full,
            Vec::new(),
            chain_id,
            Instant::now(),
        )
    }

    /// Writes the head state as `records.bin` into `w`: every account of
    /// `HashedAccounts` from one cursor walk in one read transaction (its
    /// entry count, from the same transaction, goes in the header), then
    /// `storage` sorted by key. The accounts are never held: a mainnet
    /// base is written as it is read. v2 datadirs only
    /// ([`RethDatadir::streams_full_state`]).
    pub fn write_full_state(
        &self,
        storage: SortedSlots,
        w: &mut dyn std::io::Write,
    ) -> std::io::Result<RecordsSummary> {
        let fail = std::io::Error::other;
        if !self.streams_full_state() {
            return Err(fail(RethError::Unsupported(
                "streaming the head state of a v1 (plain state) datadir",
            )));
        }
        let read = |e| fail(read_err(HASHED_ACCOUNTS)(e));
        let txn = self.db.begin_ro_txn().map_err(read)?;
        let table = txn.open_table(Some(HASHED_ACCOUNTS)).map_err(read)?;
        let accounts = txn.table_stat(&table).map_err(read)?.entries() as u64;
        let mut cursor = txn.cursor(&table).map_err(read)?;
        let mut roots = StorageWalk::new(&txn, self.layout).map_err(fail)?;
        let mut stopped = None;
        let walk = std::iter::from_fn(|| {
            let entry = cursor
                .next::<Vec<u8>, Vec<u8>>()
                .map_err(read_err(HASHED_ACCOUNTS));
            let account = |(k, v): (Vec<u8>, Vec<u8>)| head_account(Layout::V2, &k, &v, &mut roots);
            match entry.and_then(|e| e.map(account).transpose()) {
                Ok(account) => account,
                Err(e) => {
                    stopped = Some(e);
                    None
                }
            }
        });
        let slots = storage.total();
        let written =
            storage.write_with(|sorted| write_record_stream(accounts, walk, slots, sorted, w));
        // A walk stopped by an error would otherwise read as a short count.
        if let Some(e) = stopped {
            return Err(fail(e));
        }
        written
    }

    /// Every non-zero storage slot of `contracts` at the head: v1 from
    /// `PlainStorageState` (by address, entries `slot || word`), v2 from
    /// `HashedStorages` (by keccak256(address), entries `keccak256(slot) ||
    /// word`); either way the same PIR keys. Each contract is one cursor
    /// walk over its own entries (a mainnet table is never read whole).
    pub fn storage(&self, contracts: &[Address]) -> Result<Vec<StorageRecord>, RethError> {
        let table = self.layout.storage_table();
        let txn = self.db.begin_ro_txn().map_err(read_err(table))?;
        let Some(t) = open_optional(&txn, table)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for contract in contracts {
            let hashed = alloy_primitives::keccak256(contract);
            let key: &[u8] = match self.layout {
                Layout::V1 => contract.as_slice(),
                Layout::V2 => hashed.as_slice(),
            };
            let mut cursor = txn.cursor(&t).map_err(read_err(table))?;
            let mut entry = cursor
                .set_key::<Vec<u8>, Vec<u8>>(key)
                .map_err(read_err(table))?;
            while let Some((_, value)) = entry {
                let (slot, word) = decode_storage_entry(&value)
                    .map_err(|reason| RethError::Malformed { table, reason })?;
                if !word.is_zero() {
                    out.push(match self.layout {
                        Layout::V1 => StorageRecord::new(*contract, slot, word),
                        Layout::V2 => {
                            let mut r = StorageRecord::from_hashed(hashed, slot, word);
                            r.contract = Some(*contract);
                            r
                        }
                    });
                }
                entry = cursor
                    .next_dup::<Vec<u8>, Vec<u8>>()
                    .map_err(read_err(table))?;
            }
        }
        Ok(out)
    }

    /// The head, refusing a `block` past it (a state at a future block).
    fn head_not_before(&self, block: u64) -> Result<u64, RethError> {
        let head = self.head()?;
        if block > head {
            return Err(RethError::FutureBlock { block, head });
        }
        Ok(head)
    }

    /// Every non-zero slot of every contract at the head (the whole
    /// state's storage): one cursor walk over the whole table, v1 keyed by
    /// address, v2 by keccak256(address) (whose records then name no
    /// contract, as reth's hashed tables do not).
    pub fn storage_all(&self) -> Result<Vec<StorageRecord>, RethError> {
        let mut out = Vec::new();
        self.for_each_slot(|slot| {
            out.push(slot);
            Ok(())
        })?;
        Ok(out)
    }

    /// Hands every non-zero slot of every contract at the head to `f`, in
    /// the table's order ([`Self::storage_all`] without holding them).
    pub fn for_each_slot(
        &self,
        mut f: impl FnMut(StorageRecord) -> Result<(), RethError>,
    ) -> Result<(), RethError> {
        let table = self.layout.storage_table();
        self.for_each_entry(table, |key, value| {
            let (slot, word) = decode_storage_entry(&value)
                .map_err(|reason| RethError::Malformed { table, reason })?;
            if word.is_zero() {
                return Ok(());
            }
            let malformed = |_| RethError::Malformed {
                table,
                reason: format!("a storage key of {} bytes", key.len()),
            };
            f(match self.layout {
                Layout::V1 => {
                    let contract = Address::try_from(key.as_slice()).map_err(malformed)?;
                    StorageRecord::new(contract, slot, word)
                }
                Layout::V2 => {
                    let hashed = B256::try_from(key.as_slice()).map_err(malformed)?;
                    StorageRecord::from_hashed(hashed, slot, word)
                }
            })
        })
    }

    /// [`Self::storage_all`] at an older `block`: every account whose
    /// storage changed after it read back to `block` from the change sets,
    /// every other account's as at the head.
    pub fn storage_all_at(&self, block: u64) -> Result<Vec<StorageRecord>, RethError> {
        let head = self.head_not_before(block)?;
        let mut out = self.storage_all()?;
        if block == head {
            return Ok(out);
        }
        let mut changed: BTreeMap<B256, (Address, BTreeMap<B256, U256>)> = BTreeMap::new();
        self.for_each_storage_at(block, None, |contract, words| {
            changed.insert(alloy_primitives::keccak256(contract), (contract, words));
        })?;
        out.retain(|r| !changed.contains_key(&r.hashed_contract));
        for (hashed, (contract, words)) in changed {
            for (slot, word) in words.into_iter().filter(|(_, w)| !w.is_zero()) {
                let mut r = StorageRecord::from_hashed(hashed, slot, word);
                r.contract = Some(contract);
                out.push(r);
            }
        }
        Ok(out)
    }

    /// The storage a snapshot of `listed` holds, at the head or at an
    /// older `block`.
    pub fn storage_of(
        &self,
        listed: &PrivateStorage,
        block: Option<u64>,
    ) -> Result<Vec<StorageRecord>, RethError> {
        let contracts = listed.all_contracts();
        match (listed.whole_state, block) {
            (true, None) => self.storage_all(),
            (true, Some(block)) => self.storage_all_at(block),
            (false, None) => self.storage(&contracts),
            (false, Some(block)) => self.storage_at(block, &contracts),
        }
    }

    /// [`Self::storage`] at an older `block`: the head's words with every
    /// change after `block` undone, from the storage change sets of
    /// either layout.
    pub fn storage_at(
        &self,
        block: u64,
        contracts: &[Address],
    ) -> Result<Vec<StorageRecord>, RethError> {
        let head = self.head_not_before(block)?;
        if block == head || contracts.is_empty() {
            return self.storage(contracts);
        }
        let mut out = Vec::new();
        self.for_each_storage_at(block, Some(contracts), |contract, words| {
            let hashed = alloy_primitives::keccak256(contract);
            for (slot, word) in words.into_iter().filter(|(_, w)| !w.is_zero()) {
                let mut r = StorageRecord::from_hashed(hashed, slot, word);
                r.contract = Some(contract);
                out.push(r);
            }
        })?;
        Ok(out)
    }

    /// Hands the words at `block` of each of `accounts` (`None`: of every
    /// account whose storage changed after `block`) to `each`, by hashed
    /// slot, zero words included: the head's words with each slot's word
    /// before the first change after `block` put back, from the storage
    /// change sets of either layout ([`Self::storage_changes_after`]). One
    /// account's storage is held at a time; an error at the end (see
    /// [`SlotEvidence`]) voids what was handed over.
    fn for_each_storage_at(
        &self,
        block: u64,
        accounts: Option<&[Address]>,
        mut each: impl FnMut(Address, BTreeMap<B256, U256>),
    ) -> Result<(), RethError> {
        let mut changes: BTreeMap<Address, Vec<StorageChange>> = BTreeMap::new();
        for c in self.storage_changes_after(block, accounts)? {
            changes.entry(c.contract).or_default().push(c);
        }
        let read: Vec<Address> = match accounts {
            Some(listed) => listed.to_vec(),
            None => changes.keys().copied().collect(),
        };
        let mut evidence = SlotEvidence::default();
        for account in read {
            let mut words: BTreeMap<B256, U256> = self
                .storage(&[account])?
                .into_iter()
                .map(|r| (r.hashed_slot, r.value))
                .collect();
            let mut mine = changes.remove(&account).unwrap_or_default();
            evidence.weigh(&words, &mine);
            // Newest first: the last word put back is the one from before
            // the first change after `block`, i.e. the word at `block`.
            mine.sort_by_key(|c| std::cmp::Reverse(c.block));
            for c in mine {
                words.insert(alloy_primitives::keccak256(c.slot), c.before);
            }
            each(account, words);
        }
        evidence.check()
    }

    /// The storage changes in blocks after `block` of `contracts` (`None`:
    /// of every account). v1: MDBX `StorageChangeSets` (key: block (u64
    /// BE) || address; values: slot || word before the block). v2: the `storage-change-sets`
    /// static files (address || slot || word before the block, reth's
    /// `StorageBeforeTx`). Words big-endian without leading zeros; slots
    /// plain in both (see [`SlotEvidence`]).
    fn storage_changes_after(
        &self,
        block: u64,
        contracts: Option<&[Address]>,
    ) -> Result<Vec<StorageChange>, RethError> {
        let listed: Option<BTreeSet<Address>> = contracts.map(|c| c.iter().copied().collect());
        let mut changes = Vec::new();
        let mut keep = |block, contract, entry: &[u8], table| {
            if listed.as_ref().is_none_or(|l| l.contains(&contract)) {
                let (slot, before) = decode_storage_entry(entry)
                    .map_err(|reason| RethError::Malformed { table, reason })?;
                changes.push(StorageChange {
                    block,
                    contract,
                    slot,
                    before,
                });
            }
            Ok(())
        };
        let from = block.saturating_add(1);
        match self.layout {
            Layout::V1 => self.for_each_v1_storage_change(from, |block, contract, entry| {
                keep(block, contract, entry, V1_STORAGE_CHANGES)
            })?,
            Layout::V2 => {
                let segment = Segment::StorageChangeSets;
                static_files::for_each_change(&self.path, segment, from, |block, value| {
                    let (contract, entry) = split_address(value, segment.table())?;
                    keep(block, contract, entry, segment.table())
                })?
            }
        }
        Ok(changes)
    }

    /// Hands every v1 storage change of blocks from `from` on to `f` as
    /// `(block, address, slot || word)`: one cursor walk from the first
    /// key of block `from`.
    fn for_each_v1_storage_change(
        &self,
        from: u64,
        mut f: impl FnMut(u64, Address, &[u8]) -> Result<(), RethError>,
    ) -> Result<(), RethError> {
        const TABLE: &str = V1_STORAGE_CHANGES;
        let txn = self.db.begin_ro_txn().map_err(read_err(TABLE))?;
        let Some(t) = open_optional(&txn, TABLE)? else {
            return Ok(());
        };
        let mut cursor = txn.cursor(&t).map_err(read_err(TABLE))?;
        let mut entry = cursor
            .set_range::<Vec<u8>, Vec<u8>>(&from.to_be_bytes())
            .map_err(read_err(TABLE))?;
        while let Some((k, v)) = entry {
            if k.len() != 28 {
                return Err(RethError::Malformed {
                    table: TABLE,
                    reason: format!("key of {} bytes", k.len()),
                });
            }
            let block = u64::from_be_bytes(k[..8].try_into().expect("8 bytes"));
            f(block, Address::from_slice(&k[8..]), &v)?;
            entry = cursor.next::<Vec<u8>, Vec<u8>>().map_err(read_err(TABLE))?;
        }
        Ok(())
    }

    /// Change sets: `(block, address, account before the block or None)`,
    /// from MDBX (v1) or from the account change-set static files (v2).
    fn change_sets(&self) -> Result<Vec<Change>, RethError> {
        match self.layout {
            Layout::V1 => self
                .entries("AccountChangeSets")?
                .into_iter()
                .map(|(k, v)| {
                    let block: [u8; 8] =
                        k.try_into().map_err(|k: Vec<u8>| RethError::Malformed {
                            table: "AccountChangeSets",
                            reason: format!("key of {} bytes", k.len()),
                        })?;
                    parse_change(u64::from_be_bytes(block), &v, "AccountChangeSets")
                })
                .collect(),
            Layout::V2 => self.static_change_sets(),
        }
    }

    /// v2: the account change sets of the static files, one raw value per
    /// change.
    fn static_change_sets(&self) -> Result<Vec<Change>, RethError> {
        let segment = Segment::AccountChangeSets;
        let mut out = Vec::new();
        static_files::for_each_change(&self.path, segment, 0, |block, value| {
            out.push(parse_change(block, value, segment.table())?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Every account at block `block`: the head state with the change sets
    /// of later blocks undone, newest first; each with its code hash (from
    /// the account) and storage root (the head's, or, where the storage
    /// changed after `block`, from its words there).
    pub fn state_at(&self, block: u64) -> Result<Vec<AccountRecord>, RethError> {
        let head = self.head_not_before(block)?;
        if block == head {
            return self.full_state();
        }
        let mut state = self.accounts_at(block)?;
        self.for_each_storage_at(block, None, |address, words| {
            if let Some(r) = state.get_mut(&crate::account::pir_key(&address)) {
                r.storage_root = crate::state_root::storage_root(words.into_iter().collect());
            }
        })?;
        Ok(state.into_values().collect())
    }

    /// The accounts at an older `block` by key, with the head's storage
    /// roots (right only where the storage did not change after `block`:
    /// [`Self::state_at`] puts the others right).
    fn accounts_at(&self, block: u64) -> Result<BTreeMap<B256, AccountRecord>, RethError> {
        let mut state: BTreeMap<B256, AccountRecord> =
            self.full_state()?.into_iter().map(|r| (r.key, r)).collect();
        // Each record keeps the head's storage root as changes replace it;
        // that of a record a change removed waits here (not a copy of
        // every root: a mainnet state holds 3.5e8).
        let mut removed_roots: BTreeMap<B256, B256> = BTreeMap::new();
        let mut changes = self.change_sets()?;
        changes.retain(|(b, _, _)| *b > block);
        changes.sort_by_key(|c| std::cmp::Reverse(c.0));
        for (_, address, before) in changes {
            let key = crate::account::pir_key(&address);
            match before {
                Some(a) => {
                    let root = state
                        .get(&key)
                        .map(|r| r.storage_root)
                        .or_else(|| removed_roots.get(&key).copied())
                        .unwrap_or(crate::account::EMPTY_STORAGE_ROOT);
                    let record = AccountRecord::new(address, a.balance, a.nonce);
                    state.insert(key, record.with_trie(a.code_hash, root));
                }
                None => {
                    if let Some(r) = state.remove(&key) {
                        removed_roots.entry(key).or_insert(r.storage_root);
                    }
                }
            }
        }
        Ok(state)
    }

    /// Accounts whose state changed in blocks `from..=to`.
    pub fn touched(&self, from: u64, to: u64) -> Result<BTreeSet<Address>, RethError> {
        Ok(self
            .change_sets()?
            .into_iter()
            .filter(|(b, _, _)| (from..=to).contains(b))
            .map(|(_, a, _)| a)
            .collect())
    }

    /// A delta: every account changed in blocks `(from, to]` (its change
    /// sets), at `to`; an account that no longer exists there reads 0/0.
    pub fn export_delta(
        &self,
        from: u64,
        to: u64,
        chain_id: u64,
    ) -> Result<ExportedState, RethError> {
        let started = Instant::now();
        let head = self.head()?;
        if to > head {
            return Err(RethError::FutureBlock { block: to, head });
        }
        let state = self.accounts_at(to)?;
        let records = self
            .touched(from + 1, to)?
            .into_iter()
            // Trie fields left unknown: a delta names no codes, and its
            // storage roots would cost a walk of every changed account's
            // storage ([`Self::state_at`]).
            .map(|a| match state.get(&crate::account::pir_key(&a)) {
                Some(r) => AccountRecord::new(a, r.balance, r.nonce).without_trie(),
                None => AccountRecord::deleted(a).without_trie(),
            })
            .collect();
        self.exported(to, SnapshotKind::Delta { from }, records, chain_id, started)
    }

    /// Exports a snapshot's worth of accounts.
    pub fn export(&self, mode: RethMode, chain_id: u64) -> Result<ExportedState, RethError> {
        let started = Instant::now();
        let head = self.head()?;
        let (block, kind, records) = match mode {
            RethMode::Full => (head, SnapshotKind::Full, self.full_state()?),
            RethMode::FullAt { block } => (block, SnapshotKind::Full, self.state_at(block)?),
            RethMode::Active { window } => {
                let window = window.max(1);
                let touched: BTreeMap<B256, Address> = self
                    .touched(head.saturating_sub(window - 1), head)?
                    .into_iter()
                    .map(|a| (crate::account::pir_key(&a), a))
                    .collect();
                let records = self
                    .full_state()?
                    .into_iter()
                    .filter_map(|r| {
                        touched.get(&r.key).map(|a| {
                            AccountRecord::new(*a, r.balance, r.nonce)
                                .with_trie(r.code_hash, r.storage_root)
                        })
                    })
                    .collect();
                (head, SnapshotKind::Active { window }, records)
            }
        };
        self.exported(block, kind, records, chain_id, started)
    }

    /// Records at `block` with the block's metadata.
    fn exported(
        &self,
        block: u64,
        kind: SnapshotKind,
        records: Vec<AccountRecord>,
        chain_id: u64,
        started: Instant,
    ) -> Result<ExportedState, RethError> {
        let hashes = self.block_hashes()?;
        let block_hash = hashes.get(&block).copied();
        // A delta names the block it stands on.
        let parent_hash = match kind {
            SnapshotKind::Delta { from } => hashes.get(&from).copied(),
            _ => None,
        };
        let header = match self.headers() {
            Ok(h) => h.get(&block).copied(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the header static files; state root and time left empty");
                None
            }
        };
        let export_s = started.elapsed().as_secs_f64();
        tracing::info!(block, accounts = records.len(), layout = ?self.layout, export_s, "exported from the reth datadir");
        Ok(ExportedState {
            chain_id,
            block_number: block,
            block_hash,
            state_root: header.map(|h| h.0),
            block_time: header.map(|h| h.1),
            parent_hash,
            kind,
            source: format!("reth:{}", self.path.display()),
            storage: Vec::new(),
            listed: Default::default(),
            // Only records whose code hash is known name codes (a streamed
            // head, without records here, keeps its codes as it publishes).
            codes: match records.iter().any(|r| r.trie_known()) {
                true => self.codes()?,
                false => Vec::new(),
            },
            records,
            export_s,
        })
    }
}

/// The snapshot of the datadir at `dir` that `mode` names, with the slots
/// of the `listed` contracts: a v2 datadir's head streamed, anything else
/// held. What `build reth` and the follower's base both build.
pub fn export_base(
    dir: &Path,
    mode: RethMode,
    chain_id: u64,
    listed: PrivateStorage,
) -> Result<crate::sources::Base, RethError> {
    use crate::sources::Base;
    let reth = RethDatadir::open(dir)?;
    if mode == RethMode::Full && reth.streams_full_state() {
        let head = StreamedHead::new(reth, chain_id, listed)?;
        tracing::info!(
            block = head.meta.block_number,
            slots = head.slots(),
            "streaming the head state from the reth datadir (v2)"
        );
        return Ok(Base::Streamed(head));
    }
    let mut state = reth.export(mode, chain_id)?;
    if !listed.is_empty() {
        state.storage = match mode {
            RethMode::Full => reth.storage_of(&listed, None)?,
            RethMode::FullAt { block } => reth.storage_of(&listed, Some(block))?,
            RethMode::Active { .. } => return Err(RethError::ListedActiveSet),
        };
        state.listed = listed;
    }
    Ok(Base::Held(state))
}

/// A v2 datadir's head as a base whose accounts are streamed into
/// `records.bin` as it is written ([`RethDatadir::write_full_state`]), so
/// that a mainnet base is never held: what `build reth` and the follower
/// publish at a v2 datadir's head.
pub struct StreamedHead {
    /// The head's block, hash, root, time and listed contracts; no records.
    pub meta: ExportedState,
    reth: RethDatadir,
    storage: Vec<StorageRecord>,
}

impl StreamedHead {
    /// The head of `reth` with the slots of the `listed` contracts; `reth`
    /// must stream ([`RethDatadir::streams_full_state`]).
    pub fn new(
        reth: RethDatadir,
        chain_id: u64,
        listed: PrivateStorage,
    ) -> Result<Self, RethError> {
        if !reth.streams_full_state() {
            return Err(RethError::Unsupported(
                "streaming the head state of a v1 (plain state) datadir",
            ));
        }
        // The whole state's slots are walked as the base is written,
        // never held; a list's are few.
        let storage = match listed.is_empty() || listed.whole_state {
            true => Vec::new(),
            false => reth.storage_of(&listed, None)?,
        };
        let mut meta = reth.head_metadata(chain_id)?;
        meta.listed = listed;
        Ok(StreamedHead {
            meta,
            reth,
            storage,
        })
    }

    /// The listed contracts' slots (held: they are few; the whole state's
    /// are counted as they are written).
    pub fn slots(&self) -> usize {
        self.storage.len()
    }

    /// Builds and publishes the base, streaming the accounts. The slots
    /// are put in key order within the build's memory budget
    /// ([`SlotSorter`]: the whole state's spill sorted runs into the
    /// store's staging folder, merged as `records.bin` is written).
    pub fn publish(
        self,
        store: &SnapshotStore,
        options: &BuildOptions,
    ) -> Result<StoredSnapshot, BuildError> {
        let StreamedHead {
            meta,
            reth,
            storage,
        } = self;
        // The codes first: a published snapshot's codes are served.
        reth.for_each_code(|code| store.put_code(code).map(|_| ()).map_err(|e| e.to_string()))
            .map_err(|e| BuildError::Codes(e.to_string()))?;
        let runs = store.scratch_dir("slot-runs");
        let memory = options.encode_memory_bytes;
        let whole_state = meta.listed.whole_state;
        build_and_publish_streamed(store, &meta, options, |w| {
            let mut sorter = SlotSorter::new(runs, memory);
            match whole_state {
                true => reth
                    .for_each_slot(|slot| sorter.push(slot).map_err(RethError::Spill))
                    .map_err(std::io::Error::other)?,
                false => storage.into_iter().try_for_each(|slot| sorter.push(slot))?,
            }
            tracing::info!(slots = sorter.count(), "storage sorted by key");
            reth.write_full_state(sorter.finish()?, w)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_bytecodes_only_when_they_are_their_hash() {
        let code = [0x60u8, 0x01, 0x00];
        let hash = alloy_primitives::keccak256(code);
        // Legacy analysed: padded bytes, kind 2, the original length, a
        // jump table.
        let mut analysed = 35u32.to_be_bytes().to_vec();
        analysed.extend(code);
        analysed.extend([0u8; 32]);
        analysed.push(2);
        analysed.extend(3u64.to_be_bytes());
        analysed.extend([0u8; 4]);
        assert_eq!(
            decode_bytecode(hash.as_slice(), &analysed),
            Some(code.to_vec())
        );
        // A 7702 designator: its bytes, kind 3.
        let designator = [[0xef, 0x01, 0x00].as_slice(), &[7u8; 20]].concat();
        let mut raw = 23u32.to_be_bytes().to_vec();
        raw.extend(&designator);
        raw.push(3);
        let key = alloy_primitives::keccak256(&designator);
        assert_eq!(decode_bytecode(key.as_slice(), &raw), Some(designator));
        // Another key, a truncated entry, a length past the end: no code.
        assert_eq!(decode_bytecode(&[0u8; 32], &analysed), None);
        assert_eq!(decode_bytecode(hash.as_slice(), &analysed[..5]), None);
        assert_eq!(decode_bytecode(hash.as_slice(), &[0xff; 8]), None);
    }

    #[test]
    fn decodes_compact_accounts() {
        // From the fixture README: nonce 0, balance 9, no code hash.
        assert_eq!(
            decode_account(&[0x10, 0x00, 0x09]).unwrap(),
            (0, U256::from(9u64))
        );
        let v = hex::decode("a10009d3c21b4e8ae864f0c6ff").unwrap();
        assert_eq!(
            decode_account(&v).unwrap(),
            (9, U256::from_str_radix("d3c21b4e8ae864f0c6ff", 16).unwrap())
        );
        assert!(decode_account(&[0x10]).is_err());
        assert!(decode_account(&[0x10, 0x00]).is_err());
        assert!(decode_account(&[0x10, 0x00, 0x09, 0x00]).is_err());
    }

    /// Change sets with plain slots pass; hashed ones (reth 1.11) are
    /// refused when the head bears them out and never plain ones; a
    /// plain slot that is some slot's hash does not decide alone.
    #[test]
    fn tells_hashed_change_set_slots_from_plain_ones() {
        use alloy_primitives::keccak256;
        let change = |slot: B256| StorageChange {
            block: 9,
            contract: Address::repeat_byte(0x70),
            slot,
            before: U256::from(1u8),
        };
        let (a, b) = (B256::with_last_byte(1), B256::with_last_byte(2));
        let head: BTreeMap<B256, U256> = [(keccak256(a), 5u8), (keccak256(b), 6)]
            .into_iter()
            .map(|(slot, w)| (slot, U256::from(w)))
            .collect();
        let weighed = |accounts: &[(&BTreeMap<B256, U256>, &[StorageChange])]| {
            let mut evidence = SlotEvidence::default();
            for (head, changes) in accounts {
                evidence.weigh(head, changes);
            }
            evidence.check()
        };
        assert!(weighed(&[(&head, &[change(a), change(b)])]).is_ok());
        let hashed = [change(keccak256(a)), change(keccak256(b))];
        assert!(matches!(
            weighed(&[(&head, &hashed)]),
            Err(RethError::Unsupported(_))
        ));
        // keccak256(a) as a plain slot (an array's first element) beside
        // plain b, in this account or another: plain.
        assert!(weighed(&[(&head, &[change(keccak256(a)), change(b)])]).is_ok());
        assert!(weighed(&[(&head, &[change(keccak256(a))]), (&head, &[change(b)])]).is_ok());
        // Nothing at the head to tell by: read as plain.
        assert!(weighed(&[(&BTreeMap::new(), &hashed)]).is_ok());
    }
}

//! The `reth` source: a reth datadir, opened read-only with the `libmdbx`
//! bindings, account values decoded with reth's published `Compact` codecs.
//!
//! Two layouts exist, and the datadir's `Metadata` table says which:
//! - **v1** (reth 1.x, and 2.x with `--storage.v2=false`): accounts by
//!   address in `PlainAccountState`, their earlier values in
//!   `AccountChangeSets` (block -> address + account before the block).
//!   Full state, state at an older block (undoing change sets), active set.
//! - **v2** (reth 2.x default): accounts by keccak256(address) in
//!   `HashedAccounts`, change sets in the `account-change-sets` static
//!   files (raw values, a per-block row index in `.csoff`).
//!
//! Both give the full state, the state at an older block (undoing change
//! sets) and the active set.
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
use crate::store::{SnapshotStore, StoredSnapshot};

/// Storage layout of a datadir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    V1,
    V2,
}

/// What cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RethError {
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
/// `(nonce, balance)` of an account.
type AccountState = (u64, U256);
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

/// One v1 change-set entry: block, address, account before the block.
type Change = (u64, Address, Option<AccountState>);

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
    if v.len() < 20 {
        return Err(bad(format!("change of {} bytes", v.len())));
    }
    let before = if v.len() == 20 {
        None
    } else {
        Some(decode_account(&v[20..]).map_err(bad)?)
    };
    Ok((block, Address::from_slice(&v[..20]), before))
}

/// A NippyJar offsets file (`<data>.off`): one byte giving the offset
/// width, then little-endian offsets; value `i` spans `[off[i], off[i+1])`.
fn read_offsets(data_path: &str) -> Result<Vec<usize>, RethError> {
    let path = format!("{data_path}.off");
    let bad = |reason: String| RethError::Malformed {
        table: "static_files",
        reason: format!("{path}: {reason}"),
    };
    let bytes = std::fs::read(&path).map_err(|e| bad(e.to_string()))?;
    let width = *bytes.first().ok_or_else(|| bad("empty".into()))? as usize;
    if !(1..=8).contains(&width) || (bytes.len() - 1) % width != 0 {
        return Err(bad(format!("offset width {width}")));
    }
    Ok(bytes[1..]
        .chunks(width)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..width].copy_from_slice(c);
            u64::from_le_bytes(b) as usize
        })
        .collect())
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
        let txn = self.db.begin_ro_txn().map_err(read_err(table))?;
        let Some(t) = open_optional(&txn, table)? else {
            return Ok(Vec::new());
        };
        let mut cursor = txn.cursor(&t).map_err(read_err(table))?;
        let mut out = Vec::new();
        while let Some((k, v)) = cursor.next::<Vec<u8>, Vec<u8>>().map_err(read_err(table))? {
            out.push((k, v));
        }
        Ok(out)
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
        const COLUMNS: usize = 3;
        let bad = |reason: String| RethError::Malformed {
            table: "static_files/headers",
            reason,
        };
        let mut out = BTreeMap::new();
        for (first, path) in self.static_files("headers")? {
            let data = std::fs::read(&path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
            let offs = read_offsets(&path.to_string_lossy())?;
            for row in 0..offs.len().saturating_sub(1) / COLUMNS {
                let (a, b) = (offs[row * COLUMNS], offs[row * COLUMNS + 1]);
                if a > b || b > data.len() {
                    return Err(bad(format!(
                        "{}: offsets out of range at row {row}",
                        path.display()
                    )));
                }
                let raw = lz4_flex::block::decompress(&data[a..b], 1 << 16)
                    .map_err(|e| bad(format!("{} row {row}: {e}", path.display())))?;
                let (header, _) = alloy_consensus::Header::from_compact(&raw, raw.len());
                out.insert(first + row as u64, (header.state_root, header.timestamp));
            }
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
        mut storage: Vec<StorageRecord>,
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
        storage.sort_unstable_by_key(|s| s.key);
        let slots = storage.len() as u64;
        let written = write_record_stream(accounts, walk, slots, storage.into_iter(), w);
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

    /// [`Self::storage`] at an older `block`: the head's words with every
    /// change after `block` undone (v1 `StorageChangeSets`: block and
    /// address, then each slot's word before that block). The v2 layout
    /// keeps storage change sets in static files this reader does not
    /// parse yet: refused.
    pub fn storage_at(
        &self,
        block: u64,
        contracts: &[Address],
    ) -> Result<Vec<StorageRecord>, RethError> {
        let head = self.head()?;
        if block > head {
            return Err(RethError::FutureBlock { block, head });
        }
        if block == head || contracts.is_empty() {
            return self.storage(contracts);
        }
        if self.layout == Layout::V2 {
            return Err(RethError::Unsupported(
                "storage at an older block of a v2 datadir (its storage change sets are static files)",
            ));
        }
        let mut words: BTreeMap<(Address, B256), U256> = self
            .storage(contracts)?
            .into_iter()
            .map(|r| {
                (
                    (r.contract.expect("v1 knows the contract"), r.hashed_slot),
                    r.value,
                )
            })
            .collect();
        let mut changes = self.storage_changes_after(block, contracts)?;
        // Newest first: the last word put back is the one from before the
        // first change after `block`, i.e. the word at `block`.
        changes.sort_by_key(|c| std::cmp::Reverse(c.0));
        for (_, contract, slot, before) in changes {
            words.insert((contract, alloy_primitives::keccak256(slot)), before);
        }
        Ok(words
            .into_iter()
            .filter(|(_, w)| !w.is_zero())
            .map(|((contract, hashed_slot), word)| {
                let mut r = StorageRecord::from_hashed(
                    alloy_primitives::keccak256(contract),
                    hashed_slot,
                    word,
                );
                r.contract = Some(contract);
                r
            })
            .collect())
    }

    /// The v1 storage changes of `contracts` in blocks after `block`:
    /// `(block, contract, slot, word before that block)`.
    fn storage_changes_after(
        &self,
        block: u64,
        contracts: &[Address],
    ) -> Result<Vec<(u64, Address, B256, U256)>, RethError> {
        const TABLE: &str = "StorageChangeSets";
        let mut changes = Vec::new();
        for (k, v) in self.entries(TABLE)? {
            if k.len() != 28 {
                return Err(RethError::Malformed {
                    table: TABLE,
                    reason: format!("key of {} bytes", k.len()),
                });
            }
            let changed_in = u64::from_be_bytes(k[..8].try_into().expect("8 bytes"));
            let contract = Address::from_slice(&k[8..]);
            if changed_in <= block || !contracts.contains(&contract) {
                continue;
            }
            let (slot, before) =
                decode_storage_entry(&v).map_err(|reason| RethError::Malformed {
                    table: TABLE,
                    reason,
                })?;
            changes.push((changed_in, contract, slot, before));
        }
        Ok(changes)
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

    /// v2: `static_file_account-change-sets_<first>_<last>` holds one raw
    /// value per change; `.csoff` gives, per block, the first row and the
    /// number of rows.
    fn static_change_sets(&self) -> Result<Vec<Change>, RethError> {
        const TABLE: &str = "static_files/account-change-sets";
        let bad = |reason: String| RethError::Malformed {
            table: TABLE,
            reason,
        };
        let mut out = Vec::new();
        for (first, path) in self.static_files("account-change-sets")? {
            let data = std::fs::read(&path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
            let offs = read_offsets(&path.to_string_lossy())?;
            let csoff_path = format!("{}.csoff", path.display());
            let csoff =
                std::fs::read(&csoff_path).map_err(|e| bad(format!("{csoff_path}: {e}")))?;
            if csoff.len() % 16 != 0 {
                return Err(bad(format!("{csoff_path}: {} bytes", csoff.len())));
            }
            for (i, pair) in csoff.chunks_exact(16).enumerate() {
                let start = u64::from_le_bytes(pair[..8].try_into().unwrap()) as usize;
                let count = u64::from_le_bytes(pair[8..].try_into().unwrap()) as usize;
                for row in start..start.saturating_add(count) {
                    let (a, b) = match (offs.get(row), offs.get(row + 1)) {
                        (Some(&a), Some(&b)) if a <= b && b <= data.len() => (a, b),
                        _ => return Err(bad(format!("row {row} out of range"))),
                    };
                    out.push(parse_change(first + i as u64, &data[a..b], TABLE)?);
                }
            }
        }
        Ok(out)
    }

    /// `(first block, path)` of each static file of a segment.
    fn static_files(&self, segment: &str) -> Result<Vec<(u64, PathBuf)>, RethError> {
        let dir = self.path.join("static_files");
        let prefix = format!("static_file_{segment}_");
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(out);
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let Some(range) = name.strip_prefix(&prefix) else {
                continue;
            };
            if range.contains('.') {
                continue;
            }
            if let Some(first) = range.split('_').next().and_then(|b| b.parse::<u64>().ok()) {
                out.push((first, entry.path()));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Every account at block `block`: the head state with the change sets
    /// of later blocks undone, newest first.
    pub fn state_at(&self, block: u64) -> Result<Vec<AccountRecord>, RethError> {
        let head = self.head()?;
        if block > head {
            return Err(RethError::FutureBlock { block, head });
        }
        if block == head {
            return self.full_state();
        }
        // Storage roots at an older block would need the storage change
        // sets applied to the storage walk: not read yet, so every record
        // of an older block says its trie fields are unknown, and
        // `verify --state-root` refuses rather than guesses.
        let mut state: BTreeMap<B256, AccountRecord> = self
            .full_state()?
            .into_iter()
            .map(|r| (r.key, r.without_trie()))
            .collect();
        let mut changes = self.change_sets()?;
        changes.retain(|(b, _, _)| *b > block);
        changes.sort_by_key(|c| std::cmp::Reverse(c.0));
        for (_, address, before) in changes {
            let key = crate::account::pir_key(&address);
            match before {
                Some((nonce, balance)) => state.insert(
                    key,
                    AccountRecord::new(address, balance, nonce).without_trie(),
                ),
                None => state.remove(&key),
            };
        }
        Ok(state.into_values().collect())
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
        let state: BTreeMap<B256, AccountRecord> =
            self.state_at(to)?.into_iter().map(|r| (r.key, r)).collect();
        let records = self
            .touched(from + 1, to)?
            .into_iter()
            // Trie fields unknown: a delta is at a block the storage
            // walk does not read (see [`Self::state_at`]).
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
        let block_hash = self.block_hashes()?.get(&block).copied();
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
        let contracts = listed.all_contracts();
        state.storage = match mode {
            RethMode::Full => reth.storage(&contracts)?,
            RethMode::FullAt { block } => reth.storage_at(block, &contracts)?,
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
        let storage = match listed.is_empty() {
            true => Vec::new(),
            false => reth.storage(&listed.all_contracts())?,
        };
        let mut meta = reth.head_metadata(chain_id)?;
        meta.listed = listed;
        Ok(StreamedHead {
            meta,
            reth,
            storage,
        })
    }

    /// The listed contracts' slots (held: they are few).
    pub fn slots(&self) -> usize {
        self.storage.len()
    }

    /// Builds and publishes the base, streaming the accounts.
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
        build_and_publish_streamed(store, &meta, options, |w| reth.write_full_state(storage, w))
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
}

//! A whole-state base from geth's own offline export: the output of `geth
//! snapshot dump` (run with geth stopped), JSON objects one after another:
//! first `{"root": ...}`, then every account in key order with its balance,
//! nonce, storage root, code hash, code and storage, named by `key`
//! (keccak256 of its address). The PIR keys are hashes (of the address; of
//! both hashes for a slot), so no preimage is needed: a node run without
//! `--cache.preimages` dumps a usable base.
//!
//! Streamed, never held: the accounts go to a spill file as they are read
//! (`records.bin` names their count first), the slots to the build's
//! [`SlotSorter`] within its memory budget, the codes into the store. Each
//! account's storage root is recomputed from its slots as they are read
//! and must be the one the dump names; the state root recomputed from the
//! accounts must be the dump's, which must be the node's header's at the
//! block the base is of. A dump that does not add up is refused, not
//! published. No stretch of the dump between two slots (an account's
//! other fields, its code) may pass [`MAX_FIELD_BYTES`].

use std::cell::Cell;
use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use alloy_primitives::{keccak256, B256, U256};
use alloy_trie::{HashBuilder, Nibbles, EMPTY_ROOT_HASH};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::account::{AccountRecord, EMPTY_CODE_HASH};
use crate::pipeline::{build_and_publish_streamed, BuildOptions, ExportedState};
use crate::sources::PublishError;
use crate::store::{SnapshotStore, StoredSnapshot};
use protocol::storage::{PrivateStorage, StorageRecord};
use snapshot_build::account_spill::{AccountSpill, SpilledAccounts};
use snapshot_build::records::write_record_stream;
use snapshot_build::slot_sort::SlotSorter;

/// Most bytes of the dump between two slots (an account's fields but its
/// storage, its code, one slot): more is not a dump geth writes. An
/// account's storage may be any size: the count starts again at every
/// slot.
pub const MAX_FIELD_BYTES: u64 = 64 << 20;

/// Slots of one account held while its key is not yet read (geth writes
/// the key after the storage); more go to a file.
const HELD_PENDING_SLOTS: usize = 1 << 20;

/// Why a dump cannot be read or does not add up.
#[derive(Debug, thiserror::Error)]
pub enum GethDumpError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not the output of `geth snapshot dump` ({why})")]
    Format { path: PathBuf, why: String },
    #[error("{path}: account {index}: {why}")]
    Account {
        path: PathBuf,
        index: u64,
        why: String,
    },
    #[error("{path}: its accounts make the state root {computed}, the dump names {named}")]
    StateRoot {
        path: PathBuf,
        computed: B256,
        named: B256,
    },
}

impl GethDumpError {
    /// Whether reading the dump again could go otherwise (a read error of
    /// the disk), where every other error is in the dump's bytes.
    pub fn may_pass_again(&self) -> bool {
        matches!(self, GethDumpError::Io { .. })
    }
}

/// A dump file, its first line read: the state root it is of.
#[derive(Clone, Debug)]
pub struct GethDump {
    pub path: PathBuf,
    pub root: B256,
}

impl GethDump {
    /// Opens `path` and reads the root it names.
    pub fn open(path: &Path) -> Result<Self, GethDumpError> {
        let mut reader = DumpReader::open(path, MAX_FIELD_BYTES)?;
        let root = reader.header()?;
        Ok(GethDump {
            path: path.to_path_buf(),
            root,
        })
    }
}

/// The first object of a dump.
#[derive(serde::Deserialize)]
struct Header {
    root: B256,
}

/// A dump being read: the file, and the bytes read since the count was
/// last started again.
struct DumpReader {
    path: PathBuf,
    input: Budgeted,
}

impl DumpReader {
    /// The dump at `path`, no field to pass `limit` bytes.
    fn open(path: &Path, limit: u64) -> Result<Self, GethDumpError> {
        let file = File::open(path).map_err(|source| GethDumpError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(DumpReader {
            path: path.to_path_buf(),
            input: Budgeted {
                inner: BufReader::with_capacity(1 << 20, file),
                used: Rc::new(Cell::new(0)),
                limit,
            },
        })
    }

    fn format(&self, why: impl fmt::Display) -> GethDumpError {
        GethDumpError::Format {
            path: self.path.clone(),
            why: why.to_string(),
        }
    }

    fn header(&mut self) -> Result<B256, GethDumpError> {
        if !self.next_object()? {
            return Err(self.format("empty"));
        }
        let mut de = serde_json::Deserializer::from_reader(&mut self.input);
        let header = serde::Deserialize::deserialize(&mut de)
            .map_err(|e: serde_json::Error| self.format(format!("its first line: {e}")))?;
        let Header { root } = header;
        Ok(root)
    }

    /// Skips the whitespace before the next object; whether there is one.
    fn next_object(&mut self) -> Result<bool, GethDumpError> {
        self.input.used.set(0);
        loop {
            let buf = self
                .input
                .inner
                .fill_buf()
                .map_err(|source| GethDumpError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            let Some(&first) = buf.first() else {
                return Ok(false);
            };
            if !first.is_ascii_whitespace() {
                return Ok(true);
            }
            self.input.inner.consume(1);
        }
    }
}

/// A reader that refuses to give more than `limit` bytes since its count
/// was last started again.
struct Budgeted {
    inner: BufReader<File>,
    used: Rc<Cell<u64>>,
    limit: u64,
}

impl Read for Budgeted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let used = self.used.get();
        if used >= self.limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a field of more than {} bytes", self.limit),
            ));
        }
        let room = (self.limit - used).min(buf.len() as u64) as usize;
        let n = self.inner.read(&mut buf[..room])?;
        self.used.set(used + n as u64);
        Ok(n)
    }
}

/// One account of the dump, as read (its storage went elsewhere).
#[derive(Default)]
struct DumpAccount {
    balance: Option<U256>,
    nonce: Option<u64>,
    root: Option<B256>,
    code_hash: Option<B256>,
    code: Option<alloy_primitives::Bytes>,
    key: Option<B256>,
}

/// What an account's storage is read into: its slots until the account's
/// key is known, and the storage root they make.
struct StorageSink {
    used: Rc<Cell<u64>>,
    pending: PendingSlots,
    root: HashBuilder,
    last: Option<B256>,
    error: Option<String>,
}

impl StorageSink {
    fn add(&mut self, slot: B256, rlp: &str) -> Result<(), String> {
        if self.last.is_some_and(|last| last >= slot) {
            return Err(format!("its slot {slot} is out of key order"));
        }
        self.last = Some(slot);
        let bytes = hex::decode(rlp.strip_prefix("0x").unwrap_or(rlp))
            .map_err(|e| format!("slot {slot}: {e}"))?;
        let value: U256 =
            alloy_rlp::decode_exact(&bytes).map_err(|e| format!("slot {slot}: {e}"))?;
        if value.is_zero() {
            return Err(format!("slot {slot} holds zero, which is not in the trie"));
        }
        self.root
            .add_leaf(Nibbles::unpack(slot), &alloy_rlp::encode(value));
        self.pending.push(slot, value).map_err(|e| e.to_string())
    }
}

/// The slots of one account, held up to [`HELD_PENDING_SLOTS`], then in a
/// file.
struct PendingSlots {
    dir: PathBuf,
    held: Vec<(B256, U256)>,
    file: Option<(PathBuf, BufWriter<File>)>,
    spilled: u64,
}

impl PendingSlots {
    fn push(&mut self, slot: B256, value: U256) -> std::io::Result<()> {
        if self.held.len() < HELD_PENDING_SLOTS {
            self.held.push((slot, value));
            return Ok(());
        }
        if self.file.is_none() {
            std::fs::create_dir_all(&self.dir)?;
            let path = self.dir.join("pending-slots");
            let out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
            self.file = Some((path, out));
        }
        let (_, out) = self.file.as_mut().expect("opened above");
        out.write_all(slot.as_slice())?;
        out.write_all(&value.to_be_bytes::<32>())?;
        self.spilled += 1;
        Ok(())
    }

    /// Hands every slot to `each` in the order pushed, and empties.
    fn drain(
        &mut self,
        mut each: impl FnMut(B256, U256) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        for (slot, value) in self.held.drain(..) {
            each(slot, value)?;
        }
        if let Some((path, out)) = self.file.take() {
            drop(out.into_inner().map_err(|e| e.into_error())?);
            let mut reader = BufReader::with_capacity(1 << 20, File::open(&path)?);
            let mut entry = [0u8; 64];
            for _ in 0..std::mem::take(&mut self.spilled) {
                reader.read_exact(&mut entry)?;
                let value = U256::from_be_slice(&entry[32..]);
                each(B256::from_slice(&entry[..32]), value)?;
            }
            std::fs::remove_file(&path)?;
        }
        Ok(())
    }
}

/// Reads one account object into a [`DumpAccount`], its storage into the
/// sink.
struct AccountSeed<'a> {
    sink: &'a mut StorageSink,
}

impl<'de> DeserializeSeed<'de> for AccountSeed<'_> {
    type Value = DumpAccount;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<DumpAccount, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AccountSeed<'_> {
    type Value = DumpAccount;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an account of `geth snapshot dump`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DumpAccount, A::Error> {
        use serde::de::Error;
        let mut account = DumpAccount::default();
        while let Some(field) = map.next_key::<String>()? {
            match field.as_str() {
                "balance" => {
                    let text: String = map.next_value()?;
                    let balance = U256::from_str_radix(&text, 10)
                        .map_err(|e| A::Error::custom(format!("balance {text:?}: {e}")))?;
                    account.balance = Some(balance);
                }
                "nonce" => account.nonce = Some(map.next_value()?),
                "root" => account.root = Some(map.next_value()?),
                "codeHash" => account.code_hash = Some(map.next_value()?),
                "code" => account.code = Some(map.next_value()?),
                "key" => account.key = Some(map.next_value()?),
                "storage" => map.next_value_seed(StorageSeed {
                    sink: &mut *self.sink,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(account)
    }
}

/// Reads an account's `storage` object slot by slot into the sink.
struct StorageSeed<'a> {
    sink: &'a mut StorageSink,
}

impl<'de> DeserializeSeed<'de> for StorageSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for StorageSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an account's storage: hashed slot to RLP")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error;
        while let Some(slot) = map.next_key::<B256>()? {
            let rlp: String = map.next_value()?;
            self.sink.used.set(0);
            if let Err(why) = self.sink.add(slot, &rlp) {
                self.sink.error = Some(why.clone());
                return Err(A::Error::custom(why));
            }
        }
        Ok(())
    }
}

/// Where a dump's parts go while it is read.
struct DumpTargets<'a> {
    store: &'a SnapshotStore,
    sorter: &'a mut SlotSorter,
    spill: AccountSpill,
    /// Hashed addresses of the listed contracts (all when `None`).
    listed: Option<HashSet<B256>>,
}

/// Reads the dump at `dump.path` into `targets`: the accounts spilled,
/// the listed slots sorted, the codes stored; every account's storage
/// root and the state root checked.
fn read_dump(
    dump: &GethDump,
    pending_dir: PathBuf,
    mut targets: DumpTargets<'_>,
    limit: u64,
) -> Result<SpilledAccounts, GethDumpError> {
    let mut reader = DumpReader::open(&dump.path, limit)?;
    if reader.header()? != dump.root {
        return Err(reader.format("its root changed since it was opened"));
    }
    let mut state = HashBuilder::default();
    let mut index = 0u64;
    while reader.next_object()? {
        let record = read_account(&mut reader, &pending_dir, &mut targets).map_err(|why| {
            GethDumpError::Account {
                path: dump.path.clone(),
                index,
                why,
            }
        })?;
        state.add_leaf(
            Nibbles::unpack(record.key),
            &crate::state_root::leaf(&record),
        );
        index += 1;
        if index.is_multiple_of(1 << 20) {
            tracing::info!(
                accounts = index,
                slots = targets.sorter.count(),
                "reading the geth dump"
            );
        }
    }
    let computed = if index == 0 {
        EMPTY_ROOT_HASH
    } else {
        state.root()
    };
    if computed != dump.root {
        return Err(GethDumpError::StateRoot {
            path: dump.path.clone(),
            computed,
            named: dump.root,
        });
    }
    targets.spill.finish().map_err(|source| GethDumpError::Io {
        path: dump.path.clone(),
        source,
    })
}

/// The next account of the dump, checked ([`checked_account`]) and
/// spilled; the spill refuses an account out of key order, which the
/// trie's builder must never be given.
fn read_account(
    reader: &mut DumpReader,
    pending_dir: &Path,
    targets: &mut DumpTargets<'_>,
) -> Result<AccountRecord, String> {
    let mut sink = StorageSink {
        used: reader.input.used.clone(),
        pending: PendingSlots {
            dir: pending_dir.to_path_buf(),
            held: Vec::new(),
            file: None,
            spilled: 0,
        },
        root: HashBuilder::default(),
        last: None,
        error: None,
    };
    let mut de = serde_json::Deserializer::from_reader(&mut reader.input);
    let read = AccountSeed { sink: &mut sink }.deserialize(&mut de);
    let account = read.map_err(|e| sink.error.take().unwrap_or(e.to_string()))?;
    let record = checked_account(account, &mut sink, targets)?;
    targets.spill.push(&record).map_err(|e| e.to_string())?;
    Ok(record)
}

/// The record of an account read, its storage root, code and key checked;
/// its slots handed to the sorter when it is listed.
fn checked_account(
    account: DumpAccount,
    sink: &mut StorageSink,
    targets: &mut DumpTargets<'_>,
) -> Result<AccountRecord, String> {
    let missing = |field: &str| format!("no {field}");
    let key = account.key.ok_or_else(|| missing("key"))?;
    let root = account.root.ok_or_else(|| missing("root"))?;
    let code_hash = account.code_hash.ok_or_else(|| missing("codeHash"))?;
    let computed = match sink.last {
        Some(_) => sink.root.root(),
        None => EMPTY_ROOT_HASH,
    };
    if computed != root {
        return Err(format!(
            "{key}: its slots make the storage root {computed}, the dump names {root} (a dump made with --nostorage is not a whole state)"
        ));
    }
    if code_hash != EMPTY_CODE_HASH {
        let Some(code) = account.code else {
            return Err(format!(
                "{key}: no code for its code hash {code_hash} (a dump made with --nocode is not a whole state)"
            ));
        };
        if code.len() > protocol::codes::MAX_CODE_BYTES {
            return Err(format!(
                "{key}: a code of {} bytes, more than the {} a client takes",
                code.len(),
                protocol::codes::MAX_CODE_BYTES
            ));
        }
        if keccak256(&code) != code_hash {
            return Err(format!("{key}: its code is not its code hash {code_hash}"));
        }
        targets.store.put_code(&code).map_err(|e| e.to_string())?;
    }
    let balance = account.balance.ok_or_else(|| missing("balance"))?;
    let nonce = account.nonce.ok_or_else(|| missing("nonce"))?;
    let listed = targets.listed.as_ref().is_none_or(|l| l.contains(&key));
    let sorter = &mut *targets.sorter;
    sink.pending
        .drain(|slot, value| match listed {
            true => sorter.push(StorageRecord::from_hashed(key, slot, value)),
            false => Ok(()),
        })
        .map_err(|e| e.to_string())?;
    Ok(AccountRecord::from_hashed(key, balance, nonce).with_trie(code_hash, root))
}

/// A base from a geth dump, its block found: published by streaming the
/// dump into `records.bin` ([`StreamedDump::publish`]).
pub struct StreamedDump {
    /// The block, hash, root and time the dump is of, and the listed
    /// contracts; no records.
    pub meta: ExportedState,
    pub dump: GethDump,
}

impl StreamedDump {
    /// Builds and publishes the base: the dump read once, its accounts
    /// spilled and its slots sorted within the build's memory budget
    /// (both in the store's staging folder, removed when done, published
    /// or not), checked, then written as `records.bin`. A dump that does
    /// not add up is [`PublishError::GethDump`].
    pub fn publish(
        self,
        store: &SnapshotStore,
        options: &BuildOptions,
    ) -> Result<StoredSnapshot, PublishError> {
        let StreamedDump { meta, dump } = self;
        let listed = match meta.listed.whole_state {
            true => None,
            false => Some(meta.listed.all_contracts().iter().map(keccak256).collect()),
        };
        let scratch = ScratchDirs(
            ["slot-runs", "dump-accounts", "dump-pending"].map(|n| store.scratch_dir(n)),
        );
        let [runs, accounts, pending] = scratch.0.clone();
        let memory = options.encode_memory_bytes;
        let mut refused = None;
        let built = build_and_publish_streamed(store, &meta, options, |w| {
            let mut sorter = SlotSorter::new(runs, memory);
            let spill = AccountSpill::create(accounts.join("accounts"))?;
            let targets = DumpTargets {
                store,
                sorter: &mut sorter,
                spill,
                listed,
            };
            let read = read_dump(&dump, pending, targets, MAX_FIELD_BYTES);
            let mut accounts = read.map_err(|e| {
                let kept = std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string());
                refused = Some(e);
                kept
            })?;
            let count = accounts.total();
            tracing::info!(
                accounts = count,
                slots = sorter.count(),
                "geth dump read and checked"
            );
            let slots = sorter.count();
            let written = sorter
                .finish()?
                .write_with(|sorted| write_record_stream(count, &mut accounts, slots, sorted, w));
            match accounts.take_error() {
                Some(e) => Err(e),
                None => written,
            }
        });
        drop(scratch);
        match (built, refused) {
            (Ok(published), _) => Ok(published),
            (Err(_), Some(dump_error)) => Err(dump_error.into()),
            (Err(e), None) => Err(e.into()),
        }
    }
}

/// Scratch folders of a build, removed when it is dropped (after the
/// build, published or not).
struct ScratchDirs([PathBuf; 3]);

impl Drop for ScratchDirs {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The base of `dump` at `block` (whose header names the dump's root).
pub fn dump_base(
    dump: GethDump,
    chain_id: u64,
    block: u64,
    header: (B256, u64),
    listed: PrivateStorage,
) -> StreamedDump {
    let (hash, time) = header;
    let meta = ExportedState {
        chain_id,
        block_number: block,
        block_hash: Some(hash),
        parent_hash: None,
        state_root: Some(dump.root),
        block_time: Some(time),
        kind: protocol::SnapshotKind::Full,
        source: format!("geth-dump:{}", dump.path.display()),
        records: Vec::new(),
        storage: Vec::new(),
        listed,
        export_s: 0.0,
        codes: Vec::new(),
    };
    StreamedDump { meta, dump }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An account of a test dump: key, balance, code, slots.
    type Sample = (B256, u64, Option<Vec<u8>>, Vec<(B256, u64)>);

    /// A dump of `accounts` as geth writes it, its roots computed here.
    fn dump_text(accounts: &[Sample]) -> String {
        let mut state = HashBuilder::default();
        let mut lines = Vec::new();
        for (key, balance, code, slots) in accounts {
            let mut storage = HashBuilder::default();
            let mut map = serde_json::Map::new();
            for (slot, word) in slots {
                let rlp = alloy_rlp::encode(U256::from(*word));
                storage.add_leaf(Nibbles::unpack(slot), &rlp);
                map.insert(slot.to_string(), json!(hex::encode(rlp)));
            }
            let root = match slots.is_empty() {
                true => EMPTY_ROOT_HASH,
                false => storage.root(),
            };
            let code_hash = code.as_ref().map_or(EMPTY_CODE_HASH, keccak256);
            let record = AccountRecord::from_hashed(*key, U256::from(*balance), 0)
                .with_trie(code_hash, root);
            state.add_leaf(Nibbles::unpack(key), &crate::state_root::leaf(&record));
            let mut line = json!({"balance": balance.to_string(), "nonce": 0, "root": root, "codeHash": code_hash});
            if let Some(code) = code {
                line["code"] = json!(format!("0x{}", hex::encode(code)));
            }
            if !map.is_empty() {
                line["storage"] = serde_json::Value::Object(map);
            }
            line["key"] = json!(key);
            lines.push(line.to_string());
        }
        let root = json!({"root": state.root()}).to_string();
        std::iter::once(root)
            .chain(lines)
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    /// Reads `text` as a dump with fields of at most `limit` bytes: the
    /// accounts and slots it gave, or its error.
    fn read(text: &str, limit: u64) -> Result<(u64, u64), String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dump.jsonl");
        std::fs::write(&path, text).unwrap();
        let dump = GethDump::open(&path).map_err(|e| e.to_string())?;
        let store = SnapshotStore::open(dir.path().join("store")).unwrap();
        let mut sorter = SlotSorter::new(dir.path().join("runs"), 1 << 20);
        let targets = DumpTargets {
            store: &store,
            sorter: &mut sorter,
            spill: AccountSpill::create(dir.path().join("spill/accounts")).unwrap(),
            listed: None,
        };
        let accounts = read_dump(&dump, dir.path().join("pending"), targets, limit)
            .map_err(|e| e.to_string())?;
        Ok((accounts.total(), sorter.count()))
    }

    fn sample() -> Vec<Sample> {
        let slot = |n: u8| B256::repeat_byte(n);
        vec![
            (B256::repeat_byte(0x11), 7, None, vec![]),
            (
                B256::repeat_byte(0x22),
                0,
                Some(vec![0x60, 0x00]),
                vec![(slot(1), 5), (slot(9), 1 << 40)],
            ),
            (B256::repeat_byte(0x33), 1, None, vec![]),
        ]
    }

    #[test]
    fn a_dump_is_read_and_its_roots_checked() {
        let text = dump_text(&sample());
        assert_eq!(read(&text, MAX_FIELD_BYTES), Ok((3, 2)));
        // An empty state is a dump too.
        assert_eq!(read(&dump_text(&[]), MAX_FIELD_BYTES), Ok((0, 0)));
    }

    #[test]
    fn a_dump_that_does_not_add_up_is_refused() {
        let text = dump_text(&sample());
        let refused = |text: &str, words: &str| {
            let err = read(text, MAX_FIELD_BYTES).unwrap_err();
            assert!(err.contains(words), "{err}");
        };
        // Truncated mid-account, or mid-file before an account's end.
        refused(&text[..text.len() - 20], "account 2");
        refused(&text[..text.len() / 2], "account");
        // The accounts out of order.
        let lines: Vec<&str> = text.lines().collect();
        let swapped = [lines[0], lines[3], lines[2], lines[1]].join("\n");
        refused(&swapped, "out of key order");
        // A code that is not its hash, a slot's word changed, no key.
        refused(&text.replace("0x6000", "0x6001"), "not its code hash");
        refused(&text.replace("\"05\"", "\"06\""), "storage root");
        let no_key = text.replacen(&format!(",\"key\":\"{}\"", B256::repeat_byte(0x33)), "", 1);
        refused(&no_key, "no key");
        // Another state's root, a file that is no dump.
        let other = format!("{{\"root\":\"{}\"}}", B256::repeat_byte(7));
        let first = text.lines().next().unwrap();
        refused(&text.replacen(first, &other, 1), "state root");
        refused("", "empty");
        refused("[1,2]\n", "first line");
    }

    #[test]
    fn no_field_may_pass_the_limit() {
        let text = dump_text(&sample());
        // The longest stretch without a slot is an account's line
        // (about 400 bytes): under a 1,000-byte limit the dump reads,
        // under 100 not.
        assert_eq!(read(&text, 1000), Ok((3, 2)));
        let err = read(&text, 100).unwrap_err();
        assert!(err.contains("a field of more than 100 bytes"), "{err}");
    }

    #[test]
    fn an_accounts_slots_past_the_held_ones_go_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut pending = PendingSlots {
            dir: dir.path().join("pending"),
            held: Vec::new(),
            file: None,
            spilled: 0,
        };
        let n = HELD_PENDING_SLOTS + 3;
        for i in 0..n as u64 {
            pending
                .push(B256::from(U256::from(i)), U256::from(i * 2))
                .unwrap();
        }
        let mut back = Vec::new();
        pending
            .drain(|slot, word| {
                back.push((slot, word));
                Ok(())
            })
            .unwrap();
        assert_eq!(back.len(), n);
        assert!(back
            .iter()
            .enumerate()
            .all(|(i, (s, w))| *s == B256::from(U256::from(i)) && *w == U256::from(i * 2)));
        assert!(!dir.path().join("pending/pending-slots").exists());
    }
}

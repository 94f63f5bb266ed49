//! A build: exported state -> encode -> hint -> write -> publish.

use std::time::Instant;

use alloy_primitives::B256;
use pir_core::encode::{encode_into, RecordSource};
use pir_core::product::{CpuHint, HintBuildError, HintBuilder};
use pir_core::wire::SetupData;
use pir_core::wire::{query_bytes, response_bytes};
use pir_core::{Arity, EncodeOptions, EncodedDb, Expansion, Packing, PublicMatrix};

use protocol::storage::{PrivateStorage, StorageRecord};

use crate::progress::{report, ProgressEvent, ProgressFn, Step};
use crate::records::{write_records, RecordsView};
use protocol::account::{value_width, AccountRecord};
use protocol::manifest::{
    BuildSeeds, BuildStats, Manifest, PirParams, SeedInput, SnapshotId, SnapshotKind,
    MANIFEST_FORMAT,
};
use snapshot_store::failpoint;
use snapshot_store::{
    code_table_bytes, SnapshotStore, StoreError, StoredSnapshot, CODES_FILE, RECORDS_FILE,
    SETUP_FILE, TABLE_FILE,
};

/// Snapshots of at most this many records also get a `table.bin`, so that
/// clients may download them whole when that is cheaper than a hint (the
/// default of [`BuildOptions::whole_table_max_records`]).
pub const WHOLE_MAX_RECORDS: usize = 1 << 20;

/// Account state (and the storage of listed contracts) read from a
/// source, ready to build.
#[derive(Clone, Debug)]
pub struct ExportedState {
    pub chain_id: u64,
    pub block_number: u64,
    pub block_hash: Option<B256>,
    /// A delta's parent: the hash of its `from` block (see
    /// [`protocol::Manifest::parent_hash`]).
    pub parent_hash: Option<B256>,
    pub state_root: Option<B256>,
    pub block_time: Option<u64>,
    pub kind: SnapshotKind,
    pub source: String,
    pub records: Vec<AccountRecord>,
    /// Storage slots of the listed contracts (in the same database as the
    /// accounts: a lookup never says which kind it reads).
    pub storage: Vec<StorageRecord>,
    /// The contracts whose storage this snapshot holds: in a full
    /// snapshot every slot of each, in a delta the slots that changed.
    pub listed: PrivateStorage,
    /// Seconds the export took.
    pub export_s: f64,
    /// Codes of the accounts (those the source read: the build keeps them
    /// beside the snapshots by hash, for the server's code route).
    pub codes: Vec<alloy_primitives::Bytes>,
}

impl ExportedState {
    pub fn id(&self) -> SnapshotId {
        SnapshotId::new(self.chain_id, self.block_number, &self.kind)
    }
}

/// How to build.
#[derive(Clone)]
pub struct BuildOptions {
    pub arity: Arity,
    /// The packing of every level...
    pub packing: Packing,
    /// ...but full snapshots (the bases), when set: see [`resolve_packing`].
    pub base_packing: Option<Packing>,
    /// Where the hint is made: all CPU cores unless the operator's build
    /// passes a GPU (the snapshotter's `--device`).
    pub hint: std::sync::Arc<dyn HintBuilder>,
    /// How the public matrix of every new snapshot is expanded (a field of
    /// its setup; AES-128 by default, TurboSHAKE128 for clients without
    /// AES instructions).
    pub expansion: Expansion,
    /// Where the encode and hint steps report progress (none: silent).
    pub progress: Option<ProgressFn>,
    /// Working memory of the encoder: it builds the filters of as many
    /// partitions at a time as fit (records are read again for each such
    /// group; the database itself is written to its file as it is made).
    pub encode_memory_bytes: usize,
    /// Snapshots of at most this many records also get a `table.bin`
    /// (0: none).
    pub whole_table_max_records: usize,
}

/// The encoder's default working memory: 1 GiB (a base of 2^26 accounts
/// in about three groups).
pub const DEFAULT_ENCODE_MEMORY: usize = 1 << 30;

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            arity: Arity::Three,
            packing: Packing::default(),
            base_packing: None,
            hint: std::sync::Arc::new(CpuHint),
            expansion: Expansion::default(),
            progress: None,
            encode_memory_bytes: DEFAULT_ENCODE_MEMORY,
            whole_table_max_records: WHOLE_MAX_RECORDS,
        }
    }
}

impl BuildOptions {
    /// The packing of a snapshot of `kind`.
    pub fn packing_for(&self, kind: &SnapshotKind) -> Packing {
        match (kind, self.base_packing) {
            (SnapshotKind::Full, Some(base)) => base,
            _ => self.packing,
        }
    }
}

/// The hint budget of automatic packing (`hint_budget_mib` in configs,
/// `--hint-budget-mib` on the command line): `"auto"` or MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HintBudget {
    /// Every level: the least query + response under pir-core's default
    /// budget (32 MiB); bases, where that misses the lookup target: the
    /// smallest hint that meets it (up to the hint cap).
    Auto,
    Mib(u64),
}

impl std::str::FromStr for HintBudget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(HintBudget::Auto),
            n => n
                .parse()
                .map(HintBudget::Mib)
                .map_err(|_| format!("hint budget '{n}': \"auto\" or a number of MiB")),
        }
    }
}

impl<'de> serde::Deserialize<'de> for HintBudget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Mib(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Mib(n) => Ok(HintBudget::Mib(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// The packings of a build from its settings: `packing` ("auto" or a
/// partition count), the hint budget, and for an automatic budget the
/// per-lookup target (KiB, query + response) and the hint cap (MiB) of
/// the bases. Returns the packing of every level and that of the bases.
pub fn resolve_packing(
    packing: &str,
    budget: HintBudget,
    lookup_target_kib: u64,
    hint_cap_mib: u64,
) -> Result<(Packing, Option<Packing>), pir_core::ParamError> {
    let budget_mib = match budget {
        HintBudget::Mib(n) => n,
        HintBudget::Auto => pir_core::db::DEFAULT_HINT_BUDGET >> 20,
    };
    let levels = Packing::parse(packing, budget_mib)?;
    let base = match (levels, budget) {
        (Packing::Auto { hint_budget_bytes }, HintBudget::Auto) => Some(Packing::ForLookup {
            lookup_bytes: lookup_target_kib.saturating_mul(1 << 10),
            hint_floor_bytes: hint_budget_bytes,
            hint_cap_bytes: hint_cap_mib.saturating_mul(1 << 20),
        }),
        _ => None,
    };
    Ok((levels, base))
}

impl std::fmt::Debug for BuildOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildOptions")
            .field("arity", &self.arity)
            .field("packing", &self.packing)
            .field("base_packing", &self.base_packing)
            .field("hint", &self.hint.name())
            .field("expansion", &self.expansion)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("nothing to build: the export holds no accounts")]
    Empty,
    #[error("storage slot {0} belongs to no listed contract")]
    UnlistedStorage(B256),
    #[error("two records share the key {0} (the export repeats an account)")]
    Duplicate(B256),
    #[error("encoding failed: {0}")]
    Encode(#[from] pir_core::EncodeError),
    #[error("the staged records.bin: {0}")]
    Records(#[from] crate::records::RecordsError),
    #[error("hint: {0}")]
    Hint(#[from] HintBuildError),
    #[error("the hint does not fit the database: {0}")]
    HintShape(#[from] pir_core::ParamError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("another build holds the store lock ({0}); one build at a time")]
    Locked(std::path::PathBuf),
    #[error("keeping the source's codes: {0}")]
    Codes(String),
}

/// Holds the store's build lock while alive.
pub struct BuildLock {
    file: std::fs::File,
}

impl Drop for BuildLock {
    /// Unlocks before the descriptor closes. An flock belongs to the open
    /// file description, and a process spawned by another thread meanwhile
    /// holds a copy of it until it execs: closing our copy alone would leave
    /// the store locked for that moment, and the next build of this process
    /// (a test's, the follower's) would fail with `Locked`. An explicit
    /// unlock releases it for every copy at once.
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Takes the store's build lock (one build at a time across processes).
pub fn lock_store(store: &SnapshotStore) -> Result<BuildLock, BuildError> {
    let path = store.root().join(".build.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(BuildLock { file }),
        Err(_) => Err(BuildError::Locked(path)),
    }
}

/// Builds a snapshot from `state` and publishes it atomically: check the
/// records, write `records.bin` to a staging folder (the records are let
/// go then), encode from that file into `db.bin` laid out in place, build
/// the hint from it, write the setup, publish with one rename.
pub fn build_and_publish(
    store: &SnapshotStore,
    mut state: ExportedState,
    opts: &BuildOptions,
) -> Result<StoredSnapshot, BuildError> {
    let lock = prepare(store, &state)?;
    check_records(&mut state)?;
    let records = std::mem::take(&mut state.records);
    let storage = std::mem::take(&mut state.storage);
    let summary = RecordsSummary {
        accounts: records.len() as u64,
        slots: storage.len() as u64,
        width: value_width(&records),
    };
    build_staged(store, lock, &state, opts, move |w| {
        write_records(&records, &storage, w)?;
        Ok(summary)
    })
}

pub use crate::records::RecordsSummary;

/// Builds and publishes a base too large to hold in memory: `write`
/// streams its `records.bin` (sorted by key, e.g. with
/// [`crate::records::write_account_stream`]) into the staging folder, and
/// every later phase reads that file in place. `meta` says which snapshot
/// it is (its records and storage are not read: leave them empty).
pub fn build_and_publish_streamed(
    store: &SnapshotStore,
    meta: &ExportedState,
    opts: &BuildOptions,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<RecordsSummary>,
) -> Result<StoredSnapshot, BuildError> {
    let lock = prepare(store, meta)?;
    build_staged(store, lock, meta, opts, write)
}

/// Takes the build lock, removes what interrupted builds left, refuses
/// a snapshot already published, and keeps the codes the source read
/// (before the snapshot that names them is published).
fn prepare(store: &SnapshotStore, state: &ExportedState) -> Result<BuildLock, BuildError> {
    let lock = lock_store(store)?;
    let leftovers = store.clean_leftovers()?;
    if leftovers > 0 {
        tracing::warn!(leftovers, "removed folders left by interrupted builds");
    }
    let id = state.id();
    if store.path_of(&id).exists() {
        return Err(StoreError::Exists(id).into());
    }
    for code in &state.codes {
        store.put_code(code)?;
    }
    Ok(lock)
}

/// The phases after the records are known: stage and write
/// `records.bin`, encode, hint, write the rest, publish.
fn build_staged(
    store: &SnapshotStore,
    _lock: BuildLock,
    meta: &ExportedState,
    opts: &BuildOptions,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<RecordsSummary>,
) -> Result<StoredSnapshot, BuildError> {
    let id = meta.id();
    let t = Instant::now();
    let mut staged = store.stage(&id)?;
    let mut summary = None;
    let records = staged.write_file_with(RECORDS_FILE, |w| {
        summary = Some(write(w)?);
        Ok(())
    })?;
    let summary = summary.expect("the records were written");
    let records_s = t.elapsed().as_secs_f64();
    let mapped = staged.map_file(RECORDS_FILE)?;
    let t_codes = Instant::now();
    let view = RecordsView::new((*mapped).as_ref(), summary.width)?;
    let codes_s = t_codes.elapsed().as_secs_f64();
    tracing::info!(codes = view.codes().len(), codes_s, "code table gathered");
    // A hot tier is read whole by every client, whatever its size.
    let table_max = match meta.kind {
        SnapshotKind::Hot { .. } => usize::MAX,
        _ => opts.whole_table_max_records,
    };
    let table = whole_table(&view, table_max);
    // Every level publishes canaries: a client reads no level by PIR
    // without one (docs/security.md, "Blind shifts").
    let canaries = canaries_of(&view, &records.sha3_256);
    let codes = protocol::codes::CodeTree::new(view.codes().to_vec()).summary();
    let table_digest = table.as_deref().map(protocol::Sha3Digest::of);
    let seeds = BuildSeeds::of(&SeedInput {
        format: MANIFEST_FORMAT,
        chain_id: meta.chain_id,
        block_number: meta.block_number,
        block_hash: meta.block_hash,
        id: meta.id(),
        records_digest: &records.sha3_256,
        storage: &meta.listed,
        codes,
        table: table_digest.as_ref(),
    });
    if codes.is_some() {
        staged.write_file(CODES_FILE, &code_table_bytes(view.codes()))?;
    }
    let encoded = encode_phase(&mut staged, &view, &meta.kind, opts, &seeds)?;
    let hinted = hint_phase(encoded, opts, &seeds)?;
    let written = write_phase(staged, hinted, table, records.sha3_256, records_s)?;
    let codes = (codes, view.common_codes().to_vec());
    let manifest = manifest_for(meta, &summary, &written, canaries, codes);
    let published = store.publish(written.staged, &manifest)?;
    let peak_rss_mib = peak_rss_bytes().map(|b| b >> 20);
    tracing::info!(snapshot = %id, path = %published.path.display(), records = manifest.record_count, ?peak_rss_mib, "published");
    Ok(published)
}

/// The process's peak resident memory so far (Linux `VmHWM`): what a
/// build needed at most, export included (mapped file pages count too).
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_bytes("VmHWM")
}

/// A memory figure of `/proc/self/status` (`VmHWM`, `RssAnon`, ...) in
/// bytes, on Linux.
pub fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib << 10)
}

/// Sorts the records and slots by key and refuses an empty or repeating
/// export, and slots of contracts the export does not list.
fn check_records(state: &mut ExportedState) -> Result<(), BuildError> {
    if state.records.is_empty() {
        return Err(BuildError::Empty);
    }
    state.records.sort_unstable_by_key(|r| r.key);
    state.storage.sort_unstable_by_key(|s| s.key);
    if let Some(pair) = state.records.windows(2).find(|w| w[0].key == w[1].key) {
        return Err(BuildError::Duplicate(pair[0].key));
    }
    if let Some(pair) = state.storage.windows(2).find(|w| w[0].key == w[1].key) {
        return Err(BuildError::Duplicate(pair[0].key));
    }
    if !state.storage.is_empty() {
        // (A whole-state snapshot holds every contract's slots.)
        if !state.listed.whole_state {
            let listed: std::collections::HashSet<B256> = state
                .listed
                .all_contracts()
                .iter()
                .map(alloy_primitives::keccak256)
                .collect();
            if let Some(stray) = state
                .storage
                .iter()
                .find(|s| !listed.contains(&s.hashed_contract))
            {
                return Err(BuildError::UnlistedStorage(stray.key));
            }
        }
        // Keys of both kinds share one database: one set must not meet
        // the other (keccak256 of 20 and of 64 bytes never do, short of a
        // collision; checked all the same).
        let accounts: std::collections::HashSet<&B256> =
            state.records.iter().map(|r| &r.key).collect();
        if let Some(both) = state.storage.iter().find(|s| accounts.contains(&s.key)) {
            return Err(BuildError::Duplicate(both.key));
        }
    }
    Ok(())
}

/// The encoder's random draws (partition and filter seeds), from the
/// build's seeds (protocol::manifest::BuildSeeds: deterministic, and
/// bound to the manifest's fields).
fn encoder_rng(seeds: &BuildSeeds) -> rand_chacha::ChaCha20Rng {
    use rand::SeedableRng;
    let seed = alloy_primitives::keccak256([seeds.root.as_slice(), b"encoder"].concat());
    rand_chacha::ChaCha20Rng::from_seed(seed.0)
}

/// The encoded database (answered from its staged file) and how long it
/// took.
struct Encoded {
    db: EncodedDb,
    encode_s: f64,
}

/// Encodes the staged `records.bin` (read in place) into `db.bin` (laid
/// out in place), a group of partitions at a time within the options'
/// memory budget.
fn encode_phase(
    staged: &mut snapshot_store::StagedSnapshot,
    source: &RecordsView,
    kind: &SnapshotKind,
    opts: &BuildOptions,
    seeds: &BuildSeeds,
) -> Result<Encoded, BuildError> {
    failpoint::hit("encode");
    let t = Instant::now();
    let step = Step::EncodeFilters;
    report(&opts.progress, ProgressEvent::Begin { step, total: None });
    let options = EncodeOptions {
        arity: opts.arity,
        packing: opts.packing_for(kind),
    };
    let mut sink = staged.db_in_place();
    let shape = encode_into(
        source,
        &options,
        opts.encode_memory_bytes,
        &mut encoder_rng(seeds),
        &mut sink,
    );
    report(&opts.progress, ProgressEvent::End { step });
    let db = sink.finish(&shape?)?;
    let encode_s = t.elapsed().as_secs_f64();
    let shape = db.shape();
    tracing::info!(
        records = source.len(),
        k = shape.partitions,
        rows = shape.rows(),
        cols = shape.cols(),
        encode_s,
        "encoded"
    );
    Ok(Encoded { db, encode_s })
}

/// The database with its hint (setup bytes) and what the hint step cost.
struct Hinted {
    db: EncodedDb,
    setup_bytes: Vec<u8>,
    encode_s: f64,
    hint_s: f64,
    device: String,
}

fn hint_phase(
    encoded: Encoded,
    opts: &BuildOptions,
    seeds: &BuildSeeds,
) -> Result<Hinted, BuildError> {
    failpoint::hit("hint");
    let Encoded { db, encode_s } = encoded;
    let t = Instant::now();
    let step = Step::BuildHint;
    let total = Some(db.shape().lwe.dimension as u64);
    report(&opts.progress, ProgressEvent::Begin { step, total });
    let matrix = PublicMatrix::new(opts.expansion, seeds.matrix.0);
    let built = opts.hint.build_hint(&db, &matrix, &|done| {
        report(
            &opts.progress,
            ProgressEvent::Advance {
                step,
                by: done as u64,
            },
        )
    });
    report(&opts.progress, ProgressEvent::End { step });
    let (hint, device) = built?;
    let hint_s = t.elapsed().as_secs_f64();
    tracing::info!(%device, expansion = %opts.expansion, hint_s, "hint built");
    // Serialised straight from the hint: no server is needed to publish.
    let setup_bytes = SetupData::for_db(&db, matrix, hint)?.to_bytes();
    Ok(Hinted {
        db,
        setup_bytes,
        encode_s,
        hint_s,
        device,
    })
}

/// The staged files and what the manifest needs to know of them.
struct Written {
    staged: snapshot_store::StagedSnapshot,
    shape: pir_core::DbShape,
    setup_digest: [u8; 32],
    setup_len: usize,
    content_digest: protocol::Sha3Digest,
    encode_s: f64,
    hint_s: f64,
    write_s: f64,
    device: String,
}

/// Writes the setup (and a small level's table); `records_s` is what
/// writing `records.bin` took (`db.bin` is written as it is encoded).
fn write_phase(
    mut staged: snapshot_store::StagedSnapshot,
    hinted: Hinted,
    table: Option<Vec<u8>>,
    content_digest: protocol::Sha3Digest,
    records_s: f64,
) -> Result<Written, BuildError> {
    failpoint::hit("write");
    let t = Instant::now();
    staged.write_file(SETUP_FILE, &hinted.setup_bytes)?;
    if let Some(table) = table {
        staged.write_file(TABLE_FILE, &table)?;
    }
    Ok(Written {
        staged,
        shape: hinted.db.shape().clone(),
        setup_digest: SetupData::digest_of(&hinted.setup_bytes),
        setup_len: hinted.setup_bytes.len(),
        content_digest,
        encode_s: hinted.encode_s,
        hint_s: hinted.hint_s,
        write_s: records_s + t.elapsed().as_secs_f64(),
        device: hinted.device,
    })
}

/// The level as a table for whole download, when it is small: every
/// record's key and PIR value, read from the staged `records.bin`.
fn whole_table(records: &RecordsView, max_records: usize) -> Option<Vec<u8>> {
    if records.len() > max_records {
        return None;
    }
    let mut key = Vec::new();
    let mut entries: Vec<([u8; 32], Vec<u8>)> = (0..records.len())
        .map(|i| {
            let mut value = vec![0u8; records.value_bytes()];
            records.read(i, &mut key, &mut value);
            (key.as_slice().try_into().expect("32-byte keys"), value)
        })
        .collect();
    entries.sort_unstable_by_key(|e| e.0);
    protocol::table::encode_table(&entries, records.value_bytes())
}

/// A base's canaries: the records at the indices its content digest
/// draws (protocol::manifest::canary_indices), with their PIR values.
fn canaries_of(
    records: &RecordsView,
    digest: &protocol::Sha3Digest,
) -> Vec<protocol::manifest::Canary> {
    let mut key = Vec::new();
    protocol::manifest::canary_indices(digest, records.len() as u64)
        .into_iter()
        .map(|i| {
            let mut value = vec![0u8; records.value_bytes()];
            records.read(i as usize, &mut key, &mut value);
            protocol::manifest::Canary {
                key: B256::from_slice(&key),
                value: value.into(),
            }
        })
        .collect()
}

fn manifest_for(
    state: &ExportedState,
    summary: &RecordsSummary,
    w: &Written,
    canaries: Vec<protocol::manifest::Canary>,
    (codes, common_codes): (Option<protocol::codes::CodeTable>, Vec<u32>),
) -> Manifest {
    let shape = &w.shape;
    Manifest {
        format: MANIFEST_FORMAT,
        chain_id: state.chain_id,
        block_number: state.block_number,
        block_hash: state.block_hash,
        state_root: state.state_root,
        block_time: state.block_time,
        parent_hash: state.parent_hash,
        kind: state.kind,
        source: state.source.clone(),
        record_count: summary.accounts + summary.slots,
        storage_records: summary.slots,
        storage: state.listed.clone(),
        content_digest: w.content_digest.clone(),
        codes,
        common_codes,
        canaries,
        created_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        pir: PirParams {
            lwe_dimension: shape.lwe.dimension,
            plaintext_bits: shape.lwe.plaintext_bits,
            arity: shape.geometry.arity as u8,
            partitions: shape.partitions,
            rows: shape.rows() as u64,
            cols: shape.cols() as u64,
            value_bytes: shape.value_bytes,
            segment_length: shape.geometry.segment_length,
            segment_count: shape.geometry.segment_count,
            setup_digest: protocol::Sha3Digest::from_bytes(&w.setup_digest),
            hint_bytes: w.setup_len as u64,
            query_bytes: query_bytes(shape.rows(), 1) as u64,
            response_bytes: response_bytes(shape.cols(), 1) as u64,
        },
        build: BuildStats {
            export_s: state.export_s,
            encode_s: w.encode_s,
            hint_s: w.hint_s,
            write_s: w.write_s,
            hint_device: w.device.clone(),
        },
        files: w.staged.file_digests().clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hint_budgets_parse_and_resolve() {
        assert_eq!("auto".parse(), Ok(HintBudget::Auto));
        assert_eq!("128".parse(), Ok(HintBudget::Mib(128)));
        assert!("lots".parse::<HintBudget>().is_err());
        let (levels, base) = resolve_packing("auto", HintBudget::Auto, 1536, 512).unwrap();
        assert_eq!(levels, Packing::default());
        assert_eq!(
            base,
            Some(Packing::ForLookup {
                lookup_bytes: 1536 << 10,
                hint_floor_bytes: 32 << 20,
                hint_cap_bytes: 512 << 20,
            })
        );
        let (levels, base) = resolve_packing("auto", HintBudget::Mib(64), 1536, 512).unwrap();
        assert_eq!(
            levels,
            Packing::Auto {
                hint_budget_bytes: 64 << 20
            }
        );
        assert_eq!(base, None);
        assert_eq!(
            resolve_packing("9", HintBudget::Auto, 1536, 512).unwrap(),
            (Packing::Fixed(9), None)
        );
        let options = BuildOptions {
            base_packing: base,
            ..Default::default()
        };
        assert_eq!(options.packing_for(&SnapshotKind::Full), Packing::default());
    }

    /// A copy of the lock's descriptor outliving the lock (what a process
    /// spawned by another thread holds until it execs) does not keep the
    /// store locked: the flake of the crash tests under load.
    #[test]
    fn a_released_lock_is_free_while_a_copy_of_its_descriptor_lives() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        let lock = lock_store(&store).unwrap();
        assert!(matches!(lock_store(&store), Err(BuildError::Locked(_))));
        let child_copy = lock.file.try_clone().unwrap();
        drop(lock);
        let again = lock_store(&store);
        assert!(again.is_ok(), "{:?}", again.err());
        drop(child_copy);
    }
}

//! A build: exported state -> encode -> hint -> write -> publish.

use std::time::Instant;

use alloy_primitives::B256;
use gpu_kernels::HintDevice;
use indicatif::{ProgressBar, ProgressStyle};
use pir_core::wire::SetupData;
use pir_core::wire::{encode_db, query_bytes, response_bytes};
use pir_core::{Arity, EncodeOptions, EncodedDb, Packing};
use rand::Rng;

use crate::account::{encode_value, value_width, AccountRecord};
use crate::failpoint;
use crate::manifest::{BuildStats, Manifest, PirParams, SnapshotId, SnapshotKind, MANIFEST_FORMAT};
use crate::records::encode_records;
use crate::store::{
    sha3_hex, SnapshotStore, StoreError, StoredSnapshot, DB_FILE, RECORDS_FILE, SETUP_FILE,
};

/// Account state read from a source, ready to build.
#[derive(Clone, Debug)]
pub struct ExportedState {
    pub chain_id: u64,
    pub block_number: u64,
    pub block_hash: Option<B256>,
    pub state_root: Option<B256>,
    pub block_time: Option<u64>,
    pub kind: SnapshotKind,
    pub source: String,
    pub records: Vec<AccountRecord>,
    /// Seconds the export took.
    pub export_s: f64,
}

impl ExportedState {
    pub fn id(&self) -> SnapshotId {
        SnapshotId::new(self.chain_id, self.block_number, &self.kind)
    }
}

/// How to build.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    pub arity: Arity,
    pub packing: Packing,
    pub device: HintDevice,
    /// Draw progress bars (on a terminal).
    pub progress: bool,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            arity: Arity::Three,
            packing: Packing::default(),
            device: HintDevice::Auto,
            progress: true,
        }
    }
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("nothing to build: the export holds no accounts")]
    Empty,
    #[error("two records share the key {0} (the export repeats an account)")]
    Duplicate(B256),
    #[error("encoding failed: {0}")]
    Encode(#[from] pir_core::EncodeError),
    #[error("hint: {0}")]
    Hint(#[from] gpu_kernels::GpuError),
    #[error("the hint does not fit the database: {0}")]
    HintShape(#[from] pir_core::ParamError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("another build holds the store lock ({0}); one build at a time")]
    Locked(std::path::PathBuf),
}

fn spinner(enabled: bool, msg: &'static str) -> ProgressBar {
    let bar = if enabled {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::hidden()
    };
    bar.set_message(msg);
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// Holds the store's build lock while alive.
pub struct BuildLock {
    _file: std::fs::File,
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
        Ok(()) => Ok(BuildLock { _file: file }),
        Err(_) => Err(BuildError::Locked(path)),
    }
}

/// Builds a snapshot from `state` and publishes it atomically.
pub fn build_and_publish(
    store: &SnapshotStore,
    mut state: ExportedState,
    opts: &BuildOptions,
) -> Result<StoredSnapshot, BuildError> {
    let _lock = lock_store(store)?;
    let leftovers = store.clean_leftovers()?;
    if leftovers > 0 {
        tracing::warn!(leftovers, "removed folders left by interrupted builds");
    }
    let id = state.id();
    if store.path_of(&id).exists() {
        return Err(StoreError::Exists(id).into());
    }
    if state.records.is_empty() {
        return Err(BuildError::Empty);
    }
    state.records.sort_unstable_by_key(|r| r.key);
    if let Some(pair) = state.records.windows(2).find(|w| w[0].key == w[1].key) {
        return Err(BuildError::Duplicate(pair[0].key));
    }

    failpoint::hit("encode");
    let width = value_width(&state.records);
    let kv: Vec<([u8; 32], Vec<u8>)> = state
        .records
        .iter()
        .map(|r| (r.key.0, encode_value(r.balance, r.nonce, width)))
        .collect();
    let t = Instant::now();
    let bar = spinner(opts.progress, "encoding binary fuse filters");
    let db = EncodedDb::encode(
        &kv,
        width,
        &EncodeOptions {
            arity: opts.arity,
            packing: opts.packing,
        },
        &mut rand::rng(),
    )?;
    bar.finish_and_clear();
    let encode_s = t.elapsed().as_secs_f64();
    let shape = db.shape().clone();
    tracing::info!(snapshot = %id, records = kv.len(), k = shape.partitions, rows = shape.rows(), cols = shape.cols(), encode_s, "encoded");

    failpoint::hit("hint");
    let t = Instant::now();
    let n = shape.lwe.dimension as u64;
    let bar = if opts.progress {
        ProgressBar::new(n)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("hint {bar:40} {pos}/{len} rows of A {elapsed}")
            .expect("valid template"),
    );
    let seed: [u8; 32] = rand::rng().random();
    let (hint, report) = gpu_kernels::build_hint_with_progress(&db, &seed, opts.device, &|done| {
        bar.inc(done as u64)
    })?;
    bar.finish_and_clear();
    let hint_s = t.elapsed().as_secs_f64();
    tracing::info!(snapshot = %id, device = %report.device, detail = %report.detail, hint_s, "hint built");

    failpoint::hit("write");
    let t = Instant::now();
    let db_bytes = encode_db(&db);
    // Serialised straight from the hint: no server is needed to publish.
    let setup_bytes = SetupData::for_db(&db, seed, hint)?.to_bytes();
    let setup_digest = SetupData::digest_of(&setup_bytes);
    let records_bytes = encode_records(&state.records);
    let mut staged = store.stage(&id)?;
    staged.write_file(RECORDS_FILE, &records_bytes)?;
    staged.write_file(DB_FILE, &db_bytes)?;
    staged.write_file(SETUP_FILE, &setup_bytes)?;
    let write_s = t.elapsed().as_secs_f64();
    let manifest = Manifest {
        format: MANIFEST_FORMAT,
        chain_id: state.chain_id,
        block_number: state.block_number,
        block_hash: state.block_hash,
        state_root: state.state_root,
        block_time: state.block_time,
        kind: state.kind,
        source: state.source.clone(),
        record_count: state.records.len() as u64,
        content_digest: sha3_hex(&records_bytes),
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
            setup_digest: hex::encode(setup_digest),
            hint_bytes: setup_bytes.len() as u64,
            query_bytes: query_bytes(shape.rows(), 1) as u64,
            response_bytes: response_bytes(shape.cols(), 1) as u64,
        },
        build: BuildStats {
            export_s: state.export_s,
            encode_s,
            hint_s,
            write_s,
            hint_device: format!("{} ({})", report.device, report.detail),
        },
        files: staged.file_digests().clone(),
    };
    let published = store.publish(staged, &manifest)?;
    tracing::info!(snapshot = %id, path = %published.path.display(), "published");
    Ok(published)
}

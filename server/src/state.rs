//! What the server holds: the loaded snapshots, the answer workers and the
//! queue bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use snapshot_store::{SnapshotStore, StoredSnapshot};
use tokio::sync::Semaphore;

use crate::config::{BatchSettings, Role};
use crate::loaded::LoadedSnapshot;
use crate::metrics::Metrics;
use crate::shards::ShardRouter;
use crate::{ServerConfig, ServerError};

pub struct AppState {
    pub store: SnapshotStore,
    pub snapshots: RwLock<BTreeMap<String, Arc<LoadedSnapshot>>>,
    /// Answers computed at once.
    pub workers: Arc<Semaphore>,
    /// Batches waiting or running.
    pub in_queue: AtomicUsize,
    pub queue_limit: usize,
    pub max_batch: usize,
    pub body_limit: usize,
    pub batching: BatchSettings,
    pub export_files: bool,
    pub metrics: Metrics,
    pub role: Role,
    /// Where answers are computed.
    pub answer: crate::config::AnswerSettings,
    /// The shards behind a router.
    pub shards: Option<ShardRouter>,
    /// Store entries that failed to load, so each is logged once.
    failed: RwLock<BTreeMap<String, String>>,
    /// The catalog as served, made when the served set changes (never per
    /// request: every proxy polls it).
    catalog: RwLock<Arc<CatalogBody>>,
    /// The catalogs served before it, newest last (at most
    /// [`CATALOG_HISTORY`]).
    history: RwLock<std::collections::VecDeque<Arc<CatalogBody>>>,
    /// The attestations the store keeps for each served snapshot (looked
    /// at every rescan: an attester signs after a snapshot is served; read
    /// and verified again only when their folder changed).
    attestations: RwLock<Attestations>,
    /// Bumped whenever the catalog is made again: what held catalog
    /// requests wait on.
    pub catalog_version: tokio::sync::watch::Sender<u64>,
    /// Catalog requests held at once (each one small future and a
    /// connection; `held_catalog_waits`); past it a waiting request is
    /// answered at once.
    pub waiters: Semaphore,
    /// Whether catalog answers announce the long-poll (some room to hold).
    pub long_poll: bool,
    /// Set when the server shuts down: held requests are answered then.
    pub closing: tokio::sync::watch::Sender<bool>,
}

/// A served snapshot's attestations, and when their folder last changed.
#[derive(Clone, Debug, PartialEq)]
struct KeptAttestations {
    stamp: Option<std::time::SystemTime>,
    list: Vec<protocol::attest::Attestation>,
}

/// Attestations by snapshot id (url form).
type Attestations = BTreeMap<String, KeptAttestations>;

/// `GET /v1/snapshots` made once: its JSON, gzipped, and its ETag; its
/// entries with the digest of each, for differences from it.
pub struct CatalogBody {
    pub json: Bytes,
    pub gzip: Bytes,
    /// `"<SHA3-256 of the JSON>"`.
    pub etag: String,
    entries: Vec<protocol::CatalogEntry>,
    /// keccak256 of each entry's JSON, by id.
    digests: BTreeMap<protocol::SnapshotId, alloy_primitives::B256>,
    max_batch: usize,
}

/// Catalogs served before the current one that a client may ask a
/// difference from (a client polls every second or so; one that fell
/// further behind gets the whole catalog).
const CATALOG_HISTORY: usize = 64;

impl CatalogBody {
    /// The entries served, by chain and block.
    pub fn entries(&self) -> &[protocol::CatalogEntry] {
        &self.entries
    }

    /// The difference from `old` to this catalog.
    pub fn diff_from(&self, old: &CatalogBody) -> protocol::api::CatalogDiff {
        let changed =
            |e: &protocol::CatalogEntry| old.digests.get(&e.id) != self.digests.get(&e.id);
        protocol::api::CatalogDiff {
            added: self
                .entries
                .iter()
                .filter(|e| changed(e))
                .cloned()
                .collect(),
            retired: old
                .digests
                .iter()
                .filter(|(id, digest)| self.digests.get(id) != Some(digest))
                .map(|(id, _)| *id)
                .collect(),
            max_batch: self.max_batch,
        }
    }
}

impl CatalogBody {
    /// The catalog of `snapshots` (sorted by chain, block and id, with the
    /// views they form).
    fn of(
        snapshots: &[Arc<LoadedSnapshot>],
        attestations: &Attestations,
        max_batch: usize,
    ) -> CatalogBody {
        use std::io::Write;
        let mut entries: Vec<protocol::CatalogEntry> = snapshots
            .iter()
            .map(|s| protocol::CatalogEntry {
                id: s.stored.id,
                manifest: s.stored.manifest.clone(),
                attestations: attestations
                    .get(&s.stored.id.url_form())
                    .map(|kept| kept.list.clone())
                    .unwrap_or_default(),
            })
            .collect();
        entries.sort_by_key(|e| (e.manifest.chain_id, e.manifest.block_number, e.id));
        let views = protocol::view::views(&entries);
        let digests = entries
            .iter()
            .map(|e| {
                let json = serde_json::to_vec(e).expect("an entry serialises");
                (e.id, alloy_primitives::keccak256(json))
            })
            .collect();
        let catalog = protocol::Catalog {
            snapshots: entries,
            max_batch,
            views,
        };
        let json = serde_json::to_vec(&catalog).expect("catalog serialises");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&json).expect("gzip into memory");
        let gzip = gz.finish().expect("gzip into memory");
        CatalogBody {
            etag: format!("\"{}\"", protocol::sha3_hex(&json)),
            json: json.into(),
            gzip: gzip.into(),
            entries: catalog.snapshots,
            digests,
            max_batch,
        }
    }
}

impl AppState {
    pub fn new(config: &ServerConfig) -> Result<Self, ServerError> {
        let shards = match config.router.shards.is_empty() {
            true => None,
            false => Some(ShardRouter::new(&config.router)?),
        };
        let role = match (config.shard()?, &shards) {
            (Some(shard), _) => Role::Shard(shard),
            (None, Some(_)) => Role::Router,
            (None, None) => Role::Whole,
        };
        if !config.store.exists() {
            // Created so that a server may start before the snapshotter
            // publishes there; said aloud because a mistyped path does the
            // same and then serves an empty catalog.
            tracing::warn!(store = %config.store.display(), "the store directory did not exist: created empty, serving nothing until a snapshot is published there");
        }
        let max_batch = config.max_batch.clamp(1, pir_core::wire::MAX_BATCH);
        Ok(AppState {
            role,
            answer: config.answer,
            shards,
            store: SnapshotStore::open(&config.store)?,
            snapshots: RwLock::new(BTreeMap::new()),
            workers: Arc::new(Semaphore::new(config.workers.max(1))),
            in_queue: AtomicUsize::new(0),
            queue_limit: config.queue.max(1),
            max_batch,
            body_limit: config.max_body_bytes,
            batching: config.batching,
            export_files: config.export_files,
            metrics: Metrics::new(),
            failed: RwLock::new(BTreeMap::new()),
            catalog: RwLock::new(Arc::new(CatalogBody::of(&[], &BTreeMap::new(), max_batch))),
            history: RwLock::new(std::collections::VecDeque::new()),
            attestations: RwLock::new(BTreeMap::new()),
            catalog_version: tokio::sync::watch::Sender::new(0),
            waiters: Semaphore::new(config.held_catalog_waits.min(Semaphore::MAX_PERMITS)),
            long_poll: config.held_catalog_waits > 0,
            closing: tokio::sync::watch::Sender::new(false),
        })
    }

    /// The catalog as served now.
    pub fn catalog(&self) -> Arc<CatalogBody> {
        self.catalog.read().expect("lock").clone()
    }

    /// Makes the catalog again from the served set (after it changed).
    fn remake_catalog(&self) {
        let attestations = self.attestations.read().expect("lock").clone();
        let body = CatalogBody::of(&self.all(), &attestations, self.max_batch);
        let old = std::mem::replace(&mut *self.catalog.write().expect("lock"), Arc::new(body));
        let mut history = self.history.write().expect("lock");
        if history.len() == CATALOG_HISTORY {
            history.pop_front();
        }
        history.push_back(old);
        self.catalog_version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A catalog served recently, by its ETag (not the current one).
    pub fn catalog_before(&self, etag: &str) -> Option<Arc<CatalogBody>> {
        let history = self.history.read().expect("lock");
        history.iter().rev().find(|b| b.etag == etag).cloned()
    }

    /// Store entries that could not be served (`<id>:<setup digest>`) and
    /// why.
    pub fn unserved(&self) -> Vec<(String, String)> {
        let failed = self.failed.read().expect("lock");
        failed.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    pub fn get(&self, url_id: &str) -> Option<Arc<LoadedSnapshot>> {
        self.snapshots.read().expect("lock").get(url_id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<LoadedSnapshot>> {
        self.snapshots
            .read()
            .expect("lock")
            .values()
            .cloned()
            .collect()
    }

    /// Loads snapshots that appeared in the store and retires vanished ones.
    pub async fn rescan(self: &Arc<Self>) {
        let listed = match self.store.list() {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the store");
                return;
            }
        };
        let present: BTreeMap<String, StoredSnapshot> =
            listed.into_iter().map(|s| (s.id.url_form(), s)).collect();
        let retired = self.retire_vanished(&present);
        for id in &retired {
            tracing::info!(snapshot = %id, "retired (in-flight queries finish on it)");
        }
        if !retired.is_empty() {
            self.remake_catalog();
        }
        // New snapshots are served in the chain's order: by block, and at
        // one block the shorter deltas first. A merge is listed only after
        // the deltas it merges (published before it), so a reader that
        // follows the head always finds the pieces to build it from.
        let mut new: Vec<(String, StoredSnapshot)> = present
            .into_iter()
            .filter(|(id, _)| self.get(id).is_none())
            .collect();
        new.sort_by_key(|(_, s)| chain_order(&s.manifest));
        for (id, stored) in new {
            if self.load(id, stored).await {
                // Listed as soon as it serves, in the chain's order.
                self.remake_catalog();
            }
        }
        if self.reread_attestations() {
            self.remake_catalog();
        }
        self.move_to_the_gpu().await;
        self.metrics
            .snapshots
            .set(self.snapshots.read().expect("lock").len() as i64);
    }

    /// Asks the GPU again for every level on the CPU for now (each rescan:
    /// a level that did not fit beside the previous base moves once that
    /// base is retired and its memory freed).
    async fn move_to_the_gpu(&self) {
        let max_queries = self.batching.max_queries.max(1);
        for snap in self.all().into_iter().filter(|s| s.waits_for_gpu()) {
            let answer = self.answer;
            let trying = snap.clone();
            let moved =
                tokio::task::spawn_blocking(move || trying.try_gpu_again(answer, max_queries))
                    .await;
            if let Ok(true) = moved {
                tracing::info!(snapshot = %snap.url_id, gpu = %snap.answers_detail(), "answers moved to the GPU");
            }
        }
    }

    /// Reads again the attestations of the served snapshots whose folder
    /// changed since they were last read; whether any changed.
    fn reread_attestations(&self) -> bool {
        let before = self.attestations.read().expect("lock").clone();
        let now: Attestations = self
            .all()
            .iter()
            .filter_map(|s| {
                let id = s.stored.id.url_form();
                let stamp = self.store.attestations_stamp(&s.stored)?;
                // A stamp of the last seconds may not be final on a file
                // system with coarse times: read again until it settles.
                let settled = stamp.elapsed().is_ok_and(|age| age.as_secs() >= 2);
                let kept = match before.get(&id) {
                    Some(kept) if kept.stamp == Some(stamp) && settled => kept.clone(),
                    _ => KeptAttestations {
                        stamp: Some(stamp),
                        list: self.store.attestations(&s.stored),
                    },
                };
                Some((id, kept))
            })
            .collect();
        let changed = now != before;
        *self.attestations.write().expect("lock") = now;
        changed
    }

    /// Drops the snapshots no longer in the store (or rebuilt with another
    /// setup) from the served set; returns their ids.
    fn retire_vanished(&self, present: &BTreeMap<String, StoredSnapshot>) -> Vec<String> {
        let mut map = self.snapshots.write().expect("lock");
        let gone: Vec<String> = map
            .iter()
            .filter(|(id, loaded)| {
                present.get(*id).is_none_or(|s| {
                    s.manifest.pir.setup_digest != loaded.stored.manifest.pir.setup_digest
                })
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            map.remove(id);
        }
        gone
    }

    /// Loads one new snapshot off the async threads and serves it; one that
    /// fails is logged once and skipped until its setup changes. Whether it
    /// is served now.
    async fn load(&self, id: String, stored: StoredSnapshot) -> bool {
        let key = format!("{id}:{}", stored.manifest.pir.setup_digest);
        if self.failed.read().expect("lock").contains_key(&key) {
            return false;
        }
        let store = self.store.clone();
        let role = self.role;
        let answer = (self.answer, self.batching.max_queries.max(1));
        let loaded =
            tokio::task::spawn_blocking(move || LoadedSnapshot::load(&store, stored, role, answer))
                .await;
        match loaded {
            Ok(Ok(snap)) => {
                tracing::info!(snapshot = %id, records = snap.stored.manifest.record_count, k = snap.stored.manifest.pir.partitions, role = %self.role, answers = snap.answers_device(), why = %snap.answers_detail(), "serving");
                self.snapshots
                    .write()
                    .expect("lock")
                    .insert(id, Arc::new(snap));
                return true;
            }
            Ok(Err(e)) => {
                tracing::error!(snapshot = %id, error = %e, "cannot load snapshot; skipping it");
                self.failed
                    .write()
                    .expect("lock")
                    .insert(key, e.to_string());
            }
            Err(e) => tracing::error!(snapshot = %id, error = %e, "loader panicked"),
        }
        false
    }

    /// Takes a queue slot, or `None` when the queue is full.
    pub fn enter_queue(self: &Arc<Self>) -> Option<QueueSlot> {
        let before = self.in_queue.fetch_add(1, Ordering::SeqCst);
        if before >= self.queue_limit {
            self.in_queue.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        self.metrics.queued.set(before as i64 + 1);
        Some(QueueSlot {
            state: self.clone(),
        })
    }
}

/// A place in the bounded queue; released on drop.
pub struct QueueSlot {
    state: Arc<AppState>,
}

impl Drop for QueueSlot {
    fn drop(&mut self) {
        let left = self.state.in_queue.fetch_sub(1, Ordering::SeqCst) - 1;
        self.state.metrics.queued.set(left as i64);
    }
}

/// Where a snapshot comes in the chain's order: its block, then its span
/// (a delta of few blocks before a merge of many, full snapshots last).
fn chain_order(m: &protocol::Manifest) -> (u64, u64) {
    let span = match m.kind {
        protocol::SnapshotKind::Delta { from } => m.block_number.saturating_sub(from),
        _ => u64::MAX,
    };
    (m.block_number, span)
}

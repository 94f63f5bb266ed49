//! The private read path: the PIR server's catalog and the views it forms
//! (`protocol::view`), one PIR client per snapshot (setup data cached on
//! disk and checked against its digest; the newest view's kept current in
//! the background, older views' fetched when first read), a pool of
//! prepared queries per snapshot refilled in the background, and lookups
//! that ask every level of a view in one request. The math is pir-core's;
//! this module only moves bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use alloy_primitives::{Address, U256};
use pir_core::wire::{decode_responses, encode_queries};
use pir_core::{ClientError, Lookup, PirClient, PreparedQuery};
use protocol::api::{ApiError, Catalog, CatalogEntry};
use protocol::view::View;
use tokio::sync::Notify;

/// The name of a whole table in a manifest's file list (the store's
/// `TABLE_FILE`; the proxy does not link the store).
const TABLE_FILE: &str = "table.bin";

use crate::block::BlockSelector;
use crate::config::ProxyConfig;

/// Why an account could not be read privately.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReadError {
    #[error("no private snapshot for {requested}; available blocks: {available:?}")]
    NoSnapshot {
        requested: String,
        available: Vec<u64>,
    },
    #[error("account not in the private set of snapshot {snapshot} ({kind} snapshot)")]
    NotInPrivateSet {
        snapshot: String,
        kind: &'static str,
    },
    #[error("PIR server unavailable: {0}")]
    Backend(String),
    /// A snapshot of the view left the server between catalog and query
    /// (merged or retired); the lookup is retried on the new catalog.
    #[error("a snapshot of the view was retired: {0}")]
    Retired(String),
    #[error("private answer failed verification: {0}")]
    Unverifiable(String),
    #[error("setup data for {snapshot} unusable: {reason}")]
    Setup { snapshot: String, reason: String },
    #[error("the PIR server serves several chains ({0:?}); set chain_id")]
    AmbiguousChain(Vec<u64>),
    /// A verification failure was seen earlier: private reads are stopped.
    #[error("private reads stopped: the PIR server failed verification ({0})")]
    Distrusted(String),
}

/// A privately read account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountState {
    pub balance: U256,
    pub nonce: u64,
    /// Id of the level it was found in (the view's top when absent).
    pub snapshot: String,
    /// The block of the view it was read from.
    pub block: u64,
    /// Absent from every level of a complete view: balance and nonce are 0.
    pub absent: bool,
}

/// A view with a client for each of its levels, base first.
pub struct ViewClient {
    pub view: View,
    pub levels: Vec<Level>,
}

impl ViewClient {
    /// The freshest level's id: names the view in logs and the replay.
    pub fn top(&self) -> &str {
        &self.levels.last().expect("a view has a level").entry().id
    }
}

/// What [`PrivateReader::fetch_verified`] downloads: its route below
/// `/v1/snapshots/{id}/` and its cache file's extension.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fetched {
    Setup,
    Table,
}

impl Fetched {
    fn name(self) -> &'static str {
        match self {
            Fetched::Setup => "setup",
            Fetched::Table => "table",
        }
    }
}

/// How one level of a view is read.
#[derive(Clone)]
pub enum Level {
    /// By PIR queries.
    Pir(Arc<SnapshotClient>),
    /// Downloaded whole (a small level: cheaper than its hint); read
    /// locally, no query.
    Whole(Arc<WholeLevel>),
}

/// A level downloaded whole.
pub struct WholeLevel {
    pub entry: CatalogEntry,
    pub table: protocol::table::Table,
}

impl Level {
    pub fn entry(&self) -> &CatalogEntry {
        match self {
            Level::Pir(s) => &s.entry,
            Level::Whole(w) => &w.entry,
        }
    }
}

/// One snapshot with its client and prepared-query pool.
pub struct SnapshotClient {
    pub entry: CatalogEntry,
    pub client: PirClient,
    pool: Mutex<Vec<PreparedQuery>>,
    pool_size: usize,
    wanted: Arc<Notify>,
}

impl SnapshotClient {
    /// Takes a prepared query, making one now if the pool is empty. The
    /// refill is asked for once the request is answered (see `read_batch`),
    /// so that it never competes with the request for the CPU.
    async fn take_prepared(self: &Arc<Self>) -> PreparedQuery {
        let ready = self.pool.lock().expect("pool lock").pop();
        match ready {
            Some(p) => p,
            None => self.prepare_off_thread().await.expect("prepare task"),
        }
    }

    /// Prepares a query on the blocking pool (it takes milliseconds of
    /// all-core work).
    async fn prepare_off_thread(self: &Arc<Self>) -> Result<PreparedQuery, tokio::task::JoinError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.client.prepare(&mut rand::rng())).await
    }

    /// Prepared queries ready now.
    pub fn pool_len(&self) -> usize {
        self.pool.lock().expect("pool lock").len()
    }
}

/// Keeps a snapshot's pool full until the snapshot is dropped.
async fn refill(weak: Weak<SnapshotClient>) {
    loop {
        let Some(snap) = weak.upgrade() else { return };
        if snap.pool_len() < snap.pool_size {
            if let Ok(p) = snap.prepare_off_thread().await {
                snap.pool.lock().expect("pool lock").push(p);
            }
            continue;
        }
        let wanted = snap.wanted.clone();
        drop(snap);
        // Wake when a query is taken; look again now and then so that the
        // task ends soon after its snapshot is retired.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), wanted.notified()).await;
    }
}

pub struct PrivateReader {
    http: reqwest::Client,
    base: String,
    cache_dir: PathBuf,
    pool_size: usize,
    chain_id: Option<u64>,
    max_batch: RwLock<usize>,
    /// The catalog's snapshots (of the configured chain) and the views
    /// they form, as last fetched, and the catalog's ETag.
    entries: RwLock<BTreeMap<String, CatalogEntry>>,
    views: RwLock<Vec<View>>,
    catalog_etag: Mutex<Option<String>>,
    /// Snapshots whose setup data (or whole table) is loaded.
    snapshots: RwLock<BTreeMap<String, Level>>,
    /// Held while a setup is fetched, so two lookups of a cold view do not
    /// download it twice.
    opening: tokio::sync::Mutex<()>,
    limits: pir_core::ClientLimits,
    /// Queries per batch sent (1: as many as asked).
    pad_to: usize,
    /// Set by the first verification failure (its reason): from then on no
    /// private query is sent and every private read fails alike.
    distrust: Mutex<Option<String>>,
    /// Bytes sent to and received from the PIR server since start.
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    /// The part of them that were lookups (queries and their answers).
    lookup_up: AtomicU64,
    lookup_down: AtomicU64,
}

/// A transport error, without the URL reqwest would print (one redaction
/// policy: logs and wallets see `protocol::url::redact` forms only).
fn backend(e: reqwest::Error) -> ReadError {
    ReadError::Backend(e.without_url().to_string())
}

impl PrivateReader {
    pub fn new(config: &ProxyConfig) -> anyhow::Result<Self> {
        Ok(PrivateReader {
            http: config.pir_http_client()?,
            base: config.pir_server.trim_end_matches('/').to_string(),
            cache_dir: config.cache_dir.clone(),
            pool_size: config.prepared_pool,
            chain_id: config.chain_id,
            max_batch: RwLock::new(1),
            entries: RwLock::new(BTreeMap::new()),
            views: RwLock::new(Vec::new()),
            catalog_etag: Mutex::new(None),
            snapshots: RwLock::new(BTreeMap::new()),
            opening: tokio::sync::Mutex::new(()),
            limits: config.limits.client_limits(),
            pad_to: config.pad_batches_to.max(1),
            distrust: Mutex::new(None),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            lookup_up: AtomicU64::new(0),
            lookup_down: AtomicU64::new(0),
        })
    }

    /// Bytes sent to and received from the PIR server since start
    /// (queries, responses, catalogs, setup downloads).
    pub fn traffic(&self) -> (u64, u64) {
        (
            self.bytes_up.load(Ordering::Relaxed),
            self.bytes_down.load(Ordering::Relaxed),
        )
    }

    /// The part of [`Self::traffic`] that lookups moved (the rest is
    /// catalogs and setup downloads: background traffic).
    pub fn lookup_traffic(&self) -> (u64, u64) {
        (
            self.lookup_up.load(Ordering::Relaxed),
            self.lookup_down.load(Ordering::Relaxed),
        )
    }

    fn count(&self, up: usize, down: usize) {
        self.bytes_up.fetch_add(up as u64, Ordering::Relaxed);
        self.bytes_down.fetch_add(down as u64, Ordering::Relaxed);
    }

    /// Why private reads are stopped, if they are.
    pub fn distrusted(&self) -> Option<String> {
        self.distrust.lock().expect("distrust lock").clone()
    }

    /// Records a verification failure (the first one is logged) and returns
    /// the error every private read gets from now on.
    fn distrust(&self, reason: String) -> ReadError {
        let mut d = self.distrust.lock().expect("distrust lock");
        if d.is_none() {
            tracing::warn!(%reason, server = %protocol::url::redact(&self.base), "the PIR server failed verification: private reads are stopped until the proxy restarts or `ethpir-proxy trust-reset`");
            *d = Some(reason);
        }
        ReadError::Distrusted(d.clone().expect("just set"))
    }

    /// One lookup of a random address in the newest snapshot, sent exactly
    /// like a real one (cover traffic).
    pub async fn cover_lookup(&self) {
        let address = Address::from(rand::random::<[u8; 20]>());
        let _ = self.lookup(&BlockSelector::Newest, &[address]).await;
    }

    /// Trusts the server again (`ethpir_trustReset`); returns the reason
    /// that had stopped private reads, if any.
    pub fn trust_reset(&self) -> Option<String> {
        let was = self.distrust.lock().expect("distrust lock").take();
        if let Some(reason) = &was {
            tracing::warn!(%reason, "trust in the PIR server reset by the user");
        }
        was
    }

    /// Snapshots whose setup data is loaded now.
    pub fn snapshots(&self) -> Vec<Level> {
        self.snapshots
            .read()
            .expect("lock")
            .values()
            .cloned()
            .collect()
    }

    /// The views of the served chain, oldest block first.
    pub fn views(&self) -> Vec<View> {
        self.views.read().expect("lock").clone()
    }

    /// The catalog entry of a snapshot.
    pub fn entry(&self, id: &str) -> Option<CatalogEntry> {
        self.entries.read().expect("lock").get(id).cloned()
    }

    /// The chain served: configured, or the only one the server has.
    pub fn chain_id(&self) -> Result<Option<u64>, ReadError> {
        if self.chain_id.is_some() {
            return Ok(self.chain_id);
        }
        let mut chains: Vec<u64> = self
            .entries
            .read()
            .expect("lock")
            .values()
            .map(|e| e.manifest.chain_id)
            .collect();
        chains.sort_unstable();
        chains.dedup();
        match chains.len() {
            0 => Ok(None),
            1 => Ok(Some(chains[0])),
            _ => Err(ReadError::AmbiguousChain(chains)),
        }
    }

    /// Fetches the catalog (a 304 when unchanged), recomputes the views
    /// from its manifests, drops clients of vanished snapshots and loads
    /// the newest view's setups. Returns how many snapshots the catalog
    /// lists.
    pub async fn refresh(&self) -> Result<usize, ReadError> {
        if let Some(catalog) = self.fetch_catalog().await? {
            self.take_catalog(catalog);
        }
        if let Ok(chain) = self.chain_id() {
            let newest = protocol::view::newest(&self.views(), chain).cloned();
            if let Some(view) = newest {
                if let Err(e) = self.open_view(view).await {
                    tracing::warn!(error = %e, "newest view not loaded");
                }
            }
        }
        Ok(self.entries.read().expect("lock").len())
    }

    /// The catalog, or `None` when it has not changed since the last fetch.
    async fn fetch_catalog(&self) -> Result<Option<Catalog>, ReadError> {
        let mut request = self
            .http
            .get(format!("{}/v1/snapshots", self.base))
            .header(reqwest::header::ACCEPT_ENCODING, "gzip");
        let etag = self.catalog_etag.lock().expect("etag lock").clone();
        if let Some(etag) = &etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let resp = request.send().await.map_err(backend)?;
        if resp.status() == reqwest::StatusCode::NOT_MODIFIED && etag.is_some() {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(ReadError::Backend(format!(
                "catalog: HTTP {}",
                resp.status()
            )));
        }
        let new_etag = resp
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let zipped = resp
            .headers()
            .get(reqwest::header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes() == b"gzip");
        let bytes = resp.bytes().await.map_err(backend)?;
        self.count(0, bytes.len());
        let bytes = match zipped {
            true => gunzip(&bytes, MAX_CATALOG_BYTES)?,
            false => bytes.to_vec(),
        };
        let catalog: Catalog = serde_json::from_slice(&bytes)
            .map_err(|e| ReadError::Backend(format!("catalog: {e}")))?;
        *self.catalog_etag.lock().expect("etag lock") = new_etag;
        Ok(Some(catalog))
    }

    /// Adopts a new catalog: entries, views (recomputed here from the
    /// manifests, whatever the server says of them), clients kept only for
    /// snapshots still listed with the same setup.
    fn take_catalog(&self, catalog: Catalog) {
        *self.max_batch.write().expect("lock") = catalog.max_batch.max(1);
        let wanted: BTreeMap<String, CatalogEntry> = catalog
            .snapshots
            .into_iter()
            .filter(|e| self.chain_id.is_none_or(|c| c == e.manifest.chain_id))
            .map(|e| (e.id.clone(), e))
            .collect();
        self.snapshots.write().expect("lock").retain(|id, s| {
            wanted
                .get(id)
                .is_some_and(|e| e.manifest == s.entry().manifest)
        });
        let entries: Vec<CatalogEntry> = wanted.values().cloned().collect();
        *self.views.write().expect("lock") = protocol::view::views(&entries);
        *self.entries.write().expect("lock") = wanted;
    }

    /// Clients for every level of `view`, loading setups not loaded yet.
    async fn open_view(&self, view: View) -> Result<ViewClient, ReadError> {
        let mut levels = Vec::with_capacity(view.snapshots.len());
        for id in &view.snapshots {
            levels.push(self.open(id).await?);
        }
        Ok(ViewClient { view, levels })
    }

    /// The client of one listed snapshot, its setup (or table) loaded if
    /// need be.
    async fn open(&self, id: &str) -> Result<Level, ReadError> {
        if let Some(s) = self.snapshots.read().expect("lock").get(id) {
            return Ok(s.clone());
        }
        let _one_at_a_time = self.opening.lock().await;
        if let Some(s) = self.snapshots.read().expect("lock").get(id) {
            return Ok(s.clone());
        }
        let entry = self
            .entry(id)
            .ok_or_else(|| ReadError::Retired(id.to_string()))?;
        let level = match whole_table_bytes(&entry) {
            Some(bytes) if bytes <= self.limits.max_setup_bytes => {
                Level::Whole(self.open_whole(entry).await?)
            }
            _ => {
                let snap = self.open_snapshot(entry).await?;
                tokio::spawn(refill(Arc::downgrade(&snap)));
                Level::Pir(snap)
            }
        };
        tracing::info!(snapshot = %id, whole = matches!(level, Level::Whole(_)), "private snapshot ready");
        self.snapshots
            .write()
            .expect("lock")
            .insert(id.to_string(), level.clone());
        Ok(level)
    }

    /// Downloads (or reads from the cache) a level's table, checked
    /// against the digest its manifest lists.
    async fn open_whole(&self, entry: CatalogEntry) -> Result<Arc<WholeLevel>, ReadError> {
        let file = &entry.manifest.files[TABLE_FILE];
        let bytes = self
            .fetch_verified(&entry, Fetched::Table, &file.sha3_256.clone(), file.bytes)
            .await?;
        let max_entries = self.limits.max_setup_bytes;
        let table = protocol::table::Table::parse(bytes, max_entries)
            .map_err(|e| self.distrust(format!("snapshot {}: table: {e}", entry.id)))?;
        Ok(Arc::new(WholeLevel { entry, table }))
    }

    async fn open_snapshot(&self, entry: CatalogEntry) -> Result<Arc<SnapshotClient>, ReadError> {
        let announced = entry.manifest.pir.hint_bytes;
        if announced > self.limits.max_setup_bytes {
            return Err(self.distrust(format!(
                "snapshot {} announces {announced} bytes of setup data, over the limit of {}",
                entry.id, self.limits.max_setup_bytes
            )));
        }
        let digest = entry.manifest.pir.setup_digest.clone();
        let bytes = self
            .fetch_verified(&entry, Fetched::Setup, &digest, self.limits.max_setup_bytes)
            .await?;
        let limits = self.limits;
        let client = tokio::task::spawn_blocking(move || {
            PirClient::from_setup_bytes_limited(&bytes, &limits)
        })
        .await
        .expect("setup task")
        .map_err(|e| self.distrust(format!("snapshot {}: {e}", entry.id)))?;
        Ok(Arc::new(SnapshotClient {
            entry,
            client,
            pool: Mutex::new(Vec::new()),
            pool_size: self.pool_size,
            wanted: Arc::new(Notify::new()),
        }))
    }

    /// A snapshot's setup or table: from the cache when its SHA3-256 is
    /// `digest`, else downloaded (at most `max_bytes`, else the server is
    /// distrusted; a digest mismatch too), then cached.
    async fn fetch_verified(
        &self,
        entry: &CatalogEntry,
        what: Fetched,
        digest: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, ReadError> {
        let name = what.name();
        let cached = self.cache_dir.join(format!("{digest}.{name}"));
        match tokio::fs::read(&cached).await {
            Ok(b) if protocol::sha3_hex(&b) == digest => return Ok(b),
            Ok(_) => {
                tracing::warn!(file = %cached.display(), "cached {name} does not match its digest; downloading again")
            }
            Err(_) => {}
        }
        let url = format!("{}/v1/snapshots/{}/{name}", self.base, entry.id);
        let resp = self.http.get(&url).send().await.map_err(backend)?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND && what == Fetched::Table {
            return Err(ReadError::Retired(entry.id.clone()));
        }
        if !status.is_success() {
            return Err(ReadError::Setup {
                snapshot: entry.id.clone(),
                reason: match what {
                    Fetched::Setup => format!("HTTP {status}"),
                    Fetched::Table => format!("table: HTTP {status}"),
                },
            });
        }
        if resp.content_length().unwrap_or(0) > max_bytes {
            return Err(self.distrust(format!(
                "snapshot {}: {name} download over the limit of {max_bytes} bytes",
                entry.id
            )));
        }
        let b = resp.bytes().await.map_err(backend)?.to_vec();
        self.count(0, b.len());
        if protocol::sha3_hex(&b) != digest {
            return Err(self.distrust(format!(
                "snapshot {}: downloaded {name} does not match the catalog digest",
                entry.id
            )));
        }
        if let Err(e) = write_atomically(&self.cache_dir, &cached, &b).await {
            tracing::warn!(error = %e, "cannot cache {name} data");
        }
        Ok(b)
    }

    /// The view a block selector names, every level loaded.
    pub async fn select(&self, sel: &BlockSelector) -> Result<ViewClient, ReadError> {
        let chain = self.chain_id()?;
        let views: Vec<View> = self
            .views()
            .into_iter()
            .filter(|v| chain.is_none_or(|c| v.chain_id == c))
            .collect();
        let at_block = |n: u64| views.iter().find(|v| v.block == n).cloned();
        let found = match sel {
            BlockSelector::Newest => protocol::view::newest(&views, chain).cloned(),
            BlockSelector::Number(n) => at_block(*n),
            BlockSelector::Hash(h) => {
                let block = self
                    .entries
                    .read()
                    .expect("lock")
                    .values()
                    .find(|e| e.manifest.block_hash == Some(*h))
                    .map(|e| e.manifest.block_number);
                block.and_then(at_block)
            }
        };
        let Some(view) = found else {
            return Err(ReadError::NoSnapshot {
                requested: match sel {
                    BlockSelector::Newest => "the latest block".into(),
                    BlockSelector::Number(n) => format!("block {n}"),
                    BlockSelector::Hash(h) => format!("block hash {h}"),
                },
                available: views.iter().map(|v| v.block).collect(),
            });
        };
        self.open_view(view).await
    }

    /// Reads accounts at the block `sel` names: one result per address.
    /// When a level of the view was retired in the meantime (a merge), the
    /// catalog is fetched again and the lookup repeated once.
    pub async fn lookup(
        &self,
        sel: &BlockSelector,
        addresses: &[Address],
    ) -> Vec<Result<AccountState, ReadError>> {
        let mut attempt = 0;
        loop {
            let results = match self.select(sel).await {
                Ok(view) => self.read(&view, addresses).await,
                Err(e) => addresses.iter().map(|_| Err(e.clone())).collect(),
            };
            let retired = results
                .iter()
                .any(|r| matches!(r, Err(ReadError::Retired(_))));
            if !retired || attempt == 1 {
                return results;
            }
            attempt += 1;
            tracing::debug!("a level was retired during a lookup; refreshing the catalog");
            if let Err(e) = self.refresh().await {
                return addresses.iter().map(|_| Err(e.clone())).collect();
            }
        }
    }

    /// Reads accounts privately from every level of one view, in as few
    /// requests as the server's batch limit allows. One result per address.
    pub async fn read(
        &self,
        view: &ViewClient,
        addresses: &[Address],
    ) -> Vec<Result<AccountState, ReadError>> {
        let max_batch = *self.max_batch.read().expect("lock");
        let per_batch = if self.pad_to > 1 {
            self.pad_to.min(max_batch)
        } else {
            max_batch
        };
        let mut out = Vec::with_capacity(addresses.len());
        for chunk in addresses.chunks(per_batch) {
            if let Some(reason) = self.distrusted() {
                out.extend(
                    chunk
                        .iter()
                        .map(|_| Err(ReadError::Distrusted(reason.clone()))),
                );
                continue;
            }
            let results = match self.read_batch(view, chunk, per_batch).await {
                Ok(results) => results,
                Err(e) => chunk.iter().map(|_| Err(e.clone())).collect(),
            };
            // A failed verification anywhere fails the whole batch, and
            // every read after it (fail closed).
            match results.iter().find_map(|r| match r {
                Err(ReadError::Unverifiable(why)) => Some(why.clone()),
                _ => None,
            }) {
                Some(why) => {
                    let e = self.distrust(why);
                    out.extend(chunk.iter().map(|_| Err(e.clone())));
                }
                None => out.extend(results),
            }
        }
        out
    }

    /// One request: the same queries (the addresses, then random fillers up
    /// to `pad_batches_to`) to every level of the view. What the server
    /// sees never depends on the addresses or on the level that holds them.
    async fn read_batch(
        &self,
        view: &ViewClient,
        addresses: &[Address],
        per_batch: usize,
    ) -> Result<Vec<Result<AccountState, ReadError>>, ReadError> {
        let padded = if self.pad_to > 1 { per_batch } else { 0 };
        let fillers: Vec<Address> = (addresses.len()..padded)
            .map(|_| Address::from(rand::random::<[u8; 20]>()))
            .collect();
        let keys: Vec<_> = addresses
            .iter()
            .chain(&fillers)
            .map(protocol::pir_key)
            .collect();
        // found[level][query]: the value each level holds, if any.
        let mut found: Vec<Vec<Option<(U256, u64)>>> = vec![Vec::new(); view.levels.len()];
        let mut pir: Vec<(usize, &Arc<SnapshotClient>)> = Vec::new();
        for (i, level) in view.levels.iter().enumerate() {
            match level {
                Level::Whole(w) => found[i] = read_whole(w, &keys[..addresses.len()])?,
                Level::Pir(snap) => pir.push((i, snap)),
            }
        }
        if !pir.is_empty() {
            for (i, values) in self.query_levels(&pir, &keys).await? {
                found[i] = values;
            }
        }
        Ok((0..addresses.len())
            .map(|i| self.freshest(view, &found, i))
            .collect())
    }

    /// One request with the same queries to every PIR level; each level's
    /// decoded values.
    async fn query_levels(
        &self,
        levels: &[(usize, &Arc<SnapshotClient>)],
        keys: &[alloy_primitives::B256],
    ) -> Result<Vec<(usize, Vec<Option<(U256, u64)>>)>, ReadError> {
        let mut bodies = Vec::with_capacity(levels.len());
        let mut pendings = Vec::with_capacity(levels.len());
        for (_, snap) in levels {
            let mut queries = Vec::with_capacity(keys.len());
            let mut level_pendings = Vec::with_capacity(keys.len());
            for key in keys {
                let prepared = snap.take_prepared().await;
                let (q, p) = snap
                    .client
                    .query(prepared, key.as_slice())
                    .map_err(|e| ReadError::Unverifiable(e.to_string()))?;
                queries.push(q);
                level_pendings.push(p);
            }
            bodies.push(encode_queries(&queries));
            pendings.push(level_pendings);
        }
        let parts: Vec<(&str, &[u8])> = levels
            .iter()
            .zip(&bodies)
            .map(|((_, s), b)| (s.entry.id.as_str(), b.as_slice()))
            .collect();
        let request = protocol::multi::encode_request(&parts);
        let body = self.post_query(request).await?;
        let answers = protocol::multi::decode_response(&body)
            .map_err(|e| ReadError::Unverifiable(format!("malformed response: {e}")))?;
        if answers.len() != levels.len() {
            return Err(ReadError::Unverifiable(format!(
                "{} answers for {} snapshots",
                answers.len(),
                levels.len()
            )));
        }
        let mut out = Vec::with_capacity(levels.len());
        for (((i, snap), answer), level_pendings) in levels.iter().zip(&answers).zip(pendings) {
            out.push((*i, decode_level(snap, answer, level_pendings)?));
            // Answered: refill the pool now, off the request path.
            snap.wanted.notify_one();
        }
        Ok(out)
    }

    /// POSTs a multi-snapshot request; the response body.
    async fn post_query(&self, request: Vec<u8>) -> Result<Vec<u8>, ReadError> {
        self.count(request.len(), 0);
        self.lookup_up
            .fetch_add(request.len() as u64, Ordering::Relaxed);
        let resp = self
            .http
            .post(format!("{}/v1/query", self.base))
            .body(request)
            .send()
            .await
            .map_err(backend)?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(backend)?;
        self.count(0, body.len());
        self.lookup_down
            .fetch_add(body.len() as u64, Ordering::Relaxed);
        if status.is_success() {
            return Ok(body.to_vec());
        }
        let reason = serde_json::from_slice::<ApiError>(&body)
            .map(|e| e.error)
            .unwrap_or_default();
        match status {
            reqwest::StatusCode::NOT_FOUND => Err(ReadError::Retired(reason)),
            _ => Err(ReadError::Backend(format!("HTTP {status} {reason}"))),
        }
    }

    /// The answer for query `i`: the freshest level holding the key; absent
    /// from every level of a complete view is 0/0.
    fn freshest(
        &self,
        view: &ViewClient,
        found: &[Vec<Option<(U256, u64)>>],
        i: usize,
    ) -> Result<AccountState, ReadError> {
        let hit = view
            .levels
            .iter()
            .zip(found)
            .rev()
            .find_map(|(level, values)| values[i].map(|v| (level, v)));
        let state = |snapshot: &str, (balance, nonce), absent| AccountState {
            balance,
            nonce,
            snapshot: snapshot.to_string(),
            block: view.view.block,
            absent,
        };
        match hit {
            Some((level, value)) => Ok(state(&level.entry().id, value, false)),
            None if view.view.complete => Ok(state(view.top(), (U256::ZERO, 0), true)),
            None => Err(ReadError::NotInPrivateSet {
                snapshot: view.top().to_string(),
                kind: view.levels[0].entry().manifest.kind.name(),
            }),
        }
    }
}

/// Largest catalog accepted (after decompression).
const MAX_CATALOG_BYTES: u64 = 64 << 20;

/// Decompresses a gzip body of at most `limit` bytes.
fn gunzip(bytes: &[u8], limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| ReadError::Backend(format!("catalog: bad gzip: {e}")))?;
    if out.len() as u64 > limit {
        return Err(ReadError::Backend(format!(
            "catalog: over {limit} bytes uncompressed"
        )));
    }
    Ok(out)
}

/// The bytes of a delta's whole table, when it has one cheaper to
/// download than its hint. Bases are always read by PIR (their tables,
/// when small, serve other clients).
pub fn whole_table_bytes(entry: &CatalogEntry) -> Option<u64> {
    if !matches!(entry.manifest.kind, protocol::SnapshotKind::Delta { .. }) {
        return None;
    }
    let bytes = entry.manifest.files.get(TABLE_FILE)?.bytes;
    (bytes < entry.manifest.pir.hint_bytes).then_some(bytes)
}

/// Values of `keys` in a level held whole.
fn read_whole(
    level: &WholeLevel,
    keys: &[alloy_primitives::B256],
) -> Result<Vec<Option<(U256, u64)>>, ReadError> {
    keys.iter()
        .map(|k| match level.table.get(&k.0) {
            Some(v) => protocol::decode_value(v)
                .map(Some)
                .map_err(|e| ReadError::Unverifiable(format!("{}: {e}", level.entry.id))),
            None => Ok(None),
        })
        .collect()
}

/// Decodes one level's answers: the value each query found, or `None`.
/// Any failed check (noise, checksum, setup, value encoding, count) fails
/// the whole request.
fn decode_level(
    snap: &SnapshotClient,
    answer: &[u8],
    pendings: Vec<pir_core::PendingAnswer>,
) -> Result<Vec<Option<(U256, u64)>>, ReadError> {
    let responses = decode_responses(answer).map_err(|e| {
        ReadError::Unverifiable(format!("{}: malformed response: {e}", snap.entry.id))
    })?;
    if responses.len() != pendings.len() {
        return Err(ReadError::Unverifiable(format!(
            "{}: {} answers to {} queries",
            snap.entry.id,
            responses.len(),
            pendings.len()
        )));
    }
    pendings
        .into_iter()
        .zip(&responses)
        .map(
            |(pending, response)| match snap.client.decode(pending, response) {
                Ok(Lookup::Found(v)) => protocol::decode_value(&v)
                    .map(Some)
                    .map_err(|e| ReadError::Unverifiable(e.to_string())),
                Ok(Lookup::Absent) => Ok(None),
                Err(
                    e @ (ClientError::Corrupted | ClientError::Decode(_) | ClientError::WrongSetup),
                ) => Err(ReadError::Unverifiable(format!("{}: {e}", snap.entry.id))),
            },
        )
        .collect()
}

async fn write_atomically(
    dir: &std::path::Path,
    path: &std::path::Path,
    bytes: &[u8],
) -> std::io::Result<()> {
    tokio::fs::create_dir_all(dir).await?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    tokio::fs::write(&tmp, bytes).await?;
    tokio::fs::rename(&tmp, path).await
}

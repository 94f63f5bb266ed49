//! The private read path: the PIR server's catalog, one PIR client per
//! snapshot (setup data cached on disk and checked against its digest), a
//! pool of prepared queries refilled in the background, and batched
//! lookups. The math is pir-core's; this module only moves bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use alloy_primitives::{Address, U256};
use pir_core::wire::{decode_responses, encode_queries, SetupData};
use pir_core::{ClientError, Lookup, PirClient, PreparedQuery};
use protocol::api::{ApiError, Catalog, CatalogEntry};
use protocol::SnapshotKind;
use tokio::sync::Notify;

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
    /// Snapshot id it was read from, and its block.
    pub snapshot: String,
    pub block: u64,
    /// The account is absent from a full snapshot: balance and nonce are 0.
    pub absent: bool,
}

/// Requests that read from one snapshot: the snapshot, and (request index,
/// address) for each.
pub type SnapshotGroup = (Arc<SnapshotClient>, Vec<(usize, Address)>);

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
    snapshots: RwLock<BTreeMap<String, Arc<SnapshotClient>>>,
    limits: pir_core::ClientLimits,
    /// Queries per batch sent (1: as many as asked).
    pad_to: usize,
    /// Set by the first verification failure (its reason): from then on no
    /// private query is sent and every private read fails alike.
    distrust: Mutex<Option<String>>,
    /// Bytes sent to and received from the PIR server since start.
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
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
            snapshots: RwLock::new(BTreeMap::new()),
            limits: config.limits.client_limits(),
            pad_to: config.pad_batches_to.max(1),
            distrust: Mutex::new(None),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
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
        let Ok(snap) = self.select(&BlockSelector::Newest) else {
            return;
        };
        let address = Address::from(rand::random::<[u8; 20]>());
        let _ = self.read(&snap, &[address]).await;
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

    /// Snapshots known now.
    pub fn snapshots(&self) -> Vec<Arc<SnapshotClient>> {
        self.snapshots
            .read()
            .expect("lock")
            .values()
            .cloned()
            .collect()
    }

    /// The chain served: configured, or the only one the server has.
    pub fn chain_id(&self) -> Result<Option<u64>, ReadError> {
        if self.chain_id.is_some() {
            return Ok(self.chain_id);
        }
        let mut chains: Vec<u64> = self
            .snapshots()
            .iter()
            .map(|s| s.entry.manifest.chain_id)
            .collect();
        chains.sort_unstable();
        chains.dedup();
        match chains.len() {
            0 => Ok(None),
            1 => Ok(Some(chains[0])),
            _ => Err(ReadError::AmbiguousChain(chains)),
        }
    }

    /// Fetches the catalog; sets up clients for new snapshots, drops
    /// vanished ones. Returns how many snapshots are usable.
    pub async fn refresh(&self) -> Result<usize, ReadError> {
        let resp = self
            .http
            .get(format!("{}/v1/snapshots", self.base))
            .send()
            .await
            .map_err(backend)?;
        if !resp.status().is_success() {
            return Err(ReadError::Backend(format!(
                "catalog: HTTP {}",
                resp.status()
            )));
        }
        let bytes = resp.bytes().await.map_err(backend)?;
        self.count(0, bytes.len());
        let catalog: Catalog = serde_json::from_slice(&bytes)
            .map_err(|e| ReadError::Backend(format!("catalog: {e}")))?;
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
                .is_some_and(|e| e.manifest.pir.setup_digest == s.entry.manifest.pir.setup_digest)
        });
        for (id, entry) in wanted {
            if self.snapshots.read().expect("lock").contains_key(&id) {
                continue;
            }
            match self.open_snapshot(entry).await {
                Ok(snap) => {
                    tracing::info!(snapshot = %id, "private snapshot ready");
                    tokio::spawn(refill(Arc::downgrade(&snap)));
                    self.snapshots.write().expect("lock").insert(id, snap);
                }
                Err(e) => tracing::warn!(snapshot = %id, error = %e, "snapshot skipped"),
            }
        }
        Ok(self.snapshots.read().expect("lock").len())
    }

    async fn open_snapshot(&self, entry: CatalogEntry) -> Result<Arc<SnapshotClient>, ReadError> {
        let digest = entry.manifest.pir.setup_digest.clone();
        let setup_err = |reason: String| ReadError::Setup {
            snapshot: entry.id.clone(),
            reason,
        };
        let cached = self.cache_dir.join(format!("{digest}.setup"));
        let bytes = match tokio::fs::read(&cached).await {
            Ok(b) if hex::encode(SetupData::digest_of(&b)) == digest => b,
            other => {
                if other.is_ok() {
                    tracing::warn!(file = %cached.display(), "cached setup does not match its digest; downloading again");
                }
                let announced = entry.manifest.pir.hint_bytes;
                if announced > self.limits.max_setup_bytes {
                    return Err(self.distrust(format!(
                        "snapshot {} announces {announced} bytes of setup data, over the limit of {}",
                        entry.id, self.limits.max_setup_bytes
                    )));
                }
                let url = format!("{}/v1/snapshots/{}/setup", self.base, entry.id);
                let resp = self.http.get(&url).send().await.map_err(backend)?;
                if !resp.status().is_success() {
                    return Err(setup_err(format!("HTTP {}", resp.status())));
                }
                if resp.content_length().unwrap_or(0) > self.limits.max_setup_bytes {
                    return Err(self.distrust(format!(
                        "snapshot {}: setup download over the limit of {} bytes",
                        entry.id, self.limits.max_setup_bytes
                    )));
                }
                let b = resp.bytes().await.map_err(backend)?.to_vec();
                self.count(0, b.len());
                if hex::encode(SetupData::digest_of(&b)) != digest {
                    return Err(self.distrust(format!(
                        "snapshot {}: downloaded setup does not match the catalog digest",
                        entry.id
                    )));
                }
                if let Err(e) = write_atomically(&self.cache_dir, &cached, &b).await {
                    tracing::warn!(error = %e, "cannot cache setup data");
                }
                b
            }
        };
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

    /// The snapshot a block selector names.
    pub fn select(&self, sel: &BlockSelector) -> Result<Arc<SnapshotClient>, ReadError> {
        let chain = self.chain_id()?;
        let snaps: Vec<Arc<SnapshotClient>> = self
            .snapshots()
            .into_iter()
            .filter(|s| chain.is_none_or(|c| s.entry.manifest.chain_id == c))
            .collect();
        // At equal height: full, then historical, then active.
        let rank = |s: &SnapshotClient| match s.entry.manifest.kind {
            SnapshotKind::Full => 0,
            SnapshotKind::Historical => 1,
            SnapshotKind::Active { .. } => 2,
        };
        let best = |cands: Vec<Arc<SnapshotClient>>| cands.into_iter().min_by_key(|s| rank(s));
        let found = match sel {
            BlockSelector::Newest => {
                let top = snaps.iter().map(|s| s.entry.manifest.block_number).max();
                best(
                    snaps
                        .iter()
                        .filter(|s| Some(s.entry.manifest.block_number) == top)
                        .cloned()
                        .collect(),
                )
            }
            BlockSelector::Number(n) => best(
                snaps
                    .iter()
                    .filter(|s| s.entry.manifest.block_number == *n)
                    .cloned()
                    .collect(),
            ),
            BlockSelector::Hash(h) => best(
                snaps
                    .iter()
                    .filter(|s| s.entry.manifest.block_hash == Some(*h))
                    .cloned()
                    .collect(),
            ),
        };
        found.ok_or_else(|| {
            let mut available: Vec<u64> = snaps
                .iter()
                .map(|s| s.entry.manifest.block_number)
                .collect();
            available.sort_unstable();
            available.dedup();
            ReadError::NoSnapshot {
                requested: match sel {
                    BlockSelector::Newest => "the latest block".into(),
                    BlockSelector::Number(n) => format!("block {n}"),
                    BlockSelector::Hash(h) => format!("block hash {h}"),
                },
                available,
            }
        })
    }

    /// Reads accounts privately from one snapshot, in as few batches as the
    /// server allows. One result per address.
    pub async fn read(
        &self,
        snap: &Arc<SnapshotClient>,
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
            let results = match self.read_batch(snap, chunk).await {
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

    async fn read_batch(
        &self,
        snap: &Arc<SnapshotClient>,
        addresses: &[Address],
    ) -> Result<Vec<Result<AccountState, ReadError>>, ReadError> {
        // Padding: random addresses after the real ones, queried and
        // verified exactly alike; their answers are dropped.
        let padded = self.pad_to.min(*self.max_batch.read().expect("lock"));
        let fillers: Vec<Address> = (addresses.len()..padded)
            .map(|_| Address::from(rand::random::<[u8; 20]>()))
            .collect();
        let mut queries = Vec::with_capacity(addresses.len() + fillers.len());
        let mut pendings = Vec::with_capacity(addresses.len() + fillers.len());
        for a in addresses.iter().chain(&fillers) {
            let prepared = snap.take_prepared().await;
            let key = protocol::pir_key(a);
            let (q, p) = snap
                .client
                .query(prepared, key.as_slice())
                .map_err(|e| ReadError::Unverifiable(e.to_string()))?;
            queries.push(q);
            pendings.push(p);
        }
        let url = format!("{}/v1/snapshots/{}/query", self.base, snap.entry.id);
        let request = encode_queries(&queries);
        self.count(request.len(), 0);
        let resp = self
            .http
            .post(&url)
            .body(request)
            .send()
            .await
            .map_err(backend)?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(backend)?;
        self.count(0, body.len());
        if !status.is_success() {
            let reason = serde_json::from_slice::<ApiError>(&body)
                .map(|e| e.error)
                .unwrap_or_default();
            return Err(ReadError::Backend(format!("HTTP {status} {reason}")));
        }
        let responses = decode_responses(&body)
            .map_err(|e| ReadError::Unverifiable(format!("malformed response: {e}")))?;
        if responses.len() != pendings.len() {
            return Err(ReadError::Unverifiable(format!(
                "{} answers to {} queries",
                responses.len(),
                pendings.len()
            )));
        }
        let m = &snap.entry.manifest;
        let decoded = pendings
            .into_iter()
            .zip(&responses)
            .map(|(pending, response)| {
                let state = |balance, nonce, absent| AccountState {
                    balance,
                    nonce,
                    snapshot: snap.entry.id.clone(),
                    block: m.block_number,
                    absent,
                };
                match snap.client.decode(pending, response) {
                    Ok(Lookup::Found(v)) => {
                        let (balance, nonce) = protocol::decode_value(&v)
                            .map_err(|e| ReadError::Unverifiable(e.to_string()))?;
                        Ok(state(balance, nonce, false))
                    }
                    Ok(Lookup::Absent) if m.kind.is_complete() => Ok(state(U256::ZERO, 0, true)),
                    Ok(Lookup::Absent) => Err(ReadError::NotInPrivateSet {
                        snapshot: snap.entry.id.clone(),
                        kind: m.kind.name(),
                    }),
                    Err(
                        e @ (ClientError::Corrupted
                        | ClientError::Decode(_)
                        | ClientError::WrongSetup),
                    ) => Err(ReadError::Unverifiable(e.to_string())),
                }
            })
            .collect::<Vec<_>>();
        // Answered: refill the pool now, off the request path.
        snap.wanted.notify_one();
        // A filler's failed verification fails the batch like a real one's.
        let mut decoded = decoded;
        if let Some(bad) = decoded[addresses.len()..]
            .iter()
            .find(|r| matches!(r, Err(ReadError::Unverifiable(_))))
        {
            let bad = bad.clone();
            decoded.iter_mut().for_each(|r| *r = bad.clone());
        }
        decoded.truncate(addresses.len());
        Ok(decoded)
    }
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

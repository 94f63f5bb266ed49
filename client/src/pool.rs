//! One snapshot read by PIR: its client (setup loaded) and its pool of
//! prepared queries (`b0 = s·A + e`, made ahead of time, used once),
//! refilled in the background after each request is answered so that
//! the refill never competes with the request for the CPU.
//!
//! Queries are prepared in batches (`PirClient::prepare_many`: the public
//! matrix expanded once for all of them). A new snapshot's pool is first
//! filled to as many queries as the wallet's largest request took so far
//! (its first refresh there reads every key again), then kept at the
//! configured size.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use pir_core::{PirClient, PreparedQuery};
use protocol::api::CatalogEntry;
use tokio::sync::Notify;

use crate::ReadError;

/// One snapshot with its client and prepared-query pool.
pub struct SnapshotClient {
    pub entry: CatalogEntry,
    pub client: PirClient,
    pool: Mutex<Vec<PreparedQuery>>,
    pool_size: usize,
    /// Queries to have ready before the first request (0 once made).
    first_fill: AtomicUsize,
    /// Held while the refill task prepares: a request that finds the
    /// pool short waits for that batch instead of making it twice.
    filling: tokio::sync::Mutex<()>,
    wanted: Arc<Notify>,
}

/// Bytes of prepared queries a snapshot's first fill may hold: at 2^24
/// accounts (555 KB a query) about 480 queries, at mainnet's shape
/// (1.5 MiB) about 170.
const FIRST_FILL_MAX_BYTES: usize = 256 << 20;

impl SnapshotClient {
    /// A client with an empty pool; [`refill`] fills it, first to
    /// `first_fill` queries (within [`FIRST_FILL_MAX_BYTES`]), then to
    /// `pool_size`.
    pub fn new(
        entry: CatalogEntry,
        client: PirClient,
        pool_size: usize,
        first_fill: usize,
    ) -> Self {
        let query_bytes = 4 * client.setup().shape.rows().max(1);
        let first_fill = first_fill.min(FIRST_FILL_MAX_BYTES / query_bytes);
        SnapshotClient {
            entry,
            client,
            pool: Mutex::new(Vec::new()),
            pool_size,
            first_fill: AtomicUsize::new(first_fill),
            filling: tokio::sync::Mutex::new(()),
            wanted: Arc::new(Notify::new()),
        }
    }

    /// Takes `count` prepared queries: the pool's (after the batch being
    /// prepared for it, if any), and the rest made now, together.
    pub async fn take_prepared(
        self: &Arc<Self>,
        count: usize,
    ) -> Result<Vec<PreparedQuery>, ReadError> {
        let mut taken = self.take_ready(count);
        if taken.len() < count {
            drop(self.filling.lock().await);
            taken.extend(self.take_ready(count - taken.len()));
        }
        if taken.len() < count {
            taken.extend(self.prepare_off_thread(count - taken.len()).await?);
        }
        Ok(taken)
    }

    /// Up to `count` queries from the pool.
    fn take_ready(&self, count: usize) -> Vec<PreparedQuery> {
        let mut pool = self.pool.lock().expect("pool lock");
        let keep = pool.len().saturating_sub(count);
        pool.split_off(keep)
    }

    /// Asks the refill task to top the pool up (after an answer).
    pub fn want_more(&self) {
        self.wanted.notify_one();
    }

    /// Prepares `count` queries together on the blocking pool (it takes
    /// milliseconds of all-core work).
    async fn prepare_off_thread(
        self: &Arc<Self>,
        count: usize,
    ) -> Result<Vec<PreparedQuery>, ReadError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.client.prepare_many(count, &mut rand::rng()))
            .await
            .map_err(|e| ReadError::Backend(format!("preparing queries failed: {e}")))
    }

    /// Queries the pool lacks: to the first fill until it is made, then to
    /// the configured size.
    fn shortfall(&self) -> usize {
        let target = self.pool_size.max(self.first_fill.load(Ordering::Relaxed));
        target.saturating_sub(self.pool_len())
    }

    /// What names this level's content (its setup's digest): the key of
    /// the answers kept for it.
    pub fn setup_digest(&self) -> &protocol::Sha3Digest {
        &self.entry.manifest.pir.setup_digest
    }

    /// Prepared queries ready now.
    pub fn pool_len(&self) -> usize {
        self.pool.lock().expect("pool lock").len()
    }

    /// The exact bytes of this snapshot's answer to `queries` queries.
    pub fn response_bytes(&self, queries: usize) -> usize {
        pir_core::wire::response_bytes(self.client.setup().shape.cols(), queries)
    }
}

/// Keeps a snapshot's pool full until the snapshot is dropped.
pub async fn refill(weak: Weak<SnapshotClient>) {
    loop {
        let Some(snap) = weak.upgrade() else { return };
        let filling = snap.filling.lock().await;
        let short = snap.shortfall();
        if short > 0 {
            if let Ok(made) = snap.prepare_off_thread(short).await {
                snap.pool.lock().expect("pool lock").extend(made);
                snap.first_fill.store(0, Ordering::Relaxed);
            }
            drop(filling);
            continue;
        }
        drop(filling);
        let wanted = snap.wanted.clone();
        drop(snap);
        // Wake when a query is taken; look again now and then so that the
        // task ends soon after its snapshot is retired.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), wanted.notified()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pir_core::{EncodeOptions, EncodedDb, Expansion, PirServer, PublicMatrix};
    use protocol::SnapshotKind;
    use std::time::{Duration, Instant};

    /// A snapshot client over a small random database.
    fn snapshot(pool_size: usize, first_fill: usize) -> Arc<SnapshotClient> {
        let mut rng = rand::rng();
        let records: Vec<(Vec<u8>, Vec<u8>)> = (0..300u32)
            .map(|i| (i.to_le_bytes().to_vec(), vec![i as u8; 8]))
            .collect();
        let db = EncodedDb::encode(&records, 8, &EncodeOptions::default(), &mut rng).unwrap();
        let server = PirServer::build_cpu(db, PublicMatrix::new(Expansion::Aes128Ctr, [1; 32]));
        let client = PirClient::from_setup_bytes(server.setup_bytes()).unwrap();
        let entry = protocol::testing::entry(1, 0, SnapshotKind::Full, &[]);
        Arc::new(SnapshotClient::new(entry, client, pool_size, first_fill))
    }

    /// Polls `pool_len` until it is `want` (at most 30 s).
    async fn pool_reaches(snap: &SnapshotClient, want: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if snap.pool_len() == want {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    /// A new level's pool is first filled to the largest request so far,
    /// then only topped up to the configured size; a request takes what
    /// is ready and makes the rest.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_fill_then_the_configured_size() {
        let snap = snapshot(2, 9);
        tokio::spawn(refill(Arc::downgrade(&snap)));
        assert!(
            pool_reaches(&snap, 9).await,
            "first fill: {}",
            snap.pool_len()
        );
        let taken = snap.take_prepared(12).await.unwrap();
        assert_eq!(taken.len(), 12);
        snap.want_more();
        assert!(pool_reaches(&snap, 2).await, "top-up: {}", snap.pool_len());
        // Every query taken is its own (a fresh secret each).
        let vectors: Vec<_> = taken
            .into_iter()
            .map(|p| snap.client.query(p, b"key").unwrap().0.vector)
            .collect();
        for (i, a) in vectors.iter().enumerate() {
            assert!(vectors[i + 1..].iter().all(|b| a != b));
        }
    }
}

//! One snapshot read by PIR: its client (setup loaded) and its pool of
//! prepared queries (`b0 = s·A + e`, made ahead of time, used once),
//! refilled in the background after each request is answered so that
//! the refill never competes with the request for the CPU.

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
    wanted: Arc<Notify>,
}

impl SnapshotClient {
    /// A client with an empty pool; [`refill`] fills it.
    pub fn new(entry: CatalogEntry, client: PirClient, pool_size: usize) -> Self {
        SnapshotClient {
            entry,
            client,
            pool: Mutex::new(Vec::new()),
            pool_size,
            wanted: Arc::new(Notify::new()),
        }
    }

    /// Takes a prepared query, making one now if the pool is empty.
    pub async fn take_prepared(self: &Arc<Self>) -> Result<PreparedQuery, ReadError> {
        let ready = self.pool.lock().expect("pool lock").pop();
        match ready {
            Some(p) => Ok(p),
            None => self.prepare_off_thread().await,
        }
    }

    /// Asks the refill task to top the pool up (after an answer).
    pub fn want_more(&self) {
        self.wanted.notify_one();
    }

    /// Prepares a query on the blocking pool (it takes milliseconds of
    /// all-core work).
    async fn prepare_off_thread(self: &Arc<Self>) -> Result<PreparedQuery, ReadError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.client.prepare(&mut rand::rng()))
            .await
            .map_err(|e| ReadError::Backend(format!("preparing a query failed: {e}")))
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

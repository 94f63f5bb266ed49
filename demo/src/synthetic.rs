//! Synthetic stores for the benchmarks: 2^N random accounts (seeded, so
//! that a store built by one run is read by the next), built once and
//! reused.

use std::path::Path;
use std::time::Instant;

use alloy_primitives::{Address, U256};
use anyhow::Result;
use rand::{Rng, SeedableRng};
use snapshotter::pipeline::{build_and_publish, BuildOptions, ExportedState};
use snapshotter::{AccountRecord, SnapshotKind, SnapshotStore};

/// 2^`log2` random accounts, the same for the same `log2`.
pub fn accounts(log2: u32) -> Vec<AccountRecord> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(log2));
    (0..1u64 << log2)
        .map(|_| {
            AccountRecord::new(
                Address::from(rng.random::<[u8; 20]>()),
                U256::from(rng.random::<u64>()) * U256::from(1_000_000u64),
                rng.random_range(0..1000),
            )
        })
        .collect()
}

/// A store at `dir` holding a full snapshot (chain 1, block 1) of
/// `records`, built unless it is there; the build's seconds (0 if reused).
pub async fn ensure_store(dir: &Path, records: &[AccountRecord]) -> Result<(SnapshotStore, f64)> {
    let store = SnapshotStore::open(dir)?;
    if !store.list()?.is_empty() {
        return Ok((store, 0.0));
    }
    let started = Instant::now();
    let state = ExportedState {
        chain_id: 1,
        block_number: 1,
        block_hash: None,
        state_root: None,
        block_time: None,
        kind: SnapshotKind::Full,
        source: "synthetic".into(),
        records: records.to_vec(),
        export_s: 0.0,
    };
    let building = store.clone();
    tokio::task::spawn_blocking(move || {
        let options = BuildOptions {
            progress: None,
            ..Default::default()
        };
        build_and_publish(&building, state, &options)
    })
    .await??;
    Ok((store, started.elapsed().as_secs_f64()))
}

//! What the benchmark binaries share: synthetic stores of 2^N random
//! accounts (seeded, so that a store built by one run is read by the
//! next, built once and reused), a PIR server over one on loopback, and
//! percentiles.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy_primitives::{Address, U256};
use anyhow::{ensure, Result};
use ethpir_client::ClientConfig;
use rand::{Rng, SeedableRng};
use snapshotter::pipeline::{build_and_publish, BuildOptions, ExportedState};
use snapshotter::{AccountRecord, SnapshotKind, SnapshotStore};

/// 2^`log2` random accounts, the same for the same `log2`.
pub fn accounts(log2: u32) -> Vec<AccountRecord> {
    random_accounts(1 << log2, u64::from(log2))
}

/// `count` random accounts drawn from `seed`.
pub fn random_accounts(count: u64, seed: u64) -> Vec<AccountRecord> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            AccountRecord::new(
                Address::from(rng.random::<[u8; 20]>()),
                U256::from(rng.random::<u64>()) * U256::from(1_000_000u64),
                rng.random_range(0..1000),
            )
        })
        .collect()
}

/// `count` random accounts in key order with only their key known, as
/// reth's hashed accounts table hands them over: the keys spread evenly
/// over the key space (a strictly increasing top 8 bytes, the rest
/// random), balances and nonces as [`accounts`] makes them; one in five
/// has code, one of `count / 100` codes (mainnet's order: a few million
/// codes for 3.5e8 accounts), the low numbers far more often (a few
/// templates cover most contracts). Made one at a time, so that a
/// mainnet-sized base is never held.
pub fn hashed_accounts_in_order(count: u64) -> impl Iterator<Item = AccountRecord> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(count);
    let gap = (u64::MAX / count.max(1)).max(1);
    (0..count).map(move |i| {
        let mut key = [0u8; 32];
        rng.fill(&mut key[8..]);
        let top = i * gap + rng.random_range(0..gap);
        key[..8].copy_from_slice(&top.to_be_bytes());
        let balance = U256::from(rng.random::<u64>()) * U256::from(1_000_000u64);
        let account = AccountRecord::from_hashed(key.into(), balance, rng.random_range(0..1000));
        match rng.random_range(0..5) {
            0 => {
                let u: f64 = rng.random();
                let code = ((count / 100).max(1) as f64 * u * u * u) as u64;
                let hash = alloy_primitives::keccak256(code.to_le_bytes());
                account.with_trie(hash, protocol::account::EMPTY_STORAGE_ROOT)
            }
            _ => account,
        }
    })
}

/// The keys of the contracts among [`hashed_accounts_in_order`]`(count)`
/// (one account in five), in key order.
pub fn contract_keys(count: u64) -> Vec<alloy_primitives::B256> {
    hashed_accounts_in_order(count)
        .filter(|a| a.code_hash != protocol::account::EMPTY_CODE_HASH)
        .map(|a| a.key)
        .collect()
}

/// Which contract holds the `i`th synthetic slot: skewed as mainnet's
/// storage is, a few contracts holding most slots (the index is the
/// contract count times u^8 for a uniform u: the first 0.1 % of the
/// contracts hold ~42 % of the slots, the first 1 % ~56 %).
fn slot_owner(i: u64, contracts: usize) -> usize {
    let mut x = i
        .wrapping_add(0x9e37_79b9_7f4a_7c15)
        .wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 31;
    let u = (x >> 11) as f64 / (1u64 << 53) as f64;
    ((contracts as f64 * u.powi(8)) as usize).min(contracts - 1)
}

/// `count` synthetic storage slots of `contracts` (their hashed
/// addresses), in the order a storage table walk hands them over (by
/// slot number, not by PIR key): the `i`th slot is keccak256 of `i`, its
/// value `i` + 1 times a million. Made one at a time.
pub fn synthetic_slots(
    count: u64,
    contracts: &[alloy_primitives::B256],
) -> impl Iterator<Item = protocol::storage::StorageRecord> + '_ {
    assert!(!contracts.is_empty(), "synthetic slots need a contract");
    (0..count).map(move |i| {
        let owner = contracts[slot_owner(i, contracts.len())];
        let slot = alloy_primitives::keccak256(U256::from(i).to_be_bytes::<32>());
        let value = U256::from(i + 1) * U256::from(1_000_000u64);
        protocol::storage::StorageRecord::from_hashed(owner, slot, value)
    })
}

/// A base (full snapshot, chain 1, block 1) of synthetic `records`, made
/// in `made_s` seconds.
pub fn synthetic_base(records: Vec<AccountRecord>, made_s: f64) -> ExportedState {
    ExportedState {
        chain_id: 1,
        block_number: 1,
        block_hash: None,
        state_root: None,
        block_time: None,
        parent_hash: None,
        kind: SnapshotKind::Full,
        source: "synthetic".into(),
        storage: Vec::new(),
        listed: Default::default(),
        records,
        export_s: made_s,
        codes: Vec::new(),
    }
}

/// A store at `dir` holding a full snapshot (chain 1, block 1) of the
/// records `make` returns, built unless it is there; the build's seconds
/// (0 if reused). The records are made for the build and moved into it:
/// a caller that needs them too makes its own afterwards, so that a base
/// of 2^26 accounts is never held twice during its build.
pub async fn ensure_store(
    dir: &Path,
    make: impl FnOnce() -> Vec<AccountRecord> + Send + 'static,
) -> Result<(SnapshotStore, f64)> {
    let store = SnapshotStore::open(dir)?;
    if !store.list()?.is_empty() {
        return Ok((store, 0.0));
    }
    let started = Instant::now();
    let building = store.clone();
    tokio::task::spawn_blocking(move || {
        let state = synthetic_base(make(), 0.0);
        let options = BuildOptions {
            progress: None,
            ..Default::default()
        };
        build_and_publish(&building, state, &options)
    })
    .await??;
    Ok((store, started.elapsed().as_secs_f64()))
}

/// Serves `config.store` with `ethpir-server` on a free loopback port
/// (`config.listen` is replaced) and returns its URL once it answers
/// `/healthz` with the store loaded (it loads before it listens; at most
/// 10 minutes).
pub async fn serve_store(config: server::ServerConfig) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let config = server::ServerConfig {
        listen: listener.local_addr()?,
        ..config
    };
    tokio::spawn(server::serve_on(listener, config, std::future::pending()));
    let api = api_client::ApiClient::new(reqwest::Client::new(), &base);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if api.health(Duration::from_secs(5)).await.is_ok() {
            return Ok(base);
        }
        ensure!(
            Instant::now() < deadline,
            "the server did not load the store"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server over `store_dir` (rescanned every 250 ms, as a follower's
/// store wants) and an always-on private reader of it with its cache in
/// `cache_dir`, on loopback, once the reader has loaded block 0 (at most
/// 10 minutes): the server's URL and the reader.
pub async fn serve_and_read(
    store_dir: std::path::PathBuf,
    cache_dir: std::path::PathBuf,
) -> Result<(String, Arc<ethpir_client::PrivateReader>)> {
    let server = serve_store(server::ServerConfig {
        store: store_dir,
        rescan_secs: 0.25,
        ..Default::default()
    })
    .await?;
    let reader = read_from(&server, cache_dir, None).await?;
    Ok((server, reader))
}

/// A reader of `server` (catalog looked at every 0.25 s, idle after
/// `idle_after` without reads, `None`: never), once it has loaded the base.
pub async fn read_from(
    server: &str,
    cache_dir: std::path::PathBuf,
    idle_after: Option<Duration>,
) -> Result<Arc<ethpir_client::PrivateReader>> {
    let reader = ethpir_client::PrivateReader::start(&ClientConfig {
        pir_server: server.to_string(),
        cache_dir,
        refresh: Duration::from_secs_f64(0.25),
        idle_after,
        ..Default::default()
    })
    .await?;
    ensure!(
        served(&reader, 0, Duration::from_secs(600)).await.is_some(),
        "the reader never loaded the base"
    );
    Ok(reader)
}

/// The splitmix64 finaliser: a seeded synthetic chain's values made from
/// their index, so that 2^24 of them need no table.
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Seconds until `reader` has a complete view at `block`, polled for at
/// most `limit` (`None`: not in time).
pub async fn served(
    reader: &ethpir_client::PrivateReader,
    block: u64,
    limit: Duration,
) -> Option<f64> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if reader
            .views()
            .iter()
            .any(|v| v.block == block && v.complete)
        {
            return Some(t.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// The `p` quantile (0..=1, nearest rank) of `sorted`; NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => sorted[((n as f64 - 1.0) * p).round() as usize],
    }
}

/// The CPU's model name (`/proc/cpuinfo`), for benchmark lines.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split(':')
                    .nth(1)
                    .map(|m| m.trim().to_string())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The process's resident anonymous memory (Linux `RssAnon`).
pub fn anon_rss_bytes() -> Option<u64> {
    snapshotter::pipeline::proc_status_bytes("RssAnon")
}

/// Samples `RssAnon` until dropped; the largest value seen.
pub struct AnonPeak {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl AnonPeak {
    pub fn start() -> Self {
        let (peak, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(anon_rss_bytes().unwrap_or(0), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        AnonPeak { peak, stop }
    }

    pub fn mib(&self) -> u64 {
        self.peak
            .load(Ordering::Relaxed)
            .max(anon_rss_bytes().unwrap_or(0))
            >> 20
    }
}

impl Drop for AnonPeak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The URL of `path` on the server at `base` (paths are spelled only by
/// [`protocol::routes::ApiPath`]).
pub fn url(base: &str, path: protocol::routes::ApiPath<'_>) -> String {
    format!("{base}{path}")
}

//! `ethpir-snapshot run`: build snapshots again and again, unattended.
//!
//! Every `poll_secs` the node's head is read. A build is due when the head
//! (less `confirmations`) has advanced `every_blocks` past the last snapshot,
//! or `interval_secs` have passed. One build at a time; a node outage or a
//! failed build is logged and retried with exponential backoff (capped at
//! five minutes), never fatal.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::pipeline::{build_and_publish, BuildError, BuildOptions};
use crate::sources::rpc::{RpcOptions, RpcSource, Traces};
use crate::store::{SnapshotStore, StoreError};

/// `configs/snapshotter.toml`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    pub store: PathBuf,
    pub source: SourceConfig,
    #[serde(default)]
    pub schedule: Timing,
    #[serde(default)]
    pub build: BuildConfig,
    #[serde(default)]
    pub retention: Retention,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Node URL.
    pub url: String,
    /// Blocks in the active set.
    #[serde(default = "default_window")]
    pub window: u64,
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    #[serde(default)]
    pub traces: Traces,
}

fn default_window() -> u64 {
    256
}
fn default_batch() -> usize {
    100
}
fn default_concurrency() -> usize {
    4
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timing {
    pub every_blocks: u64,
    pub interval_secs: u64,
    pub poll_secs: u64,
    pub confirmations: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            every_blocks: 64,
            interval_secs: 0,
            poll_secs: 12,
            confirmations: 2,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuildConfig {
    pub device: String,
    pub arity: u8,
    pub packing: String,
    pub hint_budget_mib: u64,
}

impl Default for BuildConfig {
    fn default() -> Self {
        BuildConfig {
            device: "auto".into(),
            arity: 3,
            packing: "auto".into(),
            hint_budget_mib: 32,
        }
    }
}

impl BuildConfig {
    pub fn options(&self) -> anyhow::Result<BuildOptions> {
        Ok(BuildOptions {
            arity: pir_core::Arity::from_u8(self.arity)
                .map_err(|e| anyhow::anyhow!("build.arity: {e}"))?,
            packing: pir_core::Packing::parse(&self.packing, self.hint_budget_mib)
                .map_err(|e| anyhow::anyhow!("build.packing: {e}"))?,
            device: self
                .device
                .parse()
                .map_err(|e: String| anyhow::anyhow!(e))?,
            progress: None,
        })
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Retention {
    /// Newest non-historical snapshots kept per chain (0: all).
    pub keep_latest: usize,
    /// Heights never removed.
    pub pinned: Vec<u64>,
}

impl ScheduleConfig {
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        Ok(protocol::config::load_toml(path)?)
    }
}

/// Wait after the `failures`-th failed step in a row: 2 s doubling, at most 5 min.
fn backoff(failures: u32) -> Duration {
    protocol::retry::backoff(
        Duration::from_secs(2),
        Duration::from_secs(300),
        failures.saturating_sub(1),
    )
}

/// One build from the config now (the cron / systemd-timer form): the
/// active set at the head less `confirmations`. Returns the block built.
pub async fn build_once(config: &ScheduleConfig) -> anyhow::Result<u64> {
    let store = SnapshotStore::open(&config.store)?;
    let node = RpcSource::connect(&config.source.url, rpc_options(config)).await?;
    let at = node
        .head()
        .await?
        .saturating_sub(config.schedule.confirmations);
    build_at(config, &store, &node, at).await?;
    Ok(at)
}

/// Exports the active set at `at`, builds, publishes, applies retention.
async fn build_at(
    config: &ScheduleConfig,
    store: &SnapshotStore,
    node: &RpcSource,
    at: u64,
) -> anyhow::Result<()> {
    let state = node.export_active(config.source.window, Some(at)).await?;
    let chain = state.chain_id;
    let opts = config.build.options()?;
    let store2 = store.clone();
    let outcome =
        tokio::task::spawn_blocking(move || build_and_publish(&store2, state, &opts)).await?;
    match outcome {
        Ok(s) => tracing::info!(snapshot = %s.id, "built"),
        Err(BuildError::Store(StoreError::Exists(id))) => {
            tracing::info!(snapshot = %id, "already built")
        }
        Err(e) => return Err(e.into()),
    }
    if config.retention.keep_latest > 0 {
        for id in store.apply_retention(
            chain,
            config.retention.keep_latest,
            &config.retention.pinned,
        )? {
            tracing::info!(snapshot = %id, "removed by retention");
        }
    }
    Ok(())
}

fn rpc_options(config: &ScheduleConfig) -> RpcOptions {
    RpcOptions {
        batch_size: config.source.batch_size,
        concurrency: config.source.concurrency,
        traces: config.source.traces,
        progress: None,
        ..Default::default()
    }
}

/// Runs until `stop` resolves.
pub async fn run(
    config: ScheduleConfig,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    config.build.options()?;
    let store = SnapshotStore::open(&config.store)?;
    let mut last_block: Option<u64> = None;
    let mut last_time: Option<Instant> = None;
    let mut failures = 0u32;
    tokio::pin!(stop);
    tracing::info!(url = %protocol::url::redact(&config.source.url), every_blocks = config.schedule.every_blocks, interval_secs = config.schedule.interval_secs, "snapshot schedule started");
    loop {
        // Stop is honoured while a step waits on the node too (an outage
        // can keep it retrying for minutes). A build already handed to a
        // blocking thread still finishes and publishes atomically.
        let outcome = tokio::select! {
            _ = &mut stop => {
                tracing::info!("schedule stopped");
                return Ok(());
            }
            outcome = step(&config, &store, &mut last_block, &mut last_time) => outcome,
        };
        let wait = match outcome {
            Ok(()) => {
                failures = 0;
                Duration::from_secs(config.schedule.poll_secs.max(1))
            }
            Err(e) => {
                failures += 1;
                let wait = backoff(failures);
                tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "snapshot step failed; will retry");
                wait
            }
        };
        tokio::select! {
            _ = &mut stop => {
                tracing::info!("schedule stopped");
                return Ok(());
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

async fn step(
    config: &ScheduleConfig,
    store: &SnapshotStore,
    last_block: &mut Option<u64>,
    last_time: &mut Option<Instant>,
) -> anyhow::Result<()> {
    let node = RpcSource::connect(&config.source.url, rpc_options(config)).await?;
    let head = node.head().await?;
    let target = head.saturating_sub(config.schedule.confirmations);
    if last_block.is_none() {
        *last_block = store
            .list()?
            .iter()
            .filter(|s| s.id.chain_id == node.chain_id && s.id.kind == protocol::KindTag::Active)
            .map(|s| s.id.block)
            .max();
    }
    let t = &config.schedule;
    let by_blocks = t.every_blocks > 0 && last_block.is_none_or(|b| target >= b + t.every_blocks);
    let by_time = t.interval_secs > 0
        && last_time.is_none_or(|at| at.elapsed() >= Duration::from_secs(t.interval_secs))
        && *last_block != Some(target);
    if !(by_blocks || by_time) {
        tracing::debug!(head, last = ?last_block, "no build due");
        return Ok(());
    }
    tracing::info!(head, block = target, "building a snapshot");
    build_at(config, store, &node, target).await?;
    *last_block = Some(target);
    *last_time = Some(Instant::now());
    Ok(())
}

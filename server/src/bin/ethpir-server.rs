//! `ethpir-server`: serve a snapshot store to PIR clients.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use server::ServerConfig;

#[derive(Parser)]
#[command(
    name = "ethpir-server",
    version,
    about = "Serve PIR snapshots of Ethereum account state",
    long_about = "Serve the snapshots of a store (made by ethpir-snapshot) to PIR clients such as ethpir-proxy.\n\n\
The server answers private queries without learning which account was read. New snapshots in the \
store are picked up without a restart (rescan), removed ones are retired once their in-flight \
queries end.\n\n\
Past one box: run several processes behind nginx (replicas, configs/nginx-ethpir.conf), or split \
a large base by rows: S processes with --shard i/S and a router with --route-to (docs/architecture.md).\n\n\
API (docs/protocol.md): GET /v1/snapshots (the catalog), GET /v1/snapshots/{id}/setup, /table, /files/{name} (with export_files), /codes/{index}, GET /v1/code/{hash}, POST /v1/query, GET /healthz, GET /metrics.\n\n\
Settings come from --config (see configs/server.toml), then from these flags."
)]
struct Cli {
    /// TOML config file (configs/server.toml documents every setting).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Snapshot store to serve.
    #[arg(long, env = "ETHPIR_STORE")]
    store: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1:8546).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Seconds between store rescans (fractions allowed, e.g. 0.5).
    #[arg(long)]
    rescan_secs: Option<f64>,
    /// Answers computed at once.
    #[arg(long)]
    workers: Option<usize>,
    /// Query batches allowed to wait; beyond that, 503.
    #[arg(long)]
    queue: Option<usize>,
    /// Serve only row shard I of S of every snapshot ("I/S", I from 0):
    /// the database is memory-mapped and only this shard's rows are read.
    /// A router (--route-to) sends this process its slices of queries.
    #[arg(long, value_name = "I/S")]
    shard: Option<String>,
    /// Be a router in front of row shards: no database is loaded, each
    /// query is split by rows among these shard servers (shard 0 first,
    /// comma-separated or repeated) and their partial answers added.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    route_to: Vec<String>,
    /// Where answers are computed: auto (each level held in GPU memory
    /// when a GPU is usable and it fits, else all CPU cores; logged per
    /// level), cpu, or cuda (a level the GPU cannot hold is not served).
    #[arg(long, value_name = "DEVICE")]
    answer_device: Option<server::AnswerDevice>,
    /// Log filter.
    #[arg(long, default_value = "info", env = "ETHPIR_LOG")]
    log: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    protocol::logging::init(&cli.log)?;
    let kernel = pir_core::kernel::init_from_env().context(pir_core::kernel::KERNEL_ENV)?;
    tracing::info!(%kernel, "PIR product kernel");
    let mut config = match &cli.config {
        Some(p) => ServerConfig::from_file(p)?,
        None => ServerConfig::default(),
    };
    if let Some(v) = cli.store {
        config.store = v;
    }
    if let Some(v) = cli.listen {
        config.listen = v;
    }
    if let Some(v) = cli.rescan_secs {
        config.rescan_secs = v;
    }
    if let Some(v) = cli.workers {
        config.workers = v;
    }
    if let Some(v) = cli.queue {
        config.queue = v;
    }
    if let Some(v) = cli.shard {
        config.shard = Some(v);
    }
    if !cli.route_to.is_empty() {
        config.router.shards = cli.route_to;
    }
    if let Some(v) = cli.answer_device {
        config.answer.device = v;
    }
    config.shard().context("--shard")?;
    check_open_files(&config);
    server::serve(config, async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    })
    .await?;
    Ok(())
}

/// Raises the open-file limit and warns when it still cannot hold the
/// catalog waits the server is set to hold, with room for other clients.
fn check_open_files(config: &ServerConfig) {
    match server::raise_open_file_limit() {
        Ok(Some(limit)) if limit < config.held_catalog_waits as u64 + 1024 => tracing::warn!(
            limit,
            held_catalog_waits = config.held_catalog_waits,
            "the open-file limit leaves little room past the held catalog waits: lower held_catalog_waits or raise the hard limit (ulimit -Hn)"
        ),
        Ok(limit) => tracing::debug!(?limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "the open-file limit could not be raised"),
    }
}

//! `serve-bench`: what the server's downloads cost it. A real
//! `ethpir-server` (in this process, on loopback) over a snapshot whose
//! setup is about `--setup-mib` MiB; `--downloads` clients fetch that
//! setup at once, streaming and discarding it, while this process's RSS is
//! sampled: the growth is what the server holds per download (the setup
//! is shared bytes, so it should not grow with the downloads). Then
//! catalog polls per second from a server with one worker thread: full
//! bodies (gzip, no ETag) and 304s (with the ETag). One JSON line.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::Parser;
use pir_core::db::{plan, EncodeOptions, Packing};
use protocol::manifest::SnapshotId;
use protocol::routes::ApiPath;
use serde_json::json;
use snapshotter::pipeline::{build_and_publish, proc_status_bytes, BuildOptions};
use snapshotter::SnapshotStore;
use system_bench::url;

#[derive(Parser)]
#[command(
    name = "serve-bench",
    about = "Server memory under concurrent setup downloads, and catalog polls per second on one core",
    long_about = "Builds a snapshot of the bundled mainnet genesis packed so that its setup is about \
--setup-mib MiB, serves it with ethpir-server on loopback, and lets --downloads clients fetch the setup at \
once (streamed and discarded) while the process's RSS is sampled every 10 ms. Then clients poll the \
catalog for --seconds against a server with one worker thread, without and with its ETag. Prints one \
JSON line."
)]
struct Args {
    /// Setup size to build, MiB.
    #[arg(long, default_value_t = 256)]
    setup_mib: u64,
    /// Concurrent downloads of the setup.
    #[arg(long, default_value_t = 64)]
    downloads: usize,
    /// Seconds of each catalog-poll run.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Concurrent pollers of the catalog.
    #[arg(long, default_value_t = 32)]
    pollers: usize,
    /// Working directory (the store is kept and reused between runs).
    #[arg(long, default_value = "./serve-bench-data")]
    dir: std::path::PathBuf,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    protocol::logging::init("warn")?;
    let store_dir = args.dir.join(format!("store-{}", args.setup_mib));
    let setup_bytes = ensure_store(&store_dir, args.setup_mib << 20)?;
    let downloads = download_run(&store_dir, setup_bytes, args.downloads).await?;
    // Runtimes of their own, on a thread of their own (not inside this one).
    let (full, not_modified) = std::thread::scope(|s| {
        let full = s.spawn(|| poll_run(&store_dir, &args, false)).join();
        let not_modified = s.spawn(|| poll_run(&store_dir, &args, true)).join();
        (full, not_modified)
    });
    let full = full.expect("poll run")?;
    let not_modified = not_modified.expect("poll run")?;
    let line = json!({
        "bench": "serve",
        "cpu": system_bench::cpu_model(),
        "setup_bytes": setup_bytes,
        "downloads": args.downloads,
        "download_s": downloads.seconds,
        "download_gbit_s": downloads.bytes as f64 * 8.0 / downloads.seconds / 1e9,
        "rss_idle_mib": downloads.idle >> 20,
        "rss_growth_mib": downloads.peak.saturating_sub(downloads.idle) >> 20,
        "catalog_polls_per_s_one_worker": full,
        "catalog_304_per_s_one_worker": not_modified,
        "pollers": args.pollers,
    });
    println!("{line}");
    Ok(())
}

/// The store with one snapshot of the mainnet genesis whose setup is at
/// least `target` bytes (built once); its setup's size.
fn ensure_store(dir: &std::path::Path, target: u64) -> Result<u64> {
    let store = SnapshotStore::open(dir)?;
    if let Some(snap) = store.list()?.first() {
        return Ok(snap.manifest.pir.hint_bytes);
    }
    let state = snapshotter::sources::genesis::mainnet();
    let keys = state.records.len();
    // The fewest partitions side by side whose hint reaches the target: a
    // wide, shallow database, quick to build.
    let k = (1..=pir_core::db::MAX_PARTITIONS)
        .find(|&k| {
            let options = EncodeOptions {
                packing: Packing::Fixed(k),
                ..Default::default()
            };
            plan(keys, protocol::account::COMPACT_VALUE_BYTES, &options)
                .is_ok_and(|p| p.hint_bytes >= target)
        })
        .context("no packing reaches that setup size")?;
    eprintln!("building the genesis with {k} partitions side by side");
    let options = BuildOptions {
        packing: Packing::Fixed(k),
        ..Default::default()
    };
    let snap = build_and_publish(&store, state, &options)?;
    Ok(snap.manifest.pir.hint_bytes)
}

/// A server over `store` on a loopback port, in this process.
async fn start_server(store: &std::path::Path) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = server::ServerConfig {
        store: store.to_path_buf(),
        listen: addr,
        ..Default::default()
    };
    tokio::spawn(server::serve_on(listener, config, std::future::pending()));
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    for _ in 0..600 {
        let listed = async {
            let v: serde_json::Value = http
                .get(url(&base, ApiPath::Catalog))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            v["snapshots"][0]["id"].as_str().map(str::to_string)
        };
        if listed.await.is_some() {
            return Ok(base);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the server did not list the snapshot within 60 s")
}

struct Downloads {
    bytes: u64,
    seconds: f64,
    idle: u64,
    peak: u64,
}

fn rss() -> u64 {
    proc_status_bytes("VmRSS").unwrap_or(0)
}

/// `n` downloads of the setup at once; RSS before and at its peak.
async fn download_run(store: &std::path::Path, setup_bytes: u64, n: usize) -> Result<Downloads> {
    let base = start_server(store).await?;
    let http = reqwest::Client::new();
    let catalog: serde_json::Value = http
        .get(url(&base, ApiPath::Catalog))
        .send()
        .await?
        .json()
        .await?;
    let id: SnapshotId = catalog["snapshots"][0]["id"]
        .as_str()
        .context("no snapshot")?
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let url = url(&base, ApiPath::Setup(&id));
    // One download first, so that the server's and this process's
    // allocations are made before the idle RSS is read.
    ensure!(fetch_discarding(&http, &url).await? == setup_bytes);
    let idle = rss();
    let peak = Arc::new(AtomicU64::new(idle));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let started = Instant::now();
    let fetches: Vec<_> = (0..n)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move { fetch_discarding(&http, &url).await })
        })
        .collect();
    let mut bytes = 0;
    for f in fetches {
        let got = f.await??;
        ensure!(got == setup_bytes, "a download of {got} bytes");
        bytes += got;
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    Ok(Downloads {
        bytes,
        seconds,
        idle,
        peak: peak.load(Ordering::Relaxed),
    })
}

/// Streams `url`'s body, keeping none of it; its length.
async fn fetch_discarding(http: &reqwest::Client, url: &str) -> Result<u64> {
    let mut resp = http.get(url).send().await?.error_for_status()?;
    let mut bytes = 0;
    while let Some(chunk) = resp.chunk().await? {
        bytes += chunk.len() as u64;
    }
    Ok(bytes)
}

/// Catalog polls per second for `args.seconds` from `args.pollers`
/// clients, against a server on a runtime of one worker thread (with its
/// ETag: 304s).
fn poll_run(store: &std::path::Path, args: &Args, with_etag: bool) -> Result<f64> {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let base = server_rt.block_on(start_server(store))?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let polls = client_rt.block_on(async {
        let http = reqwest::Client::new();
        let url = url(&base, ApiPath::Catalog);
        let etag = http
            .get(&url)
            .send()
            .await?
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .context("no ETag")?;
        let until = Instant::now() + Duration::from_secs_f64(args.seconds);
        let pollers: Vec<_> = (0..args.pollers)
            .map(|_| {
                let (http, url, etag) = (http.clone(), url.clone(), etag.clone());
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < until {
                        // Gzip asked for as proxies ask; the body is
                        // read, not decompressed (the server's cost).
                        let mut req = http.get(&url).header("accept-encoding", "gzip");
                        if with_etag {
                            req = req.header("if-none-match", &etag);
                        }
                        let resp = req.send().await?;
                        let want = if with_etag { 304 } else { 200 };
                        ensure!(resp.status().as_u16() == want, "{}", resp.status());
                        resp.bytes().await?;
                        n += 1;
                    }
                    Ok::<u64, anyhow::Error>(n)
                })
            })
            .collect();
        let mut total = 0;
        for p in pollers {
            total += p.await??;
        }
        Ok::<u64, anyhow::Error>(total)
    })?;
    drop(server_rt);
    Ok(polls as f64 / args.seconds)
}

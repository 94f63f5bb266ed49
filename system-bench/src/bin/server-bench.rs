//! `server-bench`: server throughput under concurrent wallets. W wallets
//! each send single lookups (one query, one request) to `POST /v1/query`
//! of a real `ethpir-server` on loopback, back to back, for a fixed time,
//! with batching across requests on and off; one JSON line per run.
//!
//! The queries are prepared before the clock starts (preparation is the
//! wallet's cost, not the server's): a few distinct ones, each checked once
//! by decoding its answer, and every answer in the timed runs is checked
//! to be byte-for-byte that answer (the server's answer is a deterministic
//! function of the query).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::{Parser, ValueEnum};
use pir_core::{Lookup, PirClient};
use protocol::routes::ApiPath;
use rand::SeedableRng;
use serde_json::json;
use snapshotter::AccountRecord;
use system_bench::url;

#[derive(Parser)]
#[command(
    name = "server-bench",
    about = "Lookups per second and latency of ethpir-server under W concurrent wallets, batching on and off",
    long_about = "Builds (once) a store of 2^N random accounts, or takes an existing one (--store), serves it \
with ethpir-server on loopback, \
and lets W wallets send single lookups through the real HTTP route for --seconds, with batching across \
requests on, off or both. Prints one JSON line per run: lookups/s, p50/p99 latency, a lone lookup's latency, \
and the passes the server made."
)]
struct Args {
    /// log2 of the number of accounts.
    #[arg(long, default_value_t = 22)]
    log2_accounts: u32,
    /// Concurrent wallets.
    #[arg(long, default_value_t = 64)]
    wallets: usize,
    /// Seconds of each timed run.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Batching across requests.
    #[arg(long, value_enum, default_value_t = Batching::Both)]
    batching: Batching,
    /// The batching window, ms (server setting batching.window_ms).
    #[arg(long, default_value_t = 0.0)]
    window_ms: f64,
    /// Most queries in one pass (server setting batching.max_queries).
    #[arg(long, default_value_t = 256)]
    max_queries: usize,
    /// Distinct prepared queries the wallets share.
    #[arg(long, default_value_t = 8)]
    distinct_queries: usize,
    /// Measure servers already running at this URL (replicas behind nginx,
    /// a router in front of row shards) instead of starting one; they must
    /// serve the store this command builds under --dir. One run, with the
    /// servers' own batching settings.
    #[arg(long)]
    url: Option<String>,
    /// A name for what --url measures, copied into the JSON line.
    #[arg(long, default_value = "")]
    setup: String,
    /// Build the store under --dir, print its path and exit (to start the
    /// servers that --url measures).
    #[arg(long)]
    build_only: bool,
    /// Working directory (stores are kept and reused between runs).
    #[arg(long, default_value = "./server-bench-data")]
    dir: std::path::PathBuf,
    /// Serve this existing store instead of building 2^N accounts (e.g. a
    /// mainnet-sized base that `build-bench --accounts 350000000 --streamed
    /// --keep` made); the lookups are accounts sampled from its newest
    /// snapshot's records.bin, read in place.
    #[arg(long, conflicts_with_all = ["url", "build_only"])]
    store: Option<std::path::PathBuf>,
    /// Where the started server answers (server setting answer.device):
    /// one run per device named, e.g. `cpu,cuda` on a GPU machine.
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    answer_device: Vec<server::AnswerDevice>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Batching {
    On,
    Off,
    Both,
}

/// A prepared lookup: the request body and the answer it must get.
struct Lookup1 {
    body: Vec<u8>,
    answer: Vec<u8>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let (store_dir, build_s) = match &args.store {
        Some(dir) => (dir.clone(), 0.0),
        None => {
            let store_dir = args.dir.join(format!("store-{}", args.log2_accounts));
            let log2 = args.log2_accounts;
            let (_store, build_s) =
                system_bench::ensure_store(&store_dir, move || system_bench::accounts(log2))
                    .await?;
            (store_dir, build_s)
        }
    };
    if args.build_only {
        println!("{}", store_dir.display());
        return Ok(());
    }
    let records = sampled_accounts(&store_dir, args.distinct_queries)?;
    if let Some(url) = &args.url {
        let mut line = measure(&args, url, &records).await?;
        line["setup"] = json!(args.setup);
        line["batching"] = json!("as the servers are set");
        println!("{line}");
        return Ok(());
    }
    let modes = match args.batching {
        Batching::On => vec![true],
        Batching::Off => vec![false],
        Batching::Both => vec![false, true],
    };
    for &device in &args.answer_device {
        for &enabled in &modes {
            let settings = server::BatchSettings {
                enabled,
                window_ms: args.window_ms,
                max_queries: args.max_queries,
            };
            let mut line = run(&args, &store_dir, &records, settings, device).await?;
            line["build_s"] = json!(build_s);
            println!("{line}");
        }
    }
    Ok(())
}

/// One timed run against a fresh server with `batching`.
async fn run(
    args: &Args,
    store_dir: &std::path::Path,
    records: &[AccountRecord],
    batching: server::BatchSettings,
    device: server::AnswerDevice,
) -> Result<serde_json::Value> {
    let base = start_server(store_dir, batching, device).await?;
    let mut line = measure(args, &base, records).await?;
    line["batching"] = json!(batching.enabled);
    line["answer_device"] = json!(format!("{device:?}").to_lowercase());
    line["window_ms"] = json!(batching.window_ms);
    line["max_queries"] = json!(batching.max_queries);
    Ok(line)
}

/// W wallets against the server at `base` for `args.seconds`.
async fn measure(args: &Args, base: &str, records: &[AccountRecord]) -> Result<serde_json::Value> {
    let base = base.trim_end_matches('/').to_string();
    let http = reqwest::Client::new();
    let lookups = Arc::new(prepare(&http, &base, records).await?);
    let lone = lone_latency_ms(&http, &base, &lookups).await?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let wallets: Vec<_> = (0..args.wallets)
        .map(|w| {
            let (http, base, lookups) = (http.clone(), base.clone(), lookups.clone());
            tokio::spawn(async move { wallet(&http, &base, &lookups, w, deadline).await })
        })
        .collect();
    let mut ms = Vec::new();
    for w in wallets {
        ms.extend(w.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    ms.sort_by(f64::total_cmp);
    let metrics = http
        .get(url(&base, ApiPath::Metrics))
        .send()
        .await?
        .text()
        .await?;
    let passes = metric(&metrics, "ethpir_pass_queries_count");
    let queries = metric(&metrics, "ethpir_pass_queries_sum");
    let gpu_passes = metric(&metrics, "ethpir_passes_total{device=\"cuda\"}");
    let gpu_fallbacks = metric(&metrics, "ethpir_gpu_fallbacks_total");
    Ok(json!({
        "bench": "server-throughput",
        "accounts": catalog_accounts(&http, &base).await?,
        "wallets": args.wallets,
        "seconds": elapsed,
        "lookups": ms.len(),
        "lookups_per_s": ms.len() as f64 / elapsed,
        "p50_ms": system_bench::percentile(&ms, 0.5),
        "p99_ms": system_bench::percentile(&ms, 0.99),
        "lone_lookup_ms": lone,
        "passes": passes,
        "mean_queries_per_pass": queries / passes.max(1.0),
        "gpu_passes": gpu_passes,
        "gpu_fallbacks": gpu_fallbacks,
        "cpu": system_bench::cpu_model(),
        "cores": std::thread::available_parallelism().map(usize::from).unwrap_or(1),
        "kernel": pir_core::kernel::active().name(),
    }))
}

/// A server over `store_dir` with `batching`, once it serves.
async fn start_server(
    store_dir: &std::path::Path,
    batching: server::BatchSettings,
    device: server::AnswerDevice,
) -> Result<String> {
    system_bench::serve_store(server::ServerConfig {
        store: store_dir.to_path_buf(),
        queue: 4096,
        batching,
        answer: server::AnswerSettings {
            device,
            ..Default::default()
        },
        ..Default::default()
    })
    .await
}

/// A lookup of each of `records`, each answered once and decoded: the
/// answer must be the account's record.
async fn prepare(
    http: &reqwest::Client,
    base: &str,
    records: &[AccountRecord],
) -> Result<Vec<Lookup1>> {
    let id = catalog(http, base)
        .await?
        .snapshots
        .first()
        .context("the server serves no snapshot (did the store load?)")?
        .id;
    let setup = http
        .get(url(base, ApiPath::Setup(&id)))
        .send()
        .await?
        .bytes()
        .await?;
    let client = PirClient::from_setup_bytes(&setup)?;
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let mut out = Vec::with_capacity(records.len());
    for (i, record) in records.iter().enumerate() {
        let (query, pending) = client.query(client.prepare(&mut rng), record.key.as_slice())?;
        let batch = pir_core::wire::encode_queries(&[query]);
        let body = protocol::multi::encode_request(&[(&id.url_form(), &batch[..])])?;
        let answer = post(http, base, &body).await?;
        let parts = protocol::multi::decode_response(&answer)?;
        let response = &pir_core::wire::decode_responses(parts[0])?[0];
        let Lookup::Found(value) = client.decode(pending, response)? else {
            anyhow::bail!("account {i} not found");
        };
        ensure!(
            snapshotter::decode_value(&value, snapshotter::ValueLayout::WithCode)?.balance_nonce()
                == (record.balance, record.nonce),
            "wrong answer for account {i}"
        );
        out.push(Lookup1 { body, answer });
    }
    Ok(out)
}

async fn post(http: &reqwest::Client, base: &str, body: &[u8]) -> Result<Vec<u8>> {
    let resp = http
        .post(url(base, ApiPath::Query))
        .body(body.to_vec())
        .send()
        .await?;
    ensure!(
        resp.status().is_success(),
        "query refused: {}",
        resp.status()
    );
    Ok(resp.bytes().await?.to_vec())
}

/// The median latency of 20 lookups sent one at a time (no other load).
async fn lone_latency_ms(http: &reqwest::Client, base: &str, lookups: &[Lookup1]) -> Result<f64> {
    let mut ms = Vec::new();
    for i in 0..20 {
        let lookup = &lookups[i % lookups.len()];
        let t = Instant::now();
        ensure!(
            post(http, base, &lookup.body).await? == lookup.answer,
            "wrong answer"
        );
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    Ok(system_bench::percentile(&ms, 0.5))
}

/// One wallet: lookups back to back until `deadline`; their latencies, ms.
async fn wallet(
    http: &reqwest::Client,
    base: &str,
    lookups: &[Lookup1],
    w: usize,
    deadline: Instant,
) -> Result<Vec<f64>> {
    let mut ms = Vec::new();
    let mut i = w;
    while Instant::now() < deadline {
        let lookup = &lookups[i % lookups.len()];
        let t = Instant::now();
        let answer = post(http, base, &lookup.body).await?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        ensure!(answer == lookup.answer, "wallet {w}: a wrong answer");
        i += 1;
    }
    Ok(ms)
}

/// `count` accounts spread over the newest snapshot of the store at
/// `dir` (built here or given with --store): its records.bin checked
/// against its digest and read in place, so that the accounts are never
/// made or held again.
fn sampled_accounts(dir: &std::path::Path, count: usize) -> Result<Vec<AccountRecord>> {
    ensure!(dir.is_dir(), "{} is not a store's directory", dir.display());
    let store = snapshotter::SnapshotStore::open(dir)?;
    let snap = store
        .list()?
        .pop()
        .with_context(|| format!("{} holds no snapshot", dir.display()))?;
    let mapped = store.map_checked(&snap, snapshotter::store::RECORDS_FILE)?;
    let records = snapshotter::records::RecordsFile::new((*mapped).as_ref())?;
    let total = records.accounts();
    ensure!(total > 0, "the snapshot holds no accounts");
    // Spread evenly over the accounts (in key order), at least one.
    let count = count.clamp(1, total);
    Ok((0..count)
        .map(|i| records.account(i * (total / count) + total / (2 * count)))
        .collect())
}

/// The server's catalog.
async fn catalog(http: &reqwest::Client, base: &str) -> Result<server::api::Catalog> {
    Ok(http
        .get(url(base, ApiPath::Catalog))
        .send()
        .await?
        .json()
        .await?)
}

/// The records of the snapshot the server serves (from its catalog).
async fn catalog_accounts(http: &reqwest::Client, base: &str) -> Result<u64> {
    Ok(catalog(http, base)
        .await?
        .snapshots
        .first()
        .map_or(0, |s| s.manifest.record_count))
}

/// A metric's value in Prometheus text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

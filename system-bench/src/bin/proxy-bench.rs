//! `proxy-bench`: eth_getBalance latency through the real proxy and PIR
//! server on loopback, over a store of 2^N random accounts. Prints JSON.
//!
//! Measures: the first private answer after the proxy starts (with an empty
//! setup cache, and again with the setup cached), then the latency of
//! `--calls` eth_getBalance calls, back to back and spaced by `--gap-ms`
//! (a wallet's pace, which lets the prepared-query pool refill).
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use alloy_primitives::Address;
use anyhow::Result;
use clap::Parser;
use rand::{Rng, SeedableRng};
use serde_json::json;
use snapshotter::AccountRecord;

#[derive(Parser)]
#[command(
    name = "proxy-bench",
    about = "Latency of private eth_getBalance through ethpir-proxy and ethpir-server on loopback"
)]
struct Args {
    /// log2 of the number of accounts.
    #[arg(long, default_value_t = 20)]
    log2_accounts: u32,
    /// Calls per measurement.
    #[arg(long, default_value_t = 200)]
    calls: usize,
    /// Pause between spaced calls, ms.
    #[arg(long, default_value_t = 100)]
    gap_ms: u64,
    /// Working directory (store and caches; reused between runs).
    #[arg(long, default_value = "./proxy-bench-data")]
    dir: std::path::PathBuf,
}

async fn call(http: &reqwest::Client, url: &str, address: &Address) -> Result<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance", "params": [format!("{address:#x}"), "latest"]});
    let v: serde_json::Value = serde_json::from_slice(
        &http
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?
            .bytes()
            .await?,
    )?;
    v["result"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("error reply: {v}"))
}

async fn start_proxy(server: &str, cache: &std::path::Path) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let config = proxy::ProxyConfig {
        listen: addr,
        pir_server: server.to_string(),
        cache_dir: cache.to_path_buf(),
        ..Default::default()
    };
    tokio::spawn(proxy::serve_on(listener, config, std::future::pending()));
    Ok(format!("http://{addr}"))
}

/// Time from starting a proxy to its first correct private answer.
async fn first_answer(
    http: &reqwest::Client,
    server: &str,
    cache: &std::path::Path,
    who: &AccountRecord,
) -> Result<f64> {
    let started = Instant::now();
    let url = start_proxy(server, cache).await?;
    loop {
        if let Ok(v) = call(http, &url, &who.address.unwrap()).await {
            anyhow::ensure!(v == format!("{:#x}", who.balance), "wrong first answer");
            return Ok(started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn latencies(
    http: &reqwest::Client,
    url: &str,
    records: &[AccountRecord],
    calls: usize,
    gap: Duration,
    rng: &mut impl Rng,
) -> Result<serde_json::Value> {
    let mut ms = Vec::with_capacity(calls);
    for _ in 0..calls {
        let r = &records[rng.random_range(0..records.len())];
        let t = Instant::now();
        let v = call(http, url, &r.address.unwrap()).await?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(v == format!("{:#x}", r.balance), "wrong balance");
        tokio::time::sleep(gap).await;
    }
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(
        json!({"calls": calls, "gap_ms": gap.as_millis() as u64, "p50_ms": system_bench::percentile(&ms, 0.5), "p99_ms": system_bench::percentile(&ms, 0.99), "max_ms": ms[ms.len() - 1]}),
    )
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let store_dir = args.dir.join(format!("store-{}", args.log2_accounts));
    let log2 = args.log2_accounts;
    let (store, build_s) =
        system_bench::ensure_store(&store_dir, move || system_bench::accounts(log2)).await?;
    let records = system_bench::accounts(args.log2_accounts);
    let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(args.log2_accounts));
    let server = system_bench::serve_store(server::ServerConfig {
        store: store_dir.clone(),
        ..Default::default()
    })
    .await?;
    let http = reqwest::Client::new();

    let cache = args.dir.join(format!("cache-{}", args.log2_accounts));
    let _ = std::fs::remove_dir_all(&cache);
    let cold = first_answer(&http, &server, &cache, &records[0]).await?;
    let warm = first_answer(&http, &server, &cache, &records[1]).await?;
    let url = start_proxy(&server, &cache).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spaced = latencies(
        &http,
        &url,
        &records,
        args.calls,
        Duration::from_millis(args.gap_ms),
        &mut rng,
    )
    .await?;
    let back_to_back =
        latencies(&http, &url, &records, args.calls, Duration::ZERO, &mut rng).await?;
    let manifest = &store.list()?[0].manifest;
    println!(
        "{}",
        json!({
            "log2_accounts": args.log2_accounts,
            "k": manifest.pir.partitions,
            "setup_bytes": manifest.pir.hint_bytes,
            "query_bytes": manifest.pir.query_bytes,
            "response_bytes": manifest.pir.response_bytes,
            "build_s": build_s,
            "first_answer_cold_cache_s": cold,
            "first_answer_cached_setup_s": warm,
            "spaced": spaced,
            "back_to_back": back_to_back,
        })
    );
    Ok(())
}

//! A hostile PIR server cannot hurt the proxy: an endless chunked catalog,
//! an endless setup, a query response of 1 GiB (declared, and chunked), a
//! server that sends one byte a second and a response of the wrong size
//! each give a clear error within the configured bounds; the process's RSS
//! stays within 64 MiB of its idle RSS; and the proxy answers another
//! client's `eth_chainId` while the hostile request is in flight.
//!
//! One test, scenarios in turn, so that nothing else in this process
//! moves its RSS.

use crate::common;

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use common::*;
use serde_json::{json, Value};

/// What the hostile front does to one route; everything else it relays
/// from an honest server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sabotage {
    Honest,
    EndlessCatalog,
    EndlessSetup,
    DeclaredHugeQuery,
    ChunkedHugeQuery,
    SlowQuery,
    ShortQuery,
}

#[derive(Clone)]
struct Front {
    honest: String,
    http: reqwest::Client,
    sabotage: Sabotage,
}

const GIB: u64 = 1 << 30;

/// `total` bytes (forever when `None`) in 64 KiB chunks.
fn stream_of(total: Option<u64>) -> Body {
    let chunk = Bytes::from(vec![b'7'; 64 << 10]);
    let chunks = futures_util::stream::unfold(0u64, move |sent| {
        let chunk = chunk.clone();
        async move {
            if total.is_some_and(|t| sent >= t) {
                return None;
            }
            Some((
                Ok::<_, std::io::Error>(chunk.clone()),
                sent + chunk.len() as u64,
            ))
        }
    });
    Body::from_stream(chunks)
}

async fn serve(State(front): State<Front>, method: Method, uri: Uri, body: Bytes) -> Response {
    let path = uri.path().to_string();
    let (is_catalog, is_setup, is_query) = (
        path == "/v1/snapshots",
        path.ends_with("/setup"),
        path == "/v1/query",
    );
    match front.sabotage {
        Sabotage::EndlessCatalog if is_catalog => return stream_of(None).into_response(),
        Sabotage::EndlessSetup if is_setup => return stream_of(None).into_response(),
        Sabotage::DeclaredHugeQuery if is_query => {
            let mut r = stream_of(Some(GIB)).into_response();
            r.headers_mut().insert(header::CONTENT_LENGTH, GIB.into());
            return r;
        }
        Sabotage::ChunkedHugeQuery if is_query => return stream_of(Some(GIB)).into_response(),
        _ => {}
    }
    let (status, bytes) = relay_to(&front.http, &front.honest, method, &uri, body).await;
    match front.sabotage {
        Sabotage::SlowQuery if is_query => (status, trickle(bytes)).into_response(),
        Sabotage::ShortQuery if is_query => {
            (status, bytes.slice(..bytes.len() - 1)).into_response()
        }
        _ => (status, bytes).into_response(),
    }
}

async fn start_front(honest: &str, sabotage: Sabotage) -> String {
    let front = Front {
        honest: honest.to_string(),
        http: reqwest::Client::new(),
        sabotage,
    };
    let app = Router::new().fallback(serve).with_state(front);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A proxy of its own in front of `front`, with a 10-s request timeout
/// and a 16 MiB setup limit (the bounds under test; the download timeout
/// is long so that a loaded machine still meets the size limit first).
async fn start_bounded_proxy(front: &str, cache: &std::path::Path) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = proxy::ProxyConfig {
        listen: addr,
        pir_server: front.to_string(),
        cache_dir: cache.to_path_buf(),
        refresh_secs: 0.5,
        connect_timeout_secs: 10,
        request_timeout_secs: 10,
        download_timeout_secs: 60,
        limits: proxy::config::Limits {
            max_setup_mib: 16,
            ..Default::default()
        },
        ..Default::default()
    };
    tokio::spawn(proxy::serve_on(listener, config, std::future::pending()));
    format!("http://{addr}")
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

async fn call(proxy: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    test_support::rpc_raw(&reqwest::Client::new(), proxy, &body.to_string()).await
}

/// The balance of `address` through a proxy in front of a front with
/// `sabotage`; meanwhile another client's eth_chainId must be answered.
async fn scenario(honest: &str, sabotage: Sabotage, address: &str) -> (Value, Duration) {
    let front = start_front(honest, sabotage).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_bounded_proxy(&front, cache.path()).await;
    // The proxy listens before its first catalog fetch ends; a read at a
    // block hash no view has makes no query and says when the fetch is
    // over (the reason is in the error's data).
    let fetched = || async {
        let nowhere = json!({"blockHash": format!("0x{:064x}", 1)});
        let v = call(&proxy, "eth_getBalance", json!([address, nowhere])).await;
        (!v["error"].to_string().contains("not fetched yet")).then_some(())
    };
    test_support::eventually("the first catalog fetch ends", fetched).await;
    let started = Instant::now();
    let lookup = {
        let (proxy, address) = (proxy.clone(), address.to_string());
        tokio::spawn(async move { call(&proxy, "eth_getBalance", json!([address, "0x0"])).await })
    };
    let other = tokio::time::timeout(
        test_support::PATIENCE,
        call(&proxy, "eth_chainId", json!([])),
    )
    .await
    .unwrap_or_else(|_| panic!("{sabotage:?}: eth_chainId not answered meanwhile"));
    assert!(
        other.get("result").is_some() || other.get("error").is_some(),
        "{sabotage:?}: {other}"
    );
    let answer = lookup.await.unwrap();
    (answer, started.elapsed())
}

/// Runs [`hostile_scenarios`] in a process of its own with one malloc
/// arena. RSS is the measure of what the proxy holds; glibc's per-thread
/// arenas (and its sliding mmap threshold) would otherwise keep memory
/// that one thread freed out of the reach of the next thread's
/// allocations, and the sum of those leftovers over the scenarios is the
/// allocator's policy, not the proxy's.
#[test]
fn a_hostile_server_gets_a_clear_error_and_never_the_memory() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_path(module_path!(), "hostile_scenarios")])
        .args(["--ignored", "--nocapture"])
        .env("MALLOC_ARENA_MAX", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    eprintln!("{text}");
    assert!(out.status.success(), "the scenarios failed");
    assert!(text.contains("1 passed"), "the scenarios did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "run by a_hostile_server_gets_a_clear_error_and_never_the_memory, in a process of its own"]
async fn hostile_scenarios() {
    let dir = tempfile::tempdir().unwrap();
    let honest = start_genesis_server(dir.path()).await;
    let (address, wei) = genesis_balances().swap_remove(0);

    // Warm: an honest lookup, so that the server's and the proxy's
    // allocations are made before the idle RSS is read.
    let (v, _) = scenario(&honest, Sabotage::Honest, &address).await;
    assert_eq!(v["result"], Value::String(wei), "{v}");
    let idle = rss_bytes();

    // (sabotage, expected error code, words the message must hold)
    let cases: [(Sabotage, i64, &str); 6] = [
        (Sabotage::EndlessCatalog, -32003, "catalog: over the limit"),
        (Sabotage::EndlessSetup, -32004, "setup: over the limit"),
        (Sabotage::DeclaredHugeQuery, -32004, "over the limit"),
        (Sabotage::ChunkedHugeQuery, -32004, "over the limit"),
        (Sabotage::SlowQuery, -32003, "not received within 10 s"),
        (Sabotage::ShortQuery, -32004, "where exactly"),
    ];
    for (sabotage, code, words) in cases {
        let (v, took) = scenario(&honest, sabotage, &address).await;
        let text = v["error"].to_string();
        assert_eq!(v["error"]["code"], code, "{sabotage:?}: {v}");
        assert!(text.contains(words), "{sabotage:?}: {text}");
        let grown = rss_bytes().saturating_sub(idle);
        assert!(
            grown <= 64 << 20,
            "{sabotage:?}: RSS grew by {} MiB",
            grown >> 20
        );
        eprintln!(
            "{sabotage:?}: {text} after {:.1} s, RSS +{} MiB",
            took.as_secs_f64(),
            grown >> 20
        );
    }
}

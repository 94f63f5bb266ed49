//! The traffic shape the PIR server sees: with padding P every query batch
//! holds exactly P queries, whatever the wallet asks; cover lookups arrive
//! at the configured rate while the wallet is idle.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use common::*;
use pir_core::wire::decode_responses;
use serde_json::{json, Value};
use test_support::rpc_raw;

/// A relay that records the size of every query batch the server answers.
fn batch_sizes() -> (Rewrite, Arc<Mutex<Vec<usize>>>) {
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = sizes.clone();
    let rewrite: Rewrite = Arc::new(move |path: &str, b: Bytes| {
        if path.ends_with("/query") {
            // Each snapshot's batch in the multi-snapshot response.
            let parts = protocol::multi::decode_response(&b).unwrap_or_default();
            let mut seen = seen.lock().unwrap();
            for part in parts {
                seen.push(decode_responses(part).map(|r| r.len()).unwrap_or(0));
            }
        }
        b
    });
    (rewrite, sizes)
}

/// A proxy with `config` behind a batch-size recorder, its snapshots
/// loaded and the recorder emptied.
async fn counted_proxy(
    server: &str,
    cache: &std::path::Path,
    config: proxy::ProxyConfig,
) -> (String, Arc<Mutex<Vec<usize>>>) {
    let (rewrite, sizes) = batch_sizes();
    let (link, _) = start_relay(server, rewrite).await;
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: link,
        cache_dir: cache.to_path_buf(),
        ..config
    })
    .await;
    view_reaches(&proxy, 0).await;
    sizes.lock().unwrap().clear();
    (proxy, sizes)
}

fn addresses(n: usize) -> Vec<String> {
    genesis_balances()
        .into_iter()
        .take(n)
        .map(|(a, _)| a)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn padded_batches_and_cover_lookups() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let http = reqwest::Client::new();

    // Padding to 3: single calls, a JSON-RPC batch of 5 and of 2.
    let cache = tempfile::tempdir().unwrap();
    let padded = proxy::ProxyConfig {
        pad_batches_to: 3,
        ..Default::default()
    };
    let (proxy, sizes) = counted_proxy(&server, cache.path(), padded).await;
    let who = addresses(5);
    for a in &who[..2] {
        let v = test_support::rpc(&proxy, "eth_getBalance", json!([a, "latest"])).await;
        assert!(v.is_ok(), "{v:?}");
    }
    for n in [5, 2] {
        let calls: Vec<Value> = who[..n]
            .iter()
            .enumerate()
            .map(|(i, a)| json!({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance", "params": [a, "0x0"]}))
            .collect();
        let answers = rpc_raw(&http, &proxy, &Value::Array(calls).to_string()).await;
        let answers = answers.as_array().unwrap();
        assert_eq!(answers.len(), n);
        assert!(
            answers.iter().all(|a| a.get("result").is_some()),
            "{answers:?}"
        );
    }
    let seen = sizes.lock().unwrap().clone();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|&n| n == 3), "batch sizes {seen:?}");

    // Cover lookups at 4 per second while the wallet is idle: they come
    // by themselves, each the size of a real lookup of one address (its
    // query and the canaries; a count over a fixed time would depend on
    // how loaded the machine is).
    let cache = tempfile::tempdir().unwrap();
    let covered = proxy::ProxyConfig {
        cover_lookups_per_hour: 4.0 * 3600.0,
        ..Default::default()
    };
    let (_idle_proxy, sizes) = counted_proxy(&server, cache.path(), covered).await;
    let four = || async { (sizes.lock().unwrap().len() >= 4).then_some(()) };
    test_support::eventually("4 cover lookups from an idle proxy", four).await;
    let one_lookup = 1 + proxy::ProxyConfig::default().canaries_per_request;
    assert!(sizes.lock().unwrap().iter().all(|&n| n == one_lookup));
}

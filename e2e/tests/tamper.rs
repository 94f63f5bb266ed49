//! A PIR server that lies, behind a tampering relay (a real HTTP middleman):
//! whatever it changes in a response, in any partition, the proxy never
//! answers a wrong balance; after the first failure it detects it sends no
//! further private query to that server, answers every private call with
//! the same error and sends nothing upstream, even with the private
//! fallback switched on.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use common::*;
use pir_core::wire::{decode_responses, encode_responses, SetupData};
use pir_core::{DbShape, Response};
use serde_json::{json, Value};
use test_support::rpc_raw;

/// The genesis snapshot behind a PIR server; its shape.
async fn genesis_server(dir: &std::path::Path) -> (String, DbShape) {
    let server = start_genesis_server(dir).await;
    let setup = reqwest::get(format!("{server}/v1/snapshots/1-0-full/setup"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let shape = SetupData::from_bytes(&setup).unwrap().shape;
    (server, shape)
}

/// A relay that rewrites every query response with `edit` (given its
/// query's position in its snapshot's batch; the response checksum
/// recomputed) and counts the queries that reach the server.
fn rewriting(
    edit: impl Fn(usize, &mut Response) + Send + Sync + 'static,
    queries: Arc<AtomicUsize>,
) -> Rewrite {
    Arc::new(move |path: &str, b: Bytes| {
        if !path.ends_with("/query") {
            return b;
        }
        queries.fetch_add(1, Ordering::SeqCst);
        // Every snapshot's answers in the multi-snapshot response.
        let Ok(parts) = protocol::multi::decode_response(&b) else {
            return b;
        };
        let edited: Vec<Vec<u8>> = parts
            .iter()
            .map(|part| match decode_responses(part) {
                Ok(mut rs) => {
                    rs.iter_mut().enumerate().for_each(|(i, r)| edit(i, r));
                    encode_responses(&rs)
                }
                Err(_) => part.to_vec(),
            })
            .collect();
        Bytes::from(protocol::multi::encode_response(&edited))
    })
}

/// Adds `by` to every element of partition `p`'s columns.
fn shift_partition(
    shape: &DbShape,
    p: usize,
    by: u32,
) -> impl Fn(usize, &mut Response) + Send + Sync {
    let w = shape.record_elems();
    move |_, r: &mut Response| {
        for e in &mut r.elems[p * w..(p + 1) * w] {
            *e = e.wrapping_add(by);
        }
    }
}

/// Every 997th genesis account.
fn genesis_accounts() -> Vec<(String, String)> {
    genesis_balances().into_iter().step_by(997).collect()
}

async fn balance(proxy: &str, address: &str) -> Value {
    let http = reqwest::Client::new();
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance", "params": [address, "0x0"]});
    rpc_raw(&http, proxy, &body.to_string()).await
}

/// A proxy behind `rewrite`, with a recording upstream and the private
/// fallback on.
async fn tampered_proxy(
    server: &str,
    rewrite: Rewrite,
    cache: &std::path::Path,
    limits: proxy::config::Limits,
) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let (link, _) = start_relay(server, rewrite).await;
    // The upstream: a recorder in front of the PIR server (it answers no
    // JSON-RPC; only what reaches it matters). It cannot confirm a view,
    // so views are read unconfirmed (what is tested here is the PIR
    // server's answers).
    let (upstream, upstream_saw) = start_relay(server, passthrough()).await;
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: link,
        upstream: Some(upstream),
        cache_dir: cache.to_path_buf(),
        limits,
        private_fallback_to_upstream: true,
        read_unconfirmed_views: true,
        ..Default::default()
    })
    .await;
    (proxy, upstream_saw)
}

/// Whether a private method (a read naming an address) reached the
/// upstream. The proxy's block-hash checks (`eth_getBlockByNumber`) name
/// no address and may.
fn private_upstream(saw: &[String]) -> bool {
    let private = [
        "eth_getBalance",
        "eth_getTransactionCount",
        "eth_getStorageAt",
        "eth_call",
    ];
    saw.iter().any(|m| private.contains(&m.as_str()))
}

/// After the first detected failure: every private call gets -32004, no
/// query reaches the server and nothing goes upstream.
async fn assert_fails_closed(
    proxy: &str,
    queries: &AtomicUsize,
    upstream_saw: &std::sync::Mutex<Vec<String>>,
    case: &str,
) {
    let accounts = genesis_accounts();
    let first = balance(proxy, &accounts[0].0).await;
    assert_eq!(first["error"]["code"], -32004, "{case}: {first}");
    let sent = queries.load(Ordering::SeqCst);
    let mut reasons = Vec::new();
    for (a, _) in accounts.iter().take(4) {
        let v = balance(proxy, a).await;
        assert!(
            v.get("result").is_none(),
            "{case}: a balance after a failure: {v}"
        );
        assert_eq!(v["error"]["code"], -32004, "{case}: {v}");
        reasons.push(v["error"].clone());
    }
    // One stable error, whatever the address.
    assert!(
        reasons.windows(2).all(|w| w[0] == w[1]),
        "{case}: {reasons:?}"
    );
    // A block with no snapshot: the same error, not a fallback upstream.
    let http = reqwest::Client::new();
    let other_block = json!({"jsonrpc": "2.0", "id": 2, "method": "eth_getBalance", "params": [accounts[0].0, "0x10"]});
    let v = rpc_raw(&http, proxy, &other_block.to_string()).await;
    assert_eq!(v["error"]["code"], -32004, "{case}: {v}");
    assert_eq!(
        queries.load(Ordering::SeqCst),
        sent,
        "{case}: private queries reached the server after the failure"
    );
    let saw = upstream_saw.lock().unwrap().clone();
    assert!(
        !private_upstream(&saw),
        "{case}: a private method went upstream: {saw:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tampering_server_is_caught_and_contained() {
    let dir = tempfile::tempdir().unwrap();
    let (server, shape) = genesis_server(dir.path()).await;
    let delta = shape.lwe.delta();
    let k = shape.partitions as usize;
    let accounts = genesis_accounts();
    let limits = proxy::config::Limits::default();

    // Noise below delta/4 in any partition: every answer still right.
    for p in [0, k / 2, k - 1] {
        let queries = Arc::new(AtomicUsize::new(0));
        let rewrite = rewriting(shift_partition(&shape, p, delta / 8), queries.clone());
        let cache = tempfile::tempdir().unwrap();
        let (proxy, _) = tampered_proxy(&server, rewrite, cache.path(), limits).await;
        view_reaches(&proxy, 0).await;
        for (a, wei) in &accounts {
            let v = balance(&proxy, a).await;
            assert_eq!(
                v["result"].as_str(),
                Some(wei.as_str()),
                "partition {p}: {v}"
            );
        }
    }

    // Noise between delta/4 and delta/2 in one partition, any partition
    // (with the checksum recomputed): caught, then contained.
    for p in [0, k - 1] {
        let queries = Arc::new(AtomicUsize::new(0));
        let rewrite = rewriting(
            shift_partition(&shape, p, delta / 4 + delta / 16),
            queries.clone(),
        );
        let cache = tempfile::tempdir().unwrap();
        let (proxy, saw) = tampered_proxy(&server, rewrite, cache.path(), limits).await;
        view_reaches(&proxy, 0).await;
        assert_fails_closed(&proxy, &queries, &saw, &format!("noise in partition {p}")).await;
    }

    // A low bit flipped in transit without recomputing the checksum.
    let queries = Arc::new(AtomicUsize::new(0));
    let counted = queries.clone();
    let flip: Rewrite = Arc::new(move |path: &str, b: Bytes| {
        if !path.ends_with("/query") {
            return b;
        }
        counted.fetch_add(1, Ordering::SeqCst);
        let mut v = b.to_vec();
        let i = v.len() / 2;
        v[i] ^= 1;
        Bytes::from(v)
    });
    let cache = tempfile::tempdir().unwrap();
    let (proxy, saw) = tampered_proxy(&server, flip, cache.path(), limits).await;
    view_reaches(&proxy, 0).await;
    assert_fails_closed(&proxy, &queries, &saw, "bit flip without checksum").await;

    // Whole multiples of delta look like valid plaintext to the noise
    // check. The tag stops them from producing another account's value,
    // and a record moved as a whole is recognised as moved: the answer is
    // the right balance (the key in another partition) or the failure,
    // never 0 for an account that holds ether.
    for p in 0..k {
        let queries = Arc::new(AtomicUsize::new(0));
        let rewrite = rewriting(shift_partition(&shape, p, delta), queries);
        let cache = tempfile::tempdir().unwrap();
        let (proxy, _) = tampered_proxy(&server, rewrite, cache.path(), limits).await;
        view_reaches(&proxy, 0).await;
        let (a, wei) = &accounts[p % accounts.len()];
        let v = balance(&proxy, a).await;
        let right = v["result"].as_str() == Some(wei.as_str());
        assert!(right || v["error"]["code"] == -32004, "partition {p}: {v}");
    }

    // A setup whose geometry is over the proxy's limits: refused, and the
    // server is not asked any private query.
    let queries = Arc::new(AtomicUsize::new(0));
    let rewrite = rewriting(|_, _| {}, queries.clone());
    let cache = tempfile::tempdir().unwrap();
    let small = proxy::config::Limits {
        max_rows: 16,
        ..limits
    };
    let (proxy, saw) = tampered_proxy(&server, rewrite, cache.path(), small).await;
    let refused = || async {
        let v = balance(&proxy, &accounts[0].0).await;
        (v["error"]["code"] == -32004).then_some(v)
    };
    let v = test_support::eventually("the oversized setup refused", refused).await;
    assert!(
        v["error"]["data"].as_str().unwrap_or("").contains("rows"),
        "the error says which limit: {v}"
    );
    assert_eq!(queries.load(Ordering::SeqCst), 0);
    let saw = saw.lock().unwrap().clone();
    assert!(!private_upstream(&saw), "{saw:?}");
}

/// `ethpir_trustReset` lets private reads go out again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trust_reset_resumes_private_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (server, shape) = genesis_server(dir.path()).await;
    let delta = shape.lwe.delta();
    let queries = Arc::new(AtomicUsize::new(0));
    let rewrite = rewriting(shift_partition(&shape, 0, delta / 2 - 1), queries.clone());
    let cache = tempfile::tempdir().unwrap();
    let (proxy, _) = tampered_proxy(&server, rewrite, cache.path(), Default::default()).await;
    view_reaches(&proxy, 0).await;
    let accounts = genesis_accounts();
    assert_eq!(
        balance(&proxy, &accounts[0].0).await["error"]["code"],
        -32004
    );
    let sent = queries.load(Ordering::SeqCst);
    let reset = test_support::rpc(&proxy, "ethpir_trustReset", json!([]))
        .await
        .unwrap();
    assert!(reset["wasDistrusted"].is_string(), "{reset}");
    balance(&proxy, &accounts[0].0).await;
    assert!(
        queries.load(Ordering::SeqCst) > sent,
        "no query after the reset"
    );
}

/// A relay that adds Delta to the elements `element` chooses (by index)
/// of the answers to the queries `pick` chooses (by position in each
/// snapshot's batch).
fn blind_shift(
    delta: u32,
    pick: impl Fn(usize) -> bool + Send + Sync + 'static,
    element: impl Fn(usize) -> bool + Send + Sync + 'static,
    queries: Arc<AtomicUsize>,
) -> Rewrite {
    let edit = move |i: usize, r: &mut Response| {
        if pick(i) {
            let chosen = r.elems.iter_mut().enumerate().filter(|(j, _)| element(*j));
            chosen.for_each(|(_, e)| *e = e.wrapping_add(delta));
        }
    };
    rewriting(edit, queries)
}

/// Reads `accounts` in one JSON-RPC batch (one PIR request): each answer
/// the right balance or an error, never another value; whether any failed.
async fn batch_never_wrong(proxy: &str, accounts: &[(String, String)], case: &str) -> bool {
    let http = reqwest::Client::new();
    let calls: Vec<Value> = accounts
        .iter()
        .enumerate()
        .map(|(i, (a, _))| json!({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance", "params": [a, "0x0"]}))
        .collect();
    let answers = rpc_raw(&http, proxy, &Value::Array(calls).to_string()).await;
    let mut failed = false;
    for answer in answers.as_array().unwrap() {
        let (_, wei) = &accounts[answer["id"].as_u64().unwrap() as usize];
        match answer.get("result") {
            Some(got) => assert_eq!(got.as_str(), Some(wei.as_str()), "{case}: {answer}"),
            None => {
                assert_eq!(answer["error"]["code"], -32004, "{case}: {answer}");
                failed = true;
            }
        }
    }
    failed
}

type Pick = Box<dyn Fn(usize) -> bool + Send + Sync>;

/// A blind shift (Delta added to every element of every answer, or of a
/// random half of the queries; or to the first element of every record,
/// which no check of an answer alone can see): no wrong balance, and
/// private reads fail closed within the first three requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blind_shifts_fail_closed_with_no_wrong_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (server, shape) = genesis_server(dir.path()).await;
    let delta = shape.lwe.delta();
    let w = shape.record_elems();
    let limits = proxy::config::Limits::default();
    let accounts = genesis_balances();
    let cases: [(&str, Pick, Pick); 3] = [
        ("every answer", Box::new(|_| true), Box::new(|_| true)),
        (
            "a random half",
            Box::new(|_| rand::random::<bool>()),
            Box::new(|_| true),
        ),
        (
            "every record's first element",
            Box::new(|_| true),
            Box::new(move |j| j % w == 0),
        ),
    ];
    for (case, pick, element) in cases {
        let queries = Arc::new(AtomicUsize::new(0));
        let rewrite = blind_shift(delta, pick, element, queries.clone());
        let cache = tempfile::tempdir().unwrap();
        let (proxy, saw) = tampered_proxy(&server, rewrite, cache.path(), limits).await;
        view_reaches(&proxy, 0).await;
        // Three requests of eight accounts, none read before.
        let mut closed = false;
        for chunk in accounts.chunks(8).take(3) {
            if batch_never_wrong(&proxy, chunk, case).await {
                closed = true;
                break;
            }
        }
        assert!(closed, "{case}: not failed closed within three requests");
        assert_fails_closed(&proxy, &queries, &saw, case).await;
    }
}

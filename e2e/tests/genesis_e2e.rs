//! The demo path over the bundled mainnet genesis: sampled balances at
//! block 0, a bounded load test, bad input at every door, a dead server and
//! responses damaged in transit.

use crate::common;

use std::sync::Arc;

use axum::body::Bytes;
use common::*;
use serde_json::{json, Value};
use test_support::{rpc, rpc_raw};

/// Requests the proxy must refuse, and the JSON-RPC code each gets.
const BAD_INPUT: [(&str, i64); 17] = [
    ("{not json", -32700),
    ("", -32700),
    ("42", -32600),
    ("[]", -32600),
    (r#"{"jsonrpc":"1.0","id":1,"method":"eth_chainId"}"#, -32600),
    (r#"{"jsonrpc":"2.0","id":1}"#, -32600),
    (
        r#"{"jsonrpc":"2.0","id":{},"method":"eth_chainId"}"#,
        -32600,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":"x"}"#,
        -32600,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance"}"#,
        -32602,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x1234","latest"]}"#,
        -32602,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0xZZ0d836201318ec6899a67540690382780743280","latest"]}"#,
        -32602,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x000D836201318ec6899A67540690382780743280","latest"]}"#,
        -32602,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":[5,"latest"]}"#,
        -32602,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x000d836201318ec6899a67540690382780743280","yesterday"]}"#,
        -32602,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x000d836201318ec6899a67540690382780743280","0x10"]}"#,
        -32001,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":{"address":"0x0"}}"#,
        -32602,
    ),
    (
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0x00"]}"#,
        -32601,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mainnet_genesis_through_the_demo_path() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let proxy = start_proxy(&server, None, &dir.path().join("cache")).await;
    wait_for_block(&proxy, "0x0").await;
    let http = reqwest::Client::new();
    let all = genesis_balances();
    assert_eq!(all.len(), 8893);
    sampled_balances(&proxy, &all).await;
    load(&proxy, &all).await;
    bad_input(&http, &proxy).await;
    batches(&http, &proxy, &all).await;
    tampered_links(&http, &server, &all[10]).await;
    dead_server(&http).await;
}

/// Sampled accounts at every block form; an absent account; the genesis
/// hash as a block; the local methods.
async fn sampled_balances(proxy: &str, all: &[(String, String)]) {
    let proxy = proxy.to_string();
    for (a, wei) in all.iter().step_by(181) {
        for block in ["0x0", "latest", "earliest"] {
            let got = rpc(&proxy, "eth_getBalance", json!([a, block]))
                .await
                .unwrap();
            assert_eq!(got.as_str().unwrap(), wei, "{a} at {block}");
        }
        assert_eq!(
            rpc(&proxy, "eth_getTransactionCount", json!([a, "0x0"]))
                .await
                .unwrap(),
            "0x0"
        );
    }
    // Absent from a full snapshot: balance 0.
    let nobody = rpc(
        &proxy,
        "eth_getBalance",
        json!(["0x00000000000000000000000000000000000000aa", "latest"]),
    )
    .await
    .unwrap();
    assert_eq!(nobody, "0x0");
    let genesis_hash = "0xd4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3";
    let (a, wei) = &all[0];
    assert_eq!(
        rpc(&proxy, "eth_getBalance", json!([a, genesis_hash]))
            .await
            .unwrap()
            .as_str()
            .unwrap(),
        wei
    );
    assert_eq!(rpc(&proxy, "eth_chainId", json!([])).await.unwrap(), "0x1");
    assert_eq!(rpc(&proxy, "net_version", json!([])).await.unwrap(), "1");
}

/// 2,000 calls, 32 at a time, every answer right.
async fn load(proxy: &str, all: &[(String, String)]) {
    let proxy = proxy.to_string();
    let all = Arc::new(all.to_vec());
    let mut tasks = tokio::task::JoinSet::new();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..32 {
        let (proxy, all, next) = (proxy.clone(), all.clone(), next.clone());
        tasks.spawn(async move {
            let mut done = 0;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= 2000 {
                    return done;
                }
                let (a, wei) = &all[(i * 7919) % all.len()];
                let got = rpc(&proxy, "eth_getBalance", json!([a, "latest"]))
                    .await
                    .unwrap();
                assert_eq!(got.as_str().unwrap(), wei, "load call {i}");
                done += 1;
            }
        });
    }
    let mut total = 0;
    while let Some(n) = tasks.join_next().await {
        total += n.unwrap();
    }
    assert_eq!(total, 2000);
}

/// Bad input: each gets a clear JSON-RPC error.
async fn bad_input(http: &reqwest::Client, proxy: &str) {
    let proxy = proxy.to_string();
    let code = |v: &Value| v["error"]["code"].as_i64();

    for (body, expected) in BAD_INPUT {
        let v = rpc_raw(http, &proxy, body).await;
        assert_eq!(code(&v), Some(expected), "{body} -> {v}");
        assert_eq!(v["jsonrpc"], "2.0");
    }
}

/// Batches keep ids and order (private calls as one PIR batch);
/// notifications get no answer; an oversized body gets 413.
async fn batches(http: &reqwest::Client, proxy: &str, all: &[(String, String)]) {
    let proxy = proxy.to_string();
    let code = |v: &Value| v["error"]["code"].as_i64();
    let batch = rpc_raw(
        http,
        &proxy,
        r#"[{"jsonrpc":"2.0","id":"a","method":"eth_chainId"},{"jsonrpc":"2.0","id":2,"method":"nope"},{"jsonrpc":"2.0","method":"eth_chainId"},5]"#,
    )
    .await;
    let arr = batch.as_array().unwrap();
    assert_eq!(arr.len(), 3);
    assert_eq!(arr[0]["id"], "a");
    assert_eq!(arr[0]["result"], "0x1");
    assert_eq!(arr[1]["id"], 2);
    assert_eq!(code(&arr[1]), Some(-32601));
    assert_eq!(code(&arr[2]), Some(-32600));
    // A batch of private calls goes out as one PIR batch; answers keep their order.
    let mut calls: Vec<Value> = all
        .iter()
        .take(12)
        .enumerate()
        .map(|(i, (a, _))| json!({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance", "params": [a, "0x0"]}))
        .collect();
    calls.push(json!({"jsonrpc": "2.0", "id": "bad", "method": "eth_getBalance", "params": ["0x12", "0x0"]}));
    calls.push(json!({"jsonrpc": "2.0", "id": "nonce", "method": "eth_getTransactionCount", "params": [all[0].0, "latest"]}));
    let answers = rpc_raw(http, &proxy, &Value::Array(calls).to_string()).await;
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 14);
    for (i, (_, wei)) in all.iter().take(12).enumerate() {
        assert_eq!(answers[i]["id"], i);
        assert_eq!(answers[i]["result"].as_str().unwrap(), wei);
    }
    assert_eq!(code(&answers[12]), Some(-32602));
    assert_eq!(answers[13]["result"], "0x0");
    let note = http
        .post(&proxy)
        .body(r#"{"jsonrpc":"2.0","method":"eth_chainId"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(note.status(), 204);
    let huge = http
        .post(&proxy)
        .body(vec![b' '; 5 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(huge.status(), 413);
}

/// Responses damaged or swapped in transit: an error, never a balance.
async fn tampered_links(http: &reqwest::Client, server: &str, target: &(String, String)) {
    let server = server.to_string();
    let code = |v: &Value| v["error"]["code"].as_i64();
    let flip: Rewrite = Arc::new(|path: &str, b: Bytes| {
        if path.ends_with("/query") && b.len() > 100 {
            let mut v = b.to_vec();
            let i = v.len() / 2;
            v[i] ^= 0x80;
            Bytes::from(v)
        } else {
            b
        }
    });
    let truncate: Rewrite = Arc::new(|path: &str, b: Bytes| {
        if path.ends_with("/query") {
            b.slice(..b.len() / 2)
        } else {
            b
        }
    });
    let stale = Arc::new(std::sync::Mutex::new(None::<Bytes>));
    let swap: Rewrite = {
        let stale = stale.clone();
        Arc::new(move |path: &str, b: Bytes| {
            if !path.ends_with("/query") {
                return b;
            }
            // Answer each query with the response to the previous one.
            let mut s = stale.lock().unwrap();
            let previous = s.replace(b.clone());
            previous.unwrap_or(b)
        })
    };
    for (name, rewrite) in [("flip", flip), ("truncate", truncate), ("swap", swap)] {
        let (link, _) = start_relay(&server, rewrite).await;
        let cache = tempfile::tempdir().unwrap();
        let tampered = start_proxy(&link, None, cache.path()).await;
        view_reaches(&tampered, 0).await;
        for _ in 0..3 {
            let v = rpc_raw(http, &tampered, &json!({"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":[target.0, "latest"]}).to_string()).await;
            if name == "swap" && v.get("result").is_some() {
                // The very first call has nothing to swap with.
                assert_eq!(v["result"].as_str().unwrap(), target.1);
                continue;
            }
            assert!(
                v.get("result").is_none(),
                "{name}: a damaged response produced a balance: {v}"
            );
            assert!(
                matches!(code(&v), Some(-32004) | Some(-32003)),
                "{name}: {v}"
            );
        }
    }
}

/// The PIR server down: a clear error.
async fn dead_server(http: &reqwest::Client) {
    let code = |v: &Value| v["error"]["code"].as_i64();
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cache = tempfile::tempdir().unwrap();
    let orphan = start_proxy(&format!("http://127.0.0.1:{dead_port}"), None, cache.path()).await;
    let answered = || async {
        let resp = http.post(&orphan).body(r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x000d836201318ec6899a67540690382780743280","latest"]}"#).send().await.ok()?;
        serde_json::from_slice::<Value>(&resp.bytes().await.unwrap()).ok()
    };
    let v = test_support::eventually("the orphaned proxy answers", answered).await;
    assert!(v.get("result").is_none(), "{v}");
    assert!(matches!(code(&v), Some(-32001) | Some(-32003)), "{v}");
}

/// A demo store left by an older version (its genesis snapshot of manifest
/// format 2, which proxies no longer read) gets the snapshot built again,
/// so that the demo answers instead of setting its only view aside.
#[test]
fn the_demo_builds_an_older_genesis_snapshot_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = snapshotter::SnapshotStore::open(dir.path()).unwrap();
    demo::ensure_genesis_snapshot(&store).unwrap();
    let snap = store.list().unwrap().pop().unwrap();
    let read = protocol::manifest::OLDEST_READ_FORMAT;
    assert!(snap.manifest.format >= read);
    let path = snap.path.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest["format"] = serde_json::json!(2);
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    assert_eq!(store.list().unwrap()[0].manifest.format, 2);
    demo::ensure_genesis_snapshot(&store).unwrap();
    let again = store.list().unwrap();
    assert_eq!(again.len(), 1);
    assert!(again[0].manifest.format >= read);
}

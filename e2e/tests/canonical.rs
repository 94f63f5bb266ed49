//! Canonical blocks: a proxy with an upstream reads a view only if its
//! block hash is the upstream's block at that number. Against a real
//! anvil, follower and PIR server: through an honest upstream every
//! balance is anvil's; through an upstream whose headers name other
//! hashes (as if the PIR server's views were of another chain, or a
//! reorg had dropped them) no view is read, and the error says why.

use crate::common;

use axum::body::Bytes;
use common::*;
use serde_json::{json, Value};
use test_support::DEV_ACCOUNTS;

/// An upstream relay whose block headers carry another hash.
fn other_hashes() -> Rewrite {
    std::sync::Arc::new(|_, body: Bytes| {
        let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
            return body;
        };
        if v["result"]["hash"].is_string() && v["result"]["number"].is_string() {
            v["result"]["hash"] = json!(format!("0x{}", "11".repeat(32)));
        }
        Bytes::from(serde_json::to_vec(&v).unwrap())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn views_are_read_only_where_the_upstream_has_their_block() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, follower, server) = followed_chain(dir.path(), 16).await;
    anvil
        .send(json!({"from": DEV_ACCOUNTS[0], "to": DEV_ACCOUNTS[1], "value": "0x5"}))
        .await;
    let head = anvil.head().await;

    let (honest, _) = start_relay(&anvil.url, passthrough()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&server, Some(honest), cache.path()).await;
    view_reaches(&proxy, head).await;
    let at = format!("{head:#x}");
    for who in &DEV_ACCOUNTS[..2] {
        let private = test_support::rpc(&proxy, "eth_getBalance", json!([who, at]))
            .await
            .unwrap();
        let node = anvil.rpc("eth_getBalance", json!([who, at])).await;
        assert_eq!(private, node, "{who} through an honest upstream");
    }

    let (lying, saw) = start_relay(&anvil.url, other_hashes()).await;
    let cache = tempfile::tempdir().unwrap();
    let checking = start_proxy(&server, Some(lying), cache.path()).await;
    view_reaches(&checking, 0).await;
    let http = reqwest::Client::new();
    for block in [at.as_str(), "latest"] {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance", "params": [DEV_ACCOUNTS[2], block]});
        let v = test_support::rpc_raw(&http, &checking, &call.to_string()).await;
        assert!(v.get("result").is_none(), "{block}: {v}");
        assert_eq!(v["error"]["code"], -32001, "{block}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("not the upstream's block"), "{block}: {v}");
        assert!(v["error"]["data"]["node_hash"].is_string(), "{block}: {v}");
    }
    let asked = saw.lock().unwrap().clone();
    assert!(
        asked.iter().any(|m| m == "eth_getBlockByNumber"),
        "{asked:?}"
    );
    assert!(!asked.iter().any(|m| m == "eth_getBalance"), "{asked:?}");
    follower.stop().await;
}

/// Reorgs under a running follower (blocks replaced by more blocks than
/// were dropped, mined at once), then a quiet chain: every block within
/// `keep_blocks` answers through the proxy, each with anvil's balance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_recent_block_reads_once_the_chain_is_quiet_after_reorgs() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let keep_blocks = 64;
    let (anvil, follower, server) = followed_chain(dir.path(), keep_blocks).await;
    let (upstream, _) = start_relay(&anvil.url, passthrough()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&server, Some(upstream), cache.path()).await;
    let pay = |value: u64| json!({"from": DEV_ACCOUNTS[0], "to": DEV_ACCOUNTS[1], "value": format!("{value:#x}")});
    for round in 0..3u64 {
        anvil.send(pay(1 + round)).await;
        let fork = anvil.rpc("evm_snapshot", json!([])).await;
        anvil.send(pay(100 + round)).await;
        anvil.send(pay(200 + round)).await;
        view_reaches(&proxy, anvil.head().await).await;
        assert_eq!(anvil.rpc("evm_revert", json!([fork])).await, json!(true));
        // Three blocks in place of two, mined at once, then one more.
        anvil.rpc("anvil_mine", json!(["0x3"])).await;
        anvil.send(pay(300 + round)).await;
    }
    let head = anvil.head().await;
    view_reaches(&proxy, head).await;
    let oldest = head.saturating_sub(keep_blocks);
    for block in oldest..=head {
        let at = format!("{block:#x}");
        let who = DEV_ACCOUNTS[1];
        let private = test_support::rpc(&proxy, "eth_getBalance", json!([who, at])).await;
        let node = anvil.rpc("eth_getBalance", json!([who, at])).await;
        assert_eq!(private, Ok(node), "block {block} of {oldest}..={head}");
    }
    follower.stop().await;
    anvil.stop().await;
}

/// A PIR server stuck at block N (its follower stopped) after a payment
/// to the holder, and anvil reorging N away (the payment dropped, more
/// blocks mined): the proxy confirmed N's hash before, and from then on
/// never answers the orphan's balance, at `latest` or at N; it refuses
/// (-32001) until a view on the upstream's chain exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_view_reorged_away_under_a_stuck_server_is_not_read() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, follower, server) = followed_chain(dir.path(), 16).await;
    let (upstream, _) = start_relay(&anvil.url, passthrough()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&server, Some(upstream), cache.path()).await;
    let holder = "0x00000000000000000000000000000000000f0b0e";
    let fork = anvil.rpc("evm_snapshot", json!([])).await;
    let five_eth = "0x4563918244f40000";
    anvil
        .send(json!({"from": DEV_ACCOUNTS[0], "to": holder, "value": five_eth}))
        .await;
    let orphan = anvil.head().await;
    view_reaches(&proxy, orphan).await;
    let at = format!("{orphan:#x}");
    for block in ["latest", at.as_str()] {
        let read = test_support::rpc(&proxy, "eth_getBalance", json!([holder, block])).await;
        assert_eq!(read, Ok(json!(five_eth)), "before the reorg, at {block}");
    }
    follower.stop().await;
    assert_eq!(anvil.rpc("evm_revert", json!([fork])).await, json!(true));
    anvil.rpc("anvil_mine", json!(["0x3"])).await;
    assert_eq!(
        anvil.rpc("eth_getBalance", json!([holder, "latest"])).await,
        json!("0x0")
    );
    let http = reqwest::Client::new();
    for i in 0..20 {
        for block in ["latest", at.as_str()] {
            let call = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance", "params": [holder, block]});
            let v = test_support::rpc_raw(&http, &proxy, &call.to_string()).await;
            assert_ne!(
                v["result"],
                json!(five_eth),
                "read {i} at {block}: the orphan's balance"
            );
            assert_eq!(v["error"]["code"], -32001, "read {i} at {block}: {v}");
        }
    }
    anvil.stop().await;
}

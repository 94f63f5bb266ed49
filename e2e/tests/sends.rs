//! Sends apart from reads (`send_upstream`): a wallet's
//! `eth_sendRawTransaction` goes to a second endpoint (a private relay,
//! another provider) and never to the upstream that serves its reads, on
//! a connection of its own; that endpoint sees nothing else. The
//! transaction lands (anvil stands behind both) and its receipt is read
//! through the upstream.

use crate::common;

use common::*;
use serde_json::json;
use test_support::{Anvil, DEV_ACCOUNTS};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sends_go_to_their_own_endpoint_and_reads_never_do() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let anvil = Anvil::start().await;
    let (reads, _, read_calls) = start_recording_relay(&anvil.url, passthrough()).await;
    let (sends, _, send_calls) = start_recording_relay(&anvil.url, passthrough()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server,
        upstream: Some(reads),
        send_upstream: Some(sends.clone()),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    })
    .await;
    // A transaction signed by the wallet (anvil signs for its dev account).
    let tx = json!({"from": DEV_ACCOUNTS[0], "to": DEV_ACCOUNTS[1], "value": "0x1",
        "gas": "0x5208", "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x1",
        "nonce": "0x0", "chainId": "0x7a69"});
    let raw = anvil.rpc("eth_signTransaction", json!([tx])).await;
    let raw = raw.as_str().expect("a signed transaction").to_string();
    let hash = test_support::rpc(&proxy, "eth_sendRawTransaction", json!([raw]))
        .await
        .expect("sent");
    let receipt = test_support::eventually("the send's receipt through the reads", || async {
        let r = test_support::rpc(&proxy, "eth_getTransactionReceipt", json!([hash]))
            .await
            .ok()?;
        (!r.is_null()).then_some(r)
    })
    .await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    let balance = test_support::rpc(&proxy, "eth_chainId", json!([])).await;
    assert!(balance.is_ok(), "{balance:?}");

    let methods = |calls: &RelayedCalls| -> Vec<String> {
        let calls = calls.lock().unwrap();
        calls
            .iter()
            .map(|c| c["method"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (read_methods, send_methods) = (methods(&read_calls), methods(&send_calls));
    assert_eq!(
        send_methods,
        ["eth_sendRawTransaction"],
        "the send endpoint saw only the send"
    );
    assert!(
        !read_methods.iter().any(|m| m == "eth_sendRawTransaction"),
        "the reading upstream saw a send: {read_methods:?}"
    );
    let raw_hex = raw.trim_start_matches("0x").to_ascii_lowercase();
    let seen_by_reads = read_calls.lock().unwrap().clone();
    assert!(
        !seen_by_reads
            .iter()
            .any(|c| c.to_string().to_ascii_lowercase().contains(&raw_hex)),
        "the raw transaction reached the reading upstream"
    );
    assert!(
        read_methods
            .iter()
            .any(|m| m == "eth_getTransactionReceipt"),
        "{read_methods:?}"
    );
    // The page says where sends go (the endpoint's scheme and host).
    let page: serde_json::Value = reqwest::get(format!("{proxy}/status.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let host = sends.trim_start_matches("http://");
    assert!(
        page["sendsTo"].as_str().is_some_and(|s| s.contains(host)),
        "{}",
        page["sendsTo"]
    );
}

//! Sends apart from reads (`send_upstream`): a wallet's
//! `eth_sendRawTransaction` goes to a second endpoint (a private relay,
//! another provider) and never to the upstream that serves its reads, on
//! a connection of its own; that endpoint sees nothing else. The
//! transaction lands (anvil stands behind both) and its receipt is read
//! through the upstream. Through SOCKS5 (`upstream_proxy`, `send_proxy`),
//! reads and sends travel on connections of their own with credentials of
//! their own, so that Tor gives them separate circuits.

use crate::common;

use std::net::IpAddr;

use common::*;
use serde_json::json;
use test_support::{Anvil, DEV_ACCOUNTS};

/// Sends a transfer of the wallet's (anvil signs for its dev account)
/// with `nonce` through the proxy and waits for its receipt through the
/// proxy; the raw transaction.
async fn send_and_await_receipt(anvil: &Anvil, proxy: &str, nonce: u64) -> String {
    let tx = json!({"from": DEV_ACCOUNTS[0], "to": DEV_ACCOUNTS[1], "value": "0x1",
        "gas": "0x5208", "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x1",
        "nonce": format!("{nonce:#x}"), "chainId": "0x7a69"});
    let raw = anvil.rpc("eth_signTransaction", json!([tx])).await;
    let raw = raw.as_str().expect("a signed transaction").to_string();
    let hash = test_support::rpc(proxy, "eth_sendRawTransaction", json!([raw]))
        .await
        .expect("sent");
    let receipt = test_support::eventually("the send's receipt through the reads", || async {
        let r = test_support::rpc(proxy, "eth_getTransactionReceipt", json!([hash]))
            .await
            .ok()?;
        (!r.is_null()).then_some(r)
    })
    .await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sends_go_to_their_own_endpoint_and_reads_never_do() {
    let (_dir, server, anvil, (reads, read_calls), (sends, send_calls)) = endpoints(&[]).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server,
        upstream: Some(reads),
        send_upstream: Some(sends.clone()),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    })
    .await;
    let raw = send_and_await_receipt(&anvil, &proxy, 0).await;
    let balance = test_support::rpc(&proxy, "eth_chainId", json!([])).await;
    assert!(balance.is_ok(), "{balance:?}");

    sends_apart_from_reads(&read_calls, &send_calls);
    let raw_hex = raw.trim_start_matches("0x").to_ascii_lowercase();
    let seen_by_reads = read_calls.lock().unwrap().clone();
    assert!(
        !seen_by_reads
            .iter()
            .any(|c| c.to_string().to_ascii_lowercase().contains(&raw_hex)),
        "the raw transaction reached the reading upstream"
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

/// A PIR server over the bundled genesis (its store under the returned
/// directory), anvil started with `anvil_args`, and two recording relays
/// in front of it: the reading upstream's and the send endpoint's.
async fn endpoints(
    anvil_args: &[&str],
) -> (
    tempfile::TempDir,
    String,
    Anvil,
    (String, RelayedCalls),
    (String, RelayedCalls),
) {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let anvil = Anvil::start_with(anvil_args).await;
    let (reads, _, read_calls) = start_recording_relay(&anvil.url, passthrough()).await;
    let (sends, _, send_calls) = start_recording_relay(&anvil.url, passthrough()).await;
    (dir, server, anvil, (reads, read_calls), (sends, send_calls))
}

/// The methods each relayed call named, in order.
fn methods(calls: &RelayedCalls) -> Vec<String> {
    let calls = calls.lock().unwrap();
    calls
        .iter()
        .map(|c| c["method"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The send endpoint saw the send alone; the reading upstream never saw
/// it, and found its receipt by whole blocks.
fn sends_apart_from_reads(read_calls: &RelayedCalls, send_calls: &RelayedCalls) {
    let (read_methods, send_methods) = (methods(read_calls), methods(send_calls));
    assert_eq!(
        send_methods,
        ["eth_sendRawTransaction"],
        "the send endpoint saw only the send"
    );
    assert!(
        !read_methods.iter().any(|m| m == "eth_sendRawTransaction"),
        "the reading upstream saw a send: {read_methods:?}"
    );
    assert!(
        read_methods.iter().any(|m| m == "eth_getBlockReceipts"),
        "{read_methods:?}"
    );
}

/// Every address a front saw connections from: some, and all `expected`.
fn all_from(peers: &std::sync::Mutex<Vec<IpAddr>>, expected: &str, what: &str) {
    let peers = peers.lock().unwrap().clone();
    let expected: IpAddr = expected.parse().unwrap();
    assert!(!peers.is_empty(), "no connection reached {what}");
    assert!(
        peers.iter().all(|&ip| ip == expected),
        "a connection reached {what} not through its SOCKS server: {peers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_and_sends_go_through_socks_with_credentials_of_their_own() {
    let (_dir, server, anvil, (reads, read_calls), (sends, send_calls)) = endpoints(&[]).await;
    let (reads_front, read_peers) = recording_front(reads.replace("http://", "")).await;
    let (sends_front, send_peers) = recording_front(sends.replace("http://", "")).await;
    // Two real SOCKS5 servers (microsocks takes one user each), each
    // leaving from an address of its own: a connection made with the
    // other's credentials, or straight, would show.
    let (_r, read_port) = start_microsocks("127.0.0.3", Some(("reads", "read-secret"))).await;
    let (_s, send_port) = start_microsocks("127.0.0.4", Some(("sends", "send-secret"))).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server,
        upstream: Some(reads_front),
        send_upstream: Some(sends_front),
        upstream_proxy: Some(format!("socks5h://reads:read-secret@127.0.0.1:{read_port}")),
        send_proxy: Some(format!("socks5h://sends:send-secret@127.0.0.1:{send_port}")),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    })
    .await;
    send_and_await_receipt(&anvil, &proxy, 0).await;
    all_from(&read_peers, "127.0.0.3", "the reading upstream");
    all_from(&send_peers, "127.0.0.4", "the send endpoint");
    sends_apart_from_reads(&read_calls, &send_calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_socks_server_gets_made_up_credentials_for_reads_and_others_for_sends() {
    let (_dir, server, anvil, (upstream, _), _) = endpoints(&[]).await;
    // One SOCKS server, no credentials in its URL, no send endpoint: sends
    // go to the same upstream, as Tor users would set it.
    let (socks_port, connections) = start_credential_recording_socks().await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server,
        upstream: Some(upstream),
        upstream_proxy: Some(format!("socks5h://127.0.0.1:{socks_port}")),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    })
    .await;
    send_and_await_receipt(&anvil, &proxy, 0).await;
    send_and_await_receipt(&anvil, &proxy, 1).await;
    let connections: Vec<SocksConnection> = connections
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.lock().unwrap().clone())
        .collect();
    let users_of = |carrying_a_send: bool| -> std::collections::BTreeSet<String> {
        connections
            .iter()
            .filter(|c| {
                c.carried("eth_sendRawTransaction") == carrying_a_send && !c.sent.is_empty()
            })
            .map(|c| c.username.clone())
            .collect()
    };
    let (send_users, read_users) = (users_of(true), users_of(false));
    assert_eq!(
        send_users.len(),
        1,
        "sends under one made-up name: {send_users:?}"
    );
    assert_eq!(
        read_users.len(),
        1,
        "reads under one made-up name: {read_users:?}"
    );
    let (send_user, read_user) = (send_users.first().unwrap(), read_users.first().unwrap());
    assert!(send_user.starts_with("ethpir-sends-"), "{send_user}");
    assert!(read_user.starts_with("ethpir-reads-"), "{read_user}");
    for c in &connections {
        assert!(
            !(c.carried("eth_sendRawTransaction") && c.carried("eth_getBlockReceipts")),
            "a send and a read shared a connection"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sends_receipt_is_found_in_whole_blocks_and_its_hash_never_goes_upstream() {
    // Blocks only when the test mines one: the send stays pending between.
    let (_dir, server, anvil, (reads, read_calls), (sends, _)) = endpoints(&["--no-mining"]).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server,
        upstream: Some(reads),
        send_upstream: Some(sends),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    })
    .await;
    anvil.rpc("evm_mine", json!([])).await;
    let tx = json!({"from": DEV_ACCOUNTS[0], "to": DEV_ACCOUNTS[1], "value": "0x1",
        "gas": "0x5208", "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x1",
        "nonce": "0x0", "chainId": "0x7a69"});
    let raw = anvil.rpc("eth_signTransaction", json!([tx])).await;
    let hash = test_support::rpc(&proxy, "eth_sendRawTransaction", json!([raw]))
        .await
        .expect("sent");
    let through_proxy = |method: &'static str| {
        let (proxy, hash) = (proxy.clone(), hash.clone());
        async move {
            test_support::rpc(&proxy, method, json!([hash]))
                .await
                .unwrap()
        }
    };
    let at_anvil = |method: &'static str| anvil.rpc(method, json!([hash]));
    // Pending: the transaction as the node has it, no receipt yet. Where
    // anvil and geth differ, geth's shape (internal/ethapi's
    // newRPCTransaction): a pending dynamic-fee transaction's gasPrice is
    // its fee cap, and its blockTimestamp null.
    let mut pending = through_proxy("eth_getTransactionByHash").await;
    let mut expected = at_anvil("eth_getTransactionByHash").await;
    assert_eq!(pending["gasPrice"], pending["maxFeePerGas"], "{pending}");
    assert!(pending["blockTimestamp"].is_null(), "{pending}");
    for differs in ["gasPrice", "blockTimestamp"] {
        pending.as_object_mut().unwrap().remove(differs);
        expected.as_object_mut().unwrap().remove(differs);
    }
    assert_eq!(pending, expected);
    assert_eq!(through_proxy("eth_getRawTransactionByHash").await, raw);
    assert!(through_proxy("eth_getTransactionReceipt").await.is_null());
    anvil.rpc("evm_mine", json!([])).await;
    let receipt = test_support::eventually("the receipt, found in its block", || async {
        let r = through_proxy("eth_getTransactionReceipt").await;
        (!r.is_null()).then_some(r)
    })
    .await;
    assert_eq!(receipt, at_anvil("eth_getTransactionReceipt").await);
    assert_eq!(
        through_proxy("eth_getTransactionByHash").await,
        at_anvil("eth_getTransactionByHash").await
    );
    // A reorganisation replaces the block that held it: the proxy's answer
    // follows the node's again.
    anvil.rpc("anvil_reorg", json!([1, []])).await;
    let after = at_anvil("eth_getTransactionReceipt").await;
    assert_ne!(after["blockHash"], receipt["blockHash"], "{after}");
    test_support::eventually("the receipt after the reorganisation", || async {
        (through_proxy("eth_getTransactionReceipt").await == after).then_some(())
    })
    .await;
    // The reading upstream read whole blocks; the hash never reached it.
    let hash_hex = hash
        .as_str()
        .unwrap()
        .trim_start_matches("0x")
        .to_ascii_lowercase();
    let seen = read_calls.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|c| c.to_string().to_ascii_lowercase().contains(&hash_hex)),
        "the send's hash reached the reading upstream: {seen:?}"
    );
    assert!(seen.iter().any(|c| c["method"] == "eth_getBlockReceipts"));
}

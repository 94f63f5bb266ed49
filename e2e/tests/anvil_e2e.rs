//! anvil -> snapshots (rpc source, several heights) -> server -> proxy ->
//! cast and an alloy provider: every balance and nonce equals anvil's own
//! answer at the same block, and no private method reaches the upstream.

use crate::common;

use alloy_primitives::Address;
use alloy_provider::{Provider, ProviderBuilder};
use common::*;
use serde_json::json;
use snapshotter::pipeline::{build_and_publish, BuildOptions};
use snapshotter::sources::rpc::{RpcOptions, RpcSource};
use snapshotter::SnapshotStore;
use test_support::{foundry_tool, make_history, rpc, rpc_raw, Anvil, DEV_ACCOUNTS};

/// `cast <command> --block <block> <who> --rpc-url <url>`.
async fn cast_at(
    cast: &std::path::Path,
    command: &str,
    block: u64,
    who: &str,
    url: &str,
) -> std::process::Output {
    tokio::process::Command::new(cast)
        .args([
            command,
            "--block",
            &block.to_string(),
            who,
            "--rpc-url",
            url,
        ])
        .output()
        .await
        .expect("cast runs")
}

/// A scripted history on `anvil` and three snapshots of it in a store under
/// `dir`: active over everything at the head, active at head - 2, and
/// historical at block 2 (every account the history touched).
async fn snapshots_of(
    anvil: &Anvil,
    dir: &std::path::Path,
) -> (u64, Vec<snapshotter::ExportedState>) {
    let history = make_history(anvil).await;
    let head = anvil.head().await;
    let store = SnapshotStore::open(dir.join("store")).unwrap();
    let node = RpcSource::connect(
        &anvil.url,
        RpcOptions {
            progress: None,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut everyone: Vec<Address> = DEV_ACCOUNTS.iter().map(|a| a.parse().unwrap()).collect();
    everyone.extend(
        history
            .iter()
            .flat_map(|(_, t)| t.iter().map(|a| a.parse::<Address>().unwrap())),
    );
    let exports = vec![
        node.export_active(head, Some(head)).await.unwrap(),
        node.export_active(head - 2, Some(head - 2)).await.unwrap(),
        node.export_historical(everyone.clone(), 2).await.unwrap(),
    ];
    let build = BuildOptions {
        progress: None,
        ..Default::default()
    };
    for e in &exports {
        build_and_publish(&store, e.clone(), &build).unwrap();
    }
    (head, exports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_answers_equal_anvil_at_every_snapshot_height() {
    let anvil = Anvil::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (head, exports) = snapshots_of(&anvil, dir.path()).await;

    let server = start_server(&dir.path().join("store")).await;
    let (upstream, upstream_saw) = start_relay(&anvil.url, passthrough()).await;
    let proxy = start_proxy(&server, Some(upstream), &dir.path().join("cache")).await;
    for e in &exports {
        wait_for_block(&proxy, &format!("{:#x}", e.block_number)).await;
    }
    let http = reqwest::Client::new();

    // Every account of every snapshot, at its height, by number.
    for e in &exports {
        let at = format!("{:#x}", e.block_number);
        for r in &e.records {
            let a = format!("{:#x}", r.address.unwrap());
            let balance = rpc(&proxy, "eth_getBalance", json!([a, at])).await.unwrap();
            assert_eq!(
                balance.as_str().unwrap(),
                anvil.balance(&a, e.block_number).await,
                "balance {a} @ {at}"
            );
            let nonce = rpc(&proxy, "eth_getTransactionCount", json!([a, at]))
                .await
                .unwrap();
            assert_eq!(
                nonce.as_str().unwrap(),
                anvil.nonce(&a, e.block_number).await,
                "nonce {a} @ {at}"
            );
        }
    }
    // latest, a block hash and an EIP-1898 object name the head snapshot.
    let head_hash = anvil
        .rpc("eth_getBlockByNumber", json!([format!("{head:#x}"), false]))
        .await["hash"]
        .clone();
    for block in [
        json!("latest"),
        json!("finalized"),
        head_hash.clone(),
        json!({"blockHash": head_hash}),
        json!({"blockNumber": format!("{head:#x}")}),
    ] {
        let got = rpc(&proxy, "eth_getBalance", json!([DEV_ACCOUNTS[0], block]))
            .await
            .unwrap();
        assert_eq!(
            got.as_str().unwrap(),
            anvil.balance(DEV_ACCOUNTS[0], head).await,
            "block {block}"
        );
    }

    // A real client: cast.
    let cast = foundry_tool("cast");
    for (block, who) in [
        (head, DEV_ACCOUNTS[0]),
        (2, DEV_ACCOUNTS[1]),
        (head - 2, "0x1111111111111111111111111111111111111111"),
    ] {
        let out = cast_at(&cast, "balance", block, who, &proxy).await;
        assert!(
            out.status.success(),
            "cast: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = alloy_primitives::U256::from_str_radix(
            anvil.balance(who, block).await.trim_start_matches("0x"),
            16,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            expected.to_string(),
            "cast balance {who} @ {block}"
        );
        let out = cast_at(&cast, "nonce", block, who, &proxy).await;
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            u64::from_str_radix(anvil.nonce(who, block).await.trim_start_matches("0x"), 16)
                .unwrap()
                .to_string()
        );
    }

    // A real client: an alloy provider.
    let provider = ProviderBuilder::new().connect_http(proxy.parse().unwrap());
    for block in [2, head - 2, head] {
        let who: Address = DEV_ACCOUNTS[0].parse().unwrap();
        let got = provider
            .get_balance(who)
            .block_id(block.into())
            .await
            .unwrap();
        assert_eq!(
            format!("{got:#x}"),
            anvil.balance(DEV_ACCOUNTS[0], block).await
        );
        let nonce = provider
            .get_transaction_count(who)
            .block_id(block.into())
            .await
            .unwrap();
        assert_eq!(
            format!("{nonce:#x}"),
            anvil.nonce(DEV_ACCOUNTS[0], block).await
        );
    }
    assert_eq!(provider.get_chain_id().await.unwrap(), 31337);

    // ethpir_status: the view, the upstream's head, the snapshots, bytes.
    let status = rpc(&proxy, "ethpir_status", json!([])).await.unwrap();
    assert_eq!(status["chainId"], 31337, "{status}");
    assert_eq!(status["viewBlock"], head, "{status}");
    assert_eq!(status["headBlock"], head, "{status}");
    // Active sets: each is a one-level view of its own.
    assert_eq!(status["levels"].as_array().unwrap().len(), 1, "{status}");
    assert_eq!(
        status["viewBlocks"].as_array().unwrap().len(),
        exports.len(),
        "{status}"
    );
    assert_eq!(status["levels"][0]["block"], head);
    assert!(status["levels"][0]["setupBytes"].as_u64().unwrap() > 0);
    assert!(status["bytesUp"].as_u64().unwrap() > 0 && status["bytesDown"].as_u64().unwrap() > 0);
    assert_eq!(status["privateReads"], "on");

    // Other methods go upstream; private ones never do.
    let bn = rpc(&proxy, "eth_blockNumber", json!([])).await.unwrap();
    assert_eq!(test_support::quantity(&bn), head);
    let unknown = rpc_raw(&http, &proxy, r#"{"jsonrpc":"2.0","id":7,"method":"eth_getBalance","params":["0x00000000000000000000000000000000000000aa","latest"]}"#).await;
    assert_eq!(
        unknown["error"]["code"], -32002,
        "absent from an active snapshot: {unknown}"
    );
    let missing = rpc_raw(&http, &proxy, r#"{"jsonrpc":"2.0","id":8,"method":"eth_getBalance","params":["0x00000000000000000000000000000000000000aa","0x1"]}"#).await;
    assert_eq!(missing["error"]["code"], -32001, "{missing}");
    let mut heights: Vec<u64> = exports.iter().map(|e| e.block_number).collect();
    heights.sort();
    assert_eq!(missing["error"]["data"]["available_blocks"], json!(heights));
    let seen = upstream_saw.lock().unwrap().clone();
    assert!(seen.contains(&"eth_blockNumber".to_string()), "{seen:?}");
    assert!(
        !seen
            .iter()
            .any(|m| m == "eth_getBalance" || m == "eth_getTransactionCount"),
        "private method leaked upstream: {seen:?}"
    );

    // upstream_methods = "no-address-reads": the reads that name an address
    // and are not answered privately are refused before they reach the
    // upstream; the others pass.
    let (upstream2, upstream2_saw) = start_relay(&anvil.url, passthrough()).await;
    let cache2 = tempfile::tempdir().unwrap();
    let strict = start_proxy_with(proxy::ProxyConfig {
        pir_server: server.clone(),
        upstream: Some(upstream2),
        cache_dir: cache2.path().to_path_buf(),
        upstream_methods: proxy::config::UpstreamMethods::NoAddressReads,
        ..Default::default()
    })
    .await;
    let who = DEV_ACCOUNTS[1];
    // (A log filter naming an address is read widened and filtered here:
    // e2e/tests/edges.rs.)
    let refused = proxy::config::ADDRESS_READS
        .into_iter()
        .filter(|m| !["eth_getLogs", "eth_newFilter"].contains(m));
    for method in refused {
        let params = match method {
            "eth_getStorageAt" => json!([who, "0x0", "latest"]),
            "eth_getProof" => json!([who, [], "latest"]),
            "eth_getStorageValues" => json!([{who: [format!("0x{:064x}", 0)]}, "latest"]),
            // With a blob sidecar: a call the proxy does not run itself (a
            // plain one, a creation or one over overrides it answers
            // privately where it can).
            _ => json!([{"from": who, "to": who, "data": "0x70a08231", "blobs": []}, "latest"]),
        };
        let v = rpc_raw(
            &http,
            &strict,
            &json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params}).to_string(),
        )
        .await;
        assert_eq!(v["error"]["code"], -32601, "{method}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no-address-reads"),
            "{method}: {v}"
        );
    }
    let bn = rpc(&strict, "eth_blockNumber", json!([])).await.unwrap();
    assert_eq!(test_support::quantity(&bn), head);
    let block = rpc(&strict, "eth_getBlockByNumber", json!(["0x1", false]))
        .await
        .unwrap();
    assert_eq!(block["number"], "0x1");
    let sent = rpc(
        &strict,
        "eth_sendTransaction",
        json!([{"from": DEV_ACCOUNTS[3], "to": DEV_ACCOUNTS[2], "value": "0x1"}]),
    )
    .await;
    assert!(sent.is_ok(), "a send passes: {sent:?}");
    let saw = upstream2_saw.lock().unwrap().clone();
    assert!(
        !saw.iter()
            .any(|m| proxy::config::ADDRESS_READS.contains(&m.as_str())),
        "a refused read reached the upstream: {saw:?}"
    );
    assert!(saw.contains(&"eth_sendTransaction".to_string()), "{saw:?}");

    // Historical replay through the same private path.
    let input = dir.path().join("queries.csv");
    let output = dir.path().join("answers.csv");
    let mut lines = String::from("address,block\n");
    for e in &exports {
        for r in e.records.iter().take(3) {
            lines.push_str(&format!("{:#x},{}\n", r.address.unwrap(), e.block_number));
        }
    }
    lines.push_str("0xnot-an-address,2\n0x00000000000000000000000000000000000000aa,1\n");
    std::fs::write(&input, lines).unwrap();
    let reader = ethpir_client::PrivateReader::start(&ethpir_client::ClientConfig {
        pir_server: server.clone(),
        cache_dir: dir.path().join("cache"),
        ..Default::default()
    })
    .await
    .unwrap();
    let summary = proxy::replay::replay(&reader, &input, &output, &mut |_, _| {})
        .await
        .unwrap();
    assert_eq!(summary.failed, 2);
    assert_eq!(summary.answered, 9);
    let answers = std::fs::read_to_string(&output).unwrap();
    for line in answers.lines().skip(1).filter(|l| !l.ends_with('"')) {
        let f: Vec<&str> = line.split(',').collect();
        let block: u64 = f[1].parse().unwrap();
        let expected = alloy_primitives::U256::from_str_radix(
            anvil.balance(f[0], block).await.trim_start_matches("0x"),
            16,
        )
        .unwrap();
        assert_eq!(f[3], expected.to_string(), "{line}");
    }
    anvil.stop().await;
}

/// Wallets that speak WebSocket: an alloy provider on ws:// reads balances
/// and nonces at several heights, a JSON-RPC batch goes over the socket, and
/// `eth_subscribe` for new heads is relayed from anvil's WebSocket endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn websocket_clients_read_privately_and_subscribe() {
    use alloy_provider::WsConnect;
    use jsonrpsee::core::client::{BatchResponse, ClientT};
    use jsonrpsee::core::params::BatchRequestBuilder;

    let anvil = Anvil::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (head, exports) = snapshots_of(&anvil, dir.path()).await;
    let server = start_server(&dir.path().join("store")).await;
    let upstream = format!("ws://127.0.0.1:{}", anvil.port);
    let proxy = start_proxy(&server, Some(upstream), &dir.path().join("cache")).await;
    for e in &exports {
        wait_for_block(&proxy, &format!("{:#x}", e.block_number)).await;
    }
    let ws_url = proxy.replacen("http://", "ws://", 1);

    // An alloy provider over ws://: balances and nonces at several heights.
    let provider = ProviderBuilder::new()
        .connect_ws(WsConnect::new(ws_url.clone()))
        .await
        .unwrap();
    for block in [2, head - 2, head] {
        for who in [DEV_ACCOUNTS[0], DEV_ACCOUNTS[2]] {
            let address: Address = who.parse().unwrap();
            let balance = provider
                .get_balance(address)
                .block_id(block.into())
                .await
                .unwrap();
            assert_eq!(format!("{balance:#x}"), anvil.balance(who, block).await);
            let nonce = provider
                .get_transaction_count(address)
                .block_id(block.into())
                .await
                .unwrap();
            assert_eq!(format!("{nonce:#x}"), anvil.nonce(who, block).await);
        }
    }
    assert_eq!(provider.get_chain_id().await.unwrap(), 31337);
    // A forwarded method over the socket.
    assert_eq!(provider.get_block_number().await.unwrap(), head);

    // A batch over WebSocket: private reads and a forwarded call, in order.
    let client = jsonrpsee::ws_client::WsClientBuilder::default()
        .build(&ws_url)
        .await
        .unwrap();
    let mut batch = BatchRequestBuilder::new();
    for who in DEV_ACCOUNTS {
        batch.insert("eth_getBalance", (who, "latest")).unwrap();
    }
    batch
        .insert("eth_blockNumber", jsonrpsee::rpc_params![])
        .unwrap();
    let answers: BatchResponse<String> = client.batch_request(batch).await.unwrap();
    let answers: Vec<String> = answers.into_ok().unwrap().collect();
    assert_eq!(answers.len(), DEV_ACCOUNTS.len() + 1);
    for (who, got) in DEV_ACCOUNTS.iter().zip(&answers) {
        assert_eq!(got, &anvil.balance(who, head).await, "batched {who}");
    }
    assert_eq!(test_support::quantity(&json!(answers[4])), head);

    // eth_subscribe newHeads, relayed from anvil's WebSocket endpoint.
    let mut heads = provider.subscribe_blocks().await.unwrap();
    anvil
        .send(json!({"from": DEV_ACCOUNTS[1], "to": DEV_ACCOUNTS[3], "value": "0x1"}))
        .await;
    let header = tokio::time::timeout(std::time::Duration::from_secs(10), heads.recv())
        .await
        .expect("a new head within 10 s")
        .unwrap();
    assert_eq!(header.number, head + 1);
    drop(client);

    // Without a WebSocket upstream, a subscription gets a clear error.
    let cache = tempfile::tempdir().unwrap();
    let plain = start_proxy(&server, Some(anvil.url.clone()), cache.path()).await;
    let client = jsonrpsee::ws_client::WsClientBuilder::default()
        .build(plain.replacen("http://", "ws://", 1))
        .await
        .unwrap();
    let attempt = jsonrpsee::core::client::SubscriptionClientT::subscribe::<serde_json::Value, _>(
        &client,
        "eth_subscribe",
        jsonrpsee::rpc_params!["newHeads"],
        "eth_unsubscribe",
    )
    .await;
    let Err(refused) = attempt else {
        panic!("a subscription without a WebSocket upstream");
    };
    assert!(
        refused.to_string().contains("WebSocket upstream"),
        "{refused}"
    );
    anvil.stop().await;
}

//! The edges of the privacy promise (brief section 17), on anvil with the
//! whole state followed (nothing listed, every level read by PIR) and a
//! recording relay in front of the node as the upstream:
//!
//! - at start: proxies asked `balanceOf(holder)` the moment they listen
//!   answer it (never "not ready"), a server that refuses its catalog
//!   for the proxy's first second included, and never send it upstream;
//!   the proxy remembers that the server held the whole state, and a
//!   proxy that remembers it refuses address reads over a server that no
//!   longer claims it;
//! - every path out passes one gate: the call methods a denylist missed
//!   (`debug_traceCall`, `trace_call`, `eth_callMany`), log filters and
//!   `logs` subscriptions naming the holder are refused, while `newHeads`
//!   and filters naming no address pass; `eth_simulateV1` is run here;
//! - browsers: a page on another loopback port can make the proxy run
//!   nothing (no-cors `text/plain`, a JSON fetch, a WebSocket), while an
//!   extension wallet's JSON works and `ethpir_trustReset` is never run
//!   for it;
//! - after 300 `balanceOf` calls of distinct holders, a fresh holder's
//!   call costs what the first one did.

use crate::common;

use alloy_primitives::{Address, U256};
use alloy_sol_types::{SolCall, SolValue};
use common::*;
use serde_json::{json, Value};
use test_support::{browser, proxy_status as status, Anvil, DEV_ACCOUNTS};

alloy_sol_types::sol! {
    interface IToken {
        function mint(address to, uint256 amount);
        function transfer(address to, uint256 amount) returns (bool);
        function balanceOf(address holder) returns (uint256);
    }
}

/// ERC-20's `Transfer(address,address,uint256)`.
const TRANSFER: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

/// The holder whose address must never leave.
fn holder() -> Address {
    dev(2)
}

/// An address as a log topic.
fn topic(a: Address) -> String {
    format!("0x{:0>64}", alloy_primitives::hex::encode(a))
}

/// Whether any relayed call names `who` (as an address or in a word).
fn names(calls: &[Value], who: Address) -> bool {
    let needle = alloy_primitives::hex::encode(who);
    calls
        .iter()
        .any(|c| c.to_string().to_lowercase().contains(&needle))
}

fn balance_of(token: Address, who: Address) -> Value {
    call_object(token, &IToken::balanceOfCall { holder: who }.abi_encode())
}

/// A JSON-RPC call's whole reply (result or error).
async fn reply(proxy: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    test_support::rpc_raw(&reqwest::Client::new(), proxy, &body.to_string()).await
}

/// anvil with a token (OpenZeppelin's ERC-20, the holder and another
/// minted 1,000: two `Transfer` logs), followed
/// whole from its genesis; the PIR server over the follower's store.
struct WholeChain {
    anvil: Anvil,
    follower: Follower,
    server: String,
    token: Address,
}

impl WholeChain {
    async fn start(dir: &std::path::Path) -> Self {
        let genesis = dir.join("genesis.json");
        test_support::write_genesis(&genesis);
        let anvil = Anvil::start_from_genesis(&genesis).await;
        let store = dir.join("store");
        let mut config = follow_config(&store, &anvil.url, &genesis, 0, 4, 256);
        config.source.storage = snapshotter::follow::StorageScope::All;
        config.build.whole_table_max_records = 0;
        let follower = Follower::start(config);
        let server = start_server(&store).await;
        // The base first (the follower checks the genesis file against
        // block 0), then the token.
        let probe = fresh_proxy(&server, None).await;
        view_reaches(&probe.0, 0).await;
        let mut init = test_support::openzeppelin_bytecode("ERC20PresetMinterPauser");
        init.extend(("Edge token".to_string(), "EDGE".to_string()).abi_encode_params());
        let token: Address = anvil.deploy(DEV_ACCOUNTS[0], &init).await.parse().unwrap();
        let mint = IToken::mintCall {
            to: holder(),
            amount: U256::from(1000u64),
        };
        send(&anvil, 0, token, mint.abi_encode()).await;
        let mint = IToken::mintCall {
            to: dev(3),
            amount: U256::from(1000u64),
        };
        send(&anvil, 0, token, mint.abi_encode()).await;
        // Every proxy below starts when the server serves the head.
        view_reaches(&probe.0, anvil.head().await).await;
        WholeChain {
            anvil,
            follower,
            server,
            token,
        }
    }
}

/// A proxy with the default settings over `server`, `upstream` its
/// upstream, a cache of its own; a request at start waits for the first
/// view as long as a request may take (10 s: a loaded machine's start).
async fn fresh_proxy(server: &str, upstream: Option<String>) -> (String, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server.to_string(),
        upstream,
        cache_dir: cache.path().to_path_buf(),
        start_wait_secs: 10.0,
        ..Default::default()
    })
    .await;
    (proxy, cache)
}

/// The proxy's page data (`/status.json`).
async fn page_of(proxy: &str) -> Value {
    let url = format!("{proxy}/status.json");
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_address_never_leaves_at_the_edges() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let chain = WholeChain::start(dir.path()).await;
    let (upstream, _, relayed) = start_recording_relay(&chain.anvil.url, passthrough()).await;
    let head = chain.anvil.head().await;
    let at = format!("{head:#x}");
    let call = balance_of(chain.token, holder());

    // At start: asked the moment each listens, each answers (its first
    // request waits for the server's first catalog), never "not ready".
    let mut caches = Vec::new();
    for _ in 0..5 {
        let (proxy, cache) = fresh_proxy(&chain.server, Some(upstream.clone())).await;
        let v = reply(&proxy, "eth_call", json!([call, at])).await;
        let want = chain.anvil.rpc("eth_call", json!([call, at])).await;
        assert_eq!(v.get("result"), Some(&want), "the first call at start: {v}");
        caches.push((proxy, cache));
    }
    let late = a_server_late_at_start_still_answers(&chain, &upstream, &call, &at).await;
    caches.insert(0, late);
    let seen = relayed.lock().unwrap().clone();
    assert!(
        !names(&seen, holder()),
        "the holder went upstream at start: {seen:?}"
    );
    let (proxy, cache) = caches.pop().unwrap();
    assert_eq!(status(&proxy).await["wholeState"], json!(true));
    let remembered = std::fs::read_dir(cache.path().join("whole-state"))
        .unwrap()
        .count();
    assert_eq!(
        remembered, 1,
        "the proxy remembers the server held the whole state"
    );

    other_call_methods_are_refused(&proxy, &relayed, chain.token).await;
    logs_naming_the_holder_stay_private(&proxy, &chain, &relayed).await;
    subscriptions_pass_the_gate(&chain).await;
    a_widened_subscription_past_its_budget_is_closed(&chain).await;
    a_web_page_runs_nothing(&proxy, &chain).await;
    a_call_costs_what_it_reads(&proxy, &chain, &upstream).await;
    padding_reads_the_calls_view(&chain, &upstream).await;
    a_call_past_its_evm_time_is_geths_timeout(&chain, &upstream).await;
    filter_ids_are_the_proxys_own(&proxy, &chain, &upstream).await;

    let seen = relayed.lock().unwrap().clone();
    assert!(
        !names(&seen, holder()),
        "the holder went upstream: {seen:?}"
    );
    chain.follower.stop().await;
    chain.anvil.stop().await;
}

/// A call that runs past `evm_timeout_ms` (a loop until its gas is gone)
/// is answered with geth's timeout error, as a node past its
/// `--rpc.evmtimeout` answers it, and sent nowhere; an estimate of it too,
/// never an estimate made of attempts cut short. Within the default 5 s
/// the same call fails as the node's does (out of gas), not by time.
async fn a_call_past_its_evm_time_is_geths_timeout(chain: &WholeChain, upstream: &str) {
    // Created by a transaction, so that the follower's traces carry it:
    // PUSH3 0x5b5f56 PUSH0 MSTORE PUSH1 3 PUSH1 29 RETURN.
    let init = alloy_primitives::hex!("625b5f565f526003601df3");
    let looping = chain
        .anvil
        .deploy(test_support::DEV_ACCOUNTS[3], &init)
        .await;
    let head = chain.anvil.head().await;
    let at = format!("{head:#x}");
    let call = json!({"from": holder(), "to": looping});
    let cache = tempfile::tempdir().unwrap();
    let hasty = start_proxy_with(proxy::ProxyConfig {
        pir_server: chain.server.clone(),
        upstream: Some(upstream.to_string()),
        cache_dir: cache.path().to_path_buf(),
        evm_timeout_ms: 1,
        ..Default::default()
    })
    .await;
    view_reaches(&hasty, head).await;
    for method in ["eth_call", "eth_estimateGas"] {
        let v = reply(&hasty, method, json!([call, at])).await;
        assert_eq!(v["error"]["code"], -32000, "{method}: {v}");
        assert_eq!(
            v["error"]["message"], "execution aborted (timeout = 1ms)",
            "{method}: {v}"
        );
    }
    let simulated = json!([{"blockStateCalls": [{"calls": [call]}]}, at]);
    let v = reply(&hasty, "eth_simulateV1", simulated).await;
    assert_eq!(v["error"]["code"], -32603, "{v}");
    let (patient, _patient_cache) = fresh_proxy(&chain.server, Some(upstream.to_string())).await;
    view_reaches(&patient, head).await;
    for method in ["eth_call", "eth_estimateGas"] {
        let v = reply(&patient, method, json!([call, at])).await;
        let node = reply(&chain.anvil.url, method, json!([call, at])).await;
        assert!(
            v["error"].is_object() && node["error"].is_object(),
            "{method}: {v} {node}"
        );
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.contains("timeout"), "{method}: {v}");
    }
}

/// A PIR server that refuses its catalog (503) for the first second of a
/// proxy (started together, say): the proxy's first call, asked the
/// moment it listens, waits and is answered. Returns the proxy and its
/// cache (kept while it runs).
async fn a_server_late_at_start_still_answers(
    chain: &WholeChain,
    upstream: &str,
    call: &Value,
    at: &str,
) -> (String, tempfile::TempDir) {
    // Refused for a second from the first catalog request on.
    let first = std::sync::Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    let asked = first.clone();
    let not_yet: Refuse = std::sync::Arc::new(move |path| {
        if path != "/v1/snapshots" {
            return false;
        }
        let first = *asked
            .lock()
            .unwrap()
            .get_or_insert_with(std::time::Instant::now);
        first.elapsed() < std::time::Duration::from_secs(1)
    });
    let (late, _, _) = start_relay_refusing(&chain.server, passthrough(), not_yet).await;
    let (proxy, cache) = fresh_proxy(&late, Some(upstream.to_string())).await;
    let v = reply(&proxy, "eth_call", json!([call, at])).await;
    let want = chain.anvil.rpc("eth_call", json!([call, at])).await;
    assert_eq!(v.get("result"), Some(&want), "a server late at start: {v}");
    assert!(
        first.lock().unwrap().is_some(),
        "the catalog was refused first"
    );
    (proxy, cache)
}

/// The methods that take a call object, which a denylist missed, are
/// refused with an error naming the setting; `eth_simulateV1` is run
/// here (its call's answer is `eth_call`'s); nothing reaches the node.
async fn other_call_methods_are_refused(proxy: &str, relayed: &RelayedCalls, token: Address) {
    let call = balance_of(token, holder());
    let simulated = reply(
        proxy,
        "eth_simulateV1",
        json!([{"blockStateCalls": [{"calls": [call]}]}, "latest"]),
    )
    .await;
    let direct = reply(proxy, "eth_call", json!([call, "latest"])).await;
    let ran = &simulated["result"][0]["calls"][0];
    assert_eq!(ran["status"], "0x1", "{simulated}");
    assert!(direct["result"].is_string(), "{direct}");
    assert_eq!(ran["returnData"], direct["result"], "{simulated}");
    let asks = [
        ("debug_traceCall", json!([call, "latest", {}])),
        ("trace_call", json!([call, ["trace"], "latest"])),
        ("eth_callMany", json!([[{"transactions": [call]}], {}, {}])),
    ];
    for (method, params) in asks {
        let v = reply(proxy, method, params).await;
        assert_eq!(v["error"]["code"], -32601, "{method}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("upstream_methods = \"auto\""),
            "{method}: {v}"
        );
    }
    let seen = relayed.lock().unwrap().clone();
    let sent = |m: &str| seen.iter().any(|c| c["method"] == m);
    for method in [
        "eth_simulateV1",
        "debug_traceCall",
        "trace_call",
        "eth_callMany",
    ] {
        assert!(!sent(method), "{method} reached the node");
    }
    let page = page_of(proxy).await;
    let refused = &page["activity"]["sinceStart"]["refused"];
    assert_eq!(refused["debug_traceCall"], 1, "{page}");
    assert!(refused.get("eth_simulateV1").is_none(), "{page}");
}

/// A log filter naming the holder (in a topic, or the token as the
/// address with the holder in a topic) is answered with the node's logs
/// for that filter, byte for byte, read widened: nothing naming the holder
/// reaches the node. A widened `eth_newFilter`'s logs are filtered too,
/// and a filter past `logs_max_blocks` is refused.
async fn logs_naming_the_holder_stay_private(
    proxy: &str,
    chain: &WholeChain,
    relayed: &RelayedCalls,
) {
    let naming = [
        json!({"fromBlock": "0x0", "topics": [TRANSFER, null, topic(holder())]}),
        json!({"fromBlock": "0x0", "address": chain.token, "topics": [null, null, [topic(holder())]]}),
        json!({"fromBlock": "0x0", "address": [holder()]}),
    ];
    for filter in naming {
        let v = reply(proxy, "eth_getLogs", json!([filter])).await;
        let node = chain.anvil.rpc("eth_getLogs", json!([filter])).await;
        assert_eq!(v["result"], node, "{filter}: {v}");
        let id = reply(proxy, "eth_newFilter", json!([filter])).await["result"].clone();
        let logs = reply(proxy, "eth_getFilterLogs", json!([id])).await;
        assert_eq!(logs["result"], node, "{filter}: {logs}");
    }
    // A topic that names someone without being an address (an NFT's token
    // id, an ENS node): not sent either, matched here.
    let id = format!("0x{}", "ab".repeat(32));
    let by_id = json!({"fromBlock": "0x0", "topics": [TRANSFER, null, null, id]});
    let v = reply(proxy, "eth_getLogs", json!([by_id])).await;
    assert_eq!(
        v["result"],
        chain.anvil.rpc("eth_getLogs", json!([by_id])).await,
        "{v}"
    );
    let one = reply(proxy, "eth_getLogs", json!([naming_holder()])).await;
    assert_eq!(one["result"].as_array().map(Vec::len), Some(1), "{one}");
    let wide = json!({"fromBlock": "0x0", "toBlock": "0x400", "topics": [TRANSFER, null, topic(holder())]});
    let v = reply(proxy, "eth_getLogs", json!([wide])).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("logs_max_blocks"),
        "{v}"
    );
    let seen = relayed.lock().unwrap().clone();
    assert!(
        seen.iter().any(|c| c["method"] == "eth_getLogs"),
        "read widened upstream"
    );
    assert!(!names(&seen, holder()), "{seen:?}");
    assert!(
        !seen
            .iter()
            .any(|c| c.to_string().contains(&"ab".repeat(32))),
        "the token id reached the node: {seen:?}"
    );
}

/// Filter ids are the proxy's own: the node knows none of them, and a
/// proxy that did not hand an id out (one restarted, say) answers geth's
/// "filter not found", never the node's widened changes, which would
/// carry a mint to another address unfiltered. The proxy that made it
/// filters them; a block filter works the same way; uninstalling says
/// whether the id was known.
async fn filter_ids_are_the_proxys_own(proxy: &str, chain: &WholeChain, upstream: &str) {
    let filter = json!({"topics": [TRANSFER, null, topic(holder())]});
    let id = reply(proxy, "eth_newFilter", json!([filter])).await["result"].clone();
    let blocks = reply(proxy, "eth_newBlockFilter", json!([])).await["result"].clone();
    assert!(id.is_string() && blocks.is_string(), "{id} {blocks}");
    for own in [&id, &blocks] {
        let node = test_support::rpc(&chain.anvil.url, "eth_getFilterChanges", json!([own])).await;
        assert!(
            node.is_err(),
            "the node knows the proxy's id {own}: {node:?}"
        );
    }
    let (restarted, _cache) = fresh_proxy(&chain.server, Some(upstream.to_string())).await;
    view_reaches(&restarted, 0).await;
    let mint = IToken::mintCall {
        to: dev(3),
        amount: U256::from(7u64),
    };
    send(&chain.anvil, 0, chain.token, mint.abi_encode()).await;
    for own in [&id, &blocks] {
        let v = reply(&restarted, "eth_getFilterChanges", json!([own])).await;
        assert_eq!(v["error"]["code"], -32000, "{v}");
        assert_eq!(v["error"]["message"], "filter not found", "{v}");
        let v = reply(&restarted, "eth_uninstallFilter", json!([own])).await;
        assert_eq!(v["result"], json!(false), "{v}");
    }
    let v = reply(proxy, "eth_getFilterChanges", json!([id])).await;
    assert_eq!(
        v["result"],
        json!([]),
        "the mint to another is filtered out: {v}"
    );
    let v = reply(proxy, "eth_getFilterChanges", json!([blocks])).await;
    assert!(
        v["result"]
            .as_array()
            .is_some_and(|hashes| !hashes.is_empty()),
        "the mint's block: {v}"
    );
    for own in [&id, &blocks] {
        let v = reply(proxy, "eth_uninstallFilter", json!([own])).await;
        assert_eq!(v["result"], json!(true), "{v}");
        let v = reply(proxy, "eth_getFilterChanges", json!([own])).await;
        assert_eq!(v["error"]["message"], "filter not found", "{v}");
    }
}

/// Runtime code that emits `logs` Transfer-shaped logs (three topics: the
/// Transfer event, dev(3), `to`), each of `bytes` of data.
fn log_emitter(to: Address, logs: usize, bytes: u32) -> Vec<u8> {
    let word = |w: [u8; 32]| [&[0x7f][..], &w].concat();
    let topic2 = word(to.into_word().0);
    let topic1 = word(dev(3).into_word().0);
    let event: [u8; 32] = alloy_primitives::hex::decode(TRANSFER)
        .unwrap()
        .try_into()
        .unwrap();
    let size = bytes.to_be_bytes();
    let one = [
        topic2,
        topic1,
        word(event),
        // PUSH3 size, PUSH1 0, LOG3
        vec![0x62, size[1], size[2], size[3], 0x60, 0x00, 0xa3],
    ]
    .concat();
    one.repeat(logs)
}

/// A `logs` subscription naming the holder is read widened (every
/// Transfer); past `logs_max_mib` of them in a minute it is closed with an
/// error, never thinned out in silence nor kept open without bound. A
/// contract emits 14 Transfer logs of 40 KiB each to another address, in
/// each of two transactions (2.3 MB of notifications): none is the
/// holder's, the subscription ends.
async fn a_widened_subscription_past_its_budget_is_closed(chain: &WholeChain) {
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: chain.server.clone(),
        upstream: Some(chain.anvil.url.replacen("http://", "ws://", 1)),
        cache_dir: cache.path().to_path_buf(),
        logs_max_mib: 1,
        ..Default::default()
    })
    .await;
    view_reaches(&proxy, 0).await;
    // (The client lives as long as its subscription.)
    let (_ws, mut logs) = holders_logs(&proxy).await;
    let emitter = Address::with_last_byte(0xe7);
    let code =
        alloy_primitives::Bytes::from(log_emitter(Address::with_last_byte(0x44), 14, 40 << 10));
    chain
        .anvil
        .rpc("anvil_setCode", json!([emitter, code]))
        .await;
    for _ in 0..2 {
        send(&chain.anvil, 3, emitter, Vec::new()).await;
    }
    let ended = tokio::time::timeout(test_support::PATIENCE, logs.next())
        .await
        .expect("the subscription ends within the patience");
    assert!(
        !matches!(ended, Some(Ok(_))),
        "no log of another reaches the wallet: {ended:?}"
    );
}

/// A WebSocket client of `proxy` and its `logs` subscription naming the
/// holder (read widened).
async fn holders_logs(
    proxy: &str,
) -> (
    jsonrpsee::ws_client::WsClient,
    jsonrpsee::core::client::Subscription<Value>,
) {
    use jsonrpsee::core::client::SubscriptionClientT;
    let ws = jsonrpsee::ws_client::WsClientBuilder::default()
        .build(proxy.replacen("http://", "ws://", 1))
        .await
        .unwrap();
    let filter = json!({"topics": [TRANSFER, null, topic(holder())]});
    let logs = ws
        .subscribe::<Value, _>(
            "eth_subscribe",
            jsonrpsee::rpc_params!["logs", filter],
            "eth_unsubscribe",
        )
        .await
        .expect("a logs subscription naming the holder, widened");
    (ws, logs)
}

/// The filter of the holder's incoming transfers, from block 0.
fn naming_holder() -> Value {
    json!({"fromBlock": "0x0", "topics": [TRANSFER, null, topic(holder())]})
}

/// Over a WebSocket upstream: `newHeads` is relayed, and a `logs`
/// subscription naming the holder is opened widened and delivers the
/// holder's logs only (a transfer to another is filtered out here).
async fn subscriptions_pass_the_gate(chain: &WholeChain) {
    use jsonrpsee::core::client::SubscriptionClientT;
    let ws_node = chain.anvil.url.replacen("http://", "ws://", 1);
    let (proxy, _cache) = fresh_proxy(&chain.server, Some(ws_node)).await;
    view_reaches(&proxy, 0).await;
    let (ws, mut logs) = holders_logs(&proxy).await;
    let mut heads = ws
        .subscribe::<Value, _>(
            "eth_subscribe",
            jsonrpsee::rpc_params!["newHeads"],
            "eth_unsubscribe",
        )
        .await
        .expect("newHeads passes");
    // dev(3) pays another, then the holder: only the second is the
    // holder's.
    for to in [Address::with_last_byte(0x44), holder()] {
        let transfer = IToken::transferCall {
            to,
            amount: U256::from(7u64),
        };
        send(&chain.anvil, 3, chain.token, transfer.abi_encode()).await;
    }
    let head = tokio::time::timeout(test_support::PATIENCE, heads.next())
        .await
        .expect("a new head within the patience")
        .expect("a head")
        .unwrap();
    assert!(head["hash"].is_string(), "{head}");
    let log = tokio::time::timeout(test_support::PATIENCE, logs.next())
        .await
        .expect("the holder's log within the patience")
        .expect("a log")
        .unwrap();
    assert_eq!(log["topics"][2], json!(topic(holder())), "{log}");
    assert_eq!(log["topics"][1], json!(topic(dev(3))), "{log}");
    let page = page_of(&proxy).await;
    let counts = &page["activity"]["sinceStart"];
    assert_eq!(counts["upstream"]["eth_subscribe"], 2, "{page}");
    assert!(
        page["activity"]["named"].as_array().unwrap().is_empty(),
        "{page}"
    );
}

/// A page served from another loopback port tries a no-cors
/// `text/plain` POST (a balance, and `ethpir_trustReset`), a JSON fetch
/// and a WebSocket: the proxy runs none of them. An extension wallet's
/// JSON request is answered, and its `ethpir_trustReset` is not run.
async fn a_web_page_runs_nothing(proxy: &str, chain: &WholeChain) {
    let private_reads = || async {
        let page = page_of(proxy).await;
        page["activity"]["sinceStart"]["private"]["eth_getBalance"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = private_reads().await;
    let html = include_str!("edges_page.html")
        .replace("PROXY", proxy.trim_start_matches("http://"))
        .replace("HOLDER", &holder().to_string());
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || async move { axum::response::Html(html) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let page = format!("http://{}/", listener.local_addr().unwrap());
    let served = tokio::spawn(async move { axum::serve(listener, app).await });
    let dom = browser::dom(&page).await;
    served.abort();
    assert!(dom.contains("done"), "the page's script ran: {dom}");
    assert!(dom.contains("json: blocked"), "{dom}");
    assert!(dom.contains("ws: refused"), "{dom}");
    let balance = chain
        .anvil
        .rpc("eth_getBalance", json!([holder(), "latest"]))
        .await;
    assert!(!dom.contains(balance.as_str().unwrap()), "{dom}");
    assert_eq!(private_reads().await, before, "a page's request was run");

    // An extension wallet (MetaMask's origin): its JSON is answered; the
    // user's own method is not run for it.
    let http = reqwest::Client::new();
    let ask = |method: &str, params: Value| {
        http.post(proxy)
            .header(
                "origin",
                "chrome-extension://nkbihfbeogaeaoehlefnkodbefgpgknn",
            )
            .header("content-type", "application/json")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string(),
            )
            .send()
    };
    let v: Value = ask("eth_getBalance", json!([holder(), "latest"]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v["result"].is_string(), "{v}");
    let v: Value = ask("ethpir_trustReset", json!([]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["error"]["code"], -32601, "{v}");
    // Its status carries no counter (a page could watch `pirKeys` rise by
    // one on a first read and not on a repeat), a program's does.
    let v: Value = ask("ethpir_status", json!([]))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(v["result"]["viewBlock"].is_u64(), "{v}");
    for counter in ["pirKeys", "bytesUp", "bytesDown", "idle"] {
        assert!(v["result"].get(counter).is_none(), "{counter}: {v}");
    }
    let own = test_support::proxy_status(proxy).await;
    assert!(own["pirKeys"].is_u64(), "{own}");
    let data = http
        .get(format!("{proxy}/status.json"))
        .header(
            "origin",
            "chrome-extension://nkbihfbeogaeaoehlefnkodbefgpgknn",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(data.status(), 403, "the page's data to an extension");
    let plain = http
        .post(proxy)
        .header(
            "origin",
            "chrome-extension://nkbihfbeogaeaoehlefnkodbefgpgknn",
        )
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 415);
}

/// PIR queries the server has answered, over every snapshot.
async fn queries_answered(server: &str) -> u64 {
    metrics_text(server)
        .await
        .lines()
        .filter(|l| l.starts_with("ethpir_queries_total"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// 300 `balanceOf` calls of distinct holders; then, at a newer block
/// (where no answer kept at the older one hides a key asked again), a
/// fresh holder's call asks the server what it asks of a proxy that made
/// no call before (within 2x), not every holder's word asked since; the
/// holder's own call stays right.
async fn a_call_costs_what_it_reads(proxy: &str, chain: &WholeChain, upstream: &str) {
    let older = view_reaches(proxy, chain.anvil.head().await).await;
    let at = format!("{older:#x}");
    for i in 0..300u64 {
        let who = Address::left_padding_from(&(0x1000 + i).to_be_bytes());
        let v = reply(proxy, "eth_call", json!([balance_of(chain.token, who), at])).await;
        assert!(v["result"].is_string(), "{v}");
    }
    chain.anvil.rpc("evm_mine", json!([])).await;
    let newer = chain.anvil.head().await;
    let (unused, _cache) = fresh_proxy(&chain.server, Some(upstream.to_string())).await;
    view_reaches(&unused, newer).await;
    view_reaches(proxy, newer).await;
    let at = format!("{newer:#x}");
    let queries_of = |p: String, who: Address| {
        let at = at.clone();
        async move {
            let before = queries_answered(&chain.server).await;
            same_as_anvil(&p, &chain.anvil, &balance_of(chain.token, who), &at).await;
            queries_answered(&chain.server).await - before
        }
    };
    let baseline = queries_of(unused.clone(), Address::with_last_byte(0x51)).await;
    let fresh = queries_of(proxy.to_string(), Address::with_last_byte(0x52)).await;
    assert!(
        fresh <= 2 * baseline,
        "after 300 holders a fresh holder's call asked {fresh} queries, a proxy's first {baseline}"
    );
    queries_of(proxy.to_string(), holder()).await;
}

/// Queries the server has answered of each snapshot, by its id.
async fn queries_by_level(server: &str) -> std::collections::HashMap<String, u64> {
    let prefix = "ethpir_queries_total{snapshot=\"";
    metrics_text(server)
        .await
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.strip_prefix(prefix)?.split_once("\"}")?;
            Some((id.to_string(), rest.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// A call's padding (`pad_call_rounds_to`) reads the call's own view: a
/// call pinned at an older block sends its 4 requests, the padding after
/// the answer, to that block's levels only; the newer level is never
/// asked (the server cannot tell padding from a read at the newest view).
async fn padding_reads_the_calls_view(chain: &WholeChain, upstream: &str) {
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: chain.server.clone(),
        upstream: Some(upstream.to_string()),
        cache_dir: cache.path().to_path_buf(),
        pad_call_rounds_to: 4,
        canaries_per_request: 0,
        ..Default::default()
    })
    .await;
    let older = view_reaches(&proxy, chain.anvil.head().await).await;
    let transfer = IToken::transferCall {
        to: Address::with_last_byte(0x45),
        amount: U256::from(1u64),
    };
    send(&chain.anvil, 3, chain.token, transfer.abi_encode()).await;
    let newer = view_reaches(&proxy, chain.anvil.head().await).await;
    assert!(newer > older);
    let before = queries_by_level(&chain.server).await;
    let requests = route_requests(&chain.server, "query", true).await;
    let call = balance_of(chain.token, Address::with_last_byte(0x53));
    same_as_anvil(&proxy, &chain.anvil, &call, &format!("{older:#x}")).await;
    test_support::eventually("the call's rounds and padding: 4 requests", || async {
        let sent = route_requests(&chain.server, "query", true).await - requests;
        (sent >= 4).then_some(())
    })
    .await;
    let after = queries_by_level(&chain.server).await;
    let block_of = |id: &str| id.split('-').nth(1).and_then(|b| b.parse::<u64>().ok());
    let asked: Vec<(&String, u64)> = after
        .iter()
        .map(|(id, n)| (id, n - before.get(id).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(!asked.is_empty());
    for (id, _) in &asked {
        let block = block_of(id).unwrap_or_else(|| panic!("a level's id: {id}"));
        assert!(
            block <= older,
            "padding of a call at {older} asked {id}: {asked:?}"
        );
    }
}

/// A proxy that remembers (in its cache) that its server held the whole
/// state refuses address reads over a server that no longer claims it
/// (the same URL, now a follower that holds a list), with a warning on
/// the page; one whose PIR server is gone refuses them as not ready; one
/// that does not remember forwards them as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_stops_holding_the_whole_state_is_not_trusted_to_forward() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, follower, server) = followed_chain(dir.path(), 256).await;
    let (upstream, _, relayed) = start_recording_relay(&anvil.url, passthrough()).await;
    let chain = test_support::quantity(&anvil.rpc("eth_chainId", json!([])).await);
    let proof = json!([dev(1), [], "latest"]);

    let cache = tempfile::tempdir().unwrap();
    proxy::gate::WholeStateMemory::open(cache.path(), &server).remember(chain);
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server.clone(),
        upstream: Some(upstream.clone()),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    })
    .await;
    view_reaches(&proxy, 0).await;
    assert_eq!(status(&proxy).await["wholeState"], json!(false));
    let v = reply(&proxy, "eth_getProof", proof.clone()).await;
    assert_eq!(v["error"]["code"], -32003, "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("served the whole state before"), "{v}");
    let page = page_of(&proxy).await;
    let warnings = page["activity"]["warnings"].to_string();
    assert!(
        warnings.contains("served the whole state before"),
        "{warnings}"
    );
    let sent = || {
        relayed
            .lock()
            .unwrap()
            .iter()
            .any(|c| c["method"] == "eth_getProof")
    };
    assert!(!sent(), "refused, yet sent");

    // A proxy whose PIR server is gone (nothing listens there): it never
    // learns what the server holds, so nothing naming an address goes.
    let gone = format!("http://127.0.0.1:{}", test_support::free_port());
    let (lost, _lost_cache) = fresh_proxy(&gone, Some(upstream.clone())).await;
    let call = json!([{"to": dev(1), "data": "0x70a08231"}, "latest"]);
    let simulated = json!([{"blockStateCalls": [{"calls": [call[0]]}]}, "latest"]);
    let asks = [
        ("eth_getProof", proof.clone()),
        ("eth_call", call),
        ("eth_simulateV1", simulated),
    ];
    for (method, params) in asks {
        let v = reply(&lost, method, params).await;
        assert_eq!(v["error"]["code"], -32003, "{method}: {v}");
    }
    assert!(!sent(), "nothing sent while the server is unknown");
    let named = |m: &str| relayed.lock().unwrap().iter().any(|c| c["method"] == m);
    for method in ["eth_call", "eth_simulateV1"] {
        assert!(!named(method), "{method} sent while the server is unknown");
    }

    // Without the memory, the same server's list lets it go.
    let (fresh, _cache) = fresh_proxy(&server, Some(upstream)).await;
    view_reaches(&fresh, 0).await;
    let v = reply(&fresh, "eth_getProof", proof).await;
    assert!(v["result"].is_object(), "{v}");
    assert!(sent(), "forwarded over a list");
    follower.stop().await;
    anvil.stop().await;
}

/// A PIR server's front that holds the downloads of delta setups until
/// released (what a slow link does to a proxy that just read the
/// catalog), passing the headers that matter on.
#[derive(Clone)]
struct HoldingFront {
    server: String,
    http: reqwest::Client,
    held: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    release: tokio::sync::watch::Receiver<bool>,
}

async fn hold_delta_setups(
    axum::extract::State(front): axum::extract::State<HoldingFront>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    method: axum::http::Method,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if uri.path().contains("-delta-") && uri.path().ends_with("/setup") {
        front.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut release = front.release.clone();
        let _ = release.wait_for(|go| *go).await;
    }
    let url = format!("{}{}", front.server, uri.path());
    let mut ask = front.http.request(method, url).body(body);
    for name in [
        "if-match",
        "if-none-match",
        "content-type",
        "accept-encoding",
    ] {
        if let Some(v) = headers.get(name) {
            ask = ask.header(name, v);
        }
    }
    let resp = ask.send().await.unwrap();
    let status = resp.status();
    let mut out = axum::http::HeaderMap::new();
    for (name, v) in resp.headers() {
        if ["etag", "content-type", "content-encoding"].contains(&name.as_str()) {
            out.insert(name.clone(), v.clone());
        }
    }
    (status, out, resp.bytes().await.unwrap()).into_response()
}

/// A level replaced under the same id (a reorg rebuilds the deltas of the
/// blocks it replaced) after a proxy read the catalog and before it
/// downloaded the level's setup: the proxy asks for the build its catalog
/// named (`If-Match`), the server answers 412, and the proxy reads the
/// level as retired and the new catalog's build next; it never finds
/// another setup than its catalog's, which it would take for tampering
/// and stop every private read (issue 54: an honest server distrusted in
/// 1 run of 4 under reorgs).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_level_replaced_by_a_reorg_is_not_taken_for_tampering() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let genesis = dir.path().join("genesis.json");
    test_support::write_genesis(&genesis);
    let anvil = Anvil::start_from_genesis(&genesis).await;
    let store = dir.path().join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis, 0, 4, 256);
    // Every level read by PIR (a small delta is otherwise downloaded whole).
    config.build.whole_table_max_records = 0;
    let follower = Follower::start(config);
    let server = start_server(&store).await;
    let (probe, _probe_cache) = fresh_proxy(&server, None).await;
    view_reaches(&probe, 0).await;
    let pay = |to: Address, value: u64| json!({"from": DEV_ACCOUNTS[1], "to": to, "value": format!("{value:#x}")});
    let paid = Address::with_last_byte(0x71);
    let snapshot = anvil.rpc("evm_snapshot", json!([])).await;
    anvil.send(pay(paid, 1000)).await;
    anvil.send(pay(paid, 1)).await;
    let head = anvil.head().await;
    view_reaches(&probe, head).await;

    // A proxy behind a front that holds its delta setups.
    let (go, release) = tokio::sync::watch::channel(false);
    let held = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let front = HoldingFront {
        server: server.clone(),
        http: reqwest::Client::new(),
        held: held.clone(),
        release,
    };
    let app = axum::Router::new()
        .fallback(hold_delta_setups)
        .with_state(front);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let front_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (proxy, _cache) = fresh_proxy(&front_url, None).await;
    let holding = || async { (held.load(std::sync::atomic::Ordering::SeqCst) > 0).then_some(()) };
    test_support::eventually("the proxy asks for a delta's setup", holding).await;

    // The reorg: the same blocks again, another payment; the follower
    // rebuilds their levels under the same ids.
    assert_eq!(
        anvil.rpc("evm_revert", json!([snapshot])).await,
        json!(true)
    );
    anvil.send(pay(paid, 2000)).await;
    anvil.send(pay(paid, 2)).await;
    assert_eq!(anvil.head().await, head, "the same blocks, replaced");
    let at = format!("{head:#x}");
    let rebuilt = || async {
        let v = reply(&probe, "eth_getBalance", json!([paid, at])).await;
        (v["result"] == "0x7d2").then_some(())
    };
    test_support::eventually("the server serves the rebuilt levels", rebuilt).await;

    // The held downloads now meet the new builds.
    go.send(true).unwrap();
    let answered = || async {
        let v = reply(&proxy, "eth_getBalance", json!([paid, at])).await;
        assert_ne!(v["error"]["code"], -32004, "taken for tampering: {v}");
        (v["result"] == "0x7d2").then_some(())
    };
    test_support::eventually("the proxy reads the new builds", answered).await;
    assert_eq!(status(&proxy).await["privateReads"], "on");
    follower.stop().await;
    anvil.stop().await;
}

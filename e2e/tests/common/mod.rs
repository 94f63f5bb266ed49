//! Shared pieces of the proxy's end-to-end tests: a PIR server and a proxy on
//! free loopback ports, and HTTP middlemen (a recording upstream, a
//! tampering link).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, Uri};
use axum::response::IntoResponse;
use axum::Router;
use pir_core::wire::decode_responses;
use proxy::ProxyConfig;

mod socks;
pub use socks::*;

pub async fn start_server(store: &std::path::Path) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = server::ServerConfig {
        store: store.to_path_buf(),
        listen: addr,
        rescan_secs: 0.2,
        ..Default::default()
    };
    tokio::spawn(server::serve_on(listener, config, std::future::pending()));
    format!("http://{addr}")
}

/// The bundled mainnet genesis snapshot in a store under `dir`, and a PIR
/// server over it.
pub async fn start_genesis_server(dir: &std::path::Path) -> String {
    let store = snapshotter::SnapshotStore::open(dir.join("store")).unwrap();
    demo::ensure_genesis_snapshot(&store).unwrap();
    start_server(&dir.join("store")).await
}

pub async fn start_proxy(
    pir_server: &str,
    upstream: Option<String>,
    cache: &std::path::Path,
) -> String {
    start_proxy_with(ProxyConfig {
        pir_server: pir_server.to_string(),
        upstream,
        cache_dir: cache.to_path_buf(),
        ..Default::default()
    })
    .await
}

/// A proxy on a free loopback port with `config` (its listen address, a
/// 0.2-s catalog refresh and a 10-s timeout set here).
pub async fn start_proxy_with(config: ProxyConfig) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ProxyConfig {
        listen: addr,
        refresh_secs: 0.2,
        request_timeout_secs: 10,
        ..config
    };
    log_if_asked();
    tokio::spawn(proxy::serve_on(listener, config, std::future::pending()));
    format!("http://{addr}")
}

/// A follower's configuration for a test: `anvil_url` followed from the
/// `genesis` file into `store`, polled every 100 ms, `confirmations`
/// behind the head, deltas merged by `fanout` and kept `keep_blocks`
/// blocks, hints on the CPU.
pub fn follow_config(
    store: &std::path::Path,
    anvil_url: &str,
    genesis: &std::path::Path,
    confirmations: u64,
    fanout: u64,
    keep_blocks: u64,
) -> snapshotter::follow::FollowConfig {
    use snapshotter::follow::{FollowConfig, SourceConfig, Timing};
    use snapshotter::settings::BuildSettings;
    FollowConfig {
        store: Some(store.to_path_buf()),
        source: SourceConfig {
            url: Some(anvil_url.to_string()),
            genesis: Some(genesis.to_path_buf()),
            ..Default::default()
        },
        follow: Timing {
            poll_ms: 100,
            confirmations,
            ws_url: None,
            ..Default::default()
        },
        levels: snapshotter::levels::LevelPolicy {
            fanout,
            keep_blocks,
            ..Default::default()
        },
        hot: Default::default(),
        build: BuildSettings {
            device: snapshotter::settings::Device::Cpu,
            ..Default::default()
        },
    }
}

/// anvil on the test genesis (written in `dir`), a follower keeping
/// `keep_blocks` blocks of views into a store under `dir`, and a PIR
/// server over that store.
pub async fn followed_chain(
    dir: &std::path::Path,
    keep_blocks: u64,
) -> (test_support::Anvil, Follower, String) {
    let genesis = dir.join("genesis.json");
    test_support::write_genesis(&genesis);
    let anvil = test_support::Anvil::start_from_genesis(&genesis).await;
    let store = dir.join("store");
    let config = follow_config(&store, &anvil.url, &genesis, 0, 4, keep_blocks);
    let follower = Follower::start(config);
    let server = start_server(&store).await;
    // The base first: the follower checks the genesis file against the
    // node's block 0, which anvil answers from its live state while that
    // is its head, so a block mined meanwhile would fail the check.
    wait_for_base(&server).await;
    (anvil, follower, server)
}

/// Polls until `server` lists a snapshot (a follower's base published).
pub async fn wait_for_base(server: &str) {
    let listed = || async {
        let catalog: serde_json::Value = reqwest::get(format!("{server}/v1/snapshots"))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let empty = catalog["snapshots"].as_array()?.is_empty();
        (!empty).then_some(())
    };
    test_support::eventually("the server lists the follower's base", listed).await;
}

/// A follower running `config` until [`Follower::stop`].
pub struct Follower {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), snapshotter::follow::FollowError>>,
}

impl Follower {
    pub fn start(config: snapshotter::follow::FollowConfig) -> Follower {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(snapshotter::follow::run(config, async move {
            let _ = stopped.await;
        }));
        Follower { stop, task }
    }

    /// Stops it, and fails if it had failed or does not stop in 60 s (or
    /// if the user's side logged an address: [`assert_no_address_logged`]).
    pub async fn stop(self) {
        assert_no_address_logged();
        self.stop.send(()).unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(60), self.task)
            .await
            .expect("the follower stops")
            .unwrap()
            .unwrap();
    }
}

/// What a middleman does to the bytes it relays.
pub type Rewrite = Arc<dyn Fn(&str, Bytes) -> Bytes + Send + Sync>;

#[derive(Clone)]
struct Relay {
    target: String,
    http: reqwest::Client,
    seen: Arc<Mutex<Vec<String>>>,
    /// Every JSON-RPC call relayed, whole.
    calls: Arc<Mutex<Vec<serde_json::Value>>>,
    rewrite: Rewrite,
    /// Paths answered 503 instead of passed on, while it says so.
    refuse: Refuse,
}

/// Whether a relay answers a request for this path 503 (a server whose
/// queue is full, or going away) instead of passing it on.
pub type Refuse = Arc<dyn Fn(&str) -> bool + Send + Sync>;

async fn relay(State(r): State<Relay>, method: Method, uri: Uri, body: Bytes) -> impl IntoResponse {
    if (r.refuse)(uri.path()) {
        return axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
        let calls = if let Some(a) = v.as_array() {
            a.clone()
        } else {
            vec![v]
        };
        for c in calls {
            if let Some(m) = c.get("method").and_then(|m| m.as_str()) {
                r.seen.lock().unwrap().push(m.to_string());
            }
            r.calls.lock().unwrap().push(c);
        }
    }
    let url = format!(
        "{}{}",
        r.target,
        uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")
    );
    let req = r
        .http
        .request(method, url)
        .header("content-type", "application/json")
        .body(body);
    match req.send().await {
        Ok(resp) => {
            let status = resp.status();
            let bytes = resp.bytes().await.unwrap_or_default();
            (status, (r.rewrite)(uri.path(), bytes)).into_response()
        }
        Err(_) => axum::http::StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// An HTTP middleman to `target`: records JSON-RPC method names and
/// rewrites response bodies. Returns its URL and the recorded methods.
pub async fn start_relay(target: &str, rewrite: Rewrite) -> (String, Arc<Mutex<Vec<String>>>) {
    let (url, seen, _) = start_recording_relay(target, rewrite).await;
    (url, seen)
}

/// Every JSON-RPC call a relay passed on, whole.
pub type RelayedCalls = Arc<Mutex<Vec<serde_json::Value>>>;

/// [`start_relay`], also recording every call whole (what a node learns).
pub async fn start_recording_relay(
    target: &str,
    rewrite: Rewrite,
) -> (String, Arc<Mutex<Vec<String>>>, RelayedCalls) {
    start_relay_refusing(target, rewrite, Arc::new(|_| false)).await
}

/// [`start_recording_relay`] that answers 503 for the paths `refuse`
/// names at the time of the request.
pub async fn start_relay_refusing(
    target: &str,
    rewrite: Rewrite,
    refuse: Refuse,
) -> (String, Arc<Mutex<Vec<String>>>, RelayedCalls) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let state = Relay {
        target: target.trim_end_matches('/').to_string(),
        // A connection of its own for every request: a pooled one that the
        // target closed while idle (anvil's server does) could be taken
        // just as it closes, and the relay would answer 502 to a request
        // the target never saw.
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("a client"),
        seen: seen.clone(),
        calls: calls.clone(),
        rewrite,
        refuse,
    };
    let app = Router::new().fallback(relay).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen, calls)
}

pub fn passthrough() -> Rewrite {
    Arc::new(|_, b| b)
}

/// Polls until the proxy answers `eth_getBalance` at `block` (snapshots load
/// in the background).
pub async fn wait_for_block(proxy: &str, block: &str) {
    let http = reqwest::Client::new();
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x0000000000000000000000000000000000000000","{block}"]}}"#
    );
    let served = || async {
        let resp = http.post(proxy).body(body.clone()).send().await.ok()?;
        let v: serde_json::Value =
            serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or_default();
        let code = v.pointer("/error/code").and_then(|c| c.as_i64());
        (v.get("result").is_some() || code == Some(-32002)).then_some(())
    };
    test_support::eventually(&format!("the proxy serves block {block}"), served).await;
}

/// Every account of the bundled mainnet genesis: (address, balance as a
/// 0x quantity), in the file's order.
pub fn genesis_balances() -> Vec<(String, String)> {
    let v: serde_json::Value =
        serde_json::from_str(snapshotter::sources::genesis::MAINNET_GENESIS).unwrap();
    v["alloc"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(a, acc)| {
            let wei = alloy_primitives::U256::from_str_radix(
                acc["balance"].as_str().unwrap().trim_start_matches("0x"),
                16,
            )
            .unwrap();
            (format!("0x{a}"), format!("{wei:#x}"))
        })
        .collect()
}

/// `method uri` with `body` sent on to `honest` (same path): its status
/// and body, for the hostile fronts that relay what they do not sabotage.
pub async fn relay_to(
    http: &reqwest::Client,
    honest: &str,
    method: Method,
    uri: &Uri,
    body: Bytes,
) -> (axum::http::StatusCode, Bytes) {
    let url = format!("{honest}{}", uri.path());
    let resp = http.request(method, url).body(body).send().await.unwrap();
    (resp.status(), resp.bytes().await.unwrap())
}

/// `bytes` one per second: a server that answers, slowly.
pub fn trickle(bytes: Bytes) -> axum::body::Body {
    let chunks = futures_util::stream::unfold(0usize, move |at| {
        let bytes = bytes.clone();
        async move {
            if at >= bytes.len() {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            Some((Ok::<_, std::io::Error>(bytes.slice(at..at + 1)), at + 1))
        }
    });
    axum::body::Body::from_stream(chunks)
}

/// What a traced relay saw: each query request's shape (the queries it
/// asked of each PIR level, in the request's order).
pub type Trace = Arc<Mutex<Vec<Vec<usize>>>>;

/// A relay in front of `server` that records every query request's shape,
/// and answers each query request `slower` later (a server far away, or
/// a large database: a request's time is then mostly the server's).
pub async fn traced_server(server: &str, slower: std::time::Duration) -> (String, Trace) {
    let trace: Trace = Arc::default();
    let seen = trace.clone();
    let rewrite: Rewrite = Arc::new(move |path: &str, b: Bytes| {
        if path.ends_with("/query") {
            // (The relay's worker waits: the test's runtime has others.)
            std::thread::sleep(slower);
            let parts = protocol::multi::decode_response(&b).unwrap_or_default();
            let counts = parts
                .iter()
                .map(|p| decode_responses(p).map(|r| r.len()).unwrap_or(0))
                .collect();
            seen.lock().unwrap().push(counts);
        }
        b
    });
    let (url, _) = start_relay(server, rewrite).await;
    (url, trace)
}

/// The requests `during` makes the server answer, by shape.
pub async fn traced<T>(
    trace: &Trace,
    during: impl std::future::Future<Output = T>,
) -> Vec<Vec<usize>> {
    let before = trace.lock().unwrap().len();
    during.await;
    trace.lock().unwrap()[before..].to_vec()
}

/// A relay in front of `server` that passes on the query requests
/// `allowed` still lets through (each takes one), answering 503 to the
/// rest: a server that goes away after so many.
pub async fn going_away(server: &str) -> (String, Arc<std::sync::atomic::AtomicI64>) {
    use std::sync::atomic::{AtomicI64, Ordering};
    let allowed = Arc::new(AtomicI64::new(i64::MAX));
    let left = allowed.clone();
    let refuse: Refuse = Arc::new(move |path: &str| {
        path.ends_with("/query") && left.fetch_sub(1, Ordering::SeqCst) <= 0
    });
    let (link, _, _) = start_relay_refusing(server, passthrough(), refuse).await;
    (link, allowed)
}

/// Requests a PIR server has answered on `route` (its metrics label), from
/// its own `/metrics`: with status 200 only, or with any status.
pub async fn route_requests(server: &str, route: &str, ok_only: bool) -> u64 {
    let label = format!("route=\"{route}\"");
    metrics_text(server)
        .await
        .lines()
        .filter(|l| l.starts_with("ethpir_http_requests_total") && l.contains(&label))
        .filter(|l| !ok_only || l.contains("\"200\""))
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

/// A PIR server's own `/metrics` (Prometheus text).
pub async fn metrics_text(server: &str) -> String {
    let resp = reqwest::get(format!("{server}/metrics")).await.unwrap();
    resp.text().await.unwrap()
}

/// The creation code of a test contract compiled into e2e/contracts
/// (scripts/compile-test-contracts.sh).
pub fn test_contract(name: &str) -> Vec<u8> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("contracts/{name}.bin"));
    let hex = std::fs::read_to_string(&path).unwrap();
    alloy_primitives::hex::decode(hex.trim()).unwrap()
}

/// Anvil's dev account `i`.
pub fn dev(i: usize) -> alloy_primitives::Address {
    test_support::DEV_ACCOUNTS[i].parse().unwrap()
}

/// A call from dev account `from` to `to` that must succeed.
pub async fn send(
    anvil: &test_support::Anvil,
    from: usize,
    to: alloy_primitives::Address,
    data: Vec<u8>,
) {
    anvil
        .transact(
            test_support::DEV_ACCOUNTS[from],
            Some(&to.to_string()),
            &data,
        )
        .await;
}

/// Multicall3 at its canonical address, as a genesis file's alloc holds
/// it (as on mainnet, where its creation long precedes any snapshot).
pub async fn multicall3_account() -> (String, serde_json::Value) {
    let multicall = test_support::runtime_code(&test_support::multicall3_bytecode()).await;
    let account = serde_json::json!({"balance": "0x1", "nonce": "0x1", "code": multicall});
    (protocol::tokens::MULTICALL3.to_string(), account)
}

/// `call` (an `eth_call` object) at `at`, through the proxy and at anvil:
/// equal, byte for byte. The proxy's answer.
pub async fn same_as_anvil(
    proxy: &str,
    anvil: &test_support::Anvil,
    call: &serde_json::Value,
    at: &str,
) -> serde_json::Value {
    let private = test_support::rpc(proxy, "eth_call", serde_json::json!([call, at]))
        .await
        .unwrap();
    let node = anvil.rpc("eth_call", serde_json::json!([call, at])).await;
    assert_eq!(private, node, "{call} at {at}");
    private
}

/// An `eth_call` object.
pub fn call_object(to: alloy_primitives::Address, data: &[u8]) -> serde_json::Value {
    serde_json::json!({"to": to, "data": alloy_primitives::hex::encode_prefixed(data)})
}

/// The nonce dev account `i` sends its next transaction with (the
/// addresses of the contracts it creates next follow from it).
pub async fn next_nonce(anvil: &test_support::Anvil, i: usize) -> u64 {
    let params = serde_json::json!([test_support::DEV_ACCOUNTS[i], "latest"]);
    test_support::quantity(&anvil.rpc("eth_getTransactionCount", params).await)
}

/// Logs of everything the test runs (the follower, server and proxy in
/// this process) when `ETHPIR_TEST_LOG` names a filter
/// (`ETHPIR_TEST_LOG=info cargo test ... -- --nocapture`); and, whatever
/// it names, the user's side's lines at `info` and above watched for
/// addresses ([`assert_no_address_logged`]). Installed once per process,
/// by every proxy a test starts.
pub fn log_if_asked() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        use tracing_subscriber::layer::{Layer as _, SubscriberExt as _};
        use tracing_subscriber::util::SubscriberInitExt as _;
        let printed = std::env::var("ETHPIR_TEST_LOG").ok().and_then(|filter| {
            let filter: tracing_subscriber::filter::Targets = filter.parse().ok()?;
            Some(
                tracing_subscriber::fmt::layer()
                    .with_test_writer()
                    .with_filter(filter),
            )
        });
        let _ = tracing_subscriber::registry()
            .with(AddressWatch)
            .with(printed)
            .try_init();
    });
}

/// The user's side's crates, whose lines at `info` and above must name no
/// address (the operator's crates, running in the same process, log
/// theirs).
const USER_SIDE: &[&str] = &["proxy", "ethpir_client", "call_exec"];

/// Lines the user's side logged at `info` and above that name an address.
static NAMING: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Fails the test when a line the user's side logged at `info` or above,
/// by any test of this process so far, named an address (a 40-hex-digit
/// run, or a 32-byte word holding one).
pub fn assert_no_address_logged() {
    let naming = NAMING.lock().unwrap().clone();
    assert!(
        naming.is_empty(),
        "lines at info and above name an address: {naming:#?}"
    );
}

/// Whether `text` holds an address: a run of exactly 40 hex digits, or a
/// run of 64 whose first 24 are zeros (an address as a word or topic).
fn names_an_address(text: &str) -> bool {
    // (`0x` splits off at its `x`.)
    text.split(|c: char| !c.is_ascii_hexdigit())
        .any(|run| run.len() == 40 || (run.len() == 64 && run.starts_with(&"0".repeat(24))))
}

/// The layer that records the user's side's lines naming an address.
struct AddressWatch;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for AddressWatch {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        let user_side = USER_SIDE
            .iter()
            .any(|c| meta.target() == *c || meta.target().starts_with(&format!("{c}::")));
        if !user_side || *meta.level() > tracing::Level::INFO {
            return;
        }
        struct Line(String);
        impl tracing::field::Visit for Line {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!(" {}={value:?}", field.name()));
            }
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        if names_an_address(&line.0) {
            let line = format!("{} {}:{}", meta.level(), meta.target(), line.0);
            NAMING.lock().unwrap().push(line);
        }
    }
}

/// Polls until the proxy's newest view is at `block` or later; that
/// block. At 0: until it has a view at all (its first catalog adopted,
/// whatever `eth_chainId` says before it, the upstream's chain with an
/// upstream).
pub async fn view_reaches(proxy: &str, block: u64) -> u64 {
    assert_no_address_logged();
    let reached = || async {
        test_support::proxy_status(proxy).await["viewBlock"]
            .as_u64()
            .filter(|b| *b >= block)
    };
    test_support::eventually(&format!("the proxy's view reaches block {block}"), reached).await
}

/// anvil (chain `chain_id`) from the test genesis with Multicall3 in its
/// alloc; the genesis file written in `dir`.
pub async fn chain_with_multicall3(
    dir: &std::path::Path,
    chain_id: &str,
) -> (test_support::Anvil, std::path::PathBuf) {
    let genesis_path = dir.join("genesis.json");
    test_support::write_genesis_with(&genesis_path, vec![multicall3_account().await]);
    let anvil = test_support::Anvil::start_with(&[
        "--init",
        genesis_path.to_str().unwrap(),
        "--chain-id",
        chain_id,
    ])
    .await;
    (anvil, genesis_path)
}

/// An `eth_call` at `at` through the proxy and at anvil: the whole
/// response (result or error) the same.
pub async fn same_response_as_anvil(
    proxy: &str,
    anvil: &test_support::Anvil,
    call: &serde_json::Value,
    at: &str,
) -> serde_json::Value {
    let http = reqwest::Client::new();
    let body =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_call", "params": [call, at]});
    let private = test_support::rpc_raw(&http, proxy, &body.to_string()).await;
    let node = test_support::rpc_raw(&http, &anvil.url, &body.to_string()).await;
    assert_eq!(private, node, "{call} at {at}");
    private
}

/// A transaction as a wallet prepares it, through the proxy and at
/// anvil: its eth_call byte for byte, its access list and the gas used
/// with it the same, its estimate close to anvil's (both search within
/// 1.5 %) and enough at anvil.
pub async fn same_transaction(
    proxy: &str,
    anvil: &test_support::Anvil,
    tx: &serde_json::Value,
    at: &str,
) {
    same_response_as_anvil(proxy, anvil, tx, at).await;
    let private = test_support::rpc(proxy, "eth_createAccessList", serde_json::json!([tx, at]))
        .await
        .unwrap();
    let node = anvil
        .rpc("eth_createAccessList", serde_json::json!([tx, at]))
        .await;
    assert_eq!(as_set(&private), as_set(&node), "{private} vs {node}");
    assert_eq!(private["gasUsed"], node["gasUsed"], "{private} vs {node}");
    let private = test_support::rpc(proxy, "eth_estimateGas", serde_json::json!([tx, at]))
        .await
        .unwrap();
    let node = anvil
        .rpc("eth_estimateGas", serde_json::json!([tx, at]))
        .await;
    let (private, node) = (
        test_support::quantity(&private),
        test_support::quantity(&node),
    );
    assert!(
        private.abs_diff(node) as f64 / (node as f64) < 0.03,
        "estimate {private}, anvil's {node}"
    );
    let mut enough = tx.clone();
    enough["gas"] = serde_json::json!(format!("{private:#x}"));
    let ran = test_support::rpc(&anvil.url, "eth_call", serde_json::json!([enough, at])).await;
    assert!(ran.is_ok(), "{ran:?} with the estimate");
}

/// An access list's addresses and address/slot pairs, as a set.
pub fn as_set(answer: &serde_json::Value) -> std::collections::BTreeSet<String> {
    let items = answer["accessList"].as_array().expect("an access list");
    let mut set = std::collections::BTreeSet::new();
    for item in items {
        let address = item["address"].as_str().unwrap().to_lowercase();
        for key in item["storageKeys"].as_array().unwrap() {
            set.insert(format!("{address}/{}", key.as_str().unwrap()));
        }
        set.insert(address);
    }
    set
}

alloy_sol_types::sol! {
    interface IMarketFactory {
        function create(uint256 supply) returns (address token);
    }
    interface IMarketToken {
        function approve(address spender, uint256 amount) returns (bool);
    }
    interface IMarketPool {
        function addLiquidity(uint256 amount);
    }
}

/// A token made by a factory (test contract `TokenFactory`), a
/// constant-product pool of it and ETH (`Pool`) with half the supply and
/// 10 ETH of liquidity from dev account 0, and a router (`Router`).
pub struct PoolMarket {
    pub token: alloy_primitives::Address,
    pub pool: alloy_primitives::Address,
    pub router: alloy_primitives::Address,
}

/// Deploys creation code `code` from dev account 0: its address.
pub async fn deploy_code(anvil: &test_support::Anvil, code: &[u8]) -> alloy_primitives::Address {
    let at = anvil.deploy(test_support::DEV_ACCOUNTS[0], code).await;
    at.parse().unwrap()
}

/// Deploys test contract `name` from dev account 0, its constructor given
/// `arg` (an address) where it takes one: its address.
pub async fn deploy_test_contract(
    anvil: &test_support::Anvil,
    name: &str,
    arg: Option<alloy_primitives::Address>,
) -> alloy_primitives::Address {
    use alloy_sol_types::SolValue;
    let mut code = test_contract(name);
    if let Some(arg) = arg {
        code.extend_from_slice(&arg.abi_encode());
    }
    deploy_code(anvil, &code).await
}

/// Multicall3's `aggregate3` of `calls` (target, call data), each with
/// `allow_failure`.
pub fn aggregate3(calls: &[(alloy_primitives::Address, Vec<u8>)], allow_failure: bool) -> Vec<u8> {
    use alloy_sol_types::SolCall;
    use protocol::tokens::IMulticall3;
    let calls = calls
        .iter()
        .map(|(target, data)| IMulticall3::Call3 {
            target: *target,
            allowFailure: allow_failure,
            callData: data.clone().into(),
        })
        .collect();
    IMulticall3::aggregate3Call { calls }.abi_encode()
}

/// Deploys a [`PoolMarket`] from dev account 0 and funds its pool.
pub async fn deploy_pool_market(anvil: &test_support::Anvil) -> PoolMarket {
    use alloy_primitives::U256;
    use alloy_sol_types::SolCall;
    let factory = deploy_test_contract(anvil, "TokenFactory", None).await;
    let supply = U256::from(10u64).pow(U256::from(24u8));
    let create = IMarketFactory::createCall { supply };
    send(anvil, 0, factory, create.abi_encode()).await;
    // A contract's first creation has nonce 1.
    let token = factory.create(1);
    let pool = deploy_test_contract(anvil, "Pool", Some(token)).await;
    let router = deploy_test_contract(anvil, "Router", None).await;
    let approve = IMarketToken::approveCall {
        spender: pool,
        amount: U256::MAX,
    };
    send(anvil, 0, token, approve.abi_encode()).await;
    let liquidity = IMarketPool::addLiquidityCall {
        amount: supply / U256::from(2u8),
    };
    let receipt = anvil
        .send(serde_json::json!({
            "from": test_support::DEV_ACCOUNTS[0], "to": pool, "value": "0x8ac7230489e80000", "gas": "0x4c4b40",
            "data": alloy_primitives::hex::encode_prefixed(liquidity.abi_encode()),
        }))
        .await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    PoolMarket {
        token,
        pool,
        router,
    }
}

/// The harness's name of the test `name` in the module `module` (its
/// `module_path!()`): the path without the crate's name, which `--exact`
/// matches when a test runs this binary again for one test alone.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_string(),
    }
}

/// The follower (`config`), a PIR server over its store, a recording
/// relay in front of anvil and a proxy with the default settings over
/// them (the BalanceChecker at `checker`, if any), once the proxy has a
/// view.
pub struct Stack {
    pub follower: Follower,
    pub server: String,
    pub upstream: String,
    pub relayed: RelayedCalls,
    pub proxy: String,
    pub _cache: tempfile::TempDir,
}

impl Stack {
    pub async fn start(
        config: snapshotter::follow::FollowConfig,
        anvil: &test_support::Anvil,
        checker: Option<alloy_primitives::Address>,
    ) -> Self {
        let store = config.store.clone().expect("a store");
        let follower = Follower::start(config);
        let server = start_server(&store).await;
        let (upstream, _, relayed) = start_recording_relay(&anvil.url, passthrough()).await;
        let cache = tempfile::tempdir().unwrap();
        let proxy = start_proxy_with(proxy::ProxyConfig {
            pir_server: server.clone(),
            upstream: Some(upstream.clone()),
            cache_dir: cache.path().to_path_buf(),
            balance_checker: checker,
            ..Default::default()
        })
        .await;
        // The base first (the follower checks the genesis file against the
        // node's block 0, which anvil may answer from later state once
        // blocks are mined under load).
        view_reaches(&proxy, 0).await;
        Stack {
            follower,
            server,
            upstream,
            relayed,
            proxy,
            _cache: cache,
        }
    }
}

/// What the viem script `e2e/js/<script>` prints (one JSON value) when run
/// against `url` with `spec`, with the installed viem package.
pub fn viem_script(script: &str, url: &str, spec: &serde_json::Value) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("js")
        .join(script);
    let out = std::process::Command::new("node")
        .arg(&path)
        .arg(url)
        .arg(spec.to_string())
        .env("VIEM", test_support::node_modules().join("viem"))
        .output()
        .expect("node runs (install Node.js)");
    assert!(
        out.status.success(),
        "viem failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

//! A PIR server that lies in its catalog cannot hurt the proxy: ids that
//! are not ids (`_`, `/`, `..`, empty, 300 bytes), digests that are paths,
//! 10,000 chained deltas, 16 MiB of entries, an id listed twice, a delta
//! whose base is missing. The proxy runs as a process of its own (this
//! test binary started again in proxy mode) so that its memory and its log
//! are its own: it stays under 128 MiB, every call gets a JSON-RPC error,
//! nothing panics, and once the server is honest again it answers right.
//! And a server that sends its catalog one byte a second does not keep
//! the proxy from answering: it listens at once.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use common::*;
use serde_json::{json, Value};

/// Most memory the proxy may hold, whatever the catalog.
const RSS_LIMIT: u64 = 128 << 20;

/// What the front serves.
#[derive(Clone)]
enum Mode {
    /// Everything relayed from the honest server.
    Honest,
    /// This catalog body; every other route 404.
    Catalog(Bytes),
    /// The honest catalog, one byte a second.
    Trickle,
}

#[derive(Clone)]
struct Front {
    honest: String,
    http: reqwest::Client,
    mode: Arc<Mutex<Mode>>,
    /// Catalog requests answered (with a whole body) so far.
    catalogs: Arc<Mutex<u64>>,
}

async fn serve(State(front): State<Front>, method: Method, uri: Uri, body: Bytes) -> Response {
    let is_catalog = uri.path() == "/v1/snapshots";
    let mode = front.mode.lock().unwrap().clone();
    let response = match mode {
        Mode::Honest => relay_to(&front.http, &front.honest, method, &uri, body)
            .await
            .into_response(),
        Mode::Catalog(catalog) if is_catalog => catalog.into_response(),
        Mode::Catalog(_) => StatusCode::NOT_FOUND.into_response(),
        Mode::Trickle if is_catalog => {
            let (status, bytes) = relay_to(&front.http, &front.honest, method, &uri, body).await;
            return (status, trickle(bytes)).into_response();
        }
        Mode::Trickle => StatusCode::NOT_FOUND.into_response(),
    };
    if is_catalog {
        *front.catalogs.lock().unwrap() += 1;
    }
    response
}

async fn start_front(honest: &str, mode: Mode) -> Front {
    let front = Front {
        honest: honest.to_string(),
        http: reqwest::Client::new(),
        mode: Arc::new(Mutex::new(mode)),
        catalogs: Arc::new(Mutex::new(0)),
    };
    let app = Router::new().fallback(serve).with_state(front.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Front {
        honest: format!("http://{addr}"),
        ..front
    }
}

/// The proxy, as a process of its own: this test binary run again with
/// only [`proxy_process`], which serves `proxy::serve_on` (what
/// `ethpir-proxy` runs) with its log on stderr, written to `log`.
struct ProxyProcess {
    child: tokio::process::Child,
    url: String,
}

impl ProxyProcess {
    fn start(pir_server: &str, cache: &Path, log: &Path) -> ProxyProcess {
        let port = test_support::free_port();
        let child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &test_path(module_path!(), "proxy_process")])
            .args(["--ignored", "--nocapture"])
            .env("ETHPIR_TEST_PIR_SERVER", pir_server)
            .env("ETHPIR_TEST_LISTEN", format!("127.0.0.1:{port}"))
            .env("ETHPIR_TEST_CACHE", cache)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        ProxyProcess {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    fn rss(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib << 10
    }

    async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the proxy process of the hostile-catalog tests, started by them"]
async fn proxy_process() {
    let var = |name: &str| std::env::var(name).unwrap();
    protocol::logging::init("info").unwrap();
    let listen: std::net::SocketAddr = var("ETHPIR_TEST_LISTEN").parse().unwrap();
    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    let config = proxy::ProxyConfig {
        listen,
        pir_server: var("ETHPIR_TEST_PIR_SERVER"),
        cache_dir: var("ETHPIR_TEST_CACHE").into(),
        refresh_secs: 0.2,
        request_timeout_secs: 10,
        start_wait_secs: 2.0,
        ..Default::default()
    };
    proxy::serve_on(listener, config, std::future::pending())
        .await
        .unwrap();
}

/// One JSON-RPC call; `None` while nothing answers on `url`.
async fn try_call(url: &str, method: &str, params: Value) -> Option<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .ok()?;
    resp.json().await.ok()
}

async fn call(url: &str, method: &str, params: Value) -> Value {
    try_call(url, method, params)
        .await
        .unwrap_or_else(|| panic!("{method}: no answer"))
}

/// The honest catalog's JSON and its base's entry (the genesis snapshot).
async fn honest_catalog(honest: &str) -> (Value, Value) {
    let catalog: Value = reqwest::get(format!("{honest}/v1/snapshots"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let base = catalog["snapshots"][0].clone();
    assert_eq!(base["kind"], "full", "{base}");
    (catalog, base)
}

fn catalog_of(entries: Vec<Value>) -> Bytes {
    Bytes::from(json!({"snapshots": entries, "max_batch": 16}).to_string())
}

/// `base` turned into another snapshot: `kind` (with `from` for a delta) at
/// `block`, listed under its own id.
fn entry_at(base: &Value, block: u64, from: Option<u64>) -> Value {
    let mut e = base.clone();
    e["block_number"] = block.into();
    match from {
        Some(from) => {
            e["kind"] = "delta".into();
            e["from"] = from.into();
            e["id"] = format!("1-{block}-delta-{from}").into();
        }
        None => e["id"] = format!("1-{block}-full").into(),
    }
    e
}

/// The hostile catalogs, each with what it is.
fn hostile_catalogs(base: &Value) -> Vec<(&'static str, Bytes)> {
    let with = |field: &str, value: Value| {
        let mut e = base.clone();
        e[field] = value;
        catalog_of(vec![e])
    };
    let mut digest_path = base.clone();
    digest_path["pir"]["setup_digest"] = "../../../../tmp/ethpir-owned".into();
    let mut file_path = base.clone();
    for (_, file) in file_path["files"].as_object_mut().unwrap() {
        file["sha3_256"] = "/etc/passwd".into();
    }
    let chained: Vec<Value> = std::iter::once(base.clone())
        .chain((1..=10_000).map(|b| entry_at(base, b, Some(b - 1))))
        .collect();
    // Full snapshots at 10,000 blocks, each with a 1 KiB source: 16 MiB.
    let mut padded = base.clone();
    padded["source"] = "x".repeat(1000).into();
    let mut many = Vec::new();
    let mut bytes = 0;
    for b in 1.. {
        let e = entry_at(&padded, b, None);
        bytes += e.to_string().len() + 1;
        if bytes > (16 << 20) - 64 {
            break;
        }
        many.push(e);
    }
    vec![
        ("an id with '_'", with("id", "1-0-full_x".into())),
        ("an id with '/'", with("id", "1/0-full".into())),
        ("an id with '..'", with("id", "../1-0-full".into())),
        ("an empty id", with("id", "".into())),
        ("an id of 300 bytes", with("id", "1".repeat(300).into())),
        (
            "a setup digest that is a path",
            catalog_of(vec![digest_path]),
        ),
        ("file digests that are paths", catalog_of(vec![file_path])),
        ("10,000 chained deltas", catalog_of(chained)),
        ("16 MiB of entries", catalog_of(many)),
        (
            "an id listed twice",
            catalog_of(vec![base.clone(), base.clone()]),
        ),
        (
            "a delta whose base is missing",
            catalog_of(vec![entry_at(base, 6, Some(5))]),
        ),
    ]
}

/// Every private call of an address never read gets a JSON-RPC error,
/// none a result; the address read before (`known`, whose balance at
/// block 0 is `wei`) gets an error or, from the answers kept for the
/// honest base still adopted, its right balance: never another.
async fn every_call_fails(proxy: &str, known: &str, wei: &str, what: &str) {
    // An address of its own per case: never read, so only the server
    // could answer it.
    let hash = alloy_primitives::keccak256(what.as_bytes());
    let fresh = format!("{:#x}", alloy_primitives::Address::from_slice(&hash[12..]));
    for (method, params) in [
        ("eth_getBalance", json!([fresh, "latest"])),
        ("eth_getBalance", json!([fresh, "0x0"])),
        ("eth_getTransactionCount", json!([fresh, "latest"])),
    ] {
        let v = call(proxy, method, params).await;
        assert!(
            v.get("error").is_some() && v.get("result").is_none(),
            "{what}: {method} answered {v}"
        );
    }
    let v = call(proxy, "eth_getBalance", json!([known, "0x0"])).await;
    assert!(
        v.get("error").is_some() || v["result"] == Value::String(wei.to_string()),
        "{what}: a key read before answered {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_catalog_gets_errors_never_a_panic_or_the_memory() {
    let dir = tempfile::tempdir().unwrap();
    let honest = start_genesis_server(dir.path()).await;
    let (address, wei) = genesis_balances().swap_remove(0);
    let (_, base) = honest_catalog(&honest).await;
    let front = start_front(&honest, Mode::Honest).await;
    let cache = tempfile::tempdir().unwrap();
    let log = dir.path().join("proxy.log");
    let proxy = ProxyProcess::start(&front.honest, cache.path(), &log);
    let right = || async {
        let v = try_call(&proxy.url, "eth_getBalance", json!([address, "0x0"])).await?;
        (v["result"] == Value::String(wei.clone())).then_some(())
    };
    test_support::eventually("the proxy answers through the honest server", right).await;

    for (what, catalog) in hostile_catalogs(&base) {
        *front.mode.lock().unwrap() = Mode::Catalog(catalog);
        // Two whole catalogs served since the switch: the proxy has
        // fetched (and judged) this one at least once.
        let seen = *front.catalogs.lock().unwrap();
        let fetched = || async { (*front.catalogs.lock().unwrap() >= seen + 2).then_some(()) };
        test_support::eventually(what, fetched).await;
        every_call_fails(&proxy.url, &address, &wei, what).await;
        let rss = proxy.rss();
        assert!(rss < RSS_LIMIT, "{what}: the proxy holds {} MiB", rss >> 20);
        eprintln!("{what}: every call an error; proxy RSS {} MiB", rss >> 20);
    }

    // Some of those lies are caught as such (10,000 entries reusing the
    // base's setup under other blocks: a setup not built for its
    // manifest), which stops private reads (fail closed) until the user
    // trusts the server again.
    // (Reset as long as the lying catalog is still the one adopted: it
    // is caught again at once.)
    *front.mode.lock().unwrap() = Mode::Honest;
    let reset_and_read = || async {
        try_call(&proxy.url, "ethpir_trustReset", json!([])).await?;
        right().await
    };
    test_support::eventually(
        "the proxy answers again once the server is honest",
        reset_and_read,
    )
    .await;
    proxy.stop().await;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        !logged.contains("panicked"),
        "the proxy panicked:\n{logged}"
    );
    assert!(
        logged.contains("catalog refused"),
        "no refusal logged:\n{logged}"
    );
    // The process's log at info names no address it read.
    let read = address.trim_start_matches("0x").to_lowercase();
    assert!(
        !logged.to_lowercase().contains(&read),
        "the log names the address read:\n{logged}"
    );
    assert!(
        !Path::new("/tmp/ethpir-owned.setup").exists(),
        "a digest wrote outside the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_one_byte_a_second_does_not_keep_the_proxy_from_listening() {
    let dir = tempfile::tempdir().unwrap();
    let honest = start_genesis_server(dir.path()).await;
    let (address, _) = genesis_balances().swap_remove(0);
    let front = start_front(&honest, Mode::Trickle).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = ProxyProcess::start(&front.honest, cache.path(), &dir.path().join("proxy.log"));
    // It listens while the catalog trickles in (its own status answers
    // at once, however long the process takes to start).
    let listening = test_support::poll(Duration::from_secs(60), || {
        try_call(&proxy.url, "ethpir_status", json!([]))
    })
    .await;
    assert!(listening.is_some(), "the proxy never listened");
    // A wallet's request waits for the first catalog only the start wait
    // (2 s from the start here), then is told the catalog is not there:
    // under the proxy's 10-s request timeout, so a proxy that waited for
    // the trickled catalog could not answer by then.
    let asked = Instant::now();
    let v = call(&proxy.url, "eth_getBalance", json!([address, "latest"])).await;
    let took = asked.elapsed();
    let within = Duration::from_secs(8);
    assert!(took < within, "answered after {took:?}");
    assert!(v.get("error").is_some(), "{v}");
    assert!(v["error"].to_string().contains("not fetched yet"), "{v}");
    proxy.stop().await;
}

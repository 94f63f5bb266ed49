//! The server over real HTTP on loopback: catalog, setup with ETag, private
//! queries decoded by a real client, every kind of bad request, hot pickup
//! and retirement of snapshots.

use std::time::Duration;

use rand::SeedableRng;

use alloy_primitives::{Address, U256};
use pir_core::wire::{decode_responses, encode_queries};
use pir_core::{Lookup, PirClient};
use server::api::Catalog;
use server::{AnswerDevice, AnswerSettings, BatchSettings, ServerConfig};
use snapshotter::pipeline::{build_and_publish, BuildOptions, ExportedState};
use snapshotter::{AccountRecord, SnapshotKind, SnapshotStore};

fn state(block: u64, n: u64) -> ExportedState {
    ExportedState {
        chain_id: 31337,
        block_number: block,
        block_hash: None,
        state_root: None,
        block_time: None,
        parent_hash: None,
        kind: SnapshotKind::Full,
        source: "test".into(),
        storage: Vec::new(),
        listed: Default::default(),
        records: (1..=n)
            .map(|i| {
                AccountRecord::new(
                    Address::with_last_byte(i as u8)
                        .into_array()
                        .map(|b| b ^ (i >> 8) as u8)
                        .into(),
                    U256::from(i * 1000 + block),
                    i,
                )
            })
            .collect(),
        export_s: 0.0,
        codes: Vec::new(),
    }
}

/// Status of a POST that declares `len` body bytes and sends none of them.
async fn declared_length_status(url: &str, len: usize) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_at(rest.find('/').expect("a path"));
    let mut conn = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut reply = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut reply))
        .await
        .expect("the server answers without waiting for the body")
        .unwrap();
    let line = String::from_utf8_lossy(&reply[..n]);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP status line: {line:?}"))
}

fn opts() -> BuildOptions {
    BuildOptions {
        progress: None,
        ..Default::default()
    }
}

async fn start(store: &std::path::Path, workers: usize, queue: usize) -> String {
    start_with(store, workers, queue, BatchSettings::default()).await
}

async fn start_with(
    store: &std::path::Path,
    workers: usize,
    queue: usize,
    batching: BatchSettings,
) -> String {
    start_configured(ServerConfig {
        store: store.to_path_buf(),
        rescan_secs: 1.0,
        workers,
        queue,
        max_batch: 64,
        batching,
        ..Default::default()
    })
    .await
}

/// A view in a store at `dir`: a base of `accounts` at block 5 and a delta
/// at block 6 of the first `changed` of them.
fn publish_view(dir: &std::path::Path, accounts: u64, changed: u64) -> SnapshotStore {
    let store = SnapshotStore::open(dir).unwrap();
    build_and_publish(&store, state(5, accounts), &opts()).unwrap();
    let mut delta = state(6, changed);
    delta.kind = SnapshotKind::Delta { from: 5 };
    build_and_publish(&store, delta, &opts()).unwrap();
    store
}

/// Each response decoded to its record's balance and nonce.
fn assert_found(
    client: &PirClient,
    pendings: Vec<(AccountRecord, pir_core::PendingAnswer)>,
    responses: &[pir_core::Response],
) {
    for ((record, pending), response) in pendings.into_iter().zip(responses) {
        let Lookup::Found(v) = client.decode(pending, response).unwrap() else {
            panic!("absent")
        };
        assert_eq!(
            snapshotter::decode_value(&v, snapshotter::ValueLayout::WithCode)
                .unwrap()
                .balance_nonce(),
            (record.balance, record.nonce)
        );
    }
}

/// `queries` of snapshot `id` sent to `POST /v1/query` (framed by
/// protocol::multi, one snapshot named): its responses.
async fn post_queries(
    http: &reqwest::Client,
    base: &str,
    id: &str,
    queries: &[pir_core::Query],
) -> Vec<pir_core::Response> {
    let body = protocol::multi::encode_request(&[(id, &encode_queries(queries))]).unwrap();
    let resp = http
        .post(format!("{base}/v1/query"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.bytes().await.unwrap();
    let parts = protocol::multi::decode_response(&body).unwrap();
    assert_eq!(parts.len(), 1);
    decode_responses(parts[0]).unwrap()
}

/// A PIR client for snapshot `id`, from its setup over HTTP.
async fn client_for(http: &reqwest::Client, base: &str, id: &str) -> PirClient {
    let setup = http
        .get(format!("{base}/v1/snapshots/{id}/setup"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    PirClient::from_setup_bytes(&setup).unwrap()
}

/// The catalog and its ETag.
async fn catalog_with_etag(http: &reqwest::Client, base: &str) -> (String, Catalog) {
    let resp = http
        .get(format!("{base}/v1/snapshots"))
        .send()
        .await
        .unwrap();
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    (etag, resp.json().await.unwrap())
}

async fn fetch_catalog(http: &reqwest::Client, base: &str) -> Catalog {
    let bytes = http
        .get(format!("{base}/v1/snapshots"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_private_queries_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let exported = state(5, 300);
    build_and_publish(&store, exported.clone(), &opts()).unwrap();
    let base = start(dir.path(), 2, 16).await;
    let http = reqwest::Client::new();

    let catalog = fetch_catalog(&http, &base).await;
    assert_eq!(catalog.snapshots.len(), 1);
    let entry = &catalog.snapshots[0];
    assert_eq!(entry.id.url_form(), "31337-5-full");
    assert_eq!(entry.manifest.record_count, 300);

    let setup = http
        .get(format!("{base}/v1/snapshots/{}/setup", entry.id.url_form()))
        .send()
        .await
        .unwrap();
    assert_eq!(setup.status(), 200);
    let etag = setup.headers()["etag"].to_str().unwrap().to_string();
    assert_eq!(etag, format!("\"{}\"", entry.manifest.pir.setup_digest));
    let setup_bytes = setup.bytes().await.unwrap();
    let again = http
        .get(format!("{base}/v1/snapshots/{}/setup", entry.id.url_form()))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);

    // Private lookups through HTTP, a single query and a batch.
    let client = PirClient::from_setup_bytes(&setup_bytes).unwrap();
    let mut rng = rand::rng();
    let mut pendings = Vec::new();
    let mut queries = Vec::new();
    for r in exported.records.iter().take(5) {
        let (q, p) = client
            .query(client.prepare(&mut rng), r.key.as_slice())
            .unwrap();
        queries.push(q);
        pendings.push((r.clone(), p));
    }
    // Every query goes to `POST /v1/query`, framed by protocol::multi (a
    // request naming one snapshot here).
    let url = format!("{base}/v1/query");
    let to = |id: &str, batch: &[u8]| protocol::multi::encode_request(&[(id, batch)]).unwrap();
    let responses = post_queries(&http, &base, &entry.id.url_form(), &queries).await;
    assert_found(&client, pendings, &responses);
    let one = encode_queries(&queries[..1]);

    // Bad requests: truncated, trailing, random, oversized, unknown id, wrong setup.
    // A fresh connection per request: the server closes a connection after
    // refusing a body it did not read, and a pooled one would be reused.
    let once = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let status = |body: Vec<u8>| {
        let (http, url) = (once.clone(), url.clone());
        async move {
            http.post(url)
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let id = &entry.id.url_form();
    assert_eq!(status(to(id, &one[..one.len() - 1])).await, 400);
    assert_eq!(status(to(id, &[one.clone(), vec![0]].concat())).await, 400);
    assert_eq!(status(vec![0xAB; 1000]).await, 400);
    assert_eq!(status(Vec::new()).await, 400);
    assert_eq!(status(to(id, &[])).await, 400);
    // One query more than a batch may hold.
    let too_many = encode_queries(&vec![queries[0].clone(); 65]);
    assert_eq!(status(to(id, &too_many)).await, 413);
    // Far too large: refused from the declared length alone, before a byte
    // of the body is read (sending it would race the server's close).
    assert_eq!(declared_length_status(&url, 70 << 20).await, 413);
    assert_eq!(status(to("31337-6-full", &one)).await, 404);
    assert_eq!(status(to("nonsense", &one)).await, 404);
    let mut wrong_setup = one.clone();
    wrong_setup[8] ^= 1;
    assert_eq!(status(to(id, &wrong_setup)).await, 400);
    assert_eq!(
        http.get(format!("{base}/v1/snapshots/nope/setup"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    let health = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(health.contains("\"snapshots\":1"), "{health}");
    let metrics = metrics_text(&http, &base).await;
    assert!(
        metrics.contains("ethpir_queries_total{snapshot=\"31337-5-full\"} 5"),
        "{metrics}"
    );
    assert!(metrics.contains("ethpir_http_requests_total{route=\"query\",status=\"400\"}"));

    // A new snapshot is picked up without a restart; a removed one retires.
    build_and_publish(&store, state(6, 200), &opts()).unwrap();
    let both = || async { (fetch_catalog(&http, &base).await.snapshots.len() == 2).then_some(()) };
    test_support::eventually("the new snapshot picked up", both).await;
    store.remove(&"31337/5-full".parse().unwrap()).unwrap();
    let retired = || async { (status(to(id, &one)).await == 404).then_some(()) };
    test_support::eventually("the removed snapshot retired", retired).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_queue_answers_503_and_nothing_else_breaks() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let exported = state(1, 4000);
    build_and_publish(
        &store,
        exported.clone(),
        &BuildOptions {
            packing: pir_core::Packing::Fixed(1),
            ..opts()
        },
    )
    .unwrap();
    let base = start(dir.path(), 1, 1).await;
    let http = reqwest::Client::new();
    let setup = http
        .get(format!("{base}/v1/snapshots/31337-1-full/setup"))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let client = PirClient::from_setup_bytes(&setup).unwrap();
    let mut rng = rand::rng();
    let query = client
        .query(client.prepare(&mut rng), exported.records[0].key.as_slice())
        .unwrap()
        .0;
    let body =
        protocol::multi::encode_request(&[("31337-1-full", &encode_queries(&vec![query; 64]))])
            .unwrap();
    let url = format!("{base}/v1/query");
    let tasks: Vec<_> = (0..24)
        .map(|_| {
            let (http, url, body) = (http.clone(), url.clone(), body.clone());
            tokio::spawn(async move {
                http.post(url)
                    .body(body)
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16()
            })
        })
        .collect();
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    assert!(codes.iter().all(|&c| c == 200 || c == 503), "{codes:?}");
    assert!(
        codes.contains(&503),
        "queue of 1 never overflowed: {codes:?}"
    );
    assert!(codes.contains(&200));
}

#[test]
fn example_config_parses() {
    let c = ServerConfig::from_file(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/server.toml"
    )))
    .unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8546");
    assert!(c.watch_store);
    assert_eq!(c.held_catalog_waits, 4096);
}

/// `POST /v1/query`: every level of a view in one request (a base and a
/// delta here), each part answered by its own snapshot; bad framing,
/// unknown snapshots and oversized parts refused; the catalog describes
/// the view and answers 304 while unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_queries_every_level_of_a_view() {
    let dir = tempfile::tempdir().unwrap();
    publish_view(dir.path(), 200, 3);
    let base = start(dir.path(), 2, 16).await;
    let http = reqwest::Client::new();

    let (etag, catalog) = catalog_with_etag(&http, &base).await;
    let top = catalog.views.last().unwrap();
    assert_eq!(top.block, 6);
    let listed: Vec<String> = top.snapshots.iter().map(|id| id.url_form()).collect();
    assert_eq!(listed, ["31337-5-full", "31337-6-delta-5"]);
    let unchanged = http
        .get(format!("{base}/v1/snapshots"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), 304);
    let zipped = http
        .get(format!("{base}/v1/snapshots"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(zipped.headers()["content-encoding"], "gzip");
    let bytes = zipped.bytes().await.unwrap();
    let mut json = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut json).unwrap();
    assert!(bytes.len() < json.len());
    assert_eq!(serde_json::from_slice::<Catalog>(&json).unwrap(), catalog);

    // Account 2 is in both levels: the delta holds its value at block 6.
    let key = snapshotter::pir_key(&state(6, 3).records[1].address.unwrap());
    let mut rng = rand::rng();
    let mut clients = Vec::new();
    let mut bodies = Vec::new();
    let ids: Vec<String> = top.snapshots.iter().map(|id| id.url_form()).collect();
    for id in &ids {
        let client = client_for(&http, &base, id).await;
        let (q, p) = client
            .query(client.prepare(&mut rng), key.as_slice())
            .unwrap();
        bodies.push(encode_queries(&[q]));
        clients.push((client, p));
    }
    let parts: Vec<(&str, &[u8])> = ids
        .iter()
        .zip(&bodies)
        .map(|(id, b)| (id.as_str(), b.as_slice()))
        .collect();
    let request = protocol::multi::encode_request(&parts).unwrap();
    let resp = http
        .post(format!("{base}/v1/query"))
        .body(request.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.bytes().await.unwrap();
    let answers = protocol::multi::decode_response(&body).unwrap();
    let mut values = Vec::new();
    for ((client, pending), answer) in clients.into_iter().zip(answers) {
        let r = decode_responses(answer).unwrap();
        match client.decode(pending, &r[0]).unwrap() {
            Lookup::Found(v) => values.push(
                snapshotter::decode_value(&v, snapshotter::ValueLayout::WithCode)
                    .unwrap()
                    .balance_nonce(),
            ),
            Lookup::Absent => panic!("account 2 is in both levels"),
        }
    }
    assert_eq!(values, [(U256::from(2005), 2), (U256::from(2006), 2)]);

    // Small levels can be downloaded whole: the table matches its digest
    // and parses; 304 while unchanged; 404 for an unknown snapshot.
    let file = &catalog.snapshots[1].manifest.files["table.bin"];
    let resp = http
        .get(format!("{base}/v1/snapshots/31337-6-delta-5/table"))
        .send()
        .await
        .unwrap();
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    let bytes = resp.bytes().await.unwrap().to_vec();
    assert_eq!(protocol::sha3_hex(&bytes), file.sha3_256);
    let table = protocol::table::Table::parse(bytes, 10).unwrap();
    let v = table.get(&key.0).unwrap();
    assert_eq!(
        snapshotter::decode_value(v, snapshotter::ValueLayout::WithCode)
            .unwrap()
            .balance_nonce(),
        (U256::from(2006), 2)
    );
    let again = http
        .get(format!("{base}/v1/snapshots/31337-6-delta-5/table"))
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    // A client asks for the build its catalog named: another build of the
    // id (a level replaced by a reorg) is 412, never the new bytes.
    let with_match = |path: &str, tag: &str| {
        http.get(format!("{base}/v1/snapshots/31337-6-delta-5/{path}"))
            .header("if-match", format!("\"{tag}\""))
            .send()
    };
    assert_eq!(
        with_match("table", file.sha3_256.as_str())
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(with_match("table", "0123").await.unwrap().status(), 412);
    let delta = catalog
        .snapshots
        .iter()
        .find(|e| e.id.url_form() == "31337-6-delta-5")
        .unwrap();
    let setup = delta.manifest.pir.setup_digest.as_str();
    assert_eq!(with_match("setup", setup).await.unwrap().status(), 200);
    assert_eq!(with_match("setup", "0123").await.unwrap().status(), 412);
    let missing = http
        .get(format!("{base}/v1/snapshots/31337-9-full/table"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let post = |body: Vec<u8>| {
        let http = http.clone();
        let url = format!("{base}/v1/query");
        async move {
            http.post(url)
                .body(body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(post(b"junk".to_vec()).await, 400);
    assert_eq!(post(request[..request.len() - 1].to_vec()).await, 400);
    let unknown =
        protocol::multi::encode_request(&[("31337-9-full", bodies[0].as_slice())]).unwrap();
    assert_eq!(post(unknown).await, 404);
    let huge = vec![0u8; pir_core::wire::query_bytes(1 << 20, 1)];
    let oversized =
        protocol::multi::encode_request(&[("31337-6-delta-5", huge.as_slice())]).unwrap();
    assert_eq!(post(oversized).await, 413);
    let wrong_shape =
        protocol::multi::encode_request(&[("31337-6-delta-5", bodies[0].as_slice())]).unwrap();
    assert_eq!(post(wrong_shape).await, 400);
    assert_eq!(
        declared_length_status(&format!("{base}/v1/query"), 1 << 30).await,
        413
    );
}

/// A metric's value in Prometheus text (`name` with its labels, if any).
fn metric(text: &str, name: &str) -> f64 {
    counted(text, name).unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// The value of metric line `name` in `/metrics` text, if there is one.
fn counted(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The server's `/metrics` text.
async fn metrics_text(http: &reqwest::Client, base: &str) -> String {
    let response = http.get(format!("{base}/metrics")).send().await.unwrap();
    response.text().await.unwrap()
}

/// Many wallets at once, each reading its own accounts through every level
/// of a view (base and delta), one of them with a query made for another
/// snapshot: with batching on (passes capped at 4 queries, a 2-s window so
/// that the requests surely meet) and off, every request gets exactly its
/// own answers, the bad one alone is refused, and with batching on no pass
/// holds more than the cap and fewer passes than requests are run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn answers_batched_across_requests_go_to_their_own_requests() {
    let dir = tempfile::tempdir().unwrap();
    publish_view(dir.path(), 300, 40);
    let on = BatchSettings {
        enabled: true,
        window_ms: 2000.0,
        max_queries: 4,
    };
    let off = BatchSettings {
        enabled: false,
        ..Default::default()
    };
    for batching in [on, off] {
        let base = start_with(dir.path(), 2, 64, batching).await;
        let http = reqwest::Client::new();
        let ids = ["31337-5-full", "31337-6-delta-5"];
        let mut clients = Vec::new();
        for id in ids {
            clients.push(std::sync::Arc::new(client_for(&http, &base, id).await));
        }
        let wallets: Vec<_> = (0..12u64)
            .map(|w| {
                let (http, base, clients) = (http.clone(), base.clone(), clients.clone());
                tokio::spawn(async move { wallet(&http, &base, &ids, &clients, w).await })
            })
            .collect();
        for (w, task) in wallets.into_iter().enumerate() {
            let w = w as u64;
            let (status, values) = task.await.unwrap();
            if w == 7 {
                assert_eq!(
                    status, 400,
                    "wallet 7's query was made for another snapshot"
                );
                continue;
            }
            assert_eq!(status, 200, "wallet {w}");
            // Accounts 1..=40 changed at block 6 (the delta holds them);
            // the base holds every account at block 5.
            let accounts = [w + 1, w + 100];
            let expected: Vec<Option<(U256, u64)>> = accounts
                .iter()
                .flat_map(|&i| {
                    let in_delta = (i <= 40).then(|| (U256::from(i * 1000 + 6), i));
                    [Some((U256::from(i * 1000 + 5), i)), in_delta]
                })
                .collect();
            assert_eq!(values, expected, "wallet {w}'s own accounts");
        }
        let text = metrics_text(&http, &base).await;
        let passes = metric(&text, "ethpir_pass_requests_count");
        let requests = metric(&text, "ethpir_pass_requests_sum");
        assert_eq!(requests, 22.0, "11 good requests, 2 parts each");
        if batching.enabled {
            assert!(passes < requests, "{passes} passes for {requests} parts");
            assert_eq!(
                metric(&text, "ethpir_pass_queries_bucket{le=\"4\"}"),
                passes,
                "a pass above the cap of 4 queries"
            );
        } else {
            assert_eq!(passes, requests);
        }
    }
}

/// One wallet: accounts `w + 1` and `w + 100`, one query each to both
/// levels in one request; the HTTP status and, per account and level, the
/// value found. Wallet 7 spoils its delta query's setup id.
async fn wallet(
    http: &reqwest::Client,
    base: &str,
    ids: &[&str; 2],
    clients: &[std::sync::Arc<PirClient>],
    w: u64,
) -> (u16, Vec<Option<(U256, u64)>>) {
    let records = state(6, 300).records;
    let keys: Vec<_> = [w, w + 99]
        .iter()
        .map(|&i| snapshotter::pir_key(&records[i as usize].address.unwrap()))
        .collect();
    let mut bodies = Vec::new();
    let mut pendings = Vec::new();
    let mut rng = rand::rngs::StdRng::from_os_rng();
    for (level, client) in clients.iter().enumerate() {
        let mut queries = Vec::new();
        for key in &keys {
            let (q, p) = client
                .query(client.prepare(&mut rng), key.as_slice())
                .unwrap();
            queries.push(q);
            pendings.push((level, p));
        }
        if w == 7 && level == 1 {
            queries[0].setup_id[0] ^= 1;
        }
        bodies.push(encode_queries(&queries));
    }
    let parts = [(ids[0], &bodies[0][..]), (ids[1], &bodies[1][..])];
    let resp = http
        .post(format!("{base}/v1/query"))
        .body(protocol::multi::encode_request(&parts).unwrap())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    if status != 200 {
        return (status, Vec::new());
    }
    let body = resp.bytes().await.unwrap();
    let answers = protocol::multi::decode_response(&body).unwrap();
    let responses: Vec<Vec<_>> = answers
        .iter()
        .map(|a| decode_responses(a).unwrap())
        .collect();
    // Per account: base then delta.
    let mut by_level: Vec<std::vec::IntoIter<_>> =
        responses.into_iter().map(Vec::into_iter).collect();
    let mut found = vec![Vec::new(); 2];
    for (level, pending) in pendings {
        let response = by_level[level].next().unwrap();
        found[level].push(match clients[level].decode(pending, &response).unwrap() {
            Lookup::Found(v) => Some(
                snapshotter::decode_value(&v, snapshotter::ValueLayout::WithCode)
                    .unwrap()
                    .balance_nonce(),
            ),
            Lookup::Absent => None,
        });
    }
    let values = (0..keys.len())
        .flat_map(|k| [found[0][k], found[1][k]])
        .collect();
    (status, values)
}

/// A client holding a catalog asks for what changed since (`If-None-Match`
/// and the opt-in header): snapshots published and retired come as a
/// difference which, applied to what it held, is the catalog as served
/// whole; a catalog the server no longer knows, or no opt-in, gets the
/// whole catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_comes_by_difference_from_one_held() {
    let dir = tempfile::tempdir().unwrap();
    let store = publish_view(dir.path(), 40, 5);
    let base = start(dir.path(), 2, 8).await;
    let http = reqwest::Client::new();
    let (etag, held) = catalog_with_etag(&http, &base).await;
    let held = held.snapshots;
    assert_eq!(held.len(), 2);

    // A new delta; the first delta retired.
    let mut delta = state(7, 3);
    delta.kind = SnapshotKind::Delta { from: 6 };
    build_and_publish(&store, delta, &opts()).unwrap();
    let first = store
        .list()
        .unwrap()
        .into_iter()
        .find(|s| s.id.block == 6)
        .unwrap();
    store.remove(&first.id).unwrap();
    let (now, whole) = test_support::eventually("the server picks both up", || async {
        let (etag, catalog) = catalog_with_etag(&http, &base).await;
        let entries = catalog.snapshots;
        let blocks: Vec<u64> = entries.iter().map(|e| e.id.block).collect();
        (blocks == [5, 7]).then_some((etag, entries))
    })
    .await;

    let ask = |since: &str, opt_in: bool| {
        let mut req = http
            .get(format!("{base}/v1/snapshots"))
            .header("if-none-match", since);
        if opt_in {
            req = req.header(protocol::api::ACCEPT_CATALOG_DIFF, "1");
        }
        req.send()
    };
    let resp = ask(&etag, true).await.unwrap();
    assert_eq!(resp.headers()["etag"].to_str().unwrap(), now);
    let since = resp.headers()[protocol::api::CATALOG_DIFF_HEADER]
        .to_str()
        .unwrap();
    assert_eq!(since, etag);
    let diff: protocol::api::CatalogDiff =
        serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(diff.added.len(), 1, "only the new delta");
    assert_eq!(diff.retired.len(), 1, "only the retired one");
    assert_eq!(diff.apply(&held).snapshots, whole);

    // The current catalog: 304. Unknown, or no opt-in: whole.
    let resp = ask(&now, true).await.unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::NOT_MODIFIED);
    for (since, opt_in) in [("\"unknown\"", true), (etag.as_str(), false)] {
        let resp = ask(since, opt_in).await.unwrap();
        assert!(resp
            .headers()
            .get(protocol::api::CATALOG_DIFF_HEADER)
            .is_none());
        let catalog: Catalog = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert_eq!(catalog.snapshots, whole);
    }
}

/// The wait for the next catalog (`x-ethpir-wait`): announced on every
/// catalog; answered 204 at once when the client's catalog is not the
/// served one, 304 when the wait ends without a change, 204 the moment
/// a published level is served (the store watched: the rescan is a
/// minute apart), and at once when the server shuts down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_the_next_catalog_ends_when_a_level_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    build_and_publish(&store, state(5, 8), &opts()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ServerConfig {
        store: dir.path().to_path_buf(),
        listen: addr,
        rescan_secs: 60.0,
        ..Default::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server::serve_on(listener, config, async move {
        let _ = stopped.await;
    }));
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let resp = http
        .get(format!("{base}/v1/snapshots"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-ethpir-long-poll"], "1");
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    let wait = |etag: &str, secs: u64| {
        let waited = wait_after(http.clone(), base.clone(), etag.to_string(), secs);
        async move {
            let (status, _, took) = waited.await;
            (status, took)
        }
    };
    let (status, took) = wait("\"another\"", 30).await;
    assert_eq!(status, 204, "another catalog: changed at once");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (status, took) = wait(&etag, 1).await;
    assert_eq!(status, 304, "no change within the wait");
    assert!(took >= Duration::from_millis(900), "{took:?}");
    // A level published while a wait is held ends it.
    let held = tokio::spawn(wait(&etag, 30));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut delta = state(6, 3);
    delta.kind = SnapshotKind::Delta { from: 5 };
    build_and_publish(&store, delta, &opts()).unwrap();
    let (status, took) = held.await.unwrap();
    assert_eq!(status, 204, "the new level is served");
    assert!(
        took < Duration::from_secs(20),
        "served by the watch: {took:?}"
    );
    let catalog = fetch_catalog(&http, &base).await;
    assert_eq!(catalog.snapshots.len(), 2);
    // Shutting down answers a held wait at once.
    let (etag, _) = catalog_with_etag(&http, &base).await;
    let held = tokio::spawn(wait(&etag, 30));
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.send(()).unwrap();
    let (status, took) = held.await.unwrap();
    assert_eq!(status, 304);
    assert!(took < Duration::from_secs(20), "{took:?}");
    served.await.unwrap().unwrap();
}

/// A server with `config` on a free loopback port (its `listen` replaced).
async fn start_configured(config: ServerConfig) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ServerConfig {
        listen: addr,
        ..config
    };
    tokio::spawn(server::serve_on(listener, config, std::future::pending()));
    format!("http://{addr}")
}

/// A wait of `secs` for the catalog after the one `etag` names: its
/// status, whether the answer announces the long-poll, and its time.
async fn wait_after(
    http: reqwest::Client,
    base: String,
    etag: String,
    secs: u64,
) -> (u16, bool, Duration) {
    let started = std::time::Instant::now();
    let resp = http
        .get(format!("{base}/v1/snapshots"))
        .header("if-none-match", etag)
        .header("x-ethpir-wait", secs.to_string())
        .send()
        .await
        .unwrap();
    let announced = resp.headers().contains_key("x-ethpir-long-poll");
    (resp.status().as_u16(), announced, started.elapsed())
}

/// With the store's watch off (`watch_store = false`) the rescan alone
/// serves a published level and ends a wait held for it; a minute's
/// rescan then serves nothing new within the wait (the watch is off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_watch_the_rescan_alone_serves_a_published_level() {
    let http = reqwest::Client::new();
    let mut bases = Vec::new();
    let mut dirs = Vec::new();
    for rescan_secs in [0.3, 60.0] {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        build_and_publish(&store, state(5, 8), &opts()).unwrap();
        let config = ServerConfig {
            store: dir.path().to_path_buf(),
            rescan_secs,
            watch_store: false,
            ..Default::default()
        };
        bases.push((start_configured(config).await, store));
        dirs.push(dir);
    }
    let mut delta = state(6, 3);
    delta.kind = SnapshotKind::Delta { from: 5 };
    let mut held = Vec::new();
    for (base, _) in &bases {
        let (etag, catalog) = catalog_with_etag(&http, base).await;
        assert_eq!(catalog.snapshots.len(), 1);
        let secs = if held.is_empty() { 30 } else { 2 };
        held.push(tokio::spawn(wait_after(
            http.clone(),
            base.clone(),
            etag,
            secs,
        )));
    }
    for (_, store) in &bases {
        build_and_publish(store, delta.clone(), &opts()).unwrap();
    }
    let (status, _, took) = held.remove(0).await.unwrap();
    assert_eq!(status, 204, "the rescan serves the new level");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(fetch_catalog(&http, &bases[0].0).await.snapshots.len(), 2);
    let (status, _, _) = held.remove(0).await.unwrap();
    assert_eq!(status, 304, "no watch: nothing new before the rescan");
    assert_eq!(fetch_catalog(&http, &bases[1].0).await.snapshots.len(), 1);
}

/// Past its `held_catalog_waits` a server answers a wait at once and
/// announces no long-poll, so that the client polls; a wait that ends
/// gives its room back. With 0 it announces no long-poll at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_held_waits_a_server_answers_at_once_and_announces_no_long_poll() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    build_and_publish(&store, state(5, 8), &opts()).unwrap();
    let config = |held_catalog_waits| ServerConfig {
        store: dir.path().to_path_buf(),
        rescan_secs: 60.0,
        held_catalog_waits,
        ..Default::default()
    };
    let http = reqwest::Client::new();
    let base = start_configured(config(1)).await;
    let (etag, _) = catalog_with_etag(&http, &base).await;
    // A wait of 0 s (held for no time) tells whether there is room. A
    // first wait that came while such a probe held the room found none
    // and ended at once: it is sent again.
    let hold = || tokio::spawn(wait_after(http.clone(), base.clone(), etag.clone(), 30));
    let mut first = hold();
    let deadline = std::time::Instant::now() + test_support::PATIENCE;
    loop {
        let (status, announced, _) = wait_after(http.clone(), base.clone(), etag.clone(), 0).await;
        assert_eq!(status, 304);
        if !announced {
            break;
        }
        if first.is_finished() {
            first = hold();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no wait was ever held"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut delta = state(6, 3);
    delta.kind = SnapshotKind::Delta { from: 5 };
    build_and_publish(&store, delta, &opts()).unwrap();
    let (status, announced, _) = first.await.unwrap();
    assert_eq!((status, announced), (204, true));
    let (etag, _) = catalog_with_etag(&http, &base).await;
    let (status, announced, took) = wait_after(http.clone(), base.clone(), etag, 1).await;
    assert_eq!((status, announced), (304, true), "the room is given back");
    assert!(took >= Duration::from_millis(900), "held: {took:?}");

    let base = start_configured(config(0)).await;
    let resp = http
        .get(format!("{base}/v1/snapshots"))
        .send()
        .await
        .unwrap();
    assert!(!resp.headers().contains_key("x-ethpir-long-poll"));
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    let (status, announced, took) = wait_after(http.clone(), base.clone(), etag, 30).await;
    assert_eq!((status, announced), (304, false));
    assert!(took < Duration::from_secs(20), "at once: {took:?}");
    let other = "\"another\"".to_string();
    let (status, announced, _) = wait_after(http.clone(), base, other, 30).await;
    assert_eq!((status, announced), (204, false), "another catalog");
}

/// A server over `store` answering where `device` says (other settings
/// the defaults).
async fn start_answering_on(store: &std::path::Path, device: AnswerDevice) -> String {
    start_configured(ServerConfig {
        store: store.to_path_buf(),
        answer: AnswerSettings {
            device,
            ..Default::default()
        },
        ..Default::default()
    })
    .await
}

/// `/status.json`, once `ready` holds of it (polled within
/// test-support's patience).
async fn status_when(
    http: &reqwest::Client,
    base: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let last = std::sync::Mutex::new(serde_json::Value::Null);
    let status = test_support::poll(test_support::PATIENCE, || async {
        let status: serde_json::Value = http
            .get(format!("{base}/status.json"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        *last.lock().unwrap() = status.clone();
        ready(&status).then_some(status)
    })
    .await;
    status.unwrap_or_else(|| panic!("status never ready: {}", last.lock().unwrap()))
}

/// Where a level's passes run is chosen per level and shown on the page:
/// `cpu` says it was asked for, `auto` keeps a small level on the CPU and
/// says why, and `cuda` serves a level only from GPU memory (on a machine
/// without a usable GPU the level is listed unserved, with the reason).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_level_says_where_its_answers_run() {
    let dir = tempfile::tempdir().unwrap();
    publish_view(dir.path(), 300, 10);
    let http = reqwest::Client::new();
    let served = |s: &serde_json::Value| !s["snapshots"].as_array().unwrap().is_empty();
    let unserved = |s: &serde_json::Value| !s["unserved"].as_array().unwrap().is_empty();
    for (device, why) in [
        (AnswerDevice::Cpu, "requested"),
        (AnswerDevice::Auto, "the CPU is as fast"),
    ] {
        let base = start_answering_on(dir.path(), device).await;
        let status = status_when(&http, &base, served).await;
        for row in status["snapshots"].as_array().unwrap() {
            assert_eq!(row["device"], "cpu", "{device:?}: {row}");
            let detail = row["deviceDetail"].as_str().unwrap();
            assert!(detail.contains(why), "{device:?}: {detail}");
        }
    }
    let base = start_answering_on(dir.path(), AnswerDevice::Cuda).await;
    let status = status_when(&http, &base, |s| served(s) || unserved(s)).await;
    for row in status["snapshots"].as_array().unwrap() {
        assert_eq!(row["device"], "cuda", "a GPU here, yet: {row}");
    }
    for entry in status["unserved"].as_array().unwrap() {
        let error = entry["error"].as_str().unwrap();
        assert!(error.contains("answers on the GPU"), "{error}");
    }
}

/// The emulated GPU's mode is process-wide: the tests that set it take
/// turns.
static EMULATED_GPU: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Five of `exported`'s accounts looked up privately in snapshot `id`
/// over HTTP, each decoded and checked against its record.
async fn five_lookups(http: &reqwest::Client, base: &str, id: &str, exported: &ExportedState) {
    let client = client_for(http, base, id).await;
    let mut rng = rand::rng();
    let (queries, pendings): (Vec<_>, Vec<_>) = exported
        .records
        .iter()
        .take(5)
        .map(|r| {
            let (q, p) = client
                .query(client.prepare(&mut rng), r.key.as_slice())
                .unwrap();
            (q, (r.clone(), p))
        })
        .unzip();
    let responses = post_queries(http, base, id, &queries).await;
    assert_found(&client, pendings, &responses);
}

/// Passes counted on the GPU, on the CPU, and GPU passes answered on the
/// CPU instead, from `/metrics` (a label never counted is absent: 0).
async fn passes(http: &reqwest::Client, base: &str) -> (f64, f64, f64) {
    let text = metrics_text(http, base).await;
    let count = |name: &str| counted(&text, name).unwrap_or(0.0);
    (
        count("ethpir_passes_total{device=\"cuda\"}"),
        count("ethpir_passes_total{device=\"cpu\"}"),
        count("ethpir_gpu_fallbacks_total"),
    )
}

/// The first served snapshot's row of `/status.json`, once there is one.
async fn first_row(http: &reqwest::Client, base: &str) -> serde_json::Value {
    let status = status_when(http, base, |s| {
        !s["snapshots"].as_array().unwrap().is_empty()
    })
    .await;
    status["snapshots"][0].clone()
}

/// A level held on a GPU (here the host emulator, running the kernels'
/// own source) answers lookups as the CPU would, every pass counted on
/// the GPU; when the GPU's passes fail, the same lookups are answered on
/// the CPU and each fallback counted: never an error, never a wrong value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_passes_answer_and_a_failing_gpu_falls_back_to_the_cpu() {
    use gpu_kernels::{emulate_gpu, EmulatedGpu};
    let _turn = EMULATED_GPU.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let exported = state(5, 300);
    build_and_publish(&store, exported.clone(), &opts()).unwrap();
    let http = reqwest::Client::new();
    for mode in [EmulatedGpu::Answering, EmulatedGpu::Failing] {
        emulate_gpu(mode);
        let base = start_answering_on(dir.path(), AnswerDevice::Cuda).await;
        let row = first_row(&http, &base).await;
        assert_eq!(
            (row["device"].as_str(), row["deviceDetail"].as_str()),
            (Some("cuda"), Some("host emulator")),
            "{mode:?}"
        );
        five_lookups(&http, &base, row["id"].as_str().unwrap(), &exported).await;
        let counted = passes(&http, &base).await;
        match mode {
            EmulatedGpu::Answering => assert_eq!(counted, (1.0, 0.0, 0.0)),
            _ => assert_eq!(counted, (0.0, 1.0, 1.0)),
        }
    }
    emulate_gpu(EmulatedGpu::Off);
}

/// Under `auto`, a level the GPU cannot take at load is answered on the
/// CPU "for now", and moves to the GPU at a later rescan once it can
/// (here: no GPU, then the emulator standing in for one), without a
/// restart; its lookups then run on the GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_level_on_the_cpu_for_now_moves_to_the_gpu_when_it_can() {
    use gpu_kernels::{emulate_gpu, EmulatedGpu};
    let _turn = EMULATED_GPU.lock().await;
    emulate_gpu(EmulatedGpu::Off);
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let exported = state(5, 300);
    build_and_publish(&store, exported.clone(), &opts()).unwrap();
    let http = reqwest::Client::new();
    let base = start_configured(ServerConfig {
        store: dir.path().to_path_buf(),
        rescan_secs: 0.1,
        answer: AnswerSettings {
            device: AnswerDevice::Auto,
            min_gpu_mib: 0.0,
        },
        ..Default::default()
    })
    .await;
    let row = first_row(&http, &base).await;
    if row["device"] == "cuda" {
        // A real GPU here took it at once: nothing to move.
        assert_ne!(row["deviceDetail"], "host emulator");
        return;
    }
    let detail = row["deviceDetail"].as_str().unwrap();
    assert!(detail.starts_with("for now: GPU not usable"), "{detail}");
    emulate_gpu(EmulatedGpu::Answering);
    let status = status_when(&http, &base, |s| s["snapshots"][0]["device"] == "cuda").await;
    assert_eq!(status["snapshots"][0]["deviceDetail"], "host emulator");
    five_lookups(&http, &base, row["id"].as_str().unwrap(), &exported).await;
    assert_eq!(passes(&http, &base).await, (1.0, 0.0, 0.0));
    emulate_gpu(EmulatedGpu::Off);
}

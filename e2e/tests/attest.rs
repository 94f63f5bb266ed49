//! Attested views, end to end: anvil from a genesis file, the follower's
//! library building a base and deltas, an attester with its own key
//! checking them against the same anvil (`ethpir-snapshot attest`'s
//! library), a PIR server whose catalog carries the signatures, and two
//! proxies: one requiring that attester (`attesters`, `attest_quorum = 1`)
//! answers right at every attested view and refuses block 0 (anvil's
//! genesis header names no real state root, so it was never signed, and
//! the follower folds every delta into a new base at once); one
//! requiring a key that never signed reads nothing, and its error names the
//! missing attestation. Then a new block: the requiring proxy's `latest`
//! stays at the last signed view until the attester signs the new one.
//! Last, a forged server: a base at a signed block with one balance
//! changed, its manifest claiming the honest block hash and state root,
//! its catalog relaying the honest signatures: the requiring proxy reads
//! nothing from it, and says which snapshot lacks a valid signature.

use crate::common;

use std::path::Path;

use common::*;
use proxy::ProxyConfig;
use serde_json::{json, Value};
use snapshotter::attest::{Attester, Outcome};
use snapshotter::follow::run_once;
use test_support::{proxy_status, write_genesis, Anvil, ALL_DEV_ACCOUNTS};

/// anvil's dev key 1: the attester's.
const ATTESTER_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
const ATTESTER: &str = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
/// An address that never signs.
const STRANGER: &str = "0x00000000000000000000000000000000000000a7";

/// Follows to anvil's head; every delta is folded into a new base at once
/// (anvil's genesis base cannot be attested: views on it are never read).
async fn follow(store: &Path, genesis: &Path, anvil: &Anvil) -> u64 {
    let head = anvil.head().await;
    let mut config = follow_config(store, &anvil.url, genesis, 0, 4, 1000);
    config.levels.rebase_fraction = 0.0;
    config.levels.rebase_min_records = 1;
    while run_once(config.clone()).await.unwrap() < head {}
    head
}

async fn attest(store: &Path, anvil: &Anvil) -> Vec<(String, Outcome)> {
    let node = snapshotter::sources::rpc::RpcSource::connect(&anvil.url, Default::default())
        .await
        .unwrap();
    let store = snapshotter::SnapshotStore::open(store).unwrap();
    let started = std::time::Instant::now();
    let outcomes = Attester::new(store, node, ATTESTER_KEY)
        .unwrap()
        .attest_store()
        .await
        .unwrap();
    eprintln!("attested in {:?}: {outcomes:?}", started.elapsed());
    outcomes
        .into_iter()
        .map(|(id, o)| (id.url_form(), o))
        .collect()
}

async fn proxy_requiring(server: &str, anvil: &Anvil, cache: &Path, signer: &str) -> String {
    start_proxy_with(ProxyConfig {
        pir_server: server.to_string(),
        upstream: Some(anvil.url.clone()),
        cache_dir: cache.to_path_buf(),
        attesters: vec![signer.parse().unwrap()],
        attest_quorum: 1,
        ..Default::default()
    })
    .await
}

async fn balance(url: &str, who: &str, block: &str) -> Result<Value, String> {
    test_support::rpc(url, "eth_getBalance", json!([who, block])).await
}

/// A balance or, while no view can answer yet, -32003 (not ready, try
/// again): any other error fails the test.
async fn balance_or_not_ready(url: &str, who: &str, block: &str) -> Option<Value> {
    match balance(url, who, block).await {
        Ok(v) => Some(v),
        Err(e) => {
            let code = serde_json::from_str::<Value>(&e)
                .ok()
                .map(|v| v["code"].clone());
            assert_eq!(
                code,
                Some(json!(-32003)),
                "a read before the view is ready: {e}"
            );
            None
        }
    }
}

/// Reads from the first moment `url` listens, every 5 ms, until it
/// answers: only -32003 on the way.
async fn read_from_start(url: &str, who: &str, block: &str) -> Value {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(v) = balance_or_not_ready(url, who, block).await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no view within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Reads `latest` in a loop until `stop`, while the catalog changes: each
/// answer must be one of `allowed`, each error -32003. Returns the count.
fn read_through_changes(
    url: String,
    who: String,
    allowed: Vec<Value>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut reads = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Some(v) = balance_or_not_ready(&url, &who, "latest").await {
                assert!(allowed.contains(&v), "{v} is none of {allowed:?}");
            }
            reads += 1;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        reads
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proxy_reads_only_what_its_attesters_signed() {
    let dir = tempfile::tempdir().unwrap();
    let genesis = dir.path().join("genesis.json");
    write_genesis(&genesis);
    let anvil = Anvil::start_from_genesis(&genesis).await;
    let store = dir.path().join("store");
    follow(&store, &genesis, &anvil).await;
    let fresh = format!("0x{}", "11".repeat(20));
    anvil
        .send(json!({"from": ALL_DEV_ACCOUNTS[0], "to": fresh, "value": "0x1234"}))
        .await;
    let head = follow(&store, &genesis, &anvil).await;
    for (id, outcome) in attest(&store, &anvil).await {
        let want = if id.starts_with("4242-0-") {
            matches!(outcome, Outcome::Refused(_))
        } else {
            outcome == Outcome::Signed
        };
        assert!(want, "{id}: {outcome:?}");
    }

    let server = start_server(&store).await;
    let caches = [(); 3].map(|()| tempfile::tempdir().unwrap());
    let trusting = proxy_requiring(&server, &anvil, caches[0].path(), ATTESTER).await;
    let at_head = format!("{head:#x}");
    let want = anvil.balance(&fresh, head).await;
    let got = read_from_start(&trusting, &fresh, &at_head).await;
    assert_eq!(got, json!(want));
    let strict = proxy_requiring(&server, &anvil, caches[1].path(), STRANGER).await;
    let plain = start_proxy(&server, None, caches[2].path()).await;
    for who in [ALL_DEV_ACCOUNTS[0], ALL_DEV_ACCOUNTS[3]] {
        let got = balance(&trusting, who, "latest").await.unwrap();
        assert_eq!(got, json!(anvil.balance(who, head).await), "{who}");
    }
    let genesis_read = balance(&trusting, ALL_DEV_ACCOUNTS[3], "0x0")
        .await
        .unwrap_err();
    assert!(genesis_read.contains("4242-0-full"), "{genesis_read}");
    assert!(genesis_read.contains("attestations"), "{genesis_read}");

    // Once its catalog is in (before, the error says it is not fetched).
    let refused = test_support::eventually("the strict proxy's catalog", || async {
        let e = balance(&strict, &fresh, "latest").await.unwrap_err();
        e.contains("attestations this proxy requires").then_some(e)
    })
    .await;
    assert!(refused.contains(&STRANGER[2..]), "{refused}");
    assert!(refused.contains("\"signed\":0"), "{refused}");

    // A new block, followed but not yet signed: `latest` through the
    // requiring proxy stays at the signed head; signed, it moves on.
    anvil
        .send(json!({"from": ALL_DEV_ACCOUNTS[1], "to": fresh, "value": "0x1"}))
        .await;
    let next = follow(&store, &genesis, &anvil).await;
    test_support::eventually("the unsigned view is in the catalog", || async {
        let newest = proxy_status(&plain).await["viewBlock"].as_u64();
        (newest == Some(next)).then_some(())
    })
    .await;
    let stale = balance(&trusting, &fresh, "latest").await.unwrap();
    assert_eq!(stale, json!(want), "latest is the newest signed view");
    let moved = anvil.balance(&fresh, next).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = read_through_changes(
        trusting.clone(),
        fresh.clone(),
        vec![json!(want), json!(moved)],
        stop.clone(),
    );
    attest(&store, &anvil).await;
    test_support::eventually("latest moves to the signed view", || async {
        (balance(&trusting, &fresh, "latest").await.ok()? == json!(moved)).then_some(())
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.await.unwrap() > 0);
    forged_server_is_not_read(dir.path(), &anvil).await;
    anvil.stop().await;
}

/// A base forged from a signed one (dev 0's balance one wei more, the
/// honest hash and root claimed), served with the honest signatures
/// spliced into its catalog entry by a relay.
async fn forged_server_is_not_read(dir: &Path, anvil: &Anvil) {
    use snapshotter::pipeline::{build_and_publish, BuildOptions, ExportedState};
    let honest_store = snapshotter::SnapshotStore::open(dir.join("store")).unwrap();
    let honest = honest_store
        .list()
        .unwrap()
        .into_iter()
        .rev()
        .find(|s| s.id.block > 0 && s.manifest.kind == snapshotter::SnapshotKind::Full)
        .expect("a signed base");
    let signatures = serde_json::to_value(honest_store.attestations(&honest)).unwrap();
    assert_eq!(signatures.as_array().unwrap().len(), 1);
    let bytes = honest_store.read_checked(&honest, "records.bin").unwrap();
    let mut records = snapshotter::records::decode_records(&bytes).unwrap();
    let dev0 = ALL_DEV_ACCOUNTS[0].parse().unwrap();
    let rich = records
        .accounts
        .iter_mut()
        .find(|a| a.address == Some(dev0))
        .unwrap();
    rich.balance += alloy_primitives::U256::from(1);
    let m = &honest.manifest;
    let forged_store = snapshotter::SnapshotStore::open(dir.join("forged")).unwrap();
    let state = ExportedState {
        chain_id: m.chain_id,
        block_number: m.block_number,
        block_hash: m.block_hash,
        state_root: m.state_root,
        block_time: m.block_time,
        parent_hash: m.parent_hash,
        kind: snapshotter::SnapshotKind::Full,
        source: "forged".into(),
        records: records.accounts,
        storage: records.storage,
        listed: m.storage.clone(),
        export_s: 0.0,
        codes: Vec::new(),
    };
    build_and_publish(&forged_store, state, &BuildOptions::default()).unwrap();
    let forged_server = start_server(&dir.join("forged")).await;
    let id = honest.id.url_form();
    let splice: Rewrite = std::sync::Arc::new(move |path, body| {
        if path != "/v1/snapshots" {
            return body;
        }
        let mut catalog: Value = serde_json::from_slice(&body).unwrap();
        for entry in catalog["snapshots"].as_array_mut().unwrap() {
            if entry["id"] == json!(id) {
                entry["attestations"] = signatures.clone();
            }
        }
        serde_json::to_vec(&catalog).unwrap().into()
    });
    let (relay, _) = start_relay(&forged_server, splice).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = proxy_requiring(&relay, anvil, cache.path(), ATTESTER).await;
    let block = format!("{:#x}", honest.id.block);
    let refused = test_support::eventually("the forged catalog adopted", || async {
        let e = balance(&proxy, ALL_DEV_ACCOUNTS[0], &block)
            .await
            .unwrap_err();
        e.contains("attestations this proxy requires").then_some(e)
    })
    .await;
    assert!(refused.contains(&honest.id.url_form()), "{refused}");
    assert!(refused.contains("\"signed\":0"), "{refused}");
}

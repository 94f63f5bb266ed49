//! Snapshots to replicas: a replica's store pulled from a primary's server
//! (`export_files`) equals the primary's, file for file, and its server
//! lists the same catalog (same ETag); a file that does not match its
//! manifest publishes nothing; what the primary retires the replica
//! removes; a server without `export_files` exports nothing. The
//! primary's attestations come along (checked), and the replica's catalog
//! lists them. The codes a snapshot's code table names come along too,
//! and the replica proves its entries and serves them.

use std::path::Path;
use std::time::Duration;

use alloy_primitives::{Address, U256};
use server::ServerConfig;
use snapshotter::pipeline::{build_and_publish, BuildOptions, ExportedState};
use snapshotter::pull::{PullError, Puller};
use snapshotter::{AccountRecord, SnapshotKind, SnapshotStore};

/// The codes of the test's contracts: every tenth account has one.
fn codes() -> [Vec<u8>; 2] {
    [vec![0x60, 0x00, 0x56], vec![0xef, 0x01, 0x00, 0x11, 0x22]]
}

fn state(block: u64, kind: SnapshotKind, n: u64) -> ExportedState {
    let [a, b] = codes();
    ExportedState {
        chain_id: 31337,
        block_number: block,
        block_hash: None,
        state_root: None,
        block_time: None,
        parent_hash: None,
        kind,
        source: "test".into(),
        storage: Vec::new(),
        listed: Default::default(),
        records: (1..=n)
            .map(|i| {
                let mut a = [0u8; 20];
                a[12..].copy_from_slice(&i.to_be_bytes());
                let r = AccountRecord::new(Address::from(a), U256::from(i * 7 + block), i);
                match i % 10 {
                    0 => r.with_trie(
                        alloy_primitives::keccak256(&codes()[(i / 10 % 2) as usize]),
                        protocol::account::EMPTY_STORAGE_ROOT,
                    ),
                    _ => r,
                }
            })
            .collect(),
        export_s: 0.0,
        codes: vec![a.into(), b.into()],
    }
}

fn publish(store: &SnapshotStore, block: u64, kind: SnapshotKind, n: u64) {
    let opts = BuildOptions {
        progress: None,
        ..Default::default()
    };
    build_and_publish(store, state(block, kind, n), &opts).unwrap();
}

async fn serve(store: &Path, export_files: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ServerConfig {
        store: store.to_path_buf(),
        listen: addr,
        rescan_secs: 0.1,
        export_files,
        ..Default::default()
    };
    tokio::spawn(server::serve_on(listener, config, std::future::pending()));
    format!("http://{addr}")
}

async fn catalog(server: &str) -> (String, Vec<u8>) {
    let resp = reqwest::get(format!("{server}/v1/snapshots"))
        .await
        .unwrap();
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    (etag, resp.bytes().await.unwrap().to_vec())
}

/// Every published file of every snapshot, by relative path.
fn files(store: &SnapshotStore) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for snap in store.list().unwrap() {
        for name in snap.manifest.files.keys() {
            let rel = format!("{}/{name}", snap.id.url_form());
            out.push((rel, std::fs::read(snap.path.join(name)).unwrap()));
        }
    }
    out
}

/// Waits until `server` lists `n` snapshots.
async fn lists(server: &str, n: usize) {
    test_support::eventually("the server lists the store", || async {
        let (_, body) = catalog(server).await;
        let c: server::api::Catalog = serde_json::from_slice(&body).ok()?;
        (c.snapshots.len() == n).then_some(())
    })
    .await;
}

/// The replica keeps the codes, proves the base's code table's entries
/// (checked against its manifest as a proxy checks them) and serves each
/// code by its hash.
async fn check_codes(replica: &SnapshotStore, server: &str) {
    let base = replica.list().unwrap().remove(0);
    let table = base.manifest.codes.expect("the base has a code table");
    assert_eq!(table.count, 2);
    let id = base.id.url_form();
    for index in 1..=table.count {
        let proof: protocol::codes::CodeProof =
            reqwest::get(format!("{server}/v1/snapshots/{id}/codes/{index}"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
        let hash = table.verify(index, &proof).unwrap();
        let code = reqwest::get(format!("{server}/v1/code/{hash}"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        protocol::codes::check_code(&hash, &code).unwrap();
        assert_eq!(
            replica.read_code(&hash).unwrap().as_deref(),
            Some(&code[..])
        );
    }
    let outside = reqwest::get(format!("{server}/v1/snapshots/{id}/codes/3"))
        .await
        .unwrap();
    assert_eq!(outside.status(), 404);
    let unknown = reqwest::get(format!("{server}/v1/code/0x{}", "ab".repeat(32)))
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(codes()
        .iter()
        .all(|c| replica.has_code(&alloy_primitives::keccak256(c))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_pulls_the_primary_store_checked_and_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let primary = SnapshotStore::open(dir.path().join("primary")).unwrap();
    publish(&primary, 5, SnapshotKind::Full, 3000);
    publish(&primary, 6, SnapshotKind::Delta { from: 5 }, 40);
    let primary_server = serve(primary.root(), true).await;
    lists(&primary_server, 2).await;

    let replica = SnapshotStore::open(dir.path().join("replica")).unwrap();
    let puller = Puller::new(&primary_server, Duration::from_secs(60)).unwrap();
    let report = puller.pull_once(&replica).await.unwrap();
    assert_eq!(report.fetched, ["31337-5-full", "31337-6-delta-5"]);
    assert_eq!(files(&replica), files(&primary));
    // The replica's server lists exactly the primary's catalog.
    let replica_server = serve(replica.root(), false).await;
    lists(&replica_server, 2).await;
    check_codes(&replica, &replica_server).await;
    assert_eq!(
        catalog(&replica_server).await,
        catalog(&primary_server).await
    );
    // Nothing new: nothing fetched.
    assert_eq!(puller.pull_once(&replica).await.unwrap().fetched.len(), 0);

    // A new delta whose records do not match the manifest (a bad disk, a
    // tampering middlebox): refused, nothing published, no leftovers.
    publish(&primary, 7, SnapshotKind::Delta { from: 6 }, 40);
    let newest = primary.list().unwrap().pop().unwrap();
    let records = newest.path.join(snapshotter::store::RECORDS_FILE);
    let mut bytes = std::fs::read(&records).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&records, bytes).unwrap();
    lists(&primary_server, 3).await;
    let refused = puller.pull_once(&replica).await;
    assert!(matches!(refused, Err(PullError::Digest(_))), "{refused:?}");
    assert_eq!(replica.list().unwrap().len(), 2);
    let staging = replica.root().join(".staging");
    let leftovers = std::fs::read_dir(&staging).map_or(0, |d| d.count());
    assert_eq!(leftovers, 0, "a refused pull leaves nothing staged");

    // The primary retires snapshots: the replica follows.
    primary.remove(&newest.id).unwrap();
    let delta = primary.list().unwrap().pop().unwrap();
    primary.remove(&delta.id).unwrap();
    lists(&primary_server, 1).await;
    let report = puller.pull_once(&replica).await.unwrap();
    assert_eq!(report.removed, ["31337-6-delta-5"]);
    assert_eq!(files(&replica), files(&primary));

    // The primary rebuilds a level under the same id (a reorg replaced
    // its block): the replica fetches the new build in place of the old.
    publish(&primary, 6, SnapshotKind::Delta { from: 5 }, 40);
    lists(&primary_server, 2).await;
    assert_eq!(
        puller.pull_once(&replica).await.unwrap().fetched,
        ["31337-6-delta-5"]
    );
    let (before, _) = catalog(&primary_server).await;
    primary
        .remove(&primary.list().unwrap().pop().unwrap().id)
        .unwrap();
    publish(&primary, 6, SnapshotKind::Delta { from: 5 }, 41);
    test_support::eventually("the primary lists the new build", || async {
        let (etag, body) = catalog(&primary_server).await;
        let listing: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let n = listing["snapshots"].as_array().map_or(0, Vec::len);
        (etag != before && n == 2).then_some(())
    })
    .await;
    let report = puller.pull_once(&replica).await.unwrap();
    assert_eq!(report.fetched, ["31337-6-delta-5"], "the new build");
    assert_eq!(files(&replica), files(&primary));

    // Export is off by default.
    let id = "31337-5-full";
    let off = reqwest::get(format!("{replica_server}/v1/snapshots/{id}/files/db.bin"))
        .await
        .unwrap();
    assert_eq!(off.status(), 404);
    // And on, only files the manifest lists.
    let other = reqwest::get(format!("{primary_server}/v1/snapshots/{id}/files/..%2Fx"))
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_keeps_the_primarys_attestations() {
    use alloy_signer::SignerSync;
    let dir = tempfile::tempdir().unwrap();
    let primary = SnapshotStore::open(dir.path().join("primary")).unwrap();
    let mut bound = state(9, SnapshotKind::Full, 50);
    bound.block_hash = Some(alloy_primitives::B256::repeat_byte(9));
    bound.state_root = Some(alloy_primitives::B256::repeat_byte(10));
    let opts = BuildOptions::default();
    let snap = build_and_publish(&primary, bound, &opts).unwrap();
    let signer: alloy_signer_local::PrivateKeySigner =
        "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
            .parse()
            .unwrap();
    let hash = protocol::attest::signing_hash(&snap.manifest).unwrap();
    let signed = protocol::attest::Attestation {
        signer: signer.address(),
        signature: signer.sign_hash_sync(&hash).unwrap(),
    };
    primary.add_attestation(&snap, &signed).unwrap();
    let primary_server = serve(primary.root(), true).await;
    lists(&primary_server, 1).await;
    let listed = test_support::eventually("the primary lists the attestation", || async {
        let (_, body) = catalog(&primary_server).await;
        let body: serde_json::Value = serde_json::from_slice(&body).ok()?;
        let attestations = body["snapshots"][0]["attestations"].clone();
        attestations.is_array().then_some(attestations)
    })
    .await;
    assert_eq!(listed, serde_json::to_value([&signed]).unwrap());

    let replica = SnapshotStore::open(dir.path().join("replica")).unwrap();
    let puller = Puller::new(&primary_server, Duration::from_secs(60)).unwrap();
    let report = puller.pull_once(&replica).await.unwrap();
    assert_eq!((report.fetched.len(), report.attestations), (1, 1));
    let local = replica.list().unwrap().pop().unwrap();
    assert_eq!(replica.attestations(&local), [signed]);
    assert_eq!(puller.pull_once(&replica).await.unwrap().attestations, 0);
}

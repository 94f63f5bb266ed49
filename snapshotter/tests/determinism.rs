//! Deterministic builds: the same state at the same block gives byte for
//! byte the same `records.bin`, `db.bin` and `setup.bin` (and so the same
//! manifest digests and canaries), whatever the thread count and the
//! encoder's memory budget: every seed comes from what is built. The
//! mainnet genesis (8,893 accounts) with 1 MiB of encoder memory and one
//! thread, against 1 GiB and two.

use std::process::Command;

use snapshotter::store::SnapshotStore;

fn build(store: &std::path::Path, threads: &str, encode_mib: &str) {
    let mainnet = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../snapshot-build/data/mainnet-genesis.json"
    );
    let status = Command::new(env!("CARGO_BIN_EXE_ethpir-snapshot"))
        .arg("--store")
        .arg(store)
        .args(["--log", "warn", "build", "genesis", "--file", mainnet])
        .args(["--chain-id", "1", "--no-progress", "--device", "cpu"])
        .args(["--encode-memory-mib", encode_mib])
        .env("RAYON_NUM_THREADS", threads)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn two_builds_of_one_state_are_the_same_bytes() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    build(a.path(), "1", "1");
    build(b.path(), "2", "1024");
    let manifest = |dir: &std::path::Path| {
        let mut all = SnapshotStore::open(dir).unwrap().list().unwrap();
        assert_eq!(all.len(), 1);
        all.pop().unwrap().manifest
    };
    let (ma, mb) = (manifest(a.path()), manifest(b.path()));
    assert_eq!(ma.content_digest, mb.content_digest, "records.bin");
    assert_eq!(ma.pir.setup_digest, mb.pir.setup_digest, "setup.bin");
    assert_eq!(ma.files, mb.files, "every file's length and SHA3-256");
    assert!(ma.files.contains_key("db.bin"), "{:?}", ma.files.keys());
    assert_eq!(ma.canaries, mb.canaries);
    let most = protocol::manifest::CANARIES_PER_BASE as u64;
    assert_eq!(ma.canaries.len() as u64, ma.record_count.min(most));
}

/// One change to a manifest.
type Change = Box<dyn Fn(&mut protocol::Manifest)>;

/// The setup's public matrix seed is what the manifest's own fields draw
/// (`Manifest::build_seeds`): a proxy recomputes it, so a manifest whose
/// format, contracts held, code table or table digest was changed after
/// the build does not match its setup.
#[test]
fn the_setup_seed_is_drawn_from_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), "2", "1024");
    let store = SnapshotStore::open(dir.path()).unwrap();
    let snap = store.list().unwrap().pop().unwrap();
    let setup = store.read_checked(&snap, "setup.bin").unwrap();
    let client = pir_core::PirClient::from_setup_bytes(&setup).unwrap();
    let seed = *client.setup().matrix.seed();
    let m = snap.manifest;
    assert_eq!(seed, m.build_seeds().matrix.0);
    let changes: Vec<(&str, Change)> = vec![
        ("format", Box::new(|m| m.format = 2)),
        (
            "storage",
            Box::new(|m| m.storage.contracts.push(alloy_primitives::Address::ZERO)),
        ),
        (
            "codes",
            Box::new(|m| {
                m.codes = Some(protocol::codes::CodeTable {
                    count: 1,
                    root: alloy_primitives::B256::repeat_byte(7),
                })
            }),
        ),
        (
            "table",
            Box::new(|m| {
                let file = m.files["db.bin"].clone();
                m.files.insert("table.bin".into(), file);
            }),
        ),
        (
            "records",
            Box::new(|m| m.content_digest = protocol::sha3_hex(b"x")),
        ),
        ("block", Box::new(|m| m.block_number += 1)),
    ];
    for (what, change) in changes {
        let mut changed = m.clone();
        change(&mut changed);
        assert_ne!(seed, changed.build_seeds().matrix.0, "{what} not bound");
    }
}

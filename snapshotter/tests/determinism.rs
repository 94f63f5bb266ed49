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

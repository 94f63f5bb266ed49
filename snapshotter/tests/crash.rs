//! A build killed at any phase leaves the store valid: earlier snapshots
//! intact, nothing half-published; the next build cleans up and succeeds.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use snapshotter::store::SnapshotStore;

fn snapshot_bin() -> &'static str {
    env!("CARGO_BIN_EXE_ethpir-snapshot")
}

fn build(store: &std::path::Path, args: &[&str]) -> std::process::ExitStatus {
    Command::new(snapshot_bin())
        .arg("--store")
        .arg(store)
        .args(["--log", "warn", "build", "genesis"])
        .args(args)
        .args(["--no-progress", "--device", "cpu"])
        .status()
        .unwrap()
}

fn verify_all(store: &std::path::Path) {
    let out = Command::new(snapshot_bin())
        .arg("--store")
        .arg(store)
        .args(["verify", "--lookups", "4"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "verify failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn killed_builds_never_leave_half_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let sepolia = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../snapshot-build/data/sepolia-genesis.json"
    );
    assert!(build(dir.path(), &["--file", sepolia, "--chain-id", "11155111"]).success());
    let store = SnapshotStore::open(dir.path()).unwrap();
    let before: Vec<_> = store
        .list()
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.manifest.content_digest))
        .collect();
    assert_eq!(before.len(), 1);

    for phase in ["export", "encode", "hint", "write", "publish"] {
        let mut child = Command::new(snapshot_bin())
            .arg("--store")
            .arg(dir.path())
            .args([
                "--log",
                "warn",
                "build",
                "genesis",
                "--mainnet",
                "--no-progress",
                "--device",
                "cpu",
            ])
            .env("ETHPIR_PAUSE_AT", phase)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut reached = false;
        for line in BufReader::new(stderr).lines() {
            if line.unwrap().contains(&format!("paused at {phase}")) {
                reached = true;
                break;
            }
        }
        assert!(reached, "build never reached {phase}");
        child.kill().unwrap(); // SIGKILL: no cleanup runs
        child.wait().unwrap();

        let now: Vec<_> = store
            .list()
            .unwrap()
            .into_iter()
            .map(|s| (s.id, s.manifest.content_digest))
            .collect();
        assert_eq!(now, before, "killed at {phase}: the visible store changed");
        verify_all(dir.path());
        assert!(
            !dir.path().join("1").join("0-full").exists(),
            "killed at {phase}: half snapshot visible"
        );
    }
    // The next build clears the leftovers and publishes.
    assert!(build(dir.path(), &["--mainnet"]).success());
    assert_eq!(store.list().unwrap().len(), 2);
    let staging = dir.path().join(".staging");
    assert!(
        std::fs::read_dir(&staging).map_or(0, |d| d.count()) == 0,
        "leftovers not cleaned"
    );
    verify_all(dir.path());
}

#[test]
fn retention_keeps_the_newest_and_the_pinned() {
    use alloy_primitives::{Address, U256};
    use snapshotter::pipeline::{build_and_publish, BuildOptions, ExportedState};
    use snapshotter::{AccountRecord, SnapshotKind};
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let opts = BuildOptions {
        progress: None,
        ..Default::default()
    };
    for (block, kind) in [
        (10, SnapshotKind::Full),
        (20, SnapshotKind::Active { window: 5 }),
        (30, SnapshotKind::Full),
        (40, SnapshotKind::Full),
        (25, SnapshotKind::Historical),
    ] {
        let state = ExportedState {
            chain_id: 7,
            block_number: block,
            block_hash: None,
            state_root: None,
            block_time: None,
            parent_hash: None,
            kind,
            source: "test".into(),
            storage: Vec::new(),
            listed: Default::default(),
            records: vec![AccountRecord::new(
                Address::with_last_byte(block as u8),
                U256::from(block),
                0,
            )],
            export_s: 0.0,
            codes: Vec::new(),
        };
        build_and_publish(&store, state, &opts).unwrap();
    }
    let removed = store.apply_retention(7, 2, &[10]).unwrap();
    assert_eq!(
        removed.iter().map(|id| id.to_string()).collect::<Vec<_>>(),
        vec!["7/20-active"]
    );
    let left: Vec<String> = store
        .list()
        .unwrap()
        .iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(
        left,
        vec!["7/10-full", "7/25-historical", "7/30-full", "7/40-full"]
    );
}

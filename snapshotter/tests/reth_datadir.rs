//! The `reth` source against real reth 2.5.1 datadirs (v1 and v2 layouts),
//! checked against the node's own answers recorded before it stopped (the
//! head's state root recomputed from the export equals its header's). These
//! chains wrote no storage: contracts and storage are tested on the real
//! datadirs of `reth_contracts.rs`.
#![cfg(feature = "reth")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use alloy_primitives::{Address, B256, U256};
use serde_json::Value;
use snapshotter::pipeline::{build_and_publish, BuildOptions};
use snapshotter::sources::reth::{Layout, RethDatadir, RethError, RethMode};
use snapshotter::SnapshotStore;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/reth")
        .join(name)
}

/// Unpacks a datadir archive into a temporary directory (MDBX needs a
/// writable directory for its lock file, even read-only).
fn unpack(version: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::open(fixture(&format!("reth-2.5.1-dev-{version}.tar.zst"))).unwrap();
    let decoder = ruzstd::decoding::StreamingDecoder::new(file).unwrap();
    tar::Archive::new(decoder).unpack(dir.path()).unwrap();
    let datadir = dir.path().join(format!("reth-dev-{version}"));
    (dir, datadir)
}

fn json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

fn dump(name: &str) -> BTreeMap<String, (u64, U256)> {
    json(name)
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let acc = &e[1];
            let balance = U256::from_str_radix(
                acc["balance"].as_str().unwrap().trim_start_matches("0x"),
                16,
            )
            .unwrap();
            (
                e[0].as_str().unwrap().to_lowercase(),
                (acc["nonce"].as_u64().unwrap(), balance),
            )
        })
        .collect()
}

/// The state at every block, block hashes and state roots, and the active
/// sets, against the node's own answers.
fn check_history_and_active_sets(reth: &RethDatadir, expected: &Value) {
    let head = expected["head"].as_u64().unwrap();
    assert_eq!(reth.head().unwrap(), head);
    let hashes = reth.block_hashes().unwrap();
    let headers = reth.headers().unwrap();
    for b in expected["blocks"].as_array().unwrap() {
        let n = b["number"].as_u64().unwrap();
        assert_eq!(
            hashes[&n],
            b["hash"].as_str().unwrap().parse::<B256>().unwrap(),
            "hash of block {n}"
        );
        let root: B256 = b["stateRoot"].as_str().unwrap().parse().unwrap();
        assert_eq!(headers[&n].0, root, "state root of block {n}");
        let state: BTreeMap<B256, (u64, U256)> = reth
            .state_at(n)
            .unwrap()
            .into_iter()
            .map(|r| (r.key, (r.nonce, r.balance)))
            .collect();
        for (addr, acc) in expected["state"][n.to_string()].as_object().unwrap() {
            let key = snapshotter::pir_key(&addr.parse::<Address>().unwrap());
            let want = (
                acc["nonce"].as_u64().unwrap(),
                U256::from_str_radix(acc["balance"].as_str().unwrap(), 10).unwrap(),
            );
            assert_eq!(
                state.get(&key).copied().unwrap_or((0, U256::ZERO)),
                want,
                "{addr} at block {n}"
            );
        }
    }
    // The active set: accounts whose state changed in the window, all of
    // them among the accounts the node reports as touched, and every
    // touched account whose balance or nonce changed is in it.
    for window in [1u64, 3, 6] {
        let state = reth.export(RethMode::Active { window }, 1337).unwrap();
        let got: Vec<String> = state
            .records
            .iter()
            .map(|r| {
                format!(
                    "{:#x}",
                    r.address.expect("active records know their address")
                )
            })
            .collect();
        let blocks: Vec<&Value> = expected["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["number"].as_u64().unwrap() + window > head)
            .collect();
        let touched: Vec<String> = blocks
            .iter()
            .flat_map(|b| {
                b["touched"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_string())
            })
            .collect();
        for a in &got {
            assert!(
                touched.contains(a),
                "{a} in the active set of {window} blocks but not touched"
            );
        }
        for b in &blocks {
            let n = b["number"].as_u64().unwrap();
            for a in b["touched"].as_array().unwrap() {
                let a = a.as_str().unwrap();
                let at = |k: u64| expected["state"][k.to_string()].get(a).cloned();
                if at(n) != at(n - 1) {
                    assert!(
                        got.contains(&a.to_string()),
                        "{a} changed in block {n} but is missing"
                    );
                }
            }
        }
        assert_eq!(state.block_number, head);
    }
    assert!(matches!(
        reth.state_at(head + 1),
        Err(RethError::FutureBlock { .. })
    ));
}

/// Full snapshots at an older block and at the head through the pipeline,
/// verified by private lookups.
fn check_builds(reth: &RethDatadir, chain_id: u64) {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let opts = BuildOptions {
        progress: None,
        ..Default::default()
    };
    let published = build_and_publish(
        &store,
        reth.export(RethMode::FullAt { block: 5 }, chain_id)
            .unwrap(),
        &opts,
    )
    .unwrap();
    // The complete state at block 5: a full snapshot, absent means 0.
    assert_eq!(published.id.to_string(), format!("{chain_id}/5-full"));
    assert!(published.manifest.kind.is_complete());
    assert!(published.manifest.state_root.is_some() && published.manifest.block_hash.is_some());
    snapshotter::verify::verify(&store, &published, 10).unwrap();
    // Below the head every record carries its code hash (from the change
    // sets) and storage root too: their root is block 5's header's.
    let header = published.manifest.state_root;
    snapshotter::verify::verify_state_root(&store, &published, &[], header).unwrap();
    let published = build_and_publish(
        &store,
        reth.export(RethMode::Full, chain_id).unwrap(),
        &opts,
    )
    .unwrap();
    snapshotter::verify::verify(&store, &published, 10).unwrap();
    // At the head every record carries its code hash and storage root as
    // the datadir holds them: their Merkle-Patricia root is the one reth
    // wrote in the head's header.
    let header = published.manifest.state_root;
    assert!(header.is_some());
    snapshotter::verify::verify_state_root(&store, &published, &[], header).unwrap();
}

/// A base at block 0 and a delta per block from the change sets, merged as
/// the follower merges them: the view at every block answers every account
/// the node reported there, by private lookups in every level (freshest
/// hit wins), and 0/0 for addresses the node never saw.
fn check_views_at_every_block(reth: &RethDatadir, expected: &Value) {
    use snapshotter::levels::{LevelPolicy, Levels};
    let head = expected["head"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::open(dir.path()).unwrap();
    let opts = BuildOptions {
        ..Default::default()
    };
    let policy = LevelPolicy {
        fanout: 3,
        keep_blocks: 1_000_000,
        ..Default::default()
    };
    let levels = Levels::new(store.clone(), 1337, policy, opts);
    levels
        .publish(reth.export(RethMode::FullAt { block: 0 }, 1337).unwrap())
        .unwrap();
    for n in 1..=head {
        levels
            .publish(reth.export_delta(n - 1, n, 1337).unwrap())
            .unwrap();
    }
    let snaps = store.list().unwrap();
    let entries = snapshotter::store::as_entries(&snaps);
    assert!(
        snaps
            .iter()
            .any(|s| s.id.from.is_some_and(|f| s.id.block - f > 1)),
        "no merged delta"
    );
    let mut loaded = BTreeMap::new();
    for s in &snaps {
        let server = store.load_server(s, None).unwrap();
        let client = pir_core::PirClient::from_setup_bytes(server.setup_bytes()).unwrap();
        loaded.insert(s.id, (server, client));
    }
    let views = protocol::view::views(&entries);
    let mut rng = rand::rng();
    for n in 0..=head {
        let view = views
            .iter()
            .find(|v| v.block == n)
            .unwrap_or_else(|| panic!("no view at block {n}"));
        assert!(view.complete);
        let mut want: Vec<(Address, (u64, U256))> = expected["state"][n.to_string()]
            .as_object()
            .unwrap()
            .iter()
            .map(|(a, acc)| {
                let balance = U256::from_str_radix(acc["balance"].as_str().unwrap(), 10).unwrap();
                (
                    a.parse().unwrap(),
                    (acc["nonce"].as_u64().unwrap(), balance),
                )
            })
            .collect();
        want.extend((0..3).map(|i| (Address::repeat_byte(0xe0 + i), (0, U256::ZERO))));
        for (address, expected_state) in want {
            let key = snapshotter::pir_key(&address);
            let mut got = (0, U256::ZERO);
            for id in &view.snapshots {
                let (server, client) = &loaded[id];
                let (query, pending) = client
                    .query(client.prepare(&mut rng), key.as_slice())
                    .unwrap();
                let response = server.answer(&query).unwrap();
                if let pir_core::Lookup::Found(v) = client.decode(pending, &response).unwrap() {
                    let (balance, nonce) =
                        snapshotter::decode_value(&v, snapshotter::ValueLayout::WithCode)
                            .unwrap()
                            .balance_nonce();
                    got = (nonce, balance);
                }
            }
            assert_eq!(
                got, expected_state,
                "{address} at block {n} ({:?})",
                view.snapshots
            );
        }
    }
}

#[test]
fn v1_datadir_matches_the_node() {
    let (_tmp, datadir) = unpack("v1");
    let reth = RethDatadir::open(&datadir).unwrap();
    assert_eq!(reth.layout, Layout::V1);
    // Full state at the head == `reth db list PlainAccountState`.
    let full: BTreeMap<String, (u64, U256)> = reth
        .full_state()
        .unwrap()
        .into_iter()
        .map(|r| (format!("{:#x}", r.address.unwrap()), (r.nonce, r.balance)))
        .collect();
    assert_eq!(full, dump("plain-account-state-v1.json"));
    check_history_and_active_sets(&reth, &json("expected-v1.json"));
    check_builds(&reth, 1337);
    check_views_at_every_block(&reth, &json("expected-v1.json"));
}

#[test]
fn v2_datadir_matches_the_node() {
    let (_tmp, datadir) = unpack("v2");
    let reth = RethDatadir::open(&datadir).unwrap();
    assert_eq!(reth.layout, Layout::V2);
    // Full state at the head == `reth db list HashedAccounts` (keyed by keccak256(address)).
    let full: BTreeMap<String, (u64, U256)> = reth
        .full_state()
        .unwrap()
        .into_iter()
        .map(|r| (format!("{:#x}", r.key), (r.nonce, r.balance)))
        .collect();
    assert_eq!(full, dump("hashed-accounts-v2.json"));
    let expected = json("expected-v2.json");
    let head = expected["head"].as_u64().unwrap() as usize;
    let state = reth.export(RethMode::Full, 1337).unwrap();
    assert_eq!(
        state.state_root,
        Some(
            expected["blocks"][head]["stateRoot"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        )
    );
    assert!(
        state.block_time.is_some_and(|t| t > 1_600_000_000),
        "block time {:?}",
        state.block_time
    );
    check_history_and_active_sets(&reth, &expected);
    check_builds(&reth, 1337);
    check_views_at_every_block(&reth, &expected);
}

#[test]
fn unreadable_datadirs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        RethDatadir::open(dir.path()),
        Err(RethError::NotADatadir(_))
    ));
    std::fs::create_dir(dir.path().join("db")).unwrap();
    std::fs::write(dir.path().join("db/mdbx.dat"), vec![0x5a; 64 << 10]).unwrap();
    assert!(matches!(
        RethDatadir::open(dir.path()),
        Err(RethError::Open { .. })
    ));
}

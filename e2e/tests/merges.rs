//! A reader that follows the head builds each merged delta from the small
//! deltas it already holds instead of downloading it: the real levels
//! (fanout 4: merges of 4 one-block deltas, then of 4 merges), a real PIR
//! server behind a relay that records every download, and the reader
//! refreshed after each block. No merge's table or setup crosses the
//! relay; every account reads right at every block (hot accounts changed
//! in every block, new ones, emptied ones); a reader started again on the
//! same cache finds the merges there.

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, U256};
use common::*;
use ethpir_client::levels::ReadMode;
use ethpir_client::{BlockSelector, ClientConfig, PrivateReader};
use protocol::view::View;
use protocol::{AccountRecord, SnapshotId, SnapshotKind};
use snapshotter::levels::{LevelPolicy, Levels};
use snapshotter::pipeline::{BuildOptions, ExportedState};

const CHAIN: u64 = 4242;
const BASE: u8 = 200;
const HOT: u8 = 6;
const BLOCKS: u64 = 16;

fn address(group: u8, i: u8) -> Address {
    let mut a = [group; 20];
    a[19] = i;
    Address::from(a)
}

fn state(
    block: u64,
    kind: SnapshotKind,
    accounts: &BTreeMap<Address, (U256, u64)>,
) -> ExportedState {
    ExportedState {
        chain_id: CHAIN,
        block_number: block,
        block_hash: None,
        state_root: None,
        block_time: None,
        parent_hash: None,
        kind,
        source: "merges test".into(),
        records: accounts
            .iter()
            .map(|(a, (balance, nonce))| AccountRecord::new(*a, *balance, *nonce))
            .collect(),
        storage: Vec::new(),
        listed: Default::default(),
        export_s: 0.0,
        codes: Vec::new(),
    }
}

/// What block `block` changes: every hot account, two new ones, and one
/// earlier new one emptied.
fn changes(block: u64) -> BTreeMap<Address, (U256, u64)> {
    let b = block as u8;
    let mut out: BTreeMap<Address, (U256, u64)> = (0..HOT)
        .map(|i| (address(1, i), (U256::from(1000 * block + i as u64), block)))
        .collect();
    for k in 0..2 {
        out.insert(address(2, 2 * b + k), (U256::from(7 + block), 0));
    }
    if block > 2 {
        out.insert(address(2, 2 * (b - 2)), (U256::ZERO, 0));
    }
    out
}

/// Downloads (setups and tables) that crossed the relay, by path.
fn recorder() -> (Rewrite, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let rewrite: Rewrite = Arc::new(move |path: &str, b| {
        if path.ends_with("/table") || path.ends_with("/setup") {
            log.lock().unwrap().push(path.to_string());
        }
        b
    });
    (rewrite, seen)
}

/// Refreshes `reader` until its newest view is the store's (the server
/// lists what the levels published, merges included, within its rescan).
async fn newest_of(reader: &PrivateReader, levels: &Levels) -> View {
    let store_view: Vec<SnapshotId> = levels
        .newest_view()
        .unwrap()
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    let probe = || async {
        reader.refresh().await.ok()?;
        let newest = reader.views().into_iter().max_by_key(|v| v.block)?;
        (newest.snapshots == store_view).then_some(newest)
    };
    test_support::eventually("the reader's newest view is the store's", probe).await
}

fn merged_ids(reader: &PrivateReader) -> Vec<SnapshotId> {
    let views = reader.views();
    let mut ids: Vec<SnapshotId> = views
        .iter()
        .flat_map(|v| v.snapshots.iter())
        .filter(|id| {
            reader.entry(id).is_some_and(|e| match e.manifest.kind {
                SnapshotKind::Delta { from } => e.manifest.block_number - from > 1,
                _ => false,
            })
        })
        .cloned()
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_following_reader_builds_merges_from_the_deltas_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store = snapshotter::SnapshotStore::open(dir.path().join("store")).unwrap();
    let policy = LevelPolicy {
        fanout: 4,
        keep_blocks: 64,
        ..Default::default()
    };
    let build = BuildOptions {
        progress: None,
        ..Default::default()
    };
    let levels = Arc::new(Levels::new(store, CHAIN, policy, build));
    let mut chain: BTreeMap<Address, (U256, u64)> = (0..BASE)
        .map(|i| (address(0, i), (U256::from(i as u64 + 1), 1)))
        .chain((0..HOT).map(|i| (address(1, i), (U256::from(5u8), 0))))
        .collect();
    let base = state(0, SnapshotKind::Full, &chain);
    let l = levels.clone();
    tokio::task::spawn_blocking(move || l.publish(base).unwrap())
        .await
        .unwrap();

    let server = start_server(&dir.path().join("store")).await;
    let (rewrite, downloads) = recorder();
    let (relay, _) = start_relay(&server, rewrite).await;
    let config = ClientConfig {
        pir_server: relay,
        chain_id: Some(CHAIN),
        cache_dir: dir.path().join("cache"),
        ..Default::default()
    };
    let reader = PrivateReader::new(&config).unwrap();
    newest_of(&reader, &levels).await;

    for block in 1..=BLOCKS {
        let delta = changes(block);
        chain.extend(delta.clone());
        let published = state(block, SnapshotKind::Delta { from: block - 1 }, &delta);
        let l = levels.clone();
        tokio::task::spawn_blocking(move || l.publish(published).unwrap())
            .await
            .unwrap();
        newest_of(&reader, &levels).await;
        // Every account ever seen reads right at the new block.
        let addresses: Vec<Address> = chain.keys().copied().collect();
        let sel = BlockSelector::Number(block);
        let read = reader.lookup(&sel, &addresses).await;
        for (a, r) in addresses.iter().zip(read) {
            let r = r.unwrap_or_else(|e| panic!("{a} at {block}: {e}"));
            assert_eq!((r.balance, r.nonce), chain[a], "{a} at block {block}");
        }
    }

    // Merges of both tiers happened, each built here, none downloaded.
    let merged = merged_ids(&reader);
    let spans: Vec<u64> = merged
        .iter()
        .map(|id| {
            let e = reader.entry(id).unwrap();
            let SnapshotKind::Delta { from } = e.manifest.kind else {
                unreachable!()
            };
            e.manifest.block_number - from
        })
        .collect();
    assert!(spans.contains(&4) && spans.contains(&16), "{merged:?}");
    let seen = downloads.lock().unwrap().clone();
    // The base's setup and the one-block deltas' tables did cross it.
    assert!(seen.iter().any(|p| p.ends_with("-full/setup")), "{seen:?}");
    let tables = seen.iter().filter(|p| p.ends_with("/table")).count();
    assert!(tables as u64 >= BLOCKS / 2, "{seen:?}");
    for id in &merged {
        assert_eq!(reader.read_mode(id), Some(ReadMode::Merged), "{id}");
        assert!(
            !seen
                .iter()
                .any(|p| p.contains(&format!("/{}/", id.url_form()))),
            "{id} downloaded: {seen:?}"
        );
    }
    // The newest view is the base and one merge of all 16 blocks.
    let newest = newest_of(&reader, &levels).await;
    assert_eq!(newest.snapshots.len(), 2, "{newest:?}");

    // Started again on the same cache: the merge is read from it.
    downloads.lock().unwrap().clear();
    let again = PrivateReader::new(&config).unwrap();
    newest_of(&again, &levels).await;
    let top = newest.snapshots.last().unwrap();
    assert_eq!(again.read_mode(top), Some(ReadMode::Whole));
    let seen = downloads.lock().unwrap().clone();
    assert!(
        !seen.iter().any(|p| p.contains(&top.url_form())),
        "{seen:?}"
    );
    let addresses: Vec<Address> = chain.keys().copied().collect();
    let read = again.lookup(&BlockSelector::Newest, &addresses).await;
    for (a, r) in addresses.iter().zip(read) {
        let r = r.unwrap();
        assert_eq!((r.balance, r.nonce), chain[a], "{a} after a restart");
    }
}

//! The follower against a real anvil (mined on demand, so every step is
//! deterministic): it refuses without a base and says why, builds a base
//! from a genesis file and deltas on it, repairs a reorg, a damaged delta
//! in the store and rides out a node outage. Also: the example config
//! parses.

use std::collections::BTreeMap;
use std::time::Duration;

use alloy_primitives::{Address, B256, U256};
use serde_json::json;
use snapshotter::follow::{self, FollowConfig, Follower, Refusal, SourceConfig, StepOutcome};
use snapshotter::levels::LevelPolicy;
use snapshotter::settings::BuildSettings;
use snapshotter::sources::changes::ChangeTracer;
use snapshotter::store::{StoredSnapshot, RECORDS_FILE};
use snapshotter::SnapshotStore;
use test_support::{
    idle_genesis_accounts, write_genesis, write_genesis_with, Anvil, ALL_DEV_ACCOUNTS, DEV_ACCOUNTS,
};

#[test]
fn example_config_parses() {
    let c = FollowConfig::from_file(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/snapshotter.toml"
    )))
    .unwrap();
    assert_eq!(c.levels.fanout, 8);
    assert!(c.source.url.is_some());
    let options = c.build.options(None).unwrap();
    assert_eq!(options.expansion, pir_core::Expansion::Aes128Ctr);
    let older: BuildSettings = toml::from_str("matrix_expansion = \"turboshake128\"").unwrap();
    assert_eq!(
        older.options(None).unwrap().expansion,
        pir_core::Expansion::TurboShake128
    );
    let wrong = toml::from_str::<BuildSettings>("matrix_expansion = \"aes\"");
    let why = wrong.unwrap_err().to_string();
    assert!(why.contains("build.matrix_expansion"), "{why}");
}

pub(crate) fn config(
    store: &std::path::Path,
    url: &str,
    genesis: Option<&std::path::Path>,
) -> FollowConfig {
    FollowConfig {
        store: Some(store.to_path_buf()),
        source: SourceConfig {
            url: Some(url.to_string()),
            genesis: genesis.map(std::path::Path::to_path_buf),
            ..Default::default()
        },
        levels: LevelPolicy {
            fanout: 3,
            ..Default::default()
        },
        hot: Default::default(),
        build: BuildSettings {
            device: snapshotter::settings::Device::Cpu,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// anvil from the test genesis, mined on demand.
async fn genesis_anvil(dir: &std::path::Path) -> (Anvil, std::path::PathBuf) {
    let genesis = dir.join("genesis.json");
    write_genesis(&genesis);
    let anvil =
        Anvil::start_with(&["--init", genesis.to_str().unwrap(), "--chain-id", "4242"]).await;
    (anvil, genesis)
}

/// The newest view's answer for every address, by overlaying its levels'
/// records (what the PIR lookups return, without the PIR).
fn view_state(store: &SnapshotStore) -> (u64, BTreeMap<B256, (U256, u64)>) {
    let snaps = store.list().unwrap();
    let views = protocol::view::views(&snapshotter::store::as_entries(&snaps));
    let view = protocol::view::newest(&views, None).unwrap();
    assert!(view.complete);
    let mut state = BTreeMap::new();
    for id in &view.snapshots {
        let snap = snaps.iter().find(|s| s.id == *id).unwrap();
        let bytes = store.read_checked(snap, RECORDS_FILE).unwrap();
        for r in snapshotter::records::decode_records(&bytes)
            .unwrap()
            .accounts
        {
            state.insert(r.key, (r.balance, r.nonce));
        }
    }
    (view.block, state)
}

/// The top level of the newest view (with a delta per block, the newest
/// block has several deltas; only the view's is read).
fn newest_views_top(store: &SnapshotStore) -> snapshotter::store::StoredSnapshot {
    let snaps = store.list().unwrap();
    let views = protocol::view::views(&snapshotter::store::as_entries(&snaps));
    let view = protocol::view::newest(&views, None).unwrap();
    let top = view.snapshots.last().unwrap();
    snaps.into_iter().find(|s| s.id == *top).unwrap()
}

/// Every address's view answer equals anvil's at the view's block.
async fn assert_view_matches(store: &SnapshotStore, anvil: &Anvil, who: &[String]) {
    let (block, state) = view_state(store);
    for a in who {
        let address: Address = a.parse().unwrap();
        let (balance, nonce) = state
            .get(&snapshotter::pir_key(&address))
            .copied()
            .unwrap_or((U256::ZERO, 0));
        assert_eq!(
            format!("{balance:#x}"),
            anvil.balance(a, block).await,
            "{a} at {block}"
        );
        assert_eq!(
            format!("{nonce:#x}"),
            anvil.nonce(a, block).await,
            "{a} at {block}"
        );
    }
}

fn everyone(extra: &[&str]) -> Vec<String> {
    let mut who = idle_genesis_accounts();
    who.extend(ALL_DEV_ACCOUNTS.iter().map(|a| a.to_string()));
    who.extend(extra.iter().map(|a| a.to_string()));
    who
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_base_the_follower_refuses_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, _) = genesis_anvil(dir.path()).await;
    let config = config(&dir.path().join("store"), &anvil.url, None);
    let err = follow::run(config, std::future::pending())
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        follow::FollowError::Refused(Refusal::NoBase { chain_id: 4242 })
    ));
    let text = err.to_string();
    assert!(
        text.contains("--genesis") && text.contains("--datadir"),
        "{text}"
    );
    // A genesis file of another chain is refused too.
    let other = dir.path().join("other.json");
    std::fs::write(&other, r#"{"config":{"chainId":4242},"alloc":{"0x1111111111111111111111111111111111111111":{"balance":"0x5"}}}"#).unwrap();
    let config = self::config(&dir.path().join("store"), &anvil.url, Some(&other));
    let err = Follower::new(config).unwrap().step().await.unwrap_err();
    assert!(
        err.to_string().contains("is not this node's genesis"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_follow_blocks_and_survive_reorgs_and_damage() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, genesis) = genesis_anvil(dir.path()).await;
    let store_dir = dir.path().join("store");
    let store = SnapshotStore::open(&store_dir).unwrap();
    let mut follower = Follower::new(config(&store_dir, &anvil.url, Some(&genesis))).unwrap();
    let fresh = |b: u8| format!("0x{}", format!("{b:02x}").repeat(20));
    let pay = |to: String, value: u64| json!({"from": DEV_ACCOUNTS[1], "to": to, "value": format!("{value:#x}")});

    // Base at 0, then a delta per block (merged 3 at a time).
    assert!(matches!(
        follower.step().await.unwrap(),
        StepOutcome::UpToDate { block: 0 }
    ));
    for i in 0..5u8 {
        anvil.send(pay(fresh(0x30 + i), 1000 + i as u64)).await;
        let StepOutcome::Published { block, .. } = follower.step().await.unwrap() else {
            panic!("no delta")
        };
        assert_eq!(block, anvil.head().await);
    }
    let touched = [
        "0x3030303030303030303030303030303030303030",
        "0x3434343434343434343434343434343434343434",
    ];
    assert_view_matches(&store, &anvil, &everyone(&touched)).await;

    // A reorg: two blocks followed, then replaced by three others.
    let snapshot = anvil.rpc("evm_snapshot", json!([])).await;
    anvil.send(pay(fresh(0x61), 61)).await;
    anvil.send(pay(fresh(0x62), 62)).await;
    follower.step().await.unwrap();
    assert_eq!(view_state(&store).0, anvil.head().await);
    assert_eq!(
        anvil.rpc("evm_revert", json!([snapshot])).await,
        json!(true)
    );
    for b in [0x71u8, 0x72, 0x73] {
        anvil.send(pay(fresh(b), b as u64)).await;
    }
    follower.step().await.unwrap();
    let orphaned = [fresh(0x61), fresh(0x62), fresh(0x71), fresh(0x73)];
    let orphaned: Vec<&str> = orphaned.iter().map(String::as_str).collect();
    assert_view_matches(&store, &anvil, &everyone(&orphaned)).await;
    assert_eq!(view_state(&store).0, anvil.head().await);
    // Every block has a view of its own, the rebuilt ones too (a delta
    // over several blocks would leave those inside it unreadable).
    let snaps = store.list().unwrap();
    let views = protocol::view::views(&snapshotter::store::as_entries(&snaps));
    let blocks: Vec<u64> = views
        .iter()
        .filter(|v| v.complete)
        .map(|v| v.block)
        .collect();
    let head = anvil.head().await;
    assert_eq!(blocks, (0..=head).collect::<Vec<_>>());

    // A damaged delta in the store: removed with what chains on it, its
    // blocks rebuilt from the node.
    anvil.send(pay(fresh(0x81), 81)).await;
    follower.step().await.unwrap();
    let top = newest_views_top(&store);
    let records = top.path.join(RECORDS_FILE);
    let bytes = std::fs::read(&records).unwrap();
    std::fs::write(&records, &bytes[..bytes.len() / 2]).unwrap();
    follower.step().await.unwrap();
    // Removed, and rebuilt the same where no other level reaches its block.
    if top.path.exists() {
        let rebuilt = std::fs::read(&records).unwrap();
        assert_eq!(rebuilt, bytes, "rebuilt with the same records");
    }
    assert_eq!(view_state(&store).0, anvil.head().await);
    assert_view_matches(&store, &anvil, &everyone(&[&fresh(0x81)])).await;
    for s in store.list().unwrap() {
        snapshotter::verify::verify(&store, &s, 2).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_rides_out_a_node_outage_and_stops_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, genesis) = genesis_anvil(dir.path()).await;
    let store_dir = dir.path().join("store");
    let mut config = config(&store_dir, &anvil.url, Some(&genesis));
    config.follow.poll_ms = 100;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = tokio::spawn(follow::run(config, async move {
        let _ = stop_rx.await;
    }));
    anvil
        .send(json!({"from": DEV_ACCOUNTS[0], "to": DEV_ACCOUNTS[3], "value": "0x5"}))
        .await;
    let store = SnapshotStore::open(&store_dir).unwrap();
    let delta = || async {
        store
            .list()
            .unwrap()
            .iter()
            .any(|s| s.id.block == 1)
            .then_some(())
    };
    test_support::eventually("a delta for block 1", delta).await;
    anvil.stop().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !runner.is_finished(),
        "the follower gave up during a node outage"
    );
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), runner)
        .await
        .expect("the follower stops")
        .unwrap()
        .unwrap();
}

/// Every slot of the newest view, by PIR key: its levels' storage records
/// overlaid, the freshest winning (absent: 0, as a whole-state view reads).
pub(crate) fn view_slots(store: &SnapshotStore) -> BTreeMap<B256, U256> {
    let snaps = store.list().unwrap();
    let views = protocol::view::views(&snapshotter::store::as_entries(&snaps));
    let view = protocol::view::newest(&views, None).unwrap();
    let mut slots = BTreeMap::new();
    for id in &view.snapshots {
        let snap = snaps.iter().find(|s| s.id == *id).unwrap();
        assert!(
            snap.manifest.storage.whole_state,
            "{id} claims the whole state"
        );
        let bytes = store.read_checked(snap, RECORDS_FILE).unwrap();
        for s in snapshotter::records::decode_records(&bytes)
            .unwrap()
            .storage
        {
            slots.insert(s.key, s.value);
        }
    }
    slots
}

/// anvil before Cancun (`--hardfork shanghai`) on the test genesis with
/// `account` added to its alloc (written in `dir`), and a follower of the
/// whole state (`storage = "all"`) into a store under `dir`.
async fn before_cancun_whole_state(
    dir: &std::path::Path,
    account: Address,
    alloc: serde_json::Value,
    tracer: ChangeTracer,
) -> (Anvil, Follower, SnapshotStore) {
    let genesis = dir.join("genesis.json");
    write_genesis_with(&genesis, vec![(account.to_string(), alloc)]);
    // (anvil adds a CREATE2 deployer the file does not hold unless told
    // not to: the deltas' state roots would not be the base's chain's.)
    let anvil = Anvil::start_with(&[
        "--init",
        genesis.to_str().unwrap(),
        "--chain-id",
        "4242",
        "--disable-default-create2-deployer",
        "--hardfork",
        "shanghai",
    ])
    .await;
    let store_dir = dir.join("store");
    let mut config = config(&store_dir, &anvil.url, Some(&genesis));
    config.source.storage = follow::StorageScope::All;
    config.source.changes = tracer;
    let follower = Follower::new(config).unwrap();
    (anvil, follower, SnapshotStore::open(&store_dir).unwrap())
}

/// The whole state followed on a chain before Cancun (anvil
/// `--hardfork shanghai`): the genesis alloc's storage in the base, a
/// slot written later in a delta, and a contract destroyed by
/// SELFDESTRUCT: every slot it held reads 0 after, though the state diff
/// names none of the genesis ones. A base leaving a slot out under the
/// claim is refused by the state-root check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_state_is_followed_and_a_destroyed_contracts_slots_read_zero() {
    whole_state_followed_through(ChangeTracer::Prestate).await;
}

/// The same through parity traces (`trace_block`, state diffs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_state_is_followed_through_parity_traces() {
    whole_state_followed_through(ChangeTracer::Parity).await;
}

async fn whole_state_followed_through(tracer: ChangeTracer) {
    let dir = tempfile::tempdir().unwrap();
    // Empty calldata: SELFDESTRUCT to the caller; else SSTORE(3, word 0).
    let contract: Address = "0x00000000000000000000000000000000000c0de5"
        .parse()
        .unwrap();
    let alloc = json!({
        "balance": "0x0",
        "code": "0x3615600b575f35600355005b33ff",
        "storage": {
            "0x0000000000000000000000000000000000000000000000000000000000000001": "0x05",
            "0x0000000000000000000000000000000000000000000000000000000000000002": "0x07",
        },
    });
    let (anvil, mut follower, store) =
        before_cancun_whole_state(dir.path(), contract, alloc, tracer).await;
    let key = |slot: u8| protocol::storage::storage_key_of(&contract, &B256::with_last_byte(slot));
    let word =
        |slots: &BTreeMap<B256, U256>, slot: u8| slots.get(&key(slot)).copied().unwrap_or_default();

    follower.step().await.unwrap();
    let slots = view_slots(&store);
    assert_eq!(
        (word(&slots, 1), word(&slots, 2)),
        (U256::from(5), U256::from(7))
    );
    a_slot_left_out_is_caught(&store, &dir.path().join("forged")).await;

    let to = contract.to_string();
    let written = B256::with_last_byte(0x2a);
    anvil
        .transact(DEV_ACCOUNTS[0], Some(&to), written.as_slice())
        .await;
    follower.step().await.unwrap();
    let slots = view_slots(&store);
    assert_eq!(word(&slots, 3), U256::from(0x2a), "a slot written later");
    assert_eq!(word(&slots, 1), U256::from(5));

    anvil.transact(DEV_ACCOUNTS[0], Some(&to), &[]).await;
    let code = anvil.rpc("eth_getCode", json!([to, "latest"])).await;
    assert_eq!(code, json!("0x"), "destroyed");
    follower.step().await.unwrap();
    let slots = view_slots(&store);
    for slot in [1, 2, 3] {
        assert_eq!(
            word(&slots, slot),
            U256::ZERO,
            "slot {slot} after the destruction"
        );
    }
    every_level_after_genesis_is_attested(&store, &anvil).await;
}

/// A change no transaction made, so no tracer reports it
/// (`anvil_setStorageAt`, then a block): the view with the delta on top
/// does not give the block's state root, so the delta is refused, not
/// published; the newest view stays at the block before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_missing_a_change_is_refused_not_published() {
    let dir = tempfile::tempdir().unwrap();
    let contract: Address = "0x00000000000000000000000000000000000c0de5"
        .parse()
        .unwrap();
    let alloc = json!({"balance": "0x0", "code": "0x3615600b575f35600355005b33ff"});
    let genesis = dir.path().join("genesis.json");
    let (anvil, _, store) =
        before_cancun_whole_state(dir.path(), contract, alloc, ChangeTracer::Prestate).await;
    // Checked on anvil too (its contracts here write no zero, touch no
    // empty account).
    let mut config = config(&dir.path().join("store"), &anvil.url, Some(&genesis));
    config.source.storage = follow::StorageScope::All;
    config.follow.state_root_check = follow::RootCheck::Always;
    let mut follower = Follower::new(config).unwrap();
    follower.step().await.unwrap();
    let to = contract.to_string();
    let word = B256::with_last_byte(0x2a);
    anvil
        .transact(DEV_ACCOUNTS[0], Some(&to), word.as_slice())
        .await;
    follower.step().await.unwrap();
    let checked = newest_views_top(&store).manifest.block_number;
    assert_eq!(checked, anvil.head().await, "a delta whose root holds");

    let unseen = json!([to, "0x9", word]);
    anvil.rpc("anvil_setStorageAt", unseen).await;
    anvil
        .transact(DEV_ACCOUNTS[1], Some(DEV_ACCOUNTS[2]), &[])
        .await;
    let refused = follower.step().await.unwrap_err().to_string();
    assert!(refused.contains("not published"), "{refused}");
    assert_eq!(newest_views_top(&store).manifest.block_number, checked);
}

/// An attester over `store` with `anvil` as its node signs every level
/// after block 0 (anvil's genesis header names no real root), deltas that
/// destroy storage included: their zero records come from the levels
/// below.
async fn every_level_after_genesis_is_attested(store: &SnapshotStore, anvil: &Anvil) {
    use snapshotter::attest::{Attester, Outcome};
    let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let options = snapshotter::sources::rpc::RpcOptions::default();
    let node = snapshotter::sources::rpc::RpcSource::connect(&anvil.url, options)
        .await
        .unwrap();
    let outcomes = Attester::new(store.clone(), node, key)
        .unwrap()
        .attest_store()
        .await
        .unwrap();
    assert!(outcomes.len() > 2, "{outcomes:?}");
    for (id, outcome) in outcomes.iter().filter(|(id, _)| id.block > 0) {
        assert_eq!(outcome, &Outcome::Signed, "{id}");
    }
}

/// A base that claims the whole state but leaves one slot out: its state
/// root is still the manifest's (the account keeps its storage root), but
/// the storage root its slots give is not, and `verify --state-root` says
/// so.
async fn a_slot_left_out_is_caught(store: &SnapshotStore, forged_dir: &std::path::Path) {
    let base = store.list().unwrap().into_iter().next().unwrap();
    let bytes = store.read_checked(&base, RECORDS_FILE).unwrap();
    let mut records = snapshotter::records::decode_records(&bytes).unwrap();
    records.storage.pop();
    let m = &base.manifest;
    // The root the accounts give (anvil's genesis header names none).
    let root = snapshotter::state_root::state_root(|n| {
        let of_nibble: Vec<_> = records
            .accounts
            .iter()
            .filter(|a| a.key[0] >> 4 == n)
            .cloned()
            .collect();
        Box::new(of_nibble.into_iter())
    })
    .unwrap();
    let state = snapshotter::pipeline::ExportedState {
        chain_id: m.chain_id,
        block_number: m.block_number,
        block_hash: m.block_hash,
        state_root: Some(root),
        block_time: m.block_time,
        parent_hash: m.parent_hash,
        kind: m.kind,
        source: "test: a slot left out".into(),
        records: records.accounts,
        storage: records.storage,
        listed: m.storage.clone(),
        export_s: 0.0,
        codes: Vec::new(),
    };
    let forged_store = SnapshotStore::open(forged_dir).unwrap();
    let options = snapshotter::pipeline::BuildOptions::default();
    let forged = snapshotter::pipeline::build_and_publish(&forged_store, state, &options).unwrap();
    let refused = snapshotter::verify::verify_state_root(&forged_store, &forged, &[], Some(root))
        .expect_err("a slot left out")
        .to_string();
    assert!(refused.contains("storage root"), "{refused}");
}

/// Before Cancun, a contract destroyed and created again (CREATE2, same
/// address) in one block: its code is there at the block's end, but its
/// earlier slots are gone; the new constructor's slot is held. The
/// follower sees both in the call traces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_destroyed_and_created_again_in_one_block_keeps_only_its_new_slots() {
    destroyed_and_created_again_through(ChangeTracer::Prestate).await;
}

/// The same through parity traces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroyed_and_created_again_through_parity_traces() {
    destroyed_and_created_again_through(ChangeTracer::Parity).await;
}

async fn destroyed_and_created_again_through(tracer: ChangeTracer) {
    let dir = tempfile::tempdir().unwrap();
    let factory: Address = test_support::CREATE2_FACTORY.parse().unwrap();
    let alloc = json!({"balance": "0x0", "code": test_support::CREATE2_FACTORY_CODE});
    let init = alloy_primitives::hex::decode(test_support::REBORN_INIT_CODE).unwrap();
    let child = factory.create2_from_code(B256::ZERO, &init);
    let (anvil, mut follower, store) =
        before_cancun_whole_state(dir.path(), factory, alloc, tracer).await;
    let key = |slot: u8| protocol::storage::storage_key_of(&child, &B256::with_last_byte(slot));
    let word = |slot: u8| {
        view_slots(&store)
            .get(&key(slot))
            .copied()
            .unwrap_or_default()
    };
    let (factory, to) = (factory.to_string(), child.to_string());

    anvil.transact(DEV_ACCOUNTS[0], Some(&factory), &init).await;
    anvil
        .transact(
            DEV_ACCOUNTS[0],
            Some(&to),
            B256::with_last_byte(0x2a).as_slice(),
        )
        .await;
    follower.step().await.unwrap();
    assert_eq!((word(1), word(3)), (U256::from(9), U256::from(0x2a)));

    // Destroyed, then created again, in one block.
    anvil.rpc("evm_setAutomine", json!([false])).await;
    let tx = |to: &str, data: &[u8]| {
        let data = alloy_primitives::hex::encode_prefixed(data);
        json!({"from": DEV_ACCOUNTS[0], "to": to, "data": data, "gas": "0x4c4b40"})
    };
    anvil
        .rpc("eth_sendTransaction", json!([tx(&to, &[])]))
        .await;
    anvil
        .rpc("eth_sendTransaction", json!([tx(&factory, &init)]))
        .await;
    anvil.rpc("evm_mine", json!([])).await;
    anvil.rpc("evm_setAutomine", json!([true])).await;
    let block = anvil
        .rpc("eth_getBlockByNumber", json!(["latest", false]))
        .await;
    assert_eq!(block["transactions"].as_array().map(Vec::len), Some(2));
    let code = anvil.rpc("eth_getCode", json!([to, "latest"])).await;
    assert_ne!(code, json!("0x"), "created again");
    let slot3 = anvil
        .rpc("eth_getStorageAt", json!([to, "0x3", "latest"]))
        .await;
    assert_eq!(
        U256::from_str_radix(slot3.as_str().unwrap().trim_start_matches("0x"), 16).unwrap(),
        U256::ZERO
    );

    follower.step().await.unwrap();
    assert_eq!(word(1), U256::from(9), "the new constructor's slot");
    assert_eq!(
        word(3),
        U256::ZERO,
        "the slot written before the destruction"
    );
}

/// A development node without a genesis file (`--dump`): anvil's own dev
/// accounts, a contract given code and a slot by anvil_setCode and
/// anvil_setStorageAt. The whole-state base comes from the node's dump,
/// checked against its block's state root: at block 0 (whose header anvil
/// gives no real root) the step fails and is retried, after a block it
/// holds every account and the slot; a slot written later comes in a
/// delta. Without `--dump` the follower still refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_node_without_a_genesis_file_is_based_on_its_own_dump() {
    let dir = tempfile::tempdir().unwrap();
    let anvil = Anvil::start_with(&["--chain-id", "4242"]).await;
    // Any calldata: SSTORE(3, its first word).
    let contract = "0x00000000000000000000000000000000000c0de5";
    let address: Address = contract.parse().unwrap();
    anvil
        .rpc("anvil_setCode", json!([contract, "0x5f3560035500"]))
        .await;
    let five = format!("{:#066x}", 5);
    anvil
        .rpc("anvil_setStorageAt", json!([contract, "0x1", five]))
        .await;
    let store_dir = dir.path().join("store");
    let mut config = config(&store_dir, &anvil.url, None);
    config.source.storage = follow::StorageScope::All;
    let refused = Follower::new(config.clone()).unwrap().step().await;
    assert!(
        matches!(
            &refused,
            Err(follow::FollowError::Refused(Refusal::NoBase { .. }))
        ),
        "no base without --dump"
    );
    config.source.dump = true;
    let mut follower = Follower::new(config).unwrap();
    let early = follower.step().await.unwrap_err().to_string();
    assert!(
        early.contains("state root") && early.contains("block 0"),
        "{early}"
    );
    assert!(SnapshotStore::open(&store_dir)
        .unwrap()
        .list()
        .unwrap()
        .is_empty());

    anvil
        .transact(DEV_ACCOUNTS[0], Some(DEV_ACCOUNTS[1]), &[])
        .await;
    follower.step().await.unwrap();
    let store = SnapshotStore::open(&store_dir).unwrap();
    let base = &store.list().unwrap()[0];
    assert!(
        base.manifest.storage.whole_state && base.id.block == 1,
        "{}",
        base.id
    );
    let mut who: Vec<String> = ALL_DEV_ACCOUNTS.iter().map(|a| a.to_string()).collect();
    who.push(contract.to_string());
    assert_view_matches(&store, &anvil, &who).await;
    let key = |slot: u8| protocol::storage::storage_key_of(&address, &B256::with_last_byte(slot));
    let slots = view_slots(&store);
    assert_eq!(slots.get(&key(1)), Some(&U256::from(5)), "the dumped slot");
    the_same_base_from_the_command_line(dir.path(), &anvil.url, base);

    anvil
        .transact(
            DEV_ACCOUNTS[0],
            Some(contract),
            B256::with_last_byte(0x2a).as_slice(),
        )
        .await;
    follower.step().await.unwrap();
    let slots = view_slots(&store);
    assert_eq!(
        slots.get(&key(3)),
        Some(&U256::from(0x2a)),
        "a slot written later"
    );
    assert_eq!(slots.get(&key(1)), Some(&U256::from(5)));
    assert_view_matches(&store, &anvil, &who).await;
}

/// `build rpc --dump --storage all` at the same head: the follower's base
/// again, the same `records.bin`; `--storage all` without `--dump` is
/// refused (an active set holds accounts only).
fn the_same_base_from_the_command_line(dir: &std::path::Path, url: &str, base: &StoredSnapshot) {
    let store = dir.join("cli-store");
    let build = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ethpir-snapshot"))
            .args([
                "--store",
                store.to_str().unwrap(),
                "build",
                "rpc",
                "--url",
                url,
            ])
            .args(["--storage", "all", "--device", "cpu", "--no-progress"])
            .args(extra)
            .output()
            .unwrap()
    };
    let built = build(&["--dump"]);
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "{stderr}");
    let snaps = SnapshotStore::open(&store).unwrap().list().unwrap();
    assert_eq!(snaps.len(), 1);
    assert_eq!(snaps[0].id, base.id);
    assert_eq!(
        snaps[0].manifest.content_digest,
        base.manifest.content_digest
    );
    assert!(snaps[0].manifest.storage.whole_state);
    let refused = build(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("--dump"),
        "{stderr}"
    );
}

//! The follower against a real geth (`--dev`: Prague and on, a block per
//! transaction), which has no `trace_*` namespace: the whole state is
//! followed through its `prestateTracer` in diff mode.

use alloy_primitives::{Address, B256, U256};
use serde_json::json;
use snapshotter::follow::{Follower, StorageScope};
use snapshotter::sources::changes::ChangeTracer;
use snapshotter::sources::rpc::{RpcOptions, RpcSource};
use test_support::{forward_to, Node, DEV_ACCOUNTS, FORWARDER_INIT_CODE};

use super::follow::{config, view_slots};

/// A contract in the genesis: empty calldata SELFDESTRUCTs to the caller,
/// else word 0 is written to slot 3.
const CONTRACT: &str = "0x00000000000000000000000000000000000c0de5";

/// [`CONTRACT`]'s genesis account: its code, 3 wei, and `words` (slot,
/// word) in its storage.
fn genesis_contract(words: &[(u8, u8)]) -> serde_json::Value {
    let word = |n: u8| format!("{:#066x}", n);
    let storage: serde_json::Map<String, serde_json::Value> = words
        .iter()
        .map(|(slot, value)| (word(*slot), json!(word(*value))))
        .collect();
    json!({"balance": "0x3", "code": "0x3615600b575f35600355005b33ff", "storage": storage})
}

/// The tracer geth offers is found, and one it lacks is named.
async fn geth_offers_the_prestate_tracer_only(url: &str) {
    let node = RpcSource::connect(url, RpcOptions::default())
        .await
        .unwrap();
    let chosen = node.probe_changes(ChangeTracer::Auto, true, false).await;
    assert_eq!(chosen.unwrap().unwrap(), ChangeTracer::Prestate);
    let parity = node.probe_changes(ChangeTracer::Parity, true, false).await;
    let missing = parity.unwrap().unwrap_err().to_string();
    assert!(
        missing.contains("trace_replayBlockTransactions"),
        "{missing}"
    );
}

/// Base from the genesis, then deltas: a slot written, a slot cleared,
/// value sent on by a contract to a fresh address, a contract created by
/// a contract, and a SELFDESTRUCT (since Cancun the balance alone moves).
/// Every level's state root, recomputed from its records (the system
/// contracts' storage, written outside transactions, included), is the
/// one in geth's header at its block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geth_is_followed_with_the_whole_state_through_its_prestate_tracer() {
    let dir = tempfile::tempdir().unwrap();
    let contract = genesis_contract(&[(1, 5), (3, 7)]);
    let factory = test_support::CREATE2_FACTORY;
    let alloc = vec![
        (CONTRACT.into(), contract),
        (
            factory.into(),
            json!({"balance": "0x0", "code": test_support::CREATE2_FACTORY_CODE}),
        ),
    ];
    let (geth, genesis) = Node::start_geth(dir.path(), alloc).await;
    geth_offers_the_prestate_tracer_only(&geth.url).await;
    let store_dir = dir.path().join("store");
    let mut config = config(&store_dir, &geth.url, Some(&genesis));
    config.source.storage = StorageScope::All;
    let mut parity = config.clone();
    parity.source.changes = ChangeTracer::Parity;
    let refused = Follower::new(parity).unwrap().step().await.unwrap_err();
    assert!(refused.to_string().contains("debug namespace"), "{refused}");
    let mut follower = Follower::new(config).unwrap();
    follower.step().await.unwrap();

    let from = DEV_ACCOUNTS[0];
    geth.transact(from, Some(CONTRACT), B256::with_last_byte(0x2a).as_slice())
        .await;
    let forwarder = geth.deploy(from, &hex(FORWARDER_INIT_CODE)).await;
    let fresh = "0x00000000000000000000000000000000000f7e57";
    geth.send(json!({"from": from, "to": forwarder, "value": "0x777", "data": forward_to(fresh)}))
        .await;
    geth.transact(from, Some(factory), &hex(test_support::REBORN_INIT_CODE))
        .await;
    geth.transact(from, Some(CONTRACT), &[]).await;
    follower.step().await.unwrap();

    let contract: Address = CONTRACT.parse().unwrap();
    let slot = |n: u8| {
        let key = protocol::storage::storage_key_of(&contract, &B256::with_last_byte(n));
        view_slots(&snapshotter::SnapshotStore::open(&store_dir).unwrap())
            .get(&key)
            .copied()
            .unwrap_or_default()
    };
    assert_eq!((slot(1), slot(3)), (U256::from(5), U256::from(0x2a)));
    every_level_has_geths_state_root(&store_dir, &geth.url, geth.head().await);
}

fn hex(text: &str) -> Vec<u8> {
    alloy_primitives::hex::decode(text).unwrap()
}

/// `ethpir-snapshot verify --state-root --url`: each level's records give
/// the state root of geth's header at its block.
fn every_level_has_geths_state_root(store: &std::path::Path, url: &str, head: u64) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ethpir-snapshot"))
        .args(["--store", store.to_str().unwrap(), "verify", "--state-root"])
        .args(["--lookups", "0", "--url", url])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    let checked = text.lines().filter(|l| l.contains(": state root")).count();
    assert!(checked >= 2, "{text}");
    assert!(text.contains(&format!("at block {head} ")), "{text}");
}

/// A base from geth's own state at its head (`debug_accountRange`, geth
/// recording preimages): every account and slot (more than a page of
/// accounts), checked against its state root, the slots written since
/// the genesis included; without
/// preimages, geth cannot name its accounts, and the base is refused
/// with the advice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_is_read_from_geths_account_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let contract = genesis_contract(&[(1, 5)]);
    let mut alloc = vec![(CONTRACT.into(), contract.clone())];
    // Past geth's page of 256 accounts.
    let funded = (1..=300u64).map(|i| {
        (
            format!("{:#042x}", 0xf000_0000 + i),
            json!({"balance": "0x1"}),
        )
    });
    alloc.extend(funded);
    let preimages = ["--cache.preimages"];
    let (geth, _) = Node::start_geth_with(dir.path(), alloc.clone(), &preimages).await;
    geth.transact(
        DEV_ACCOUNTS[0],
        Some(CONTRACT),
        B256::with_last_byte(0x2a).as_slice(),
    )
    .await;
    let head = geth.head().await;
    let node = RpcSource::connect(&geth.url, RpcOptions::default())
        .await
        .unwrap();
    let whole = protocol::storage::PrivateStorage::whole_state();
    let state = node
        .export_dump(&whole)
        .await
        .unwrap()
        .expect("geth dumps its state");
    assert_eq!(state.block_number, head);
    assert!(
        state.source.contains("debug_accountRange"),
        "{}",
        state.source
    );
    let contract: Address = CONTRACT.parse().unwrap();
    let word_of = |n: u8| {
        let key = protocol::storage::storage_key_of(&contract, &B256::with_last_byte(n));
        let slot = state.storage.iter().find(|s| s.key == key);
        slot.map(|s| s.value)
    };
    assert_eq!(
        (word_of(1), word_of(3)),
        (Some(U256::from(5)), Some(U256::from(0x2a)))
    );
    let sender: Address = DEV_ACCOUNTS[0].parse().unwrap();
    assert!(state
        .records
        .iter()
        .any(|r| r.address == Some(sender) && r.nonce == 1));
    assert!(
        state.records.len() > 300,
        "{} accounts",
        state.records.len()
    );
    geth.stop().await;

    let bare = tempfile::tempdir().unwrap();
    let (geth, _) = Node::start_geth(bare.path(), alloc).await;
    geth.transact(
        DEV_ACCOUNTS[0],
        Some(CONTRACT),
        B256::with_last_byte(0x2a).as_slice(),
    )
    .await;
    let node = RpcSource::connect(&geth.url, RpcOptions::default())
        .await
        .unwrap();
    let refused = node.export_dump(&whole).await.unwrap_err().to_string();
    assert!(refused.contains("--cache.preimages"), "{refused}");
}

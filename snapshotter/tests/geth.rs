//! The follower against a real geth (`--dev`: Prague and on, a block per
//! transaction), which has no `trace_*` namespace: the whole state is
//! followed through its `prestateTracer` in diff mode.

use alloy_primitives::{Address, B256, U256};
use serde_json::json;
use snapshotter::follow::{FollowError, Follower, StorageScope};
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

    let slot = |n: u8| contract_word(&store_dir, n);
    assert_eq!((slot(1), slot(3)), (U256::from(5), U256::from(0x2a)));
    every_level_has_geths_state_root(&store_dir, &geth.url, geth.head().await);
}

/// Slot `n` of [`CONTRACT`] in the store's newest view (0 when absent).
fn contract_word(store_dir: &std::path::Path, n: u8) -> U256 {
    let contract: Address = CONTRACT.parse().unwrap();
    let key = protocol::storage::storage_key_of(&contract, &B256::with_last_byte(n));
    view_slots(&snapshotter::SnapshotStore::open(store_dir).unwrap())
        .get(&key)
        .copied()
        .unwrap_or_default()
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

/// A base from geth's offline export (`geth snapshot dump`, geth stopped
/// as an operator stops it, no preimages recorded): streamed, checked
/// against the state root of the block it is of, then followed through
/// the prestate tracer; every level's root is geth's. A dump whose slot
/// was changed, or whose root is no block's, is refused and nothing is
/// published from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_is_streamed_from_geths_offline_dump() {
    let dir = tempfile::tempdir().unwrap();
    let contract = genesis_contract(&[(1, 5), (2, 6)]);
    let mut alloc = vec![(CONTRACT.into(), contract)];
    alloc.extend((1..=300u64).map(|i| {
        (
            format!("{:#042x}", 0xf000_0000 + i),
            json!({"balance": "0x1"}),
        )
    }));
    let (geth, _) = Node::start_geth(dir.path(), alloc).await;
    let from = DEV_ACCOUNTS[0];
    geth.transact(from, Some(CONTRACT), B256::with_last_byte(0x2a).as_slice())
        .await;
    let dumped_at = geth.head().await;
    geth.shutdown().await;
    let dump = dir.path().join("state.jsonl");
    Node::geth_snapshot_dump(dir.path(), &dump);
    let text = std::fs::read_to_string(&dump).unwrap();
    let geth = Node::restart_geth(dir.path(), &[]).await;

    // Refused: a slot's word changed (its account's storage root no longer
    // adds up), and a root that is no block's.
    let tampered_word = tamper_first_slot(&text);
    let (bad, refusals) = (dir.path().join("bad.jsonl"), dir.path().join("refusals"));
    std::fs::write(&bad, &tampered_word).unwrap();
    let mut refusing = config(&refusals, &geth.url, None);
    refusing.source.storage = StorageScope::All;
    refusing.source.geth_dump = Some(bad.clone());
    let refused = Follower::new(refusing.clone())
        .unwrap()
        .step()
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("storage root"), "{refused}");
    // It stops the follower (the same bytes would be read again), and
    // its scratch files are gone.
    assert!(matches!(refused, FollowError::Refused(_)), "{refused:?}");
    let staging = refusals.join(".staging");
    let left: Vec<_> = std::fs::read_dir(&staging).map_or(Vec::new(), |d| d.collect());
    assert!(left.is_empty(), "{left:?}");
    let root_line = text.lines().next().unwrap();
    let other_root = format!("{{\"root\":\"{}\"}}", B256::repeat_byte(0x77));
    std::fs::write(&bad, text.replacen(root_line, &other_root, 1)).unwrap();
    let refused = Follower::new(refusing).unwrap().step().await.unwrap_err();
    assert!(refused.to_string().contains("no header's"), "{refused}");
    let published = snapshotter::SnapshotStore::open(&refusals)
        .unwrap()
        .list()
        .unwrap();
    assert!(published.is_empty(), "{published:?}");

    let store_dir = dir.path().join("store");
    let mut following = config(&store_dir, &geth.url, None);
    following.source.storage = StorageScope::All;
    following.source.geth_dump = Some(dump);
    let mut follower = Follower::new(following).unwrap();
    follower.step().await.unwrap();
    let store = snapshotter::SnapshotStore::open(&store_dir).unwrap();
    let base = &store.list().unwrap()[0];
    assert_eq!(base.id.block, dumped_at);
    assert!(
        base.manifest.record_count > 300,
        "{}",
        base.manifest.record_count
    );

    geth.transact(from, Some(CONTRACT), B256::with_last_byte(0x2b).as_slice())
        .await;
    follower.step().await.unwrap();
    let slot = |n: u8| contract_word(&store_dir, n);
    assert_eq!(
        (slot(1), slot(2), slot(3)),
        (U256::from(5), U256::from(6), U256::from(0x2b))
    );
    every_level_has_geths_state_root(&store_dir, &geth.url, geth.head().await);
}

/// `text` (a dump) with the word of the first slot of its first account
/// with storage changed (its last hex digit, the RLP still well formed).
fn tamper_first_slot(text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for line in lines.iter_mut().skip(1) {
        let mut account: serde_json::Value = serde_json::from_str(line).unwrap();
        let Some(storage) = account["storage"].as_object_mut() else {
            continue;
        };
        let (slot, rlp) = storage
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()))
            .unwrap();
        let rlp = rlp.as_str().unwrap();
        let last = u8::from_str_radix(&rlp[rlp.len() - 1..], 16).unwrap();
        let changed = format!("{}{:x}", &rlp[..rlp.len() - 1], last ^ 2);
        storage.insert(slot, json!(changed));
        *line = account.to_string();
        return lines.join("\n");
    }
    panic!("no account with storage in the dump");
}

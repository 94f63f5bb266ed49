//! `verify --state-root` against a real anvil, whose headers' state roots
//! are the oracle: anvil from a genesis file the test writes, the follower
//! (its library, one step at a time) keeping a base and deltas with a
//! listed contract (e2e/contracts/PooledShares.sol, `getShares`), while
//! the chain sees transfers, an OpenZeppelin ERC-20's deployment, mints,
//! transfers and approvals, a holder's token balance cleared to zero, the
//! listed contract's deployment and mints, a contract that destroys itself
//! in its constructor, a call that touches an empty account and an internal
//! transfer. After every step the newest view's records give anvil's state
//! root at its block, and the listed contract's slots its storage root; a
//! fold into a new base gives them too, and so does the CLI with `--url`.
//! Records with a balance changed, an account dropped, an account added or
//! a listed slot changed (each published as a snapshot whose manifest
//! claims the honest root) are refused, each with the reason.
//!
//! anvil keeps a slot written to zero as a leaf of the storage trie (and a
//! touched empty account as one of the state trie), where Ethereum's
//! clients delete them: the account trie still matches, since each account
//! read carries the node's own storage root and proof, but a listed
//! contract's storage root is recomputed the chain's way, so the listed
//! contract here never writes a zero (OpenZeppelin's preset does, in its
//! constructor: it is not listed). For the touched empty account, the
//! follower reads changes from anvil's parity traces here
//! ([`config`]).

use std::path::Path;

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{SolCall, SolValue};
use protocol::storage::StorageRecord;
use protocol::tokens::{MappingLayout, SlotIndex, TokenEntry, TokenList};
use serde_json::json;
use snapshotter::follow::run_once;
use snapshotter::levels::LevelPolicy;
use snapshotter::pipeline::{build_and_publish, BuildOptions, ExportedState};
use snapshotter::verify::verify_state_root;
use snapshotter::{AccountRecord, SnapshotKind, SnapshotStore, StoredSnapshot};
use test_support::{forward_to, write_genesis, Anvil, ALL_DEV_ACCOUNTS, FORWARDER_INIT_CODE};

alloy_sol_types::sol! {
    interface IToken {
        function mint(address to, uint256 amount);
        function transfer(address to, uint256 amount) returns (bool);
        function approve(address spender, uint256 amount) returns (bool);
    }
}

/// Creation code of e2e/contracts/PooledShares.sol (its owner mints
/// shares, kept in a mapping at slot 3 and read by `getShares`).
fn pooled_shares_code() -> Vec<u8> {
    let hex = include_str!("../../e2e/contracts/PooledShares.bin");
    alloy_primitives::hex::decode(hex.trim()).unwrap()
}

fn dev(i: usize) -> Address {
    ALL_DEV_ACCOUNTS[i].parse().unwrap()
}

/// Init code that sends its value to 0x22..22 and destroys itself.
const SELF_DESTRUCT_INIT: &str = "0x732222222222222222222222222222222222222222ff";

fn write_token_list(path: &Path, shares: Address) {
    let list = TokenList {
        tokens: vec![TokenEntry {
            chain_id: test_support::GENESIS_CHAIN_ID,
            address: shares,
            symbol: "SHARES".into(),
            function: "getShares(address)".parse().unwrap(),
            balance_slot: SlotIndex::Position(3),
            layout: MappingLayout::Solidity,
            source: "test: PooledShares.sol".into(),
        }],
        ..Default::default()
    };
    std::fs::write(path, list.to_toml()).unwrap();
}

/// The follower's configuration: no confirmations, deltas merged two at
/// a time and folded into a new base once they hold 8 records.
fn config(dir: &Path, anvil: &Anvil) -> snapshotter::follow::FollowConfig {
    use snapshotter::follow::{FollowConfig, SourceConfig, Timing};
    use snapshotter::settings::BuildSettings;
    FollowConfig {
        store: Some(dir.join("store")),
        source: SourceConfig {
            url: Some(anvil.url.clone()),
            genesis: Some(dir.join("genesis.json")),
            tokens: Some(dir.join("tokens.toml")),
            // anvil keeps a touched empty account in its trie (EIP-161
            // deletes it), which only its call traces name: the prestate
            // tracer reports changes alone, as geth's does.
            changes: snapshotter::sources::changes::ChangeTracer::Parity,
            ..Default::default()
        },
        follow: Timing {
            poll_ms: 100,
            confirmations: 0,
            ws_url: None,
            ..Default::default()
        },
        levels: LevelPolicy {
            fanout: 2,
            keep_blocks: 1000,
            rebase_fraction: 0.0,
            rebase_min_records: 8,
            ..Default::default()
        },
        hot: Default::default(),
        build: BuildSettings {
            device: snapshotter::settings::Device::Cpu,
            ..Default::default()
        },
    }
}

/// Follows to anvil's head; returns the head.
async fn follow(dir: &Path, anvil: &Anvil) -> u64 {
    let head = anvil.head().await;
    loop {
        if run_once(config(dir, anvil)).await.unwrap() >= head {
            return head;
        }
    }
}

/// The state root of anvil's header at `block`.
async fn header_root(anvil: &Anvil, block: u64) -> B256 {
    let header = anvil
        .rpc(
            "eth_getBlockByNumber",
            json!([format!("{block:#x}"), false]),
        )
        .await;
    header["stateRoot"].as_str().unwrap().parse().unwrap()
}

/// The newest view of the store (base first).
fn newest_view(dir: &Path) -> Vec<StoredSnapshot> {
    let store = SnapshotStore::open(dir.join("store")).unwrap();
    let all = store.list().unwrap();
    let views = protocol::view::Views::build(&snapshotter::store::as_entries(&all));
    let view = views.newest(Some(test_support::GENESIS_CHAIN_ID)).unwrap();
    view.snapshots
        .iter()
        .map(|id| all.iter().find(|s| &s.id == id).unwrap().clone())
        .collect()
}

/// Checks the newest view's roots against anvil's header at its block.
async fn check_newest(dir: &Path, anvil: &Anvil, head: u64) -> B256 {
    let view = newest_view(dir);
    let store = SnapshotStore::open(dir.join("store")).unwrap();
    let root = header_root(anvil, head).await;
    let checked = verify_state_root(&store, &view[0], &view[1..], Some(root))
        .unwrap_or_else(|e| panic!("the view at block {head}: {e}"));
    assert_eq!(
        (checked.block, checked.root, checked.contracts),
        (head, root, 1)
    );
    root
}

async fn call(anvil: &Anvil, from: usize, to: Address, data: Vec<u8>) {
    anvil
        .transact(ALL_DEV_ACCOUNTS[from], Some(&to.to_string()), &data)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_give_anvils_state_root_at_every_view() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    write_genesis(&dir.join("genesis.json"));
    // The listed contract is dev 5's first creation.
    let shares = dev(5).create(0);
    write_token_list(&dir.join("tokens.toml"), shares);
    let genesis = dir.join("genesis.json");
    let anvil = Anvil::start_from_genesis(&genesis).await;
    follow(dir, &anvil).await;

    let fresh = |b: u8| Address::repeat_byte(b).to_string();
    let amount = |a: u64| U256::from(a);
    let mut init = test_support::openzeppelin_bytecode("ERC20PresetMinterPauser");
    init.extend(("AAA token".to_string(), "AAA".to_string()).abi_encode_params());
    let token: Address = anvil
        .deploy(ALL_DEV_ACCOUNTS[0], &init)
        .await
        .parse()
        .unwrap();
    let deployed = anvil
        .deploy(ALL_DEV_ACCOUNTS[5], &pooled_shares_code())
        .await;
    assert_eq!(deployed.parse::<Address>().unwrap(), shares);
    anvil
        .send(json!({"from": ALL_DEV_ACCOUNTS[0], "to": fresh(0x11), "value": "0xde0b6b3a7640000"}))
        .await;
    let head = follow(dir, &anvil).await;
    check_newest(dir, &anvil, head).await;

    let mint = IToken::mintCall {
        to: dev(1),
        amount: amount(1_000),
    }
    .abi_encode();
    call(&anvil, 0, token, mint).await;
    let give = IToken::transferCall {
        to: dev(2),
        amount: amount(300),
    }
    .abi_encode();
    call(&anvil, 1, token, give).await;
    let allow = IToken::approveCall {
        spender: dev(3),
        amount: amount(77),
    }
    .abi_encode();
    call(&anvil, 2, token, allow).await;
    let head = follow(dir, &anvil).await;
    check_newest(dir, &anvil, head).await;

    // dev 2's balance slot back to zero; a contract gone in its
    // constructor; an empty account touched; an internal transfer.
    let all = IToken::transferCall {
        to: dev(3),
        amount: amount(300),
    }
    .abi_encode();
    call(&anvil, 2, token, all).await;
    anvil
        .send(json!({"from": ALL_DEV_ACCOUNTS[3], "data": SELF_DESTRUCT_INIT, "value": "0x7"}))
        .await;
    anvil
        .send(json!({"from": ALL_DEV_ACCOUNTS[1], "to": fresh(0x33)}))
        .await;
    let receipt = anvil
        .send(json!({"from": ALL_DEV_ACCOUNTS[1], "data": FORWARDER_INIT_CODE}))
        .await;
    let forwarder = receipt["contractAddress"].as_str().unwrap().to_string();
    anvil
        .send(json!({"from": ALL_DEV_ACCOUNTS[4], "to": forwarder, "value": "0x5", "data": forward_to(&fresh(0x44))}))
        .await;
    let head = follow(dir, &anvil).await;
    let root = check_newest(dir, &anvil, head).await;

    // Deltas folded into a base along the way; the newest base alone at
    // its block verifies too.
    let view = newest_view(dir);
    assert!(view[0].manifest.block_number > 0, "a fold made a new base");
    cli_verifies(dir, &anvil, &view.last().unwrap().id.to_string());
    tampered_records_are_refused(dir, &view, root);
    attestations_sign_what_holds(dir, &anvil).await;
    anvil.stop().await;
}

/// The attester signs every whole state from block 1 on (anvil's genesis
/// header names no real root: refused), each signature verifies against
/// its manifest, a second run signs nothing again, and the forged
/// snapshots are refused.
async fn attestations_sign_what_holds(dir: &Path, anvil: &Anvil) {
    use snapshotter::attest::{Attester, Outcome};
    let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let node = || async {
        let options = snapshotter::sources::rpc::RpcOptions::default();
        snapshotter::sources::rpc::RpcSource::connect(&anvil.url, options)
            .await
            .unwrap()
    };
    let store = SnapshotStore::open(dir.join("store")).unwrap();
    let attester = Attester::new(store.clone(), node().await, key).unwrap();
    let outcomes = attester.attest_store().await.unwrap();
    for (id, outcome) in &outcomes {
        match id.block {
            0 => assert!(matches!(outcome, Outcome::Refused(_)), "{id}: {outcome:?}"),
            _ => assert_eq!(outcome, &Outcome::Signed, "{id}"),
        }
    }
    assert!(outcomes.len() > 2, "{outcomes:?}");
    for snap in store.list().unwrap().iter().filter(|s| s.id.block > 0) {
        let kept = store.attestations(snap);
        assert_eq!(kept.len(), 1, "{}", snap.id);
        assert_eq!(kept[0].signer, attester.address());
        kept[0].verify(&snap.manifest).unwrap();
        let mut other = snap.manifest.clone();
        other.content_digest = protocol::sha3_hex(b"another records.bin");
        assert!(kept[0].verify(&other).is_err(), "bound to the digests");
    }
    let again = attester.attest_store().await.unwrap();
    assert!(again
        .iter()
        .all(|(id, o)| id.block == 0 || o == &Outcome::AlreadySigned));
    for i in 0..4 {
        let forged = SnapshotStore::open(dir.join(format!("forged-{i}"))).unwrap();
        let outcomes = Attester::new(forged, node().await, key)
            .unwrap()
            .attest_store()
            .await
            .unwrap();
        assert!(
            matches!(outcomes[..], [(_, Outcome::Refused(_))]),
            "forged-{i}: {outcomes:?}"
        );
    }
}

/// `ethpir-snapshot verify --state-root --url` on the newest view.
fn cli_verifies(dir: &Path, anvil: &Anvil, id: &str) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ethpir-snapshot"))
        .args(["--store", dir.join("store").to_str().unwrap()])
        .args([
            "verify",
            "--lookups",
            "2",
            "--state-root",
            "--url",
            &anvil.url,
            id,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("ok      {id}: state root")),
        "{stdout}"
    );
}

/// Each tampering, published as a base claiming the honest root, is
/// refused with a reason naming what differs.
fn tampered_records_are_refused(dir: &Path, view: &[StoredSnapshot], root: B256) {
    let store = SnapshotStore::open(dir.join("store")).unwrap();
    let base_bytes = store.read_checked(&view[0], "records.bin").unwrap();
    let base = snapshotter::records::RecordsFile::new(&base_bytes).unwrap();
    let newer = snapshotter::folded::overlay(&store, &view[1..]).unwrap();
    let folded = snapshotter::folded::Folded {
        base: &base,
        newer: &newer,
    };
    let accounts: Vec<AccountRecord> = folded.accounts().collect();
    let slots: Vec<StorageRecord> = folded.slots().collect();
    let rich = accounts
        .iter()
        .position(|a| a.address == Some(dev(5)))
        .unwrap();
    let mut changed = accounts.clone();
    changed[rich].balance += U256::from(1);
    let mut dropped = accounts.clone();
    dropped.remove(rich);
    let mut extra = accounts.clone();
    extra.push(AccountRecord::new(
        Address::repeat_byte(0xee),
        U256::from(1),
        0,
    ));
    extra.sort_by_key(|a| a.key);
    let mut forged_slots = slots.clone();
    forged_slots[0].value += U256::from(1);
    let cases = [
        ("a changed balance", changed, slots.clone(), "state root"),
        ("a dropped account", dropped, slots.clone(), "state root"),
        ("an extra account", extra, slots.clone(), "state root"),
        (
            "a changed token slot",
            accounts.clone(),
            forged_slots,
            "storage root",
        ),
    ];
    let top = &view.last().unwrap().manifest;
    for (i, (what, records, storage, reason)) in cases.into_iter().enumerate() {
        let forged_store = SnapshotStore::open(dir.join(format!("forged-{i}"))).unwrap();
        let state = ExportedState {
            chain_id: top.chain_id,
            block_number: top.block_number,
            block_hash: top.block_hash,
            state_root: Some(root),
            block_time: top.block_time,
            parent_hash: top.parent_hash,
            kind: SnapshotKind::Full,
            source: format!("test: {what}"),
            records,
            storage,
            listed: view[0].manifest.storage.clone(),
            export_s: 0.0,
            codes: Vec::new(),
        };
        let forged = build_and_publish(&forged_store, state, &BuildOptions::default()).unwrap();
        let refused = verify_state_root(&forged_store, &forged, &[], Some(root))
            .expect_err(what)
            .to_string();
        assert!(refused.contains(reason), "{what}: {refused}");
    }
}

//! `tokens detect` against a real anvil: OpenZeppelin's compiled ERC-20
//! (its npm artifact, installed by scripts/install-test-deps.sh) deployed,
//! minted and transferred; detection finds its balances mapping from the
//! Transfer events alone, and the slot it names holds the balance of a
//! holder it never saw. A contract whose balanceOf is a constant is
//! reported non-standard, an address without code refused; the CLI prints
//! a list entry the loader reads back, and exits 2 for a non-standard token.

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{SolCall, SolValue};
use protocol::tokens::{MappingLayout, SlotIndex, TokenList};
use serde_json::json;
use snapshotter::sources::rpc::{RpcOptions, RpcSource};
use snapshotter::tokens::{self, DetectError, DetectOptions, Detection};
use test_support::{Anvil, DEV_ACCOUNTS};

alloy_sol_types::sol! {
    interface IMintable {
        function mint(address to, uint256 amount);
        function transfer(address to, uint256 amount) returns (bool);
    }
}

/// Runtime code answering every call with the word 42:
/// `PUSH1 42 PUSH1 0 MSTORE PUSH1 32 PUSH1 0 RETURN`, behind an init code
/// that copies it out.
const CONSTANT_42: &str = "0x600a600c600039600a6000f3602a60005260206000f3";

async fn deploy(anvil: &Anvil, init_code: &[u8]) -> Address {
    anvil
        .deploy(DEV_ACCOUNTS[0], init_code)
        .await
        .parse()
        .unwrap()
}

async fn call(anvil: &Anvil, from: &str, to: Address, data: Vec<u8>) {
    anvil.transact(from, Some(&to.to_string()), &data).await;
}

fn dev(i: usize) -> Address {
    DEV_ACCOUNTS[i].parse().unwrap()
}

/// An OpenZeppelin ERC-20 with three holders of different balances, the
/// second and third reached by transfers.
async fn token_with_holders(anvil: &Anvil) -> Address {
    let mut init = test_support::openzeppelin_bytecode("ERC20PresetMinterPauser");
    init.extend(("Test Token".to_string(), "TT".to_string()).abi_encode_params());
    let token = deploy(anvil, &init).await;
    let mint = |to: Address, amount: u64| {
        IMintable::mintCall {
            to,
            amount: U256::from(amount),
        }
        .abi_encode()
    };
    call(anvil, DEV_ACCOUNTS[0], token, mint(dev(1), 1_000_000)).await;
    let transfer = |to: Address, amount: u64| {
        IMintable::transferCall {
            to,
            amount: U256::from(amount),
        }
        .abi_encode()
    };
    call(anvil, DEV_ACCOUNTS[1], token, transfer(dev(2), 250_000)).await;
    call(anvil, DEV_ACCOUNTS[2], token, transfer(dev(3), 1_234)).await;
    token
}

async fn storage_word(anvil: &Anvil, token: Address, slot: B256) -> B256 {
    let word = anvil
        .rpc("eth_getStorageAt", json!([token, slot, "latest"]))
        .await;
    word.as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn finds_the_balances_mapping_of_a_real_erc20() {
    let anvil = Anvil::start().await;
    let token = token_with_holders(&anvil).await;
    let source = RpcSource::connect(&anvil.url, RpcOptions::default())
        .await
        .unwrap();
    let detection = tokens::detect(&source, token, &DetectOptions::default())
        .await
        .unwrap();
    let Detection::Plain {
        index,
        layout,
        holders,
        ..
    } = &detection
    else {
        panic!("expected a plain mapping, got {detection:?}");
    };
    // OpenZeppelin 4.9's preset: AccessControl's roles (slot 0) and
    // AccessControlEnumerable's members (slot 1) come before ERC20's
    // _balances.
    assert_eq!(*index, SlotIndex::Position(2));
    assert_eq!(*layout, MappingLayout::Solidity);
    assert_eq!(holders.len(), 3, "{holders:?}");

    // A holder detection never saw: the named slot holds its balance.
    let fresh = Address::repeat_byte(0x5a);
    let amount = IMintable::mintCall {
        to: fresh,
        amount: U256::from(777_777u64),
    }
    .abi_encode();
    call(&anvil, DEV_ACCOUNTS[0], token, amount).await;
    let entry = detection.entry(31337, token, "TT").unwrap();
    let word = storage_word(&anvil, token, entry.balance_slot_of(&fresh)).await;
    assert_eq!(U256::from_be_bytes(word.0), U256::from(777_777u64));

    // The entry is a list the loader reads back.
    let list = TokenList {
        tokens: vec![entry.clone()],
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    std::fs::write(&path, list.to_toml()).unwrap();
    assert_eq!(TokenList::from_file(&path).unwrap().tokens, vec![entry]);
}

#[tokio::test]
async fn a_computed_balance_is_non_standard_and_an_account_is_no_token() {
    let anvil = Anvil::start().await;
    let constant = deploy(&anvil, &alloy_primitives::hex::decode(CONSTANT_42).unwrap()).await;
    let source = RpcSource::connect(&anvil.url, RpcOptions::default())
        .await
        .unwrap();
    let options = DetectOptions {
        holders: vec![dev(1), dev(2)],
        max_index: 16,
        ..Default::default()
    };
    let detection = tokens::detect(&source, constant, &options).await.unwrap();
    assert!(
        matches!(&detection, Detection::NonStandard { reason, .. } if reason.contains("no mapping entry")),
        "{detection:?}"
    );
    assert!(detection.entry(31337, constant, "").is_none());

    match tokens::detect(&source, dev(3), &options).await {
        Err(DetectError::NotAContract(a, _)) => assert_eq!(a, dev(3)),
        other => panic!("an account is not a token: {other:?}"),
    }
}

#[tokio::test]
async fn the_cli_prints_an_entry_or_exits_2() {
    let anvil = Anvil::start().await;
    let token = token_with_holders(&anvil).await;
    let constant = deploy(&anvil, &alloy_primitives::hex::decode(CONSTANT_42).unwrap()).await;
    let bin = env!("CARGO_BIN_EXE_ethpir-snapshot");
    let run = |token: Address, extra: &[&str]| {
        let mut command = std::process::Command::new(bin);
        command.args([
            "--log",
            "warn",
            "tokens",
            "detect",
            "--url",
            &anvil.url,
            "--token",
            &token.to_string(),
            "--symbol",
            "TT",
        ]);
        command.args(extra);
        command.output().unwrap()
    };
    let found = run(token, &[]);
    assert!(found.status.success(), "{found:?}");
    let dir = tempfile::tempdir().unwrap();
    let printed = dir.path().join("printed.toml");
    std::fs::write(&printed, &found.stdout).unwrap();
    let list = TokenList::from_file(&printed).unwrap();
    assert_eq!(list.tokens.len(), 1);
    assert_eq!(list.tokens[0].address, token);
    assert_eq!(list.tokens[0].symbol, "TT");
    assert_eq!(list.tokens[0].balance_slot, SlotIndex::Position(2));

    let holder = dev(1).to_string();
    let odd = run(constant, &["--holder", &holder, "--max-index", "8"]);
    assert_eq!(odd.status.code(), Some(2), "{odd:?}");
    let said = String::from_utf8(odd.stdout).unwrap();
    assert!(said.contains("non-standard"), "{said}");
}

/// `build genesis --tokens FILE --contract ADDR`: the listed contracts'
/// storage from the file's alloc, in a snapshot whose manifest lists them;
/// every slot answers by PIR.
#[test]
fn one_shot_builds_take_the_token_list() {
    let dir = tempfile::tempdir().unwrap();
    let token = "0x00000000000000000000000000000000000000aa";
    let other = "0x00000000000000000000000000000000000000bb";
    let genesis = dir.path().join("genesis.json");
    let alloc = json!({
        token: {"balance": "0x0", "code": "0x00", "storage": {"0x01": "0x05", "0x02": "0x06"}},
        other: {"balance": "0x1", "code": "0x00", "storage": {"0x01": "0x07"}},
        "0x00000000000000000000000000000000000000cc": {"balance": "0x2", "code": "0x00", "storage": {"0x01": "0x08"}},
    });
    let text = json!({"config": {"chainId": 7}, "alloc": alloc}).to_string();
    std::fs::write(&genesis, text).unwrap();
    let list = TokenList {
        tokens: vec![protocol::tokens::TokenEntry {
            chain_id: 7,
            address: token.parse().unwrap(),
            symbol: "AA".into(),
            function: Default::default(),
            balance_slot: SlotIndex::Position(0),
            layout: MappingLayout::Solidity,
            source: "test".into(),
        }],
        ..Default::default()
    };
    let tokens_file = dir.path().join("tokens.toml");
    std::fs::write(&tokens_file, list.to_toml()).unwrap();
    let store_dir = dir.path().join("store");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_ethpir-snapshot"))
        .arg("--store")
        .arg(&store_dir)
        .args(["--log", "warn", "build", "genesis", "--file"])
        .arg(&genesis)
        .arg("--tokens")
        .arg(&tokens_file)
        .args(["--contract", other, "--no-progress", "--device", "cpu"])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let store = snapshotter::SnapshotStore::open(&store_dir).unwrap();
    let snap = store.list().unwrap().pop().unwrap();
    assert_eq!(
        snap.manifest.storage_records, 3,
        "aa's two slots and bb's one"
    );
    assert_eq!(snap.manifest.storage.tokens, list.tokens);
    assert_eq!(
        snap.manifest.storage.contracts,
        vec![other.parse::<Address>().unwrap()]
    );
    snapshotter::verify::verify(&store, &snap, 8).unwrap();
}

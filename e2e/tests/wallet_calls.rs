//! The calls modern wallets and dapps make that run code which is not
//! deployed, or run over state overrides (brief section 19), through the
//! proxy with the whole state held and nothing listed, as viem makes them
//! (e2e/js/viem-wallet-calls.cjs): sign-in checks (`verifyMessage`, which
//! creates ERC-6492's validator in an `eth_call`) of an EOA and of a
//! Safe-shaped contract wallet (ERC-1271: true for its owner, false for
//! another signer), a `multicall` creating Multicall3 in the call,
//! `readContract` with `code`, calls over a balance override, a storage
//! word overridden and block overrides, an estimate over an override, and
//! a preview (`simulateCalls` with `traceAssetChanges`). Each answer is
//! anvil's at the same block, and a recording relay in front of anvil sees
//! none of these calls and no address they name.

use crate::common;

use alloy_primitives::{keccak256, Address, B256, U256};
use alloy_sol_types::{SolCall, SolValue};
use common::*;
use serde_json::{json, Value};
use test_support::DEV_ACCOUNTS;

alloy_sol_types::sol! {
    interface ISimpleToken {
        function transfer(address to, uint256 amount) returns (bool);
    }
}

/// Anvil's dev keys 3 (the wallet's owner) and 2 (another signer).
const OWNER_KEY: &str = "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6";
const OTHER_KEY: &str = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a";

/// The Safe-shaped wallet's creation code, owned by `owner`.
fn wallet_code(owner: Address) -> Vec<u8> {
    let mut code = test_contract("SignerWallet");
    code.extend_from_slice(&owner.abi_encode());
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wallets_calls_of_code_not_deployed_and_over_overrides_run_here() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, genesis_path) = chain_with_multicall3(dir.path(), "4246").await;
    let store = dir.path().join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis_path, 0, 4, 256);
    config.source.storage = snapshotter::follow::StorageScope::All;
    let stack = Stack::start(config, &anvil, None).await;
    let market = deploy_pool_market(&anvil).await;
    let owner = dev(3);
    let wallet: Address = anvil
        .deploy(DEV_ACCOUNTS[0], &wallet_code(owner))
        .await
        .parse()
        .unwrap();
    let pay = ISimpleToken::transferCall {
        to: owner,
        amount: U256::from(5_000u64),
    };
    send(&anvil, 0, market.token, pay.abi_encode()).await;
    let block = view_reaches(&stack.proxy, anvil.head().await).await;
    stack.relayed.lock().unwrap().clear();

    // The token's balances are its mapping at slot 0.
    let slot = keccak256([B256::left_padding_from(owner.as_slice()).0, B256::ZERO.0].concat());
    let spec = json!({
        "block": block,
        "chainId": 4246,
        "wallet": wallet,
        "ownerKey": OWNER_KEY,
        "otherKey": OTHER_KEY,
        "token": market.token,
        "holder": owner,
        "walletCode": alloy_primitives::hex::encode_prefixed(wallet_code(owner)),
        "balanceSlot": slot,
    });
    let node = viem_script("viem-wallet-calls.cjs", &anvil.url, &spec);
    // The node's answers are what a wallet expects of them.
    assert_eq!(node["verifyEoa"], json!(true), "{node}");
    assert_eq!(node["verifyWallet"], json!(true), "{node}");
    assert_eq!(node["verifyWalletWrongSigner"], json!(false), "{node}");
    assert_eq!(node["readWithCode"], json!("1"), "{node}");
    assert_eq!(
        node["callStateDiff"]["data"],
        json!(format!("{:#066x}", 1234)),
        "{node}"
    );
    assert!(node["estimateWithOverride"].is_string(), "{node}");
    let overridden = format!("{:#066x}{:064x}", 2_000_000_000u64, 123_456u64);
    assert_eq!(
        node["callBlockOverride"]["data"],
        json!(overridden),
        "{node}"
    );
    let private = viem_script("viem-wallet-calls.cjs", &stack.proxy, &spec);
    for (name, answer) in node.as_object().unwrap() {
        if name != "estimateWithOverride" && name != "preview" {
            assert_eq!(&private[name], answer, "{name}: the proxy's {private}");
        }
    }
    // An estimate is geth's search (anvil's differs a little): close to
    // anvil's, and enough there over the same override.
    let estimate = |v: &Value| v.as_str().unwrap().parse::<u64>().unwrap();
    let (mine, anvils) = (
        estimate(&private["estimateWithOverride"]),
        estimate(&node["estimateWithOverride"]),
    );
    assert!(
        mine.abs_diff(anvils) as f64 / (anvils as f64) < 0.03,
        "estimate {mine}, anvil's {anvils}"
    );
    // (The script's transfer: 1,000 to the holder itself.)
    let transfer = ISimpleToken::transferCall {
        to: owner,
        amount: U256::from(1_000u64),
    };
    let mut over_balance = call_object(market.token, &transfer.abi_encode());
    over_balance["from"] = json!(owner);
    over_balance["gas"] = json!(format!("{mine:#x}"));
    let word = format!("{:#066x}", 1_000_000u64);
    let overrides =
        json!({format!("{:#x}", market.token): {"stateDiff": {format!("{slot:#x}"): word}}});
    let ran = anvil
        .rpc(
            "eth_call",
            json!([over_balance, format!("{block:#x}"), overrides]),
        )
        .await;
    assert_eq!(ran, json!(format!("{:#066x}", 1)), "with the estimate");

    // The preview (anvil refuses viem's simulation of asset changes):
    // the payment succeeds, the holder's token balance goes from what
    // anvil says to 1,000 less, its ether is untouched (no fee).
    let preview = &private["preview"];
    assert_eq!(preview["results"][0]["status"], "success", "{preview}");
    let balance_of = format!("0x70a08231{:0>64}", format!("{owner:x}"));
    let held = anvil
        .rpc(
            "eth_call",
            json!([{"to": market.token, "data": balance_of}, format!("{block:#x}")]),
        )
        .await;
    let held = U256::from_str_radix(held.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    let token = format!("{:#x}", market.token);
    let change = preview["assetChanges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["token"]["address"] == token.as_str())
        .unwrap_or_else(|| panic!("no change of the token: {preview}"));
    assert_eq!(change["value"]["pre"], json!(held.to_string()), "{preview}");
    assert_eq!(
        change["value"]["post"],
        json!((held - U256::from(1_000u64)).to_string())
    );
    assert_eq!(change["value"]["diff"], json!("-1000"), "{preview}");

    // Nothing of them reached the upstream: no call, no estimate, no
    // simulation, and no address they name.
    let seen = stack.relayed.lock().unwrap().clone();
    let run_here = [
        "eth_call",
        "eth_estimateGas",
        "eth_createAccessList",
        "eth_simulateV1",
    ];
    assert!(
        !seen
            .iter()
            .any(|c| run_here.contains(&c["method"].as_str().unwrap_or(""))),
        "nothing run upstream: {seen:?}"
    );
    for named in [owner, wallet, market.token] {
        let hex = format!("{named:x}");
        assert!(
            !seen
                .iter()
                .any(|c| c.to_string().to_ascii_lowercase().contains(&hex)),
            "{named} reached the upstream: {seen:?}"
        );
    }
    stack.follower.stop().await;
}

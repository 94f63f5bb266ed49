//! Every read-only call private: contracts written for the test (see
//! e2e/contracts) deployed on anvil and listed whole (their storage in
//! the snapshots), then called through the proxy as wallets call them: a
//! FiatToken-2.2-style flagged balance behind an EIP-1967 proxy (one holder
//! blacklisted, an ordinary and an unlimited allowance), a stETH-style
//! shares token after a rebase, an ERC-4626-style vault (`getShares`, then
//! `convertToAssets` of the shares), ERC-721 and ERC-1155 collections, a
//! call that reverts, Multicall3 at its canonical address (in the genesis
//! alloc) and the same code elsewhere, the BalanceChecker over them. Each
//! answer is anvil's at the same block, byte for byte, and a recording
//! relay in front of anvil sees no call naming a holder. A batch with an
//! unlisted token sends that inner call alone upstream; with private-only
//! settings the whole batch fails with the gate's error (never
//! `success = false` or the BalanceChecker's 0).

use crate::common;

use alloy_primitives::{Address, U256};
use alloy_sol_types::{SolCall, SolValue};
use common::*;
use protocol::tokens::{IBalanceChecker, IMulticall3, MULTICALL3};
use serde_json::{json, Value};
use test_support::{proxy_status as status, write_genesis_with, Anvil, DEV_ACCOUNTS};

alloy_sol_types::sol! {
    interface IFlagged {
        function initialize(address newOwner);
        function mint(address to, uint256 amount);
        function blacklist(address holder);
        function isBlacklisted(address holder) returns (bool);
        function balanceOf(address holder) returns (uint256);
        function transfer(address to, uint256 amount) returns (bool);
        function approve(address spender, uint256 amount) returns (bool);
        function allowance(address holder, address spender) returns (uint256);
        function totalSupply() returns (uint256);
    }
    interface IShares {
        function mintShares(address to, uint256 amount);
        function rebase(uint256 pooled);
        function sharesOf(address holder) returns (uint256);
        function getPooledEthByShares(uint256 amount) returns (uint256);
    }
    interface IVault {
        function deposit(address to, uint256 newShares, uint256 assets);
        function reward(uint256 assets);
        function getShares(address account) returns (uint256);
        function convertToAssets(uint256 amount) returns (uint256);
    }
    interface ICollectibles {
        function mint(address to, uint256 id);
        function ownerOf(uint256 id) returns (address);
    }
    interface ISimpleToken {
        function balanceOf(address holder) returns (uint256);
        function transfer(address to, uint256 amount) returns (bool);
    }
    interface IRouter {
        function quote(address pool, uint256 amountIn) returns (uint256);
        function swapExactETHForTokens(address pool, uint256 minOut, address to, uint256 deadline) returns (uint256 out);
    }
    interface IMultisig {
        function getOwners() returns (address[]);
        function nonce() returns (uint256);
        function threshold() returns (uint256);
        function execTransaction(address to, uint256 value, bytes data) returns (bool ok);
    }
    interface IGasQuoter {
        function quote(address target, bytes data) returns (bool ok, uint256 used);
    }
    interface IMultiTokens {
        function mint(address to, uint256 id, uint256 amount);
        function balanceOf(address holder, uint256 id) returns (uint256);
        function balanceOfBatch(address[] holders, uint256[] ids) returns (uint256[]);
    }
}

/// The test's contracts, at the addresses dev account 0 creates them.
struct Contracts {
    implementation: Address,
    flagged: Address,
    shares: Address,
    vault: Address,
    nft: Address,
    multi: Address,
    /// The same flagged token behind another proxy, not listed.
    unlisted: Address,
    multicall_copy: Address,
    checker: Address,
    /// Measures the gas of a call with gasleft() around it.
    quoter: Address,
}

impl Contracts {
    fn from_nonce(n: u64) -> Self {
        let at = |k: u64| dev(0).create(n + k);
        Contracts {
            implementation: at(0),
            flagged: at(1),
            shares: at(2),
            vault: at(3),
            nft: at(4),
            multi: at(5),
            unlisted: at(6),
            multicall_copy: at(7),
            checker: at(8),
            quoter: at(9),
        }
    }

    /// The contracts the snapshots hold whole.
    fn listed(&self) -> Vec<Address> {
        vec![self.flagged, self.shares, self.vault, self.nft, self.multi]
    }

    /// Deploys them in order, each where it was predicted.
    async fn deploy(&self, anvil: &Anvil) {
        let behind_proxy = |implementation: Address| {
            let mut init = test_contract("Proxy1967");
            init.extend_from_slice(&implementation.abi_encode());
            init
        };
        let codes = [
            (self.implementation, test_contract("FlaggedToken")),
            (self.flagged, behind_proxy(self.implementation)),
            (self.shares, test_contract("SharesToken")),
            (self.vault, test_contract("StakingVault")),
            (self.nft, test_contract("Collectibles")),
            (self.multi, test_contract("MultiTokens")),
            (self.unlisted, behind_proxy(self.implementation)),
            (self.multicall_copy, test_support::multicall3_bytecode()),
            (self.checker, test_contract("BalanceChecker")),
            (self.quoter, test_contract("GasQuoter")),
        ];
        for (want, code) in codes {
            let got: Address = anvil.deploy(DEV_ACCOUNTS[0], &code).await.parse().unwrap();
            assert_eq!(got, want);
        }
    }
}

/// Holders: two dev accounts (they approve and transfer) and two fresh
/// addresses, the last blacklisted.
fn holders() -> [Address; 4] {
    [
        dev(1),
        dev(2),
        Address::repeat_byte(0x11),
        Address::repeat_byte(0x22),
    ]
}

const SPENDER: Address = Address::repeat_byte(0x5e);
const NFT_IDS: [u64; 3] = [7, 42, 1001];
const MULTI_ID: u64 = 77;

/// Shares of holder `i` (distinctive numbers, searched for in what the
/// upstream saw).
fn shares_of(i: usize) -> U256 {
    U256::from(7_700_000_123u64 + 1_000_003 * i as u64)
}

/// The chain's history: mints, a blacklisting, allowances (one
/// unlimited), a transfer, shares and a rebase, vault deposits and a
/// reward, NFTs and multi-tokens.
async fn make_history(anvil: &Anvil, c: &Contracts) {
    for token in [c.flagged, c.unlisted] {
        let init = IFlagged::initializeCall { newOwner: dev(0) };
        send(anvil, 0, token, init.abi_encode()).await;
    }
    for (i, h) in holders().iter().enumerate() {
        let amount = U256::from(1_000_000u64 * (i as u64 + 1));
        for token in [c.flagged, c.unlisted] {
            let mint = IFlagged::mintCall { to: *h, amount };
            send(anvil, 0, token, mint.abi_encode()).await;
        }
        let shares = IShares::mintSharesCall {
            to: *h,
            amount: shares_of(i),
        };
        send(anvil, 0, c.shares, shares.abi_encode()).await;
        let deposit = IVault::depositCall {
            to: *h,
            newShares: shares_of(i),
            assets: shares_of(i) + U256::from(i),
        };
        send(anvil, 0, c.vault, deposit.abi_encode()).await;
        let multi = IMultiTokens::mintCall {
            to: *h,
            id: U256::from(MULTI_ID),
            amount: U256::from(5 + i),
        };
        send(anvil, 0, c.multi, multi.abi_encode()).await;
    }
    for (id, h) in NFT_IDS.iter().zip(holders()) {
        let mint = ICollectibles::mintCall {
            to: h,
            id: U256::from(*id),
        };
        send(anvil, 0, c.nft, mint.abi_encode()).await;
    }
    let blacklist = IFlagged::blacklistCall {
        holder: holders()[3],
    };
    send(anvil, 0, c.flagged, blacklist.abi_encode()).await;
    let approve = |amount| IFlagged::approveCall {
        spender: SPENDER,
        amount,
    };
    send(
        anvil,
        1,
        c.flagged,
        approve(U256::from(1234u64)).abi_encode(),
    )
    .await;
    send(anvil, 2, c.flagged, approve(U256::MAX).abi_encode()).await;
    let transfer = IFlagged::transferCall {
        to: holders()[2],
        amount: U256::from(5u64),
    };
    send(anvil, 1, c.flagged, transfer.abi_encode()).await;
    let rebase = IShares::rebaseCall {
        pooled: U256::from(9_999_999_999_999u64),
    };
    send(anvil, 0, c.shares, rebase.abi_encode()).await;
    let reward = IVault::rewardCall {
        assets: U256::from(123_456_789u64),
    };
    send(anvil, 0, c.vault, reward.abi_encode()).await;
}

/// The calls a wallet makes of each contract: (target, calldata).
fn wallet_calls(c: &Contracts) -> Vec<(Address, Vec<u8>)> {
    let mut calls = Vec::new();
    for (i, h) in holders().iter().enumerate() {
        let holder = *h;
        calls.push((c.flagged, IFlagged::balanceOfCall { holder }.abi_encode()));
        calls.push((c.shares, IFlagged::balanceOfCall { holder }.abi_encode()));
        calls.push((c.shares, IShares::sharesOfCall { holder }.abi_encode()));
        calls.push((
            c.vault,
            IVault::getSharesCall { account: holder }.abi_encode(),
        ));
        let assets = IVault::convertToAssetsCall {
            amount: shares_of(i),
        };
        calls.push((c.vault, assets.abi_encode()));
        calls.push((c.nft, IFlagged::balanceOfCall { holder }.abi_encode()));
        let multi = IMultiTokens::balanceOfCall {
            holder,
            id: U256::from(MULTI_ID),
        };
        calls.push((c.multi, multi.abi_encode()));
        let allowance = IFlagged::allowanceCall {
            holder,
            spender: SPENDER,
        };
        calls.push((c.flagged, allowance.abi_encode()));
    }
    let blacklisted = IFlagged::isBlacklistedCall {
        holder: holders()[3],
    };
    calls.push((c.flagged, blacklisted.abi_encode()));
    calls.push((c.flagged, IFlagged::totalSupplyCall {}.abi_encode()));
    let pooled = IShares::getPooledEthBySharesCall {
        amount: U256::from(777u64),
    };
    calls.push((c.shares, pooled.abi_encode()));
    for id in NFT_IDS {
        let owner = ICollectibles::ownerOfCall { id: U256::from(id) };
        calls.push((c.nft, owner.abi_encode()));
    }
    let batch = IMultiTokens::balanceOfBatchCall {
        holders: holders().to_vec(),
        ids: vec![U256::from(MULTI_ID); 4],
    };
    calls.push((c.multi, batch.abi_encode()));
    calls
}

/// Whether anything the upstream saw names a holder or a holder's shares.
fn names_a_holder(calls: &[Value]) -> Option<String> {
    let words: Vec<String> = holders()
        .iter()
        .map(|h| format!("{h:x}").trim_start_matches("0x").to_string())
        .chain((0..4).map(|i| format!("{:064x}", shares_of(i))))
        .collect();
    calls.iter().find_map(|c| {
        let text = c.to_string().to_lowercase();
        words
            .iter()
            .any(|w| text.contains(w.as_str()))
            .then_some(text)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contracts_run_here_over_private_state_as_the_node_runs_them() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, genesis_path) = chain_with_multicall3(dir.path(), "4242").await;
    let c = Contracts::from_nonce(next_nonce(&anvil, 0).await);

    let store = dir.path().join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis_path, 0, 4, 16);
    config.source.contracts = c.listed();
    let Stack {
        follower,
        server,
        upstream,
        relayed,
        proxy,
        _cache,
    } = Stack::start(config, &anvil, Some(c.checker)).await;
    c.deploy(&anvil).await;
    make_history(&anvil, &c).await;
    let block = view_reaches(&proxy, anvil.head().await).await;
    let at = format!("{block:#x}");
    relayed.lock().unwrap().clear();

    // Each call alone, then all of them in one aggregate3 (a reverting
    // ownerOf among them, allowed to fail) at Multicall3 and at its copy,
    // and in tryAggregate.
    let mut calls = wallet_calls(&c);
    for (target, data) in &calls {
        same_as_anvil(&proxy, &anvil, &call_object(*target, data), &at).await;
    }
    let missing = ICollectibles::ownerOfCall {
        id: U256::from(999u64),
    };
    let reverted = same_response_as_anvil(
        &proxy,
        &anvil,
        &call_object(c.nft, &missing.abi_encode()),
        &at,
    )
    .await;
    assert_eq!(reverted["error"]["code"], 3, "{reverted}");
    calls.push((c.nft, missing.abi_encode()));
    let batch = aggregate3(&calls, true);
    for multicall in [MULTICALL3, c.multicall_copy] {
        same_as_anvil(&proxy, &anvil, &call_object(multicall, &batch), &at).await;
    }
    let plain: Vec<IMulticall3::Call> = calls
        .iter()
        .map(|(target, data)| IMulticall3::Call {
            target: *target,
            callData: data.clone().into(),
        })
        .collect();
    let try_aggregate = IMulticall3::tryAggregateCall {
        requireSuccess: false,
        calls: plain,
    };
    same_as_anvil(
        &proxy,
        &anvil,
        &call_object(MULTICALL3, &try_aggregate.abi_encode()),
        &at,
    )
    .await;
    // A wallet's own call object: from the holder, with gas and fees.
    let from_holder = json!({
        "from": holders()[0], "to": c.flagged, "gas": "0x2dc6c0", "maxFeePerGas": "0x174876e800",
        "input": alloy_primitives::hex::encode_prefixed(IFlagged::balanceOfCall { holder: holders()[0] }.abi_encode()),
    });
    same_as_anvil(&proxy, &anvil, &from_holder, &at).await;
    // The BalanceChecker over ETH and the listed tokens.
    let checked = IBalanceChecker::balancesCall {
        users: holders().to_vec(),
        tokens: vec![Address::ZERO, c.flagged, c.shares, c.nft],
    };
    same_as_anvil(
        &proxy,
        &anvil,
        &call_object(c.checker, &checked.abi_encode()),
        &at,
    )
    .await;
    // The unlimited allowance is a wide word, read whole.
    let unlimited = IFlagged::allowanceCall {
        holder: holders()[1],
        spender: SPENDER,
    };
    let word = same_as_anvil(
        &proxy,
        &anvil,
        &call_object(c.flagged, &unlimited.abi_encode()),
        &at,
    )
    .await;
    assert_eq!(word, json!(format!("{:#066x}", U256::MAX)));

    let seen = relayed.lock().unwrap().clone();
    assert!(
        !seen.iter().any(|c| c["method"] == "eth_call"),
        "no eth_call upstream: {seen:?}"
    );
    assert_eq!(names_a_holder(&seen), None, "the upstream saw a holder");

    // A repeat costs no PIR query (answers kept per base).
    let before = route_requests(&server, "query", true).await;
    same_as_anvil(&proxy, &anvil, &call_object(MULTICALL3, &batch), &at).await;
    assert_eq!(route_requests(&server, "query", true).await, before);

    estimates(&proxy, &anvil, &c, &relayed, &at).await;
    unlisted_inner_calls(&proxy, &anvil, &c, &relayed, &at).await;
    private_only(&server, &anvil, &c, &upstream, &at).await;
    follower.stop().await;
}

/// `eth_estimateGas` of a wallet's transactions (a token transfer, an
/// approval), run here: close to anvil's estimate (both search within
/// 1.5 % of the least gas that works), enough for the call to succeed at
/// anvil, and nothing of it upstream.
async fn estimates(proxy: &str, anvil: &Anvil, c: &Contracts, relayed: &RelayedCalls, at: &str) {
    relayed.lock().unwrap().clear();
    let transfer = IFlagged::transferCall {
        to: holders()[2],
        amount: U256::from(3u64),
    };
    let approve = IFlagged::approveCall {
        spender: SPENDER,
        amount: U256::from(99u64),
    };
    for (from, data) in [(1, transfer.abi_encode()), (2, approve.abi_encode())] {
        let call = json!({"from": dev(from), "to": c.flagged, "data": alloy_primitives::hex::encode_prefixed(&data)});
        let private = test_support::rpc(proxy, "eth_estimateGas", json!([call, at]))
            .await
            .unwrap();
        let node = anvil.rpc("eth_estimateGas", json!([call, at])).await;
        let (private, node) = (
            test_support::quantity(&private),
            test_support::quantity(&node),
        );
        let apart = private.abs_diff(node) as f64 / node as f64;
        assert!(apart < 0.03, "estimate {private}, anvil's {node}");
        let mut enough = call.clone();
        enough["gas"] = json!(format!("{private:#x}"));
        let ran = test_support::rpc(&anvil.url, "eth_call", json!([enough, at])).await;
        assert!(ran.is_ok(), "{ran:?} with the estimate");
    }
    access_lists(proxy, anvil, c, at).await;
    let seen = relayed.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|c| c["method"] == "eth_estimateGas" || c["method"] == "eth_createAccessList"),
        "{seen:?}"
    );
}

/// `eth_createAccessList` through the proxy: anvil's list (as a set: its
/// order is a hash map's) and gas. A transfer of the token behind its
/// proxy touches the proxy's slots (the implementation's address, two
/// balance words) and the implementation; a BalanceChecker read touches
/// the tokens and their words.
async fn access_lists(proxy: &str, anvil: &Anvil, c: &Contracts, at: &str) {
    let transfer = IFlagged::transferCall {
        to: holders()[2],
        amount: U256::from(3u64),
    };
    let checked = IBalanceChecker::balancesCall {
        users: holders()[..2].to_vec(),
        tokens: vec![Address::ZERO, c.flagged, c.shares],
    };
    let calls = [
        json!({"from": dev(1), "to": c.flagged, "data": alloy_primitives::hex::encode_prefixed(transfer.abi_encode())}),
        json!({"to": c.checker, "data": alloy_primitives::hex::encode_prefixed(checked.abi_encode())}),
    ];
    for call in calls {
        let private = test_support::rpc(proxy, "eth_createAccessList", json!([call, at]))
            .await
            .unwrap();
        let node = anvil.rpc("eth_createAccessList", json!([call, at])).await;
        assert_eq!(as_set(&private), as_set(&node), "{private} vs {node}");
        assert!(!as_set(&private).is_empty(), "{private}");
        assert_eq!(private["gasUsed"], node["gasUsed"], "{private} vs {node}");
    }
}

/// An access list's accounts and (account, slot) pairs.
/// A batch holding an unlisted token's `balanceOf`: that inner call alone
/// goes upstream (the rest of the batch is private).
async fn unlisted_inner_calls(
    proxy: &str,
    anvil: &Anvil,
    c: &Contracts,
    relayed: &RelayedCalls,
    at: &str,
) {
    relayed.lock().unwrap().clear();
    let holder = holders()[2];
    let balance_of = IFlagged::balanceOfCall { holder }.abi_encode();
    let mixed = [
        (c.flagged, balance_of.clone()),
        (c.unlisted, balance_of.clone()),
    ];
    same_as_anvil(
        proxy,
        anvil,
        &call_object(MULTICALL3, &aggregate3(&mixed, false)),
        at,
    )
    .await;
    let seen = relayed.lock().unwrap().clone();
    let forwarded: Vec<&Value> = seen.iter().filter(|c| c["method"] == "eth_call").collect();
    assert_eq!(forwarded.len(), 1, "{seen:?}");
    let call = &forwarded[0]["params"][0];
    assert_eq!(
        call["to"].as_str().unwrap().parse::<Address>().unwrap(),
        c.unlisted
    );
    assert_eq!(
        call["input"],
        json!(alloy_primitives::hex::encode_prefixed(&balance_of)),
        "only the inner call"
    );
    let text = seen
        .iter()
        .map(Value::to_string)
        .collect::<String>()
        .to_lowercase();
    assert!(
        !text.contains(
            &format!("{:x}", c.flagged)
                .trim_start_matches("0x")
                .to_string()
        ),
        "the listed token's call stayed private"
    );
    gas_after_an_inner_call_apart(proxy, anvil, c, relayed, at).await;
}

/// A quoter measuring gasleft() around an unlisted token's call: that
/// call answered apart would make the figure wrong (no gas spent here),
/// so the whole call takes the fallback and the answer is the node's, the
/// figure included; its estimate too.
async fn gas_after_an_inner_call_apart(
    proxy: &str,
    anvil: &Anvil,
    c: &Contracts,
    relayed: &RelayedCalls,
    at: &str,
) {
    relayed.lock().unwrap().clear();
    let quote = IGasQuoter::quoteCall {
        target: c.unlisted,
        data: IFlagged::balanceOfCall {
            holder: holders()[2],
        }
        .abi_encode()
        .into(),
    };
    let call = call_object(c.quoter, &quote.abi_encode());
    let answer = same_response_as_anvil(proxy, anvil, &call, at).await;
    let bytes = alloy_primitives::hex::decode(answer["result"].as_str().unwrap()).unwrap();
    let quoted = IGasQuoter::quoteCall::abi_decode_returns(&bytes).unwrap();
    assert!(
        quoted.ok && quoted.used > U256::from(1000u64),
        "{}",
        quoted.used
    );
    let seen = relayed.lock().unwrap().clone();
    // (The inner call was asked first, before the run that observed gas
    // after it; the answer is then the whole call's.)
    let forwarded: Vec<&Value> = seen.iter().filter(|c| c["method"] == "eth_call").collect();
    let whole = forwarded.iter().filter(|call| {
        call["params"][0]["to"]
            .as_str()
            .and_then(|t| t.parse::<Address>().ok())
            == Some(c.quoter)
    });
    assert_eq!(whole.count(), 1, "the whole call went upstream: {seen:?}");
    // A transfer of the unlisted token through the quoter, estimated: the
    // inner call would be answered apart, so the node estimates it.
    let transfer = IFlagged::transferCall {
        to: holders()[2],
        amount: U256::from(1u64),
    };
    let quote = IGasQuoter::quoteCall {
        target: c.unlisted,
        data: transfer.abi_encode().into(),
    };
    let mut call = call_object(c.quoter, &quote.abi_encode());
    call["from"] = json!(dev(1));
    let private = test_support::rpc(proxy, "eth_estimateGas", json!([call, at]))
        .await
        .unwrap();
    let node = anvil.rpc("eth_estimateGas", json!([call, at])).await;
    assert_eq!(private, node, "the node's estimate");
}

/// With private-only settings (no address reads upstream): a batch whose
/// one inner call cannot be answered privately fails whole with the
/// gate's error (never `success = false`, never the BalanceChecker's 0);
/// the same call alone is refused; a batch of listed tokens is answered;
/// nothing goes upstream.
async fn private_only(server: &str, anvil: &Anvil, c: &Contracts, upstream: &str, at: &str) {
    let (relay, seen) = start_relay(upstream, passthrough()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server.to_string(),
        upstream: Some(relay),
        cache_dir: cache.path().to_path_buf(),
        upstream_methods: proxy::config::UpstreamMethods::NoAddressReads,
        ..Default::default()
    })
    .await;
    let block = test_support::quantity(&json!(at));
    view_reaches(&proxy, block).await;
    let holder = holders()[2];
    let balance_of = IFlagged::balanceOfCall { holder }.abi_encode();
    let refused = |v: &Result<Value, String>| match v {
        Err(e) => e.contains("no-address-reads"),
        Ok(_) => false,
    };
    let mixed = [
        (c.flagged, balance_of.clone()),
        (c.unlisted, balance_of.clone()),
    ];
    let multicall = call_object(MULTICALL3, &aggregate3(&mixed, true));
    let out = test_support::rpc(&proxy, "eth_call", json!([multicall, at])).await;
    assert!(
        refused(&out),
        "a refused inner call fails the batch: {out:?}"
    );
    let checked = IBalanceChecker::balancesCall {
        users: vec![holder],
        tokens: vec![c.flagged, c.unlisted],
    };
    let checker = call_object(c.checker, &checked.abi_encode());
    let out = test_support::rpc(&proxy, "eth_call", json!([checker, at])).await;
    assert!(refused(&out), "the BalanceChecker gives no 0: {out:?}");
    let listed = [(c.flagged, balance_of.clone())];
    let multicall = call_object(MULTICALL3, &aggregate3(&listed, true));
    same_as_anvil(&proxy, anvil, &multicall, at).await;
    let alone = test_support::rpc(
        &proxy,
        "eth_call",
        json!([call_object(c.unlisted, &balance_of), at]),
    )
    .await;
    assert!(refused(&alone), "{alone:?}");
    assert!(
        !seen.lock().unwrap().iter().any(|m| m == "eth_call"),
        "private-only: nothing upstream"
    );
}

/// A token made by a factory (after the base), a pool of it and ETH, a
/// router in front of the pool, and a 2-owner multisig whose nonce moved.
struct Defi {
    token: Address,
    pool: Address,
    router: Address,
    multisig: Address,
}

impl Defi {
    async fn deploy(anvil: &Anvil) -> Self {
        let PoolMarket {
            token,
            pool,
            router,
        } = deploy_pool_market(anvil).await;
        let mut multisig_code = test_contract("Multisig");
        multisig_code
            .extend_from_slice(&(vec![dev(0), dev(1)], U256::from(2u8)).abi_encode_params());
        let multisig: Address = anvil
            .deploy(DEV_ACCOUNTS[0], &multisig_code)
            .await
            .parse()
            .unwrap();
        // A holder is paid in the new token; the multisig runs a call.
        let pay = ISimpleToken::transferCall {
            to: holders()[2],
            amount: U256::from(4_242u64),
        };
        send(anvil, 0, token, pay.abi_encode()).await;
        let exec = IMultisig::execTransactionCall {
            to: token,
            value: U256::ZERO,
            data: ISimpleToken::balanceOfCall { holder: dev(0) }
                .abi_encode()
                .into(),
        };
        send(anvil, 1, multisig, exec.abi_encode()).await;
        Defi {
            token,
            pool,
            router,
            multisig,
        }
    }

    /// What wallets read of them.
    fn calls(&self) -> Vec<(Address, Vec<u8>)> {
        let mut calls: Vec<(Address, Vec<u8>)> = holders()
            .iter()
            .map(|h| {
                (
                    self.token,
                    ISimpleToken::balanceOfCall { holder: *h }.abi_encode(),
                )
            })
            .collect();
        calls.push((self.multisig, IMultisig::getOwnersCall {}.abi_encode()));
        calls.push((self.multisig, IMultisig::nonceCall {}.abi_encode()));
        calls.push((self.multisig, IMultisig::thresholdCall {}.abi_encode()));
        let quote = IRouter::quoteCall {
            pool: self.pool,
            amountIn: U256::from(10u64).pow(U256::from(17u8)),
        };
        calls.push((self.router, quote.abi_encode()));
        calls
    }

    /// A holder's swap of 0.1 ETH for the token through the router, and
    /// an owner's multisig transaction: as a wallet sends them before
    /// signing.
    fn transactions(&self) -> Vec<Value> {
        let swap = IRouter::swapExactETHForTokensCall {
            pool: self.pool,
            minOut: U256::from(1u8),
            to: dev(1),
            deadline: U256::from(u64::MAX),
        };
        let exec = IMultisig::execTransactionCall {
            to: self.token,
            value: U256::ZERO,
            data: ISimpleToken::transferCall {
                to: holders()[3],
                amount: U256::ZERO,
            }
            .abi_encode()
            .into(),
        };
        vec![
            json!({"from": dev(1), "to": self.router, "value": "0x16345785d8a0000",
                "data": alloy_primitives::hex::encode_prefixed(swap.abi_encode())}),
            json!({"from": dev(0), "to": self.multisig,
                "data": alloy_primitives::hex::encode_prefixed(exec.abi_encode())}),
        ]
    }
}

/// `eth_getStorageValues` of two contracts' first words through the proxy
/// (read here: the view holds the whole state): anvil's answer; and
/// `eth_getProof` refused with why.
async fn storage_values(proxy: &str, anvil: &Anvil, c: &Contracts, at: &str) {
    let word = |n: u8| alloy_primitives::B256::with_last_byte(n);
    let asked = json!([{
        c.flagged.to_string(): [word(0), word(1), word(2), word(3)],
        c.nft.to_string(): [word(0), word(5)],
    }, at]);
    let private = test_support::rpc(proxy, "eth_getStorageValues", asked.clone())
        .await
        .unwrap();
    let node = anvil.rpc("eth_getStorageValues", asked).await;
    assert_eq!(private, node, "eth_getStorageValues at {at}");
    // No trie nodes are held: a proof is refused, saying so.
    let proof = json!([c.flagged, [word(0)], at]);
    let refused = test_support::rpc(proxy, "eth_getProof", proof)
        .await
        .unwrap_err();
    assert!(refused.contains("no proof can be made here"), "{refused}");
}

/// A wallet's calls of every transaction type at `at`: an approval with an
/// EIP-2930 access list (its gas paid, its entries listed back), one with
/// an EIP-4844 blob's hash and fee cap, and a `balanceOf` sent to a dev
/// account that an EIP-7702 authorization (signed by `cast` with its key,
/// at its nonce at `at`) delegates to the token: the token's code runs
/// over the account's own storage, the delegation's gas included.
async fn typed_calls(anvil: &Anvil, c: &Contracts, at: &str) -> Vec<Value> {
    let approve = IFlagged::approveCall {
        spender: holders()[3],
        amount: U256::from(1u64),
    };
    let data = alloy_primitives::hex::encode_prefixed(approve.abi_encode());
    let from = DEV_ACCOUNTS[0];
    let slot = alloy_primitives::B256::with_last_byte(1);
    let listed = json!({"from": from, "to": c.flagged, "data": data,
        "accessList": [{"address": c.flagged, "storageKeys": [slot]}, {"address": holders()[2], "storageKeys": []}]});
    let blob_hash = format!("0x01{}", "ab".repeat(31));
    let blob = json!({"from": from, "to": c.flagged, "data": data,
        "blobVersionedHashes": [blob_hash], "maxFeePerBlobGas": "0x3b9aca00"});
    let authority = DEV_ACCOUNTS[1];
    let nonce = anvil
        .rpc("eth_getTransactionCount", json!([authority, at]))
        .await;
    let auth = signed_authorization(c.flagged, test_support::quantity(&nonce), anvil).await;
    let balance_of = IFlagged::balanceOfCall {
        holder: holders()[0],
    }
    .abi_encode();
    let delegated = json!({"from": from, "to": authority,
        "data": alloy_primitives::hex::encode_prefixed(balance_of), "authorizationList": [auth]});
    vec![listed, blob, delegated]
}

/// Dev account 1's EIP-7702 authorization of `delegate` at `nonce`, as
/// `cast wallet sign-auth` signs it (RLP), written as nodes write it.
async fn signed_authorization(delegate: Address, nonce: u64, anvil: &Anvil) -> Value {
    use alloy_rlp::Decodable;
    let chain = test_support::quantity(&anvil.rpc("eth_chainId", json!([])).await);
    let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let out = std::process::Command::new(test_support::foundry_tool("cast"))
        .args([
            "wallet",
            "sign-auth",
            &delegate.to_string(),
            "--private-key",
            key,
        ])
        .args(["--nonce", &nonce.to_string(), "--chain", &chain.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rlp = alloy_primitives::hex::decode(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    let auth = alloy_eips::eip7702::SignedAuthorization::decode(&mut rlp.as_slice()).unwrap();
    json!({
        "chainId": format!("{:#x}", auth.chain_id()),
        "address": auth.address(),
        "nonce": format!("{:#x}", auth.nonce()),
        "yParity": format!("{:#x}", auth.y_parity()),
        "r": format!("{:#x}", auth.r()),
        "s": format!("{:#x}", auth.s()),
    })
}

/// The whole state held (`storage = "all"`, nothing listed), every level
/// read by PIR queries: every contract (all created after the base, so
/// each is held from its first block by the deltas) answered here as the
/// node answers, at the newest view and at an older block, the unlisted
/// token and the gas quoter included; estimates and access lists too; and
/// with the default settings no read naming an address goes upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_whole_state_answers_every_call_without_naming_a_holder() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, genesis_path) = chain_with_multicall3(dir.path(), "4243").await;
    let c = Contracts::from_nonce(next_nonce(&anvil, 0).await);

    let store = dir.path().join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis_path, 0, 4, 256);
    config.source.storage = snapshotter::follow::StorageScope::All;
    config.build.whole_table_max_records = 0;
    let Stack {
        follower,
        server,
        relayed,
        proxy,
        _cache,
        ..
    } = Stack::start(config, &anvil, Some(c.checker)).await;
    assert_eq!(status(&proxy).await["wholeState"], json!(true));
    c.deploy(&anvil).await;
    make_history(&anvil, &c).await;
    let defi = Defi::deploy(&anvil).await;
    // A block with a view of its own (the follower's deltas may span
    // several blocks: only their ends are views).
    let older = view_reaches(&proxy, anvil.head().await).await;
    // Newer changes, so that the older block's answers differ.
    let transfer = IFlagged::transferCall {
        to: holders()[3],
        amount: U256::from(17u64),
    };
    send(&anvil, 2, c.unlisted, transfer.abi_encode()).await;
    let mint = ICollectibles::mintCall {
        to: holders()[0],
        id: U256::from(5u64),
    };
    send(&anvil, 0, c.nft, mint.abi_encode()).await;
    let head = view_reaches(&proxy, anvil.head().await).await;
    relayed.lock().unwrap().clear();

    let mut calls = wallet_calls(&c);
    calls.extend(defi.calls());
    for holder in holders() {
        let balance_of = IFlagged::balanceOfCall { holder }.abi_encode();
        calls.push((c.unlisted, balance_of.clone()));
        let quote = IGasQuoter::quoteCall {
            target: c.unlisted,
            data: balance_of.into(),
        };
        calls.push((c.quoter, quote.abi_encode()));
    }
    for at in [format!("{older:#x}"), format!("{head:#x}")] {
        for (target, data) in &calls {
            same_as_anvil(&proxy, &anvil, &call_object(*target, data), &at).await;
        }
        let batch = aggregate3(&calls, true);
        same_as_anvil(&proxy, &anvil, &call_object(MULTICALL3, &batch), &at).await;
        let checked = IBalanceChecker::balancesCall {
            users: holders().to_vec(),
            tokens: vec![Address::ZERO, c.flagged, c.unlisted, c.shares, c.nft],
        };
        let checker = call_object(c.checker, &checked.abi_encode());
        same_as_anvil(&proxy, &anvil, &checker, &at).await;
        storage_values(&proxy, &anvil, &c, &at).await;
        estimates(&proxy, &anvil, &c, &relayed, &at).await;
        for tx in defi.transactions() {
            same_transaction(&proxy, &anvil, &tx, &at).await;
        }
        for tx in typed_calls(&anvil, &c, &at).await {
            same_transaction(&proxy, &anvil, &tx, &at).await;
        }
    }
    let seen = relayed.lock().unwrap().clone();
    let named = [
        "eth_call",
        "eth_estimateGas",
        "eth_createAccessList",
        "eth_getStorageValues",
        "eth_getProof",
    ];
    assert!(
        !seen
            .iter()
            .any(|c| named.contains(&c["method"].as_str().unwrap_or(""))),
        "nothing run upstream: {seen:?}"
    );
    assert_eq!(names_a_holder(&seen), None, "the upstream saw a holder");
    // At a newer view the refresh asks in its first round the shared keys
    // it read last time (learned here: the tokens' accounts, a proxy's
    // implementation and its code), never the holders' words (a repeat of
    // the same holders must take the rounds a first read takes): the
    // holders' words in a second request, a wide word's high part after
    // its low part, the accounts past the first round's eight arguments.
    send(&anvil, 1, c.unlisted, transfer.abi_encode()).await;
    let newer = view_reaches(&proxy, anvil.head().await).await;
    let at = format!("{newer:#x}");
    let batch = aggregate3(&calls, true);
    let before = route_requests(&server, "query", true).await;
    same_as_anvil(&proxy, &anvil, &call_object(MULTICALL3, &batch), &at).await;
    let requests = route_requests(&server, "query", true).await - before;
    assert!(
        requests <= 5,
        "{requests} requests: the refresh's shared keys asked at once"
    );
    // Every level was read by PIR: none downloaded whole.
    let levels = status(&proxy).await["levels"].clone();
    assert!(
        levels
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["read"] == "pir"),
        "{levels}"
    );
    follower.stop().await;
}

/// Before Cancun (anvil `--hardfork shanghai`), with the whole state held
/// and every level read by PIR: a contract created by a CREATE2 factory,
/// a slot written, then the contract destroyed and created again in one
/// block. Its storage and code read through the proxy as anvil has them
/// before and after (the slot written before the destruction reads 0, the
/// new constructor's slot its new word), and none of those reads goes
/// upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_contract_destroyed_and_created_again_reads_as_the_node_has_it() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let genesis_path = dir.path().join("genesis.json");
    let factory_account = json!({"balance": "0x0", "code": test_support::CREATE2_FACTORY_CODE});
    let alloc = vec![(test_support::CREATE2_FACTORY.to_string(), factory_account)];
    write_genesis_with(&genesis_path, alloc);
    let factory: Address = test_support::CREATE2_FACTORY.parse().unwrap();
    let path = genesis_path.to_str().unwrap();
    let anvil = Anvil::start_with(&[
        "--init",
        path,
        "--chain-id",
        "4244",
        "--hardfork",
        "shanghai",
    ])
    .await;
    let init = alloy_primitives::hex::decode(test_support::REBORN_INIT_CODE).unwrap();
    let child = factory.create2_from_code(alloy_primitives::B256::ZERO, &init);

    let store = dir.path().join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis_path, 0, 4, 256);
    config.source.storage = snapshotter::follow::StorageScope::All;
    config.build.whole_table_max_records = 0;
    let follower = Follower::start(config);
    let server = start_server(&store).await;
    let (upstream, _, relayed) = start_recording_relay(&anvil.url, passthrough()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server,
        upstream: Some(upstream),
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    })
    .await;
    view_reaches(&proxy, 0).await;

    let (factory, to) = (factory.to_string(), child.to_string());
    anvil.transact(DEV_ACCOUNTS[0], Some(&factory), &init).await;
    let word = alloy_primitives::B256::with_last_byte(0x2a);
    anvil
        .transact(DEV_ACCOUNTS[0], Some(&to), word.as_slice())
        .await;
    let before = view_reaches(&proxy, anvil.head().await).await;
    anvil.rpc("evm_setAutomine", json!([false])).await;
    for (target, data) in [(&to, &[][..]), (&factory, &init[..])] {
        let data = alloy_primitives::hex::encode_prefixed(data);
        let tx = json!({"from": DEV_ACCOUNTS[0], "to": target, "data": data, "gas": "0x4c4b40"});
        anvil.rpc("eth_sendTransaction", json!([tx])).await;
    }
    anvil.rpc("evm_mine", json!([])).await;
    anvil.rpc("evm_setAutomine", json!([true])).await;
    let after = view_reaches(&proxy, anvil.head().await).await;
    relayed.lock().unwrap().clear();

    for at in [format!("{before:#x}"), format!("{after:#x}")] {
        for slot in ["0x1", "0x3"] {
            let params = json!([to, slot, at]);
            let private = test_support::rpc(&proxy, "eth_getStorageAt", params.clone()).await;
            let node = anvil.rpc("eth_getStorageAt", params).await;
            assert_eq!(private.unwrap(), node, "slot {slot} at {at}");
        }
        let params = json!([to, at]);
        let private = test_support::rpc(&proxy, "eth_getCode", params.clone()).await;
        assert_eq!(
            private.unwrap(),
            anvil.rpc("eth_getCode", params).await,
            "code at {at}"
        );
    }
    let three = anvil
        .rpc(
            "eth_getStorageAt",
            json!([to, "0x3", format!("{after:#x}")]),
        )
        .await;
    assert_eq!(
        test_support::quantity(&three),
        0,
        "the word written before is gone"
    );
    let seen = relayed.lock().unwrap().clone();
    assert!(
        !seen.iter().any(|c| c
            .to_string()
            .to_lowercase()
            .contains(&to[2..].to_lowercase())),
        "a read of the contract went upstream: {seen:?}"
    );
    follower.stop().await;
}

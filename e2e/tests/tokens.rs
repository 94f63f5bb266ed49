//! Token balances read privately, end to end: anvil started from a genesis
//! file holding a listed contract's storage (one word wider than a compact
//! value, read whole), Multicall3 at its canonical address (viem's compiled
//! bytecode), two listed OpenZeppelin ERC-20s and an unlisted one deployed,
//! minted and transferred between holders over many blocks while the
//! follower publishes a delta per block. Then viem, as a wallet uses it,
//! reads every holder's balances through the proxy (`readContract` one by
//! one, and one `multicall`) at the block `ethpir_status` reports: each
//! equals anvil's at that block, and a counting relay in front of anvil
//! sees no `eth_call` and no `eth_getStorageAt`. `eth_getStorageAt` of a
//! listed contract is private (a never-written slot reads 0, a too-wide
//! word is refused, not answered); the unlisted token's `balanceOf` goes
//! upstream.

use crate::common;

use std::path::Path;

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{SolCall, SolValue};
use common::*;
use protocol::tokens::{
    Getter, IBalanceChecker, IMulticall3, MappingLayout, SlotIndex, TokenEntry, TokenList, IERC20,
    MULTICALL3,
};
use serde_json::{json, Value};
use test_support::{proxy_status as status, write_genesis_with, Anvil, DEV_ACCOUNTS};

alloy_sol_types::sol! {
    interface IPresetToken {
        function mint(address to, uint256 amount);
        function transfer(address to, uint256 amount) returns (bool);
    }
}

alloy_sol_types::sol! {
    /// e2e/contracts/PooledShares.sol: `getShares(address)` backed by a
    /// mapping at slot 3.
    interface IPooledShares {
        function mint(address to, uint256 amount);
        function getShares(address account) returns (uint256);
    }
}

/// The getter `getShares(address)` of e2e/contracts/PooledShares.sol.
fn get_shares() -> Getter {
    "getShares(address)".parse().unwrap()
}

/// A contract of the genesis whose storage is listed: slot 1 holds 5,
/// slot 2 a word of 26 bytes (wider than 24-byte values hold).
const STORE: &str = "0x00000000000000000000000000000000000057a1";

fn wide_word() -> U256 {
    U256::from(1u8) << 200
}

/// The test's genesis: test-support's, plus the listed contract and
/// Multicall3 at its canonical address (as on mainnet, where its creation
/// long precedes any snapshot).
async fn write_genesis_with_store(path: &Path) {
    let store = json!({
        "balance": "0x0",
        "code": "0x00",
        "storage": {
            "0x01": format!("{:#066x}", 5),
            "0x02": format!("{:#066x}", wide_word()),
        },
    });
    let alloc = vec![multicall3_account().await, (STORE.to_string(), store)];
    write_genesis_with(path, alloc);
}

/// An OpenZeppelin ERC-20 (the preset with mint) deployed by dev account 0.
async fn deploy_token(anvil: &Anvil, symbol: &str) -> Address {
    let mut init = test_support::openzeppelin_bytecode("ERC20PresetMinterPauser");
    init.extend((format!("{symbol} token"), symbol.to_string()).abi_encode_params());
    anvil.deploy(DEV_ACCOUNTS[0], &init).await.parse().unwrap()
}

/// The token list naming `tokens` (OpenZeppelin 4.9's preset keeps its
/// balances at slot 2, as `tokens detect` finds) and the `getShares` of
/// `shares` (its mapping at slot 3).
fn write_token_list(path: &Path, tokens: &[Address], shares: Address) {
    let entry = |address, function, slot, source: &str| TokenEntry {
        chain_id: test_support::GENESIS_CHAIN_ID,
        address,
        symbol: String::new(),
        function,
        balance_slot: SlotIndex::Position(slot),
        layout: MappingLayout::Solidity,
        source: source.into(),
    };
    let preset = "test: OpenZeppelin 4.9.6 ERC20PresetMinterPauser";
    let list = TokenList {
        tokens: tokens
            .iter()
            .map(|&address| entry(address, Getter::balance_of(), 2, preset))
            .chain([entry(shares, get_shares(), 3, "test: PooledShares.sol")])
            .collect(),
        ..Default::default()
    };
    std::fs::write(path, list.to_toml()).unwrap();
}

/// `balanceOf(holder)` of `token` at `block`, asked of `url`.
async fn balance_of(
    url: &str,
    token: Address,
    holder: Address,
    block: u64,
) -> Result<U256, String> {
    let data = IERC20::balanceOfCall { holder }.abi_encode();
    let call = json!({"to": token, "data": alloy_primitives::hex::encode_prefixed(data)});
    let out = test_support::rpc(url, "eth_call", json!([call, format!("{block:#x}")])).await?;
    let bytes = alloy_primitives::hex::decode(out.as_str().unwrap()).unwrap();
    Ok(IERC20::balanceOfCall::abi_decode_returns(&bytes).unwrap())
}

/// How many `POST /v1/query` requests the server has answered.
async fn queries_served(server: &str) -> u64 {
    served(server, "query").await
}

/// Requests `server` answered with 200 on `route`.
async fn served(server: &str, route: &str) -> u64 {
    route_requests(server, route, true).await
}

/// What viem reads through `url`: (token, holder, balance) one by one,
/// and the multicall's balances in the order tokens x holders.
fn viem_balances(url: &str, block: u64, tokens: &[Address], holders: &[Address]) -> Value {
    let spec = json!({"block": block, "tokens": tokens, "holders": holders});
    viem_script("viem-balances.cjs", url, &spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wallets_read_token_balances_privately_through_viem() {
    let dir = tempfile::tempdir().unwrap();
    let genesis = dir.path().join("genesis.json");
    write_genesis_with_store(&genesis).await;
    let anvil =
        Anvil::start_with(&["--init", genesis.to_str().unwrap(), "--chain-id", "4242"]).await;

    // The listed tokens are the next two contracts dev account 0 creates.
    let nonce = next_nonce(&anvil, 0).await;
    let listed = [dev(0).create(nonce), dev(0).create(nonce + 1)];
    // The staking pool is dev account 2's next contract.
    let nonce2 = next_nonce(&anvil, 2).await;
    let shares = dev(2).create(nonce2);
    let tokens_path = dir.path().join("tokens.toml");
    write_token_list(&tokens_path, &listed, shares);
    let checker: Address = anvil
        .deploy(DEV_ACCOUNTS[3], &test_contract("BalanceChecker"))
        .await
        .parse()
        .unwrap();

    let store = dir.path().join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis, 0, 4, 16);
    config.source.tokens = Some(tokens_path.clone());
    config.source.contracts = vec![STORE.parse().unwrap()];
    let follower = Follower::start(config);
    let server = start_server(&store).await;
    let (upstream, upstream_saw) = start_relay(&anvil.url, passthrough()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server.clone(),
        upstream: Some(upstream),
        cache_dir: cache.path().to_path_buf(),
        balance_checker: Some(checker),
        // Codes are counted as the wallet reads them (none ahead).
        prefetch_codes: 0,
        // The rounds a refresh needs are counted, unpadded.
        pad_call_rounds_to: 1,
        // The proxy trusts its own list (the shipped one has no tokens of
        // this chain).
        tokens: Some(tokens_path.clone()),
        ..Default::default()
    })
    .await;
    view_reaches(&proxy, 0).await;

    // Two listed tokens, a listed staking pool and an unlisted token;
    // mints, then transfers between holders, a block each.
    let before_tokens = anvil.head().await;
    assert_eq!(deploy_token(&anvil, "AAA").await, listed[0]);
    assert_eq!(deploy_token(&anvil, "BBB").await, listed[1]);
    let pool = anvil
        .deploy(DEV_ACCOUNTS[2], &test_contract("PooledShares"))
        .await;
    assert_eq!(pool.parse::<Address>().unwrap(), shares);
    before_deployment(&proxy, &anvil, &listed, checker, before_tokens).await;
    let unlisted = deploy_token(&anvil, "ZZZ").await;
    let holders: Vec<Address> = (0..4)
        .map(dev)
        .chain((1..=4u8).map(Address::repeat_byte))
        .collect();
    for (i, holder) in holders.iter().enumerate() {
        for (t, token) in listed.iter().chain([&unlisted]).enumerate() {
            let amount = U256::from(1_000_000u64 * (i as u64 + 1) + t as u64);
            let mint = IPresetToken::mintCall {
                to: *holder,
                amount,
            }
            .abi_encode();
            send(&anvil, 0, *token, mint).await;
        }
        if i % 2 == 0 {
            let amount = U256::from(31_337u64 * (i as u64 + 1));
            let mint = IPooledShares::mintCall {
                to: *holder,
                amount,
            }
            .abi_encode();
            send(&anvil, 2, shares, mint).await;
        }
    }
    for k in 0..6usize {
        let (from, to) = (k % 4, (k + 1) % 4);
        let amount = U256::from(12_345u64 * (k as u64 + 1));
        let transfer = IPresetToken::transferCall {
            to: holders[4 + k % 4],
            amount,
        }
        .abi_encode();
        send(&anvil, from, listed[k % 2], transfer).await;
        let back = IPresetToken::transferCall {
            to: dev(to),
            amount: U256::from(7u8),
        }
        .abi_encode();
        send(&anvil, from, listed[(k + 1) % 2], back).await;
    }
    // Dev account 5 delegates to the genesis contract (code `STOP`, so
    // the type-4 transaction to itself succeeds).
    delegate(&anvil, STORE.parse().unwrap()).await;
    let head = anvil.head().await;
    view_reaches(&proxy, head).await;
    let block = status(&proxy).await["viewBlock"].as_u64().unwrap();
    upstream_saw.lock().unwrap().clear();

    // viem through the proxy, against anvil at the same block.
    let mut asked = holders.clone();
    asked.push(Address::repeat_byte(0x77)); // never held a token
    let got = viem_balances(&proxy, block, &listed, &asked);
    let mut want = Vec::new();
    for token in &listed {
        for holder in &asked {
            want.push(
                balance_of(&anvil.url, *token, *holder, block)
                    .await
                    .unwrap()
                    .to_string(),
            );
        }
    }
    let read: Vec<String> = got["read"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[2].as_str().unwrap().to_string())
        .collect();
    assert_eq!(read, want, "readContract through the proxy");
    let multicall: Vec<String> = serde_json::from_value(got["multicall"].clone()).unwrap();
    assert_eq!(multicall, want, "multicall through the proxy");
    assert!(want.iter().any(|w| w != "0"), "the holders hold tokens");
    assert_eq!(want[asked.len() - 1], "0");

    // Storage reads of listed contracts are private too.
    let storage_at = |contract: String, slot: B256| {
        let proxy = proxy.clone();
        async move {
            test_support::rpc(
                &proxy,
                "eth_getStorageAt",
                json!([contract, slot, format!("{block:#x}")]),
            )
            .await
        }
    };
    let word = |v: Value| U256::from_be_bytes(v.as_str().unwrap().parse::<B256>().unwrap().0);
    assert_eq!(
        word(
            storage_at(STORE.into(), B256::with_last_byte(1))
                .await
                .unwrap()
        ),
        U256::from(5)
    );
    assert_eq!(
        word(
            storage_at(STORE.into(), B256::with_last_byte(9))
                .await
                .unwrap()
        ),
        U256::ZERO
    );
    // The wide word: its low part and its high part's record, joined.
    let wide = storage_at(STORE.into(), B256::with_last_byte(2))
        .await
        .unwrap();
    assert_eq!(word(wide), wide_word());
    let slot = MappingLayout::Solidity.slot(&holders[5], &SlotIndex::Position(2));
    let private = storage_at(format!("{:#x}", listed[0]), slot).await.unwrap();
    let node = anvil
        .rpc(
            "eth_getStorageAt",
            json!([listed[0], slot, format!("{block:#x}")]),
        )
        .await;
    assert_eq!(private, node);
    // One aggregate3 of every balance, and a JSON-RPC batch of balanceOf
    // calls (what batching providers send): each one PIR request.
    let calls = listed
        .iter()
        .flat_map(|t| asked.iter().map(move |h| (*t, *h)))
        .map(|(target, holder)| IMulticall3::Call3 {
            target,
            allowFailure: false,
            callData: IERC20::balanceOfCall { holder }.abi_encode().into(),
        })
        .collect();
    let data = IMulticall3::aggregate3Call { calls }.abi_encode();
    let call = json!({"to": MULTICALL3, "data": alloy_primitives::hex::encode_prefixed(data)});
    let before = queries_served(&server).await;
    let out = test_support::rpc(&proxy, "eth_call", json!([call, format!("{block:#x}")]))
        .await
        .unwrap();
    assert_eq!(
        queries_served(&server).await,
        before,
        "the keys viem read at this base: no PIR request"
    );
    let bytes = alloy_primitives::hex::decode(out.as_str().unwrap()).unwrap();
    let results = IMulticall3::aggregate3Call::abi_decode_returns(&bytes).unwrap();
    let balances: Vec<String> = results
        .iter()
        .map(|r| {
            assert!(r.success);
            IERC20::balanceOfCall::abi_decode_returns(&r.returnData)
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(balances, want, "aggregate3 through the proxy");
    let wallet = Wallet {
        proxy: &proxy,
        anvil: &anvil,
        server: &server,
        listed: &listed,
        shares,
        checker,
    };
    wallet.metamask_refresh(&asked, block).await;
    wallet.every_multicall_form(&asked, block).await;
    wallet.blocks_as_wallets_name_them(&asked).await;
    wallet.code_reads(block).await;
    let batch: Vec<Value> = asked
        .iter()
        .enumerate()
        .map(|(i, holder)| {
            let data = IERC20::balanceOfCall { holder: *holder }.abi_encode();
            let call = json!({"to": listed[1], "data": alloy_primitives::hex::encode_prefixed(data)});
            json!({"jsonrpc": "2.0", "id": i, "method": "eth_call", "params": [call, format!("{block:#x}")]})
        })
        .collect();
    let before = queries_served(&server).await;
    let http = reqwest::Client::new();
    let answers = test_support::rpc_raw(&http, &proxy, &Value::from(batch).to_string()).await;
    assert_eq!(
        queries_served(&server).await,
        before,
        "keys read before: no PIR request"
    );
    let mut answers = answers.as_array().unwrap().clone();
    answers.sort_by_key(|a| a["id"].as_u64());
    for (i, a) in answers.iter().enumerate() {
        let bytes = alloy_primitives::hex::decode(a["result"].as_str().unwrap()).unwrap();
        let balance = IERC20::balanceOfCall::abi_decode_returns(&bytes).unwrap();
        assert_eq!(
            balance.to_string(),
            want[asked.len() + i],
            "batch entry {i}"
        );
    }

    let saw = upstream_saw.lock().unwrap().clone();
    assert!(
        !saw.iter().any(|m| [
            "eth_call",
            "eth_getStorageAt",
            "eth_getBalance",
            "eth_getCode"
        ]
        .contains(&m.as_str())),
        "the upstream saw {saw:?}"
    );

    // The unlisted token goes upstream, as configured, and is right.
    let holder = holders[2];
    let via_proxy = balance_of(&proxy, unlisted, holder, block).await.unwrap();
    assert_eq!(
        via_proxy,
        balance_of(&anvil.url, unlisted, holder, block)
            .await
            .unwrap()
    );
    assert!(upstream_saw.lock().unwrap().iter().any(|m| m == "eth_call"));

    // A proxy with a token list of its own answers privately only the
    // tokens the catalog agrees on: here the list names another balances
    // slot for the second token, so its balanceOf goes upstream (and is
    // right), while the first's stays private.
    let pinned = dir.path().join("pinned.toml");
    let mut list = TokenList::from_file(&tokens_path).unwrap();
    list.tokens[1].balance_slot = SlotIndex::Position(7);
    std::fs::write(&pinned, list.to_toml()).unwrap();
    let (upstream2, upstream2_saw) = start_relay(&anvil.url, passthrough()).await;
    let cache2 = tempfile::tempdir().unwrap();
    let checking = start_proxy_with(proxy::ProxyConfig {
        pir_server: server.clone(),
        upstream: Some(upstream2),
        cache_dir: cache2.path().to_path_buf(),
        tokens: Some(pinned),
        ..Default::default()
    })
    .await;
    let _ = &shares;
    view_reaches(&checking, 0).await;
    let first = balance_of(&checking, listed[0], holders[1], block)
        .await
        .unwrap();
    assert_eq!(first.to_string(), want[1]);
    assert!(!upstream2_saw
        .lock()
        .unwrap()
        .iter()
        .any(|m| m == "eth_call"));
    let second = balance_of(&checking, listed[1], holders[1], block)
        .await
        .unwrap();
    assert_eq!(second.to_string(), want[asked.len() + 1]);
    assert!(upstream2_saw
        .lock()
        .unwrap()
        .iter()
        .any(|m| m == "eth_call"));

    follower.stop().await;
}

/// Anvil's key of dev account 5 (`ALL_DEV_ACCOUNTS[5]`).
const DEV5_KEY: &str = "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba";

/// Dev account 5 delegates its code to `target` (EIP-7702: a type-4
/// transaction to itself, its authorization signed by cast).
async fn delegate(anvil: &Anvil, target: Address) {
    let out = std::process::Command::new(test_support::foundry_tool("cast"))
        .args(["send", "--rpc-url", &anvil.url, "--private-key", DEV5_KEY])
        .args([
            "--auth",
            &target.to_string(),
            test_support::ALL_DEV_ACCOUNTS[5],
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cast send --auth: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads at a block before the listed tokens existed: what the node
/// answers (`0x` for a call to no code; success with nothing inside a
/// batch; 0 from the BalanceChecker).
async fn before_deployment(
    proxy: &str,
    anvil: &Anvil,
    listed: &[Address],
    checker: Address,
    block: u64,
) {
    let head = anvil.head().await;
    let caught_up = || async { (status(proxy).await["viewBlock"].as_u64()? >= head).then_some(()) };
    test_support::eventually("the proxy's view reaches the tokens", caught_up).await;
    let at = format!("{block:#x}");
    let holder = dev(1);
    let balance_of = IERC20::balanceOfCall { holder }.abi_encode();
    let direct = same_as_anvil(proxy, anvil, &call_object(listed[0], &balance_of), &at).await;
    assert_eq!(direct, json!("0x"));
    let calls = listed
        .iter()
        .map(|t| IMulticall3::Call3 {
            target: *t,
            allowFailure: true,
            callData: balance_of.clone().into(),
        })
        .collect();
    let batch = IMulticall3::aggregate3Call { calls }.abi_encode();
    same_as_anvil(proxy, anvil, &call_object(MULTICALL3, &batch), &at).await;
    let checked = IBalanceChecker::balancesCall {
        users: vec![holder],
        tokens: vec![Address::ZERO, listed[0]],
    }
    .abi_encode();
    same_as_anvil(proxy, anvil, &call_object(checker, &checked), &at).await;
}

/// A wallet's view of the test chain: the proxy, anvil beside it, the PIR
/// server (its metrics count requests) and the contracts.
struct Wallet<'a> {
    proxy: &'a str,
    anvil: &'a Anvil,
    server: &'a str,
    listed: &'a [Address],
    shares: Address,
    checker: Address,
}

impl Wallet<'_> {
    /// MetaMask's balance refresh (its balance service off): one
    /// `aggregate3` (allowFailure) mixing `balanceOf(holder)` on each
    /// listed token, Multicall3's own `getEthBalance(holder)` and the
    /// staking pool's `getShares(holder)`; `getEthBalance` and `getShares`
    /// alone; its token detection (the BalanceChecker). Byte for byte
    /// anvil's answers at the same block; the first refresh in at most one
    /// PIR request, the same refresh again in none.
    async fn metamask_refresh(&self, holders: &[Address], block: u64) {
        let calls: Vec<IMulticall3::Call3> = holders
            .iter()
            .flat_map(|h| {
                let call3 = |target, data: Vec<u8>| IMulticall3::Call3 {
                    target,
                    allowFailure: true,
                    callData: data.into(),
                };
                let tokens = self
                    .listed
                    .iter()
                    .map(move |t| call3(*t, IERC20::balanceOfCall { holder: *h }.abi_encode()));
                let eth = IMulticall3::getEthBalanceCall { addr: *h }.abi_encode();
                tokens.chain([
                    call3(MULTICALL3, eth),
                    call3(self.shares, get_shares().calldata(h)),
                ])
            })
            .collect();
        let refresh = IMulticall3::aggregate3Call { calls }.abi_encode();
        let mut tokens = vec![Address::ZERO];
        tokens.extend(self.listed);
        let detection = IBalanceChecker::balancesCall {
            users: holders.to_vec(),
            tokens,
        }
        .abi_encode();
        let asked = [
            call_object(MULTICALL3, &refresh),
            call_object(
                MULTICALL3,
                &IMulticall3::getEthBalanceCall { addr: holders[0] }.abi_encode(),
            ),
            call_object(self.shares, &get_shares().calldata(&holders[0])),
            call_object(self.checker, &detection),
        ];
        let at = format!("{block:#x}");
        let before = queries_served(self.server).await;
        let first = same_as_anvil(self.proxy, self.anvil, &asked[0], &at).await;
        assert!(
            queries_served(self.server).await <= before + 1,
            "one PIR request at most"
        );
        let bytes = alloy_primitives::hex::decode(first.as_str().unwrap()).unwrap();
        let results = IMulticall3::aggregate3Call::abi_decode_returns(&bytes).unwrap();
        assert!(
            results.iter().any(|r| r.returnData.iter().any(|b| *b != 0)),
            "the refresh holds balances"
        );
        for call in &asked[1..] {
            same_as_anvil(self.proxy, self.anvil, call, &at).await;
        }
        let before = queries_served(self.server).await;
        for call in &asked {
            same_as_anvil(self.proxy, self.anvil, call, &at).await;
        }
        assert_eq!(
            queries_served(self.server).await,
            before,
            "a second refresh of the same keys: no PIR request"
        );
    }

    /// `eth_getCode` as a wallet sends it before a transaction, of an EOA,
    /// an account that never existed, contracts deployed while the
    /// follower ran, a contract of the genesis file and an EIP-7702
    /// delegated account: anvil's bytes at the same block. Asked again:
    /// no PIR query, no code entry and no code downloaded.
    async fn code_reads(&self, block: u64) {
        let delegated: Address = test_support::ALL_DEV_ACCOUNTS[5].parse().unwrap();
        let accounts = [
            dev(1),
            Address::repeat_byte(0x77),
            self.listed[0],
            self.listed[1],
            self.shares,
            self.checker,
            STORE.parse().unwrap(),
            delegated,
        ];
        let at = format!("{block:#x}");
        let read = |address: Address| {
            let at = at.clone();
            async move {
                let params = json!([address, at]);
                let private = test_support::rpc(self.proxy, "eth_getCode", params.clone())
                    .await
                    .unwrap();
                assert_eq!(
                    private,
                    self.anvil.rpc("eth_getCode", params).await,
                    "{address}"
                );
                private
            }
        };
        for a in accounts {
            read(a).await;
        }
        let designator = read(delegated).await;
        let expected = format!("0xef0100{}", &STORE[2..]);
        assert_eq!(designator.as_str().unwrap(), expected);
        assert_eq!(read(dev(1)).await, json!("0x"));
        let downloads = || async {
            let (q, e, c) = (
                served(self.server, "query").await,
                served(self.server, "code_entry").await,
                served(self.server, "code").await,
            );
            (q, e, c)
        };
        // Five contracts' codes downloaded by hash; their places resolved
        // by proved entries (a base's) or from the whole code tables of
        // the deltas, held since those levels were opened.
        let before = downloads().await;
        assert!(before.2 >= 5, "codes were downloaded: {before:?}");
        for a in accounts {
            read(a).await;
        }
        assert_eq!(
            downloads().await,
            before,
            "codes read before: nothing asked"
        );
    }

    /// Every batch form of Multicall3 with the refresh's inner calls and
    /// its block views, as anvil answers them.
    async fn every_multicall_form(&self, holders: &[Address], block: u64) {
        let views = [
            IMulticall3::getBlockNumberCall {}.abi_encode(),
            IMulticall3::getChainIdCall {}.abi_encode(),
            IMulticall3::getCurrentBlockTimestampCall {}.abi_encode(),
        ];
        let inner: Vec<(Address, Vec<u8>)> = holders[..2]
            .iter()
            .flat_map(|h| {
                [
                    (
                        self.listed[0],
                        IERC20::balanceOfCall { holder: *h }.abi_encode(),
                    ),
                    (
                        MULTICALL3,
                        IMulticall3::getEthBalanceCall { addr: *h }.abi_encode(),
                    ),
                    (self.shares, get_shares().calldata(h)),
                ]
            })
            .chain(views.iter().map(|v| (MULTICALL3, v.clone())))
            .collect();
        let plain: Vec<IMulticall3::Call> = inner
            .iter()
            .map(|(target, data)| IMulticall3::Call {
                target: *target,
                callData: data.clone().into(),
            })
            .collect();
        let valued = inner
            .iter()
            .map(|(target, data)| IMulticall3::Call3Value {
                target: *target,
                allowFailure: false,
                value: U256::ZERO,
                callData: data.clone().into(),
            })
            .collect();
        let forms = [
            IMulticall3::aggregateCall {
                calls: plain.clone(),
            }
            .abi_encode(),
            IMulticall3::tryAggregateCall {
                requireSuccess: true,
                calls: plain.clone(),
            }
            .abi_encode(),
            IMulticall3::blockAndAggregateCall {
                calls: plain.clone(),
            }
            .abi_encode(),
            IMulticall3::tryBlockAndAggregateCall {
                requireSuccess: false,
                calls: plain,
            }
            .abi_encode(),
            IMulticall3::aggregate3ValueCall { calls: valued }.abi_encode(),
        ];
        let at = format!("{block:#x}");
        for data in forms.iter().chain(&views) {
            same_as_anvil(self.proxy, self.anvil, &call_object(MULTICALL3, data), &at).await;
        }
    }

    /// `pending` reads the newest view; the number `eth_blockNumber`
    /// gives through the proxy names a view.
    async fn blocks_as_wallets_name_them(&self, holders: &[Address]) {
        let number = test_support::rpc(self.proxy, "eth_blockNumber", json!([]))
            .await
            .unwrap();
        let block = test_support::quantity(&number);
        let newest = status(self.proxy).await["viewBlock"].as_u64().unwrap();
        assert!(
            block <= newest,
            "eth_blockNumber {block} past the view {newest}"
        );
        let balance_of = IERC20::balanceOfCall { holder: holders[1] }.abi_encode();
        let at = number.as_str().unwrap().to_string();
        same_as_anvil(
            self.proxy,
            self.anvil,
            &call_object(self.listed[1], &balance_of),
            &at,
        )
        .await;
        let pending =
            test_support::rpc(self.proxy, "eth_getBalance", json!([holders[1], "pending"]))
                .await
                .unwrap();
        let at_view = self
            .anvil
            .rpc(
                "eth_getBalance",
                json!([holders[1], format!("{newest:#x}")]),
            )
            .await;
        assert_eq!(pending, at_view, "pending: the newest view");
    }
}

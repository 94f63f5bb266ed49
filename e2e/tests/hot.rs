//! The hot tier (brief section 17): the state every swapper reads,
//! published whole, so that a wallet's swap asks the PIR server only for
//! the keys that name its holder.
//!
//! On anvil: a token made by a factory, a constant-product pool of it, a
//! router in front of the pool, and a flagged token behind an EIP-1967
//! proxy. Six traders each swap through the router, refresh through
//! Multicall3 and move the proxied token. The follower holds the whole
//! state and chooses the hot tier from that activity (`prestateTracer`
//! over the window): the router, the pool, the tokens, the proxy's
//! implementation slot and its implementation. A holder who traded
//! nothing in the window then prepares a swap (`eth_call`,
//! `eth_estimateGas`, `eth_createAccessList`), refreshes its tokens
//! through Multicall3 and reads the proxied token's `balanceOf`: every
//! answer anvil's, byte for byte, and the keys read by PIR only those that
//! name the holder. The same calls through a proxy with `hot_tier = "off"`
//! read every key by PIR (the tier disabled: the mutation check).
//!
//! The tier must not steer what the server sees: a second server over a
//! copy of the store, whose tier also holds the holder's own keys (values
//! right), sees the same requests and query counts from the holder's
//! calls as the first; and the attester applies the tier's rule (distinct
//! senders) again and refuses that second tier.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use alloy_primitives::{Address, U256};
use alloy_sol_types::SolCall;
use common::*;
use ethpir_client::config::HotTierUse;
use protocol::tokens::MULTICALL3;
use serde_json::{json, Value};
use test_support::{proxy_status as status, Anvil, DEV_ACCOUNTS};

alloy_sol_types::sol! {
    interface IFlagged {
        function initialize(address newOwner);
        function mint(address to, uint256 amount);
        function balanceOf(address holder) returns (uint256);
        function transfer(address to, uint256 amount) returns (bool);
    }
    interface ISimpleToken {
        function balanceOf(address holder) returns (uint256);
    }
    interface ISafe {
        function nonce() returns (uint256);
        function threshold() returns (uint256);
    }
    interface IRewardPool {
        function stake(address user, uint256 amount, uint256 debt);
    }
    interface IRewardLens {
        function pending(address user) returns (uint256);
    }
    interface IRouter {
        function quote(address pool, uint256 amountIn) returns (uint256);
        function swapExactETHForTokens(address pool, uint256 minOut, address to, uint256 deadline) returns (uint256 out);
    }
}

/// The traders of the window: fresh addresses, funded by dev account 0
/// and sent from by anvil's impersonation.
fn traders() -> Vec<Address> {
    (0xa1..=0xa6u8).map(Address::repeat_byte).collect()
}

/// The dev account whose calls are measured: it trades nothing in the
/// window (one mint pays it the proxied token).
const HOLDER: usize = 3;

/// What the traders and the holder use.
struct Market {
    token: Address,
    pool: Address,
    router: Address,
    proxied: Address,
    /// A Safe-shaped wallet of the holder's (e2e/contracts/SignerWallet.sol:
    /// its owners' mapping at slot 0, its threshold at 1, its nonce at 2).
    safe: Address,
    /// A staking pool of `token` rewards holding the holder's stake
    /// (e2e/contracts/RewardPool.sol: `users[W].rewardDebt[token]`).
    reward_pool: Address,
    /// A dapp's lens in front of it (e2e/contracts/RewardLens.sol): the
    /// pool's address in its storage, named by no call to the lens.
    lens: Address,
}

impl Market {
    async fn deploy(anvil: &Anvil) -> Self {
        let PoolMarket {
            token,
            pool,
            router,
        } = deploy_pool_market(anvil).await;
        let implementation = deploy_test_contract(anvil, "FlaggedToken", None).await;
        let proxied = deploy_test_contract(anvil, "Proxy1967", Some(implementation)).await;
        let init = IFlagged::initializeCall { newOwner: dev(0) };
        send(anvil, 0, proxied, init.abi_encode()).await;
        let safe = deploy_test_contract(anvil, "SignerWallet", Some(dev(HOLDER))).await;
        let (reward_pool, lens) = Self::deploy_rewards(anvil, token).await;
        Market {
            token,
            pool,
            router,
            proxied,
            safe,
            reward_pool,
            lens,
        }
    }

    /// A reward pool with the holder's stake in `token` (a debt of 777),
    /// and a lens in front of it.
    async fn deploy_rewards(anvil: &Anvil, token: Address) -> (Address, Address) {
        let reward_pool = deploy_test_contract(anvil, "RewardPool", Some(token)).await;
        let stake = IRewardPool::stakeCall {
            user: dev(HOLDER),
            amount: U256::from(5u8),
            debt: U256::from(777u16),
        };
        send(anvil, 0, reward_pool, stake.abi_encode()).await;
        let lens = deploy_test_contract(anvil, "RewardLens", Some(reward_pool)).await;
        (reward_pool, lens)
    }

    /// The slot of `users[holder].rewardDebt[token]` in the reward pool:
    /// the struct at `keccak(holder . 0)`, its mapping one word past it.
    fn reward_debt_slot(&self, holder: Address) -> alloy_primitives::B256 {
        let word = |a: Address| alloy_primitives::B256::left_padding_from(a.as_slice());
        let user = alloy_primitives::keccak256([word(holder).0, [0u8; 32]].concat());
        let member = U256::from_be_bytes(user.0) + U256::from(1u8);
        alloy_primitives::keccak256([word(self.token).0, member.to_be_bytes::<32>()].concat())
    }

    /// What a wallet reads of the holder's Safe: its nonce and threshold,
    /// through Multicall3 (the Safe named only in the batch's data).
    fn safe_reads(&self) -> Vec<u8> {
        let calls = [
            (self.safe, ISafe::nonceCall {}.abi_encode()),
            (self.safe, ISafe::thresholdCall {}.abi_encode()),
        ];
        aggregate3(&calls, true)
    }

    /// A swap of 0.1 ETH for the token, paid to `from`, as a wallet sends
    /// it.
    fn swap(&self, from: Address) -> Value {
        let swap = IRouter::swapExactETHForTokensCall {
            pool: self.pool,
            minOut: U256::from(1u8),
            to: from,
            deadline: U256::from(u64::MAX),
        };
        json!({"from": from, "to": self.router, "value": "0x16345785d8a0000",
            "data": alloy_primitives::hex::encode_prefixed(swap.abi_encode())})
    }

    /// A wallet's refresh of `holder`: both tokens and a quote, through
    /// Multicall3.
    fn refresh(&self, holder: Address) -> Vec<u8> {
        let calls = [
            (
                self.proxied,
                IFlagged::balanceOfCall { holder }.abi_encode(),
            ),
            (
                self.token,
                ISimpleToken::balanceOfCall { holder }.abi_encode(),
            ),
            (
                self.router,
                IRouter::quoteCall {
                    pool: self.pool,
                    amountIn: U256::from(10u64).pow(U256::from(17u8)),
                }
                .abi_encode(),
            ),
        ];
        aggregate3(&calls, true)
    }

    /// Each trader swaps, is paid the proxied token, refreshes through
    /// Multicall3 and pays some of it on: distinct transactions over the
    /// same router, pool, tokens and proxy.
    async fn trade(&self, anvil: &Anvil) {
        for trader in traders() {
            let fund = json!({"from": DEV_ACCOUNTS[0], "to": trader, "value": "0xde0b6b3a7640000"});
            anvil.send(fund).await;
            anvil.rpc("anvil_impersonateAccount", json!([trader])).await;
            let from = trader.to_string();
            let receipt = anvil.send(self.swap(trader)).await;
            assert_eq!(receipt["status"], "0x1", "{receipt}");
            let pay = IFlagged::mintCall {
                to: trader,
                amount: U256::from(1_000u64),
            };
            send(anvil, 0, self.proxied, pay.abi_encode()).await;
            let multicall = MULTICALL3.to_string();
            anvil
                .transact(&from, Some(&multicall), &self.refresh(trader))
                .await;
            let on = IFlagged::transferCall {
                to: dev(0),
                amount: U256::from(7u64),
            };
            let proxied = self.proxied.to_string();
            anvil
                .transact(&from, Some(&proxied), &on.abi_encode())
                .await;
        }
        let pay = IFlagged::mintCall {
            to: dev(HOLDER),
            amount: U256::from(4_242u64),
        };
        send(anvil, 0, self.proxied, pay.abi_encode()).await;
    }
}

/// The queries the PIR server has answered of snapshot `id` so far.
async fn queries_of(server: &str, id: &str) -> u64 {
    let text = metrics_text(server).await;
    let line = format!("ethpir_queries_total{{snapshot=\"{id}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line)?.parse().ok())
        .unwrap_or(0)
}

/// A proxy of `pir_server` with `hot_tier`, no canaries (so that the
/// queries counted are the calls'), forwarding to `upstream`.
async fn tier_proxy(
    pir_server: &str,
    upstream: &str,
    cache: &tempfile::TempDir,
    hot_tier: HotTierUse,
) -> String {
    start_proxy_with(proxy::ProxyConfig {
        pir_server: pir_server.to_string(),
        upstream: Some(upstream.to_string()),
        cache_dir: cache.path().to_path_buf(),
        hot_tier,
        canaries_per_request: 0,
        // What the tier saves is counted in the rounds calls need,
        // unpadded.
        pad_call_rounds_to: 1,
        ..Default::default()
    })
    .await
}

/// A fresh proxy of `server` ([`tier_proxy`], the tier read ahead)
/// through a traced link, once it holds the tier at a view of `traded`
/// or later: the proxy, what its link saw, and its cache.
async fn proxy_with_tier(
    server: &str,
    upstream: &str,
    traded: u64,
) -> (String, Trace, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let (link, trace) = traced_server(server, std::time::Duration::ZERO).await;
    let proxy = tier_proxy(&link, upstream, &cache, HotTierUse::Ahead).await;
    tier_read(&proxy, traded).await;
    (proxy, trace, cache)
}

/// A fresh proxy of `server` under the defaults but `pad_call_rounds_to`
/// (canaries and padding on: what a user runs), once it holds the tier at
/// a view of `traded` or later: the proxy and its cache.
async fn padded_proxy_with_tier(
    server: String,
    upstream: &str,
    traded: u64,
    pad_call_rounds_to: usize,
) -> (String, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: server,
        upstream: Some(upstream.to_string()),
        cache_dir: cache.path().to_path_buf(),
        pad_call_rounds_to,
        ..Default::default()
    })
    .await;
    tier_read(&proxy, traded).await;
    (proxy, cache)
}

/// Waits until `proxy` holds a tier at a view of `traded` or later.
async fn tier_read(proxy: &str, traded: u64) {
    test_support::eventually("a fresh proxy reads the tier", || async {
        let s = status(proxy).await;
        (s["viewBlock"].as_u64()? >= traded && !s["hot"].is_null()).then_some(())
    })
    .await;
}

/// What the holder's calls cost a proxy.
#[derive(Debug)]
struct Cost {
    /// Queries the base answered (no canaries: `canaries_per_request = 0`).
    base_queries: u64,
    /// PIR requests of the Multicall3 refresh.
    refresh_requests: u64,
}

/// The holder's swap prepared (call, access list, estimate), its refresh
/// through Multicall3 and the proxied token's `balanceOf`, through
/// `proxy` at `at`, each as anvil answers; what they cost of `server`
/// (whose base is `base`).
async fn holders_calls(
    (proxy, server, base): (&str, &str, &str),
    anvil: &Anvil,
    m: &Market,
    at: &str,
) -> Cost {
    let holder = dev(HOLDER);
    let before = queries_of(server, base).await;
    same_transaction(proxy, anvil, &m.swap(holder), at).await;
    let requests = route_requests(server, "query", true).await;
    let refresh = call_object(MULTICALL3, &m.refresh(holder));
    same_as_anvil(proxy, anvil, &refresh, at).await;
    let refresh_requests = route_requests(server, "query", true).await - requests;
    let balance = IFlagged::balanceOfCall { holder }.abi_encode();
    same_as_anvil(proxy, anvil, &call_object(m.proxied, &balance), at).await;
    Cost {
        base_queries: queries_of(server, base).await - before,
        refresh_requests,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_swap_reads_by_pir_only_the_keys_that_name_its_holder() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, genesis) = chain_with_multicall3(dir.path(), "4244").await;
    let market = Market::deploy(&anvil).await;
    market.trade(&anvil).await;
    let traded = anvil.head().await;

    // The whole state followed; a base at the last traded block (a pinned
    // height), and the hot tier on it from the window's activity.
    let store = dir.path().join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis, 0, 4, 256);
    config.source.storage = snapshotter::follow::StorageScope::All;
    // Every delta read by PIR: a key the tier holds is still asked of the
    // deltas above it, never of the base.
    config.build.whole_table_max_records = 0;
    config.levels.pinned = vec![traded];
    let policy = snapshotter::hot::HotPolicy {
        max_mib: 1,
        window: 256,
        min_senders: 3,
    };
    config.hot = policy.clone();
    let follower = Follower::start(config);
    let server = start_server(&store).await;
    let (upstream, _, relayed) = start_recording_relay(&anvil.url, passthrough()).await;
    let (hot_cache, cold_cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let hot = tier_proxy(&server, &upstream, &hot_cache, HotTierUse::Ahead).await;
    let cold = tier_proxy(&server, &upstream, &cold_cache, HotTierUse::Off).await;
    let tier = test_support::eventually("the proxy reads a hot tier", || async {
        let s = status(&hot).await;
        let block = s["viewBlock"].as_u64()?;
        (block >= traded && !s["hot"].is_null()).then_some(s["hot"].clone())
    })
    .await;
    assert_eq!(tier["kind"], "hot");
    assert_eq!(tier["read"], "whole");
    assert_eq!(tier["block"], json!(traded), "it stands on the base");
    let at = format!("{:#x}", view_reaches(&cold, traded).await);
    assert_eq!(at, format!("{:#x}", view_reaches(&hot, traded).await));
    assert!(status(&cold).await["hot"].is_null());
    relayed.lock().unwrap().clear();

    let base = format!("4244-{traded}-full");
    let with_tier = holders_calls((&hot, &server, &base), &anvil, &market, &at).await;
    let without = holders_calls((&cold, &server, &base), &anvil, &market, &at).await;
    // Of the base: the keys that name the holder (the accounts its calls
    // name: itself, the router, the pool, the tokens, Multicall3; the
    // slots derived from them: its balances), each request padded to the
    // ladder; the rest (reserves, the proxy's implementation, codes'
    // accounts) is the tier's.
    eprintln!("with the tier {with_tier:?}, without {without:?}");
    assert!(
        with_tier.base_queries < without.base_queries,
        "keys read from the base by PIR with the hot tier ({without:?} without it)"
    );
    assert!(
        with_tier.refresh_requests < without.refresh_requests,
        "{with_tier:?} vs {without:?}"
    );
    let keys = |s: Value| s["pirKeys"].as_u64().expect("pirKeys");
    let (hot_keys, cold_keys) = (keys(status(&hot).await), keys(status(&cold).await));
    assert!(
        hot_keys < cold_keys,
        "the page's count: {hot_keys} vs {cold_keys}"
    );
    // A trader swaps again: the pool's reserves and the router's count,
    // held by the tier at the base's block, change in a delta above it
    // (read by PIR). The holder's calls read the delta's values over the
    // tier's, and ask the base for the holder's keys (a request asks
    // every PIR level it goes to for the same keys) and a random filler
    // in a round that asks only keys of the tier (its request to every
    // level still goes, so that each round looks alike): far fewer than
    // without the tier.
    let again = traders()[0];
    let receipt = anvil.send(market.swap(again)).await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    let newer = format!("{:#x}", view_reaches(&hot, traded + 1).await);
    let now = status(&hot).await;
    assert_eq!(
        now["hot"]["block"],
        json!(traded),
        "the tier still read: {now}"
    );
    let levels = now["levels"].as_array().expect("levels");
    assert!(levels.iter().any(|l| l["id"] == base.as_str()), "{now}");
    assert!(
        levels
            .iter()
            .any(|l| l["kind"] == "delta" && l["read"] == "pir"),
        "{now}"
    );
    let after = holders_calls((&hot, &server, &base), &anvil, &market, &newer).await;
    assert!(
        after.base_queries < without.base_queries,
        "{after:?} ({without:?} without)"
    );
    // With a PIR level above the tier every round is two requests, sent
    // at once, whether it asks a key of the tier (the router's account:
    // every trader's swaps touch it), one that is not (a fresh address)
    // or both; asked of a fresh proxy (one that read the router before
    // keeps its answer).
    let fresh_cache = tempfile::tempdir().unwrap();
    let fresh = tier_proxy(&server, &upstream, &fresh_cache, HotTierUse::Ahead).await;
    test_support::eventually("a fresh proxy reads the tier under a delta", || async {
        let s = status(&fresh).await;
        (s["viewBlock"].as_u64()? > traded && !s["hot"].is_null()).then_some(())
    })
    .await;
    for who in [market.router, Address::repeat_byte(0x5e)] {
        let before = route_requests(&server, "query", true).await;
        let private = test_support::rpc(&fresh, "eth_getBalance", json!([who, newer]))
            .await
            .unwrap();
        assert_eq!(
            private,
            anvil.rpc("eth_getBalance", json!([who, newer])).await
        );
        let sent = route_requests(&server, "query", true).await - before;
        assert_eq!(sent, 2, "the requests of a balance of {who}");
    }
    a_tier_not_had_is_read_by_pir(&server, &upstream, &anvil, &market, &newer).await;
    lying_tier_stops_private_reads(&server, &upstream, &anvil, &market, &newer).await;
    refused_queries_never_answer_the_tiers_old_values(&server, &upstream, &anvil, &market, traded)
        .await;
    a_stalled_tier_holds_up_nothing(&server, &upstream, &anvil, &market).await;
    let seen = relayed.lock().unwrap().clone();
    let named = [
        "eth_call",
        "eth_estimateGas",
        "eth_createAccessList",
        "eth_getBalance",
    ];
    assert!(
        !seen
            .iter()
            .any(|c| named.contains(&c["method"].as_str().unwrap_or(""))),
        "nothing run upstream: {seen:?}"
    );
    follower.stop().await;
    let served = (server.as_str(), upstream.as_str());
    a_tier_holding_the_holders_keys_changes_nothing_on_the_wire(
        &store, served, &anvil, &market, traded, &policy,
    )
    .await;
    a_forged_tier_is_answered_by_pir(&store, served, &anvil, &market, traded, &policy).await;
    a_forged_shared_key_is_caught_by_audits(&store, served, &anvil, &market, traded, &policy).await;
    let tier = (traded, &policy);
    a_forged_shared_value_is_corrected_in_time(&store, &upstream, &anvil, &market, tier).await;
    the_attester_chooses_the_tier_again(&store, &anvil, traded, &policy).await;
}

/// What the server saw of a proxy's calls: its query requests, each
/// one's shape (queries per PIR level), the queries the base (the view
/// at `traded`) answered, and the codes downloaded (by hash or by place
/// in a level's table, whatever the answer's status).
#[derive(Debug, PartialEq, Eq)]
struct Wire {
    requests: u64,
    shapes: Vec<Vec<usize>>,
    base_queries: u64,
    code_downloads: u64,
}

async fn wire_of<T>(
    (server, trace): (&str, &Trace),
    base: &str,
    calls: impl std::future::Future<Output = T>,
) -> Wire {
    let downloads = || async {
        route_requests(server, "code", false).await
            + route_requests(server, "code_entry", false).await
    };
    let (requests, queries, codes) = (
        route_requests(server, "query", true).await,
        queries_of(server, base).await,
        downloads().await,
    );
    let shapes = traced(trace, calls).await;
    Wire {
        requests: route_requests(server, "query", true).await - requests,
        shapes,
        base_queries: queries_of(server, base).await - queries,
        code_downloads: downloads().await - codes,
    }
}

/// The holder's keys as a hostile operator would put them in a tier: its
/// account, its Safe's threshold and nonce, its reward debt in the pool
/// behind the lens, and the balance-mapping slots of both tokens for the
/// first mapping positions (the real ones among them; the rest read 0).
fn holders_keys(m: &Market) -> Vec<snapshotter::hot::HotKey> {
    let mut keys = vec![snapshotter::hot::HotKey::Account(dev(HOLDER))];
    // Its Safe's threshold and nonce (fixed slots).
    for slot in [1u8, 2] {
        let slot = alloy_primitives::B256::with_last_byte(slot);
        keys.push(snapshotter::hot::HotKey::Slot(m.safe, slot));
    }
    // Its reward debt in the pool behind the lens.
    let debt = m.reward_debt_slot(dev(HOLDER));
    keys.push(snapshotter::hot::HotKey::Slot(m.reward_pool, debt));
    for contract in [m.token, m.proxied] {
        let slots = balance_slots(dev(HOLDER)).into_iter();
        keys.extend(slots.map(|slot| snapshotter::hot::HotKey::Slot(contract, slot)));
    }
    keys
}

/// The slots a balance mapping at positions 0 to 15 keeps `holder`'s
/// balance in (`keccak(holder . position)`).
fn balance_slots(holder: Address) -> Vec<alloy_primitives::B256> {
    let holder = alloy_primitives::B256::left_padding_from(holder.as_slice());
    (0..16u8)
        .map(|position| {
            let input = [holder.0, alloy_primitives::B256::with_last_byte(position).0].concat();
            alloy_primitives::keccak256(input)
        })
        .collect()
}

/// A second server over a copy of the store whose tier holds, beside the
/// follower's keys, the holder's own (all values right: the operator's
/// test of whether this wallet is the holder). Fresh proxies of either
/// server send the same requests with the same query counts for the
/// holder's swap estimate (its first request: at most 12 queries of the
/// base), its refresh, its token's `balanceOf`, its Safe through
/// Multicall3 and its reward debt through a lens; and over the second,
/// `balanceOf` of the holder (whose slot the tier holds) and of a fresh
/// address look alike.
async fn a_tier_holding_the_holders_keys_changes_nothing_on_the_wire(
    store: &std::path::Path,
    (server, upstream): (&str, &str),
    anvil: &Anvil,
    m: &Market,
    traded: u64,
    policy: &snapshotter::hot::HotPolicy,
) {
    let (testing_server, _copy) =
        serve_tier_with_holders_keys(store, anvil, m, traded, policy, |_| {}).await;

    let base = format!("4244-{traded}-full");
    let at = format!("{traded:#x}");
    let holder = dev(HOLDER);
    let balance = call_object(m.proxied, &IFlagged::balanceOfCall { holder }.abi_encode());
    let mut seen = Vec::new();
    for server in [server, testing_server.as_str()] {
        let (proxy, trace, _cache) = proxy_with_tier(server, upstream, traded).await;
        let swap = m.swap(holder);
        let estimate = wire_of((server, &trace), &base, async {
            let v = test_support::rpc(&proxy, "eth_estimateGas", json!([swap, at])).await;
            assert!(v.is_ok(), "{v:?}");
        })
        .await;
        // Five requests: the router, the holder and the pool (3 keys, 4
        // queries), then the pool's slots (its reserves and token: the
        // pool is an argument of the swap, so every slot of it names the
        // call, docs/security.md), then the token's balances of the pool
        // and of the holder (2 each: the ladder's least); the token's
        // account and the router's count are the tier's.
        assert!(
            estimate.base_queries <= 12,
            "the swap's first estimate: {estimate:?}"
        );
        let refresh = call_object(MULTICALL3, &m.refresh(holder));
        let refresh = wire_of(
            (server, &trace),
            &base,
            same_as_anvil(&proxy, anvil, &refresh, &at),
        )
        .await;
        let balance = wire_of((server, &trace), &base, async {
            same_as_anvil(&proxy, anvil, &balance, &at).await;
        })
        .await;
        // The swap simulated (eth_simulateV1), the first request of
        // another fresh proxy: its result is the call's, every key read
        // by PIR whatever the tier holds.
        let (proxy, trace, _cache) = proxy_with_tier(server, upstream, traded).await;
        let simulated = wire_of((server, &trace), &base, async {
            let blocks = json!([{"blockStateCalls": [{"calls": [swap]}]}, at]);
            let v = test_support::rpc(&proxy, "eth_simulateV1", blocks).await;
            let direct = anvil.rpc("eth_call", json!([swap, at])).await;
            let v = v.expect("simulated");
            assert_eq!(v[0]["calls"][0]["status"], "0x1", "{v}");
            assert_eq!(v[0]["calls"][0]["returnData"], direct, "{v}");
        })
        .await;
        // The holder's Safe read through Multicall3: every slot of it
        // names the call (the Safe is in the batch's data), so the tier
        // that holds its threshold and nonce spares no query.
        let safe = call_object(MULTICALL3, &m.safe_reads());
        let safe = wire_of(
            (server, &trace),
            &base,
            same_as_anvil(&proxy, anvil, &safe, &at),
        )
        .await;
        // Its reward debt through the lens: the pool and its reward token
        // are named nowhere in the call, and the slot names the holder
        // only through the chain `keccak(token . keccak(holder . 0) + 1)`.
        let pending = IRewardLens::pendingCall { user: holder };
        let pending = call_object(m.lens, &pending.abi_encode());
        let rewards = wire_of((server, &trace), &base, async {
            let v = same_as_anvil(&proxy, anvil, &pending, &at).await;
            assert_eq!(v, format!("{:#066x}", 777), "the holder's debt");
        })
        .await;
        seen.push((estimate, refresh, balance, simulated, safe, rewards));
    }
    assert_eq!(
        seen[0], seen[1],
        "the follower's tier, then one holding the holder's keys"
    );
    let mut alike = Vec::new();
    for who in [holder, Address::repeat_byte(0x5e)] {
        let (proxy, trace, _cache) = proxy_with_tier(&testing_server, upstream, traded).await;
        let call = call_object(
            m.proxied,
            &IFlagged::balanceOfCall { holder: who }.abi_encode(),
        );
        alike.push(
            wire_of((&testing_server, &trace), &base, async {
                same_as_anvil(&proxy, anvil, &call, &at).await;
            })
            .await,
        );
    }
    assert_eq!(
        alike[0], alike[1],
        "balanceOf of a tier key and of a fresh address"
    );

    // Answers kept: a second read sends nothing by default; with
    // `answer_kept_as_fresh` it sends what the first sent.
    for as_fresh in [false, true] {
        let cache = tempfile::tempdir().unwrap();
        let (link, trace) = traced_server(&testing_server, std::time::Duration::ZERO).await;
        let proxy = start_proxy_with(proxy::ProxyConfig {
            pir_server: link,
            upstream: Some(upstream.to_string()),
            cache_dir: cache.path().to_path_buf(),
            canaries_per_request: 0,
            answer_kept_as_fresh: as_fresh,
            ..Default::default()
        })
        .await;
        view_reaches(&proxy, traded).await;
        let read = || async {
            let v = test_support::rpc(&proxy, "eth_getBalance", json!([holder, at])).await;
            assert_eq!(
                v,
                Ok(anvil.rpc("eth_getBalance", json!([holder, at])).await)
            );
        };
        let first = wire_of((&testing_server, &trace), &base, read()).await;
        let again = wire_of((&testing_server, &trace), &base, read()).await;
        match as_fresh {
            false => assert_eq!(again.requests, 0, "kept: {first:?} then {again:?}"),
            true => assert_eq!(first, again, "kept, as fresh"),
        }
    }
}

/// A second server over a copy of `store` whose tier holds, beside the
/// follower's keys, the holder's own ([`holders_keys`]), its records
/// passed through `forge` (the operator's change) before the tier is
/// built: the server's URL, and the copy (removed when dropped).
async fn serve_tier_with_holders_keys(
    store: &std::path::Path,
    anvil: &Anvil,
    m: &Market,
    traded: u64,
    policy: &snapshotter::hot::HotPolicy,
    forge: impl FnOnce(&mut snapshotter::records::Records),
) -> (String, tempfile::TempDir) {
    let tier = (traded, policy, holders_keys(m));
    serve_tier_with(store, anvil, tier, forge).await
}

/// [`serve_tier_with_holders_keys`] with `more` keys than the follower's
/// in its tier (of the view at `traded`, built by `policy`).
async fn serve_tier_with(
    store: &std::path::Path,
    anvil: &Anvil,
    (traded, policy, more): (
        u64,
        &snapshotter::hot::HotPolicy,
        Vec<snapshotter::hot::HotKey>,
    ),
    forge: impl FnOnce(&mut snapshotter::records::Records),
) -> (String, tempfile::TempDir) {
    let copy = tempfile::tempdir().unwrap();
    let testing = copy.path().join("store");
    copy_dir(store, &testing);
    let copied = snapshotter::SnapshotStore::open(&testing).unwrap();
    let tier = copied
        .get(&format!("4244-{traded}-hot").parse().unwrap())
        .unwrap();
    let base = copied
        .get(&format!("4244-{traded}-full").parse().unwrap())
        .unwrap();
    let node = snapshotter::sources::rpc::RpcSource::connect(&anvil.url, Default::default())
        .await
        .unwrap();
    let value_bytes = base.manifest.pir.value_bytes;
    let mut keys = snapshotter::hot::chosen_keys(&node, traded, policy, value_bytes, 4)
        .await
        .unwrap();
    keys.extend(more);
    copied.remove(&tier.id).unwrap();
    let view = [base];
    let mut records = snapshotter::folded::with_view(&copied, &view, |folded| {
        Ok(snapshotter::hot::records_of(
            folded,
            &keys,
            &view[0].manifest.storage,
        ))
    })
    .unwrap();
    forge(&mut records);
    let levels =
        snapshotter::levels::Levels::new(copied, 4244, Default::default(), Default::default());
    levels
        .publish_hot_records(&view, records, policy)
        .unwrap()
        .unwrap();
    (start_server(&testing).await, copy)
}

/// A server whose operator forges its tier (digests and canaries made
/// anew by its own build, as an operator would): the holder's account
/// richer by one ether and given a code (a made-up code reference), its
/// token balance slot larger by a million, and another holder's balance
/// a wide word (past 2^184: its high part in a record of its own). A
/// fresh proxy answers the holder's balance and code, `balanceOf` of
/// both holders, the slot's `eth_getStorageAt` and a `transfer` of more
/// than the holder holds (which anvil reverts) and its estimate as anvil
/// does, never the forged values; sends the same requests, each of the
/// same shape, and downloads the same codes as through the follower's
/// honest tier (the forger learns nothing from its forgery); and says so
/// on its status and page.
async fn a_forged_tier_is_answered_by_pir(
    store: &std::path::Path,
    (honest, upstream): (&str, &str),
    anvil: &Anvil,
    m: &Market,
    traded: u64,
    policy: &snapshotter::hot::HotPolicy,
) {
    let holder = dev(HOLDER);
    let holder_slots: Vec<(Address, alloy_primitives::B256)> = holders_keys(m)
        .into_iter()
        .filter_map(|k| match k {
            // (The token balances: the Safe's words and the reward debt
            // are left as they are.)
            snapshotter::hot::HotKey::Slot(c, slot) if [m.token, m.proxied].contains(&c) => {
                Some((c, slot))
            }
            _ => None,
        })
        .collect();
    // Another holder's balance (dev account 0 is paid by every trader, so
    // the tier holds its slot): made a wide word.
    let others_slots: Vec<_> = balance_slots(dev(0))
        .iter()
        .map(|slot| protocol::storage::storage_key_of(&m.proxied, slot))
        .collect();
    // A code the holder (an account without one) is given: the proxy's.
    let proxy_code = anvil.rpc("eth_getCode", json!([m.proxied, "latest"])).await;
    let proxy_code = alloy_primitives::hex::decode(proxy_code.as_str().unwrap()).unwrap();
    let made_up_code = alloy_primitives::keccak256(proxy_code);
    let forged_slot = std::sync::Mutex::new(None);
    let widened = AtomicBool::new(false);
    let (forging, _copy) = serve_tier_with_holders_keys(store, anvil, m, traded, policy, |r| {
        for account in r.accounts.iter_mut().filter(|a| a.address == Some(holder)) {
            account.balance += U256::from(10u64.pow(18));
            account.code_hash = made_up_code;
        }
        for word in r.storage.iter_mut().filter(|w| w.value > U256::ZERO) {
            let slot = holder_slots
                .iter()
                .find(|(c, slot)| protocol::storage::storage_key_of(c, slot) == word.key);
            if let Some(slot) = slot {
                word.value += U256::from(1_000_000u64);
                *forged_slot.lock().unwrap() = Some(*slot);
            }
            if others_slots.contains(&word.key) {
                word.value += U256::from(1u8) << 200;
                widened.store(true, Ordering::Relaxed);
            }
        }
    })
    .await;
    let (contract, slot) = forged_slot
        .into_inner()
        .unwrap()
        .expect("the holder's balance slot is in the tier");
    assert_eq!(contract, m.proxied);
    assert!(widened.into_inner(), "the tier holds dev 0's balance");
    let at = format!("{traded:#x}");
    let base = format!("4244-{traded}-full");
    let held = U256::from(4_242u64);
    let over = IFlagged::transferCall {
        to: dev(0),
        amount: held + U256::from(1u8),
    };
    let mut over = call_object(m.proxied, &over.abi_encode());
    over["from"] = json!(holder);
    let mut seen = Vec::new();
    for server in [honest, forging.as_str()] {
        let (proxy, trace, _cache) = proxy_with_tier(server, upstream, traded).await;
        let wire = wire_of((server, &trace), &base, async {
            let balance = test_support::rpc(&proxy, "eth_getBalance", json!([holder, at])).await;
            assert_eq!(
                balance,
                Ok(anvil.rpc("eth_getBalance", json!([holder, at])).await)
            );
            let call = call_object(m.proxied, &IFlagged::balanceOfCall { holder }.abi_encode());
            let answer = same_as_anvil(&proxy, anvil, &call, &at).await;
            assert_eq!(answer, json!(format!("{:#066x}", held)));
            let params = json!([contract, slot, at]);
            let word = test_support::rpc(&proxy, "eth_getStorageAt", params.clone()).await;
            assert_eq!(word, Ok(anvil.rpc("eth_getStorageAt", params).await));
            let code = test_support::rpc(&proxy, "eth_getCode", json!([holder, at])).await;
            assert_eq!(code, Ok(json!("0x")), "the holder has no code");
            let other = IFlagged::balanceOfCall { holder: dev(0) };
            same_as_anvil(
                &proxy,
                anvil,
                &call_object(m.proxied, &other.abi_encode()),
                &at,
            )
            .await;
            same_response_as_anvil(&proxy, anvil, &over, &at).await;
            let estimate = test_support::rpc(&proxy, "eth_estimateGas", json!([over, at])).await;
            assert!(
                estimate.is_err(),
                "an estimate of a transfer anvil reverts: {estimate:?}"
            );
        })
        .await;
        let s = status(&proxy).await;
        seen.push(wire);
        let forged = s["forgedTiers"].as_array().cloned().unwrap_or_default();
        match server == honest {
            true => assert!(forged.is_empty(), "{s}"),
            false => {
                assert_eq!(forged, [json!(format!("4244-{traded}-hot"))], "{s}");
                let page = reqwest::get(format!("{proxy}/status.json"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                assert!(page.contains("forged by its operator"), "{page}");
            }
        }
        assert_eq!(s["privateReads"], "on", "private reads go on: {s}");
    }
    assert_eq!(seen[0], seen[1], "an honest tier, then a forged one");
}

/// Two servers whose tiers hold, beside the follower's keys, the reward
/// pool's account and its reward token's slot (both name no one: the
/// lens's call names neither); the second's operator makes that slot
/// another token. A fresh proxy under the defaults (two rounds at least:
/// the padding round audits what the call read from the tier) answers
/// the holder's `pending` through the honest tier as anvil does; through
/// the forged one it catches the forgery before the answer is released
/// and withholds it (the debt it read was another token's), then answers
/// the retry as anvil does (the slot now read as the levels hold it);
/// the server sees the same first request either way. Unpadded, the call
/// is answered with the forged value (the limit docs/security.md
/// states); and a forging server that fails the padding rounds gets an
/// error, not its value, answered.
async fn a_forged_shared_value_is_corrected_in_time(
    store: &std::path::Path,
    upstream: &str,
    anvil: &Anvil,
    m: &Market,
    (traded, policy): (u64, &snapshotter::hot::HotPolicy),
) {
    let reward_token = alloy_primitives::B256::with_last_byte(1);
    let more = || {
        vec![
            snapshotter::hot::HotKey::Account(m.reward_pool),
            snapshotter::hot::HotKey::Slot(m.reward_pool, reward_token),
        ]
    };
    let (honest, _honest_copy) =
        serve_tier_with(store, anvil, (traded, policy, more()), |_| {}).await;
    let forged_key = protocol::storage::storage_key_of(&m.reward_pool, &reward_token);
    let forged = AtomicBool::new(false);
    let (forging, _copy) = serve_tier_with(store, anvil, (traded, policy, more()), |r| {
        for word in r.storage.iter_mut().filter(|w| w.key == forged_key) {
            word.value = U256::from_be_slice(m.proxied.as_slice());
            forged.store(true, Ordering::Relaxed);
        }
    })
    .await;
    assert!(
        forged.into_inner(),
        "the tier holds the reward token's slot"
    );
    let at = format!("{traded:#x}");
    let base = format!("4244-{traded}-full");
    let pending = IRewardLens::pendingCall { user: dev(HOLDER) };
    let pending = call_object(m.lens, &pending.abi_encode());
    let debt = json!(format!("{:#066x}", 777));
    let mut seen = Vec::new();
    for server in [honest.as_str(), forging.as_str()] {
        let (link, trace) = traced_server(server, std::time::Duration::ZERO).await;
        let (proxy, _cache) = padded_proxy_with_tier(link, upstream, traded, 2).await;
        let call = || test_support::rpc(&proxy, "eth_call", json!([pending, at]));
        let mut answer = None;
        seen.push(
            wire_of((server, &trace), &base, async {
                answer = Some(call().await)
            })
            .await,
        );
        let forged = status(&proxy).await["forgedTiers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match server == honest {
            true => {
                assert_eq!(answer, Some(Ok(debt.clone())));
                assert!(forged.is_empty(), "an honest tier: {forged:?}");
            }
            false => {
                let answer = answer.unwrap();
                assert!(
                    answer.as_ref().is_err_and(|e| e.contains("forged")),
                    "a forged value's answer is withheld: {answer:?}"
                );
                assert_eq!(forged, [json!(format!("4244-{traded}-hot"))]);
                assert_eq!(call().await, Ok(debt.clone()), "the retry");
            }
        }
    }
    assert_eq!(
        seen[0], seen[1],
        "the first call, through an honest tier then a forged one"
    );

    // Unpadded (`pad_call_rounds_to = 1`: no padding round to audit in),
    // the same call is answered with the forged value, as
    // docs/security.md says; its requests are the call's real rounds.
    let (link, trace) = traced_server(&forging, std::time::Duration::ZERO).await;
    let (unpadded, _cache) = padded_proxy_with_tier(link, upstream, traded, 1).await;
    let real = traced(&trace, async {
        let answer = test_support::rpc(&unpadded, "eth_call", json!([pending, at])).await;
        assert_eq!(
            answer,
            Ok(json!(format!("{:#066x}", 0))),
            "not caught in time"
        );
    })
    .await;
    // A forging server that also fails the padding rounds that were to
    // audit the forged value: the call fails, never answered 0.
    let (gone, allowed) = going_away(&forging).await;
    let (proxy, _cache) = padded_proxy_with_tier(gone, upstream, traded, 2).await;
    allowed.store(real.len() as i64, Ordering::SeqCst);
    let answer = test_support::rpc(&proxy, "eth_call", json!([pending, at])).await;
    assert!(
        answer.as_ref().is_err_and(|e| e.contains("-32003")),
        "padding failed before its audit: {answer:?}"
    );
}

/// A server whose operator forges a key that names no one: the proxied
/// token's implementation account, richer by one ether (a `balanceOf`
/// through the proxy reads it from the tier; its balance changes no
/// answer). Audits riding in the free queries of later requests (a
/// balance: one key in a request of 2 on the ladder, one query free)
/// catch it, and the server sees what it sees through the honest tier.
async fn a_forged_shared_key_is_caught_by_audits(
    store: &std::path::Path,
    (honest, upstream): (&str, &str),
    anvil: &Anvil,
    m: &Market,
    traded: u64,
    policy: &snapshotter::hot::HotPolicy,
) {
    let at = format!("{traded:#x}");
    let eip1967 = "0x360894a13ba1a3210667c828492db98dca3e2076cc3735a920a3ca505d382bbc";
    let word = anvil
        .rpc("eth_getStorageAt", json!([m.proxied, eip1967, at]))
        .await;
    let word: alloy_primitives::B256 = serde_json::from_value(word).unwrap();
    let implementation = Address::from_word(word);
    let (forging, _copy) = serve_tier_with_holders_keys(store, anvil, m, traded, policy, |r| {
        let account = r
            .accounts
            .iter_mut()
            .find(|a| a.address == Some(implementation))
            .expect("the tier holds the implementation's account");
        account.balance += U256::from(10u64.pow(18));
    })
    .await;
    let base = format!("4244-{traded}-full");
    let holder = dev(HOLDER);
    let mut seen = Vec::new();
    for server in [honest, forging.as_str()] {
        let (proxy, trace, _cache) = proxy_with_tier(server, upstream, traded).await;
        let wire = wire_of((server, &trace), &base, async {
            let call = call_object(m.proxied, &IFlagged::balanceOfCall { holder }.abi_encode());
            same_as_anvil(&proxy, anvil, &call, &at).await;
            for i in 0..3u8 {
                let who = Address::repeat_byte(0xb0 + i);
                let params = json!([who, at]);
                let balance = test_support::rpc(&proxy, "eth_getBalance", params.clone()).await;
                assert_eq!(balance, Ok(anvil.rpc("eth_getBalance", params).await));
            }
            // Again, the implementation's account now corrected: its code
            // still the tier's (no download the honest tier spares).
            same_as_anvil(&proxy, anvil, &call, &at).await;
        })
        .await;
        let forged = status(&proxy).await["forgedTiers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        match server == honest {
            true => assert!(forged.is_empty(), "an honest tier: {forged:?}"),
            false => assert_eq!(forged, [json!(format!("4244-{traded}-hot"))]),
        }
        seen.push(wire);
    }
    assert_eq!(seen[0], seen[1], "an honest tier, then a forged one");
}

/// Copies a directory tree.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type().unwrap().is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
}

/// The moment a stalled download was given up on (its body dropped).
struct GaveUp(Arc<std::sync::Mutex<Option<std::time::Instant>>>);

impl Drop for GaveUp {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(std::time::Instant::now());
    }
}

/// A server whose tier's table stalls after its first bytes (a front that
/// sends them, then nothing): a fresh proxy's balance read, call and
/// transaction are answered while the download hangs, not after it is
/// given up on (the tier's keys are read by PIR meanwhile).
async fn a_stalled_tier_holds_up_nothing(server: &str, upstream: &str, anvil: &Anvil, m: &Market) {
    use axum::response::IntoResponse;
    type Stall = (
        String,
        reqwest::Client,
        Arc<std::sync::Mutex<Option<std::time::Instant>>>,
        Arc<AtomicBool>,
    );
    async fn front(
        axum::extract::State((honest, http, gave_up, began)): axum::extract::State<Stall>,
        method: axum::http::Method,
        uri: axum::http::Uri,
        body: axum::body::Bytes,
    ) -> axum::response::Response {
        let (status, bytes) = relay_to(&http, &honest, method, &uri, body).await;
        if !(uri.path().contains("-hot") && uri.path().ends_with("/table")) {
            return (status, bytes).into_response();
        }
        began.store(true, Ordering::SeqCst);
        let guard = GaveUp(gave_up);
        let first = bytes.slice(..bytes.len().min(64));
        let stalled = futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) })
            .chain(futures_util::stream::pending())
            .map(move |chunk| {
                let _ = &guard;
                chunk
            });
        (status, axum::body::Body::from_stream(stalled)).into_response()
    }
    use futures_util::StreamExt as _;
    let gave_up = Arc::new(std::sync::Mutex::new(None));
    let began = Arc::new(AtomicBool::new(false));
    let state: Stall = (
        server.to_string(),
        reqwest::Client::new(),
        gave_up.clone(),
        began.clone(),
    );
    let app = axum::Router::new().fallback(front).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stalling = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let cache = tempfile::tempdir().unwrap();
    let proxy = tier_proxy(&stalling, upstream, &cache, HotTierUse::Ahead).await;
    test_support::eventually("the tier's download begins", || async {
        began.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let at = format!("{:#x}", anvil.head().await);
    let who = dev(HOLDER);
    let balance = test_support::rpc(&proxy, "eth_getBalance", json!([who, at])).await;
    assert_eq!(
        balance,
        Ok(anvil.rpc("eth_getBalance", json!([who, at])).await)
    );
    let call = call_object(
        m.proxied,
        &IFlagged::balanceOfCall { holder: who }.abi_encode(),
    );
    same_as_anvil(&proxy, anvil, &call, &at).await;
    let pay = json!({"from": DEV_ACCOUNTS[0], "to": DEV_ACCOUNTS[1], "value": "0x1"});
    let sent = test_support::rpc(&proxy, "eth_sendTransaction", json!([pay])).await;
    assert!(sent.is_ok(), "{sent:?}");
    assert!(
        gave_up.lock().unwrap().is_none(),
        "answered only once the stalled download was given up on"
    );
}

/// The attester applies the tier's rule again on its own node, before it
/// checks the values: the follower's tier passes that check, one over the
/// same base whose values are all right but which also holds the holder's
/// account (a key of one sender, that the rule does not choose) is
/// refused for it. (The base here cannot be signed, so neither tier is:
/// `verify --state-root` of anvil's followed base disagrees on a
/// contract's storage root, a finding of its own.)
async fn the_attester_chooses_the_tier_again(
    store: &std::path::Path,
    anvil: &Anvil,
    traded: u64,
    policy: &snapshotter::hot::HotPolicy,
) {
    const KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let node = || snapshotter::sources::rpc::RpcSource::connect(&anvil.url, Default::default());
    let store = snapshotter::SnapshotStore::open(store).unwrap();
    let tier_id = format!("4244-{traded}-hot");
    let outcome_of_tier = |outcomes: Vec<(protocol::SnapshotId, snapshotter::attest::Outcome)>| {
        outcomes
            .into_iter()
            .find(|(id, _)| id.url_form() == tier_id)
            .map(|(_, o)| o)
            .expect("the tier attested")
    };
    let attester = snapshotter::attest::Attester::new(store.clone(), node().await.unwrap(), KEY);
    let outcomes = attester.unwrap().attest_store().await.unwrap();
    match outcome_of_tier(outcomes) {
        snapshotter::attest::Outcome::Signed => {}
        snapshotter::attest::Outcome::Refused(why) => {
            assert!(!why.contains("rule chooses"), "the follower's tier: {why}")
        }
        other => panic!("the follower's tier: {other:?}"),
    }
    let tier = store.get(&tier_id.parse().unwrap()).unwrap();
    let base = store
        .get(&format!("4244-{traded}-full").parse().unwrap())
        .unwrap();
    let value_bytes = base.manifest.pir.value_bytes;
    let mut keys =
        snapshotter::hot::chosen_keys(&node().await.unwrap(), traded, policy, value_bytes, 4)
            .await
            .unwrap();
    keys.push(snapshotter::hot::HotKey::Account(dev(HOLDER)));
    store.remove(&tier.id).unwrap();
    let levels = snapshotter::levels::Levels::new(
        store.clone(),
        4244,
        Default::default(),
        Default::default(),
    );
    let published = levels.publish_hot(&[base], &keys, policy).unwrap();
    assert_eq!(published.as_deref(), Some(tier_id.as_str()));
    let attester = snapshotter::attest::Attester::new(store.clone(), node().await.unwrap(), KEY);
    let outcomes = attester.unwrap().attest_store().await.unwrap();
    match outcome_of_tier(outcomes) {
        snapshotter::attest::Outcome::Refused(why) => {
            assert!(why.contains("not the ones its rule chooses"), "{why}")
        }
        other => panic!("a tier holding the holder's account: {other:?}"),
    }
}

/// A fresh proxy whose server will not send the tier's table (503: a
/// front that drops large downloads, say): its first call, the swap asked
/// the moment it listens, is anvil's answer, every key read by PIR (the
/// tier not held, not a lie: private reads go on).
async fn a_tier_not_had_is_read_by_pir(
    server: &str,
    upstream: &str,
    anvil: &Anvil,
    m: &Market,
    at: &str,
) {
    let refusals = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = refusals.clone();
    let tier_refused: Refuse = Arc::new(move |path: &str| {
        let tier = path.contains("-hot") && path.ends_with("/table");
        if tier {
            counted.fetch_add(1, Ordering::SeqCst);
        }
        tier
    });
    let (front, _, _) = start_relay_refusing(server, passthrough(), tier_refused).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: front,
        upstream: Some(upstream.to_string()),
        cache_dir: cache.path().to_path_buf(),
        canaries_per_request: 0,
        start_wait_secs: 10.0,
        ..Default::default()
    })
    .await;
    let call = json!([m.swap(dev(HOLDER)), at]);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_call", "params": call});
    let answer = test_support::rpc_raw(&reqwest::Client::new(), &proxy, &body.to_string()).await;
    let expected = anvil.rpc("eth_call", call).await;
    assert_eq!(answer.get("result"), Some(&expected), "{answer}");
    let s = status(&proxy).await;
    assert!(s["hot"].is_null(), "no tier held: {s}");
    assert!(
        refusals.load(Ordering::SeqCst) > 0,
        "the tier was asked for"
    );
    assert_eq!(s["privateReads"], "on", "{s}");
}

/// A PIR server that alters the tier's table (a relay in front of it flips
/// a byte of every tier download): the table does not match the catalog's
/// digest, so the proxy stops private reads, as for any level
/// (tests/tamper.rs). Until then every answer is anvil's (nothing read
/// from the altered tier), then every call of the holder's and every
/// balance is the same error.
async fn lying_tier_stops_private_reads(
    server: &str,
    upstream: &str,
    anvil: &Anvil,
    m: &Market,
    at: &str,
) {
    let flip: Rewrite = Arc::new(|path: &str, bytes: axum::body::Bytes| {
        if !(path.contains("-hot") && path.ends_with("/table")) {
            return bytes;
        }
        let mut altered = bytes.to_vec();
        let middle = altered.len() / 2;
        if let Some(b) = altered.get_mut(middle) {
            *b ^= 0x01;
        }
        altered.into()
    });
    let (lying, _) = start_relay(server, flip).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = tier_proxy(&lying, upstream, &cache, HotTierUse::Ahead).await;
    let swap = m.swap(dev(HOLDER));
    let call = json!([swap, at]);
    let expected = anvil.rpc("eth_call", call.clone()).await;
    test_support::eventually("a tampered tier stops private reads", || async {
        let answer = test_support::rpc_raw(
            &reqwest::Client::new(),
            &proxy,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "eth_call", "params": call.clone()})
                .to_string(),
        )
        .await;
        if let Some(result) = answer.get("result") {
            assert_eq!(result, &expected, "an answer before the tier is read");
        }
        let reads = status(&proxy).await["privateReads"].clone();
        reads.get("stopped").map(|_| ())
    })
    .await;
    assert!(
        status(&proxy).await["hot"].is_null(),
        "the tier is not read"
    );
    let trader = format!("{:#x}", traders()[1]);
    for (method, params) in [
        ("eth_call", json!([swap, at])),
        ("eth_getBalance", json!([trader, at])),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
        let answer =
            test_support::rpc_raw(&reqwest::Client::new(), &proxy, &body.to_string()).await;
        assert_eq!(answer["error"]["code"], -32004, "{method}: {answer}");
    }
}

/// A proxy holding the tier, whose server stops answering queries: a
/// quote of the pool (its reserves are the tier's at the base, changed by
/// the delta above it) is an error, never the tier's reserves, and is
/// right again once the server answers.
async fn refused_queries_never_answer_the_tiers_old_values(
    server: &str,
    upstream: &str,
    anvil: &Anvil,
    m: &Market,
    traded: u64,
) {
    let refusing = Arc::new(AtomicBool::new(false));
    let queries_refused = {
        let refusing = refusing.clone();
        Arc::new(move |path: &str| path == "/v1/query" && refusing.load(Ordering::SeqCst))
    };
    let (front, _, _) = start_relay_refusing(server, passthrough(), queries_refused).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = tier_proxy(&front, upstream, &cache, HotTierUse::Ahead).await;
    let newer = anvil.head().await;
    test_support::eventually("a fresh proxy reads the tier under a delta", || async {
        let s = status(&proxy).await;
        (s["viewBlock"].as_u64()? >= newer && !s["hot"].is_null()).then_some(())
    })
    .await;
    let amount = U256::from(10u64.pow(17));
    let quote = IRouter::quoteCall {
        pool: m.pool,
        amountIn: amount,
    }
    .abi_encode();
    let quote = call_object(m.router, &quote);
    let at = format!("{newer:#x}");
    let now = anvil.rpc("eth_call", json!([quote, at])).await;
    let then = anvil
        .rpc("eth_call", json!([quote, format!("{traded:#x}")]))
        .await;
    assert_ne!(now, then, "the delta changed the pool's reserves");
    refusing.store(true, Ordering::SeqCst);
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "eth_call", "params": [quote, at]});
    let answer = test_support::rpc_raw(&reqwest::Client::new(), &proxy, &body.to_string()).await;
    assert!(answer["error"].is_object(), "queries refused: {answer}");
    // The same quote simulated (every key by PIR, none from the tier): an
    // error too, and right once the server answers.
    let blocks = json!([{"calls": [quote]}]);
    let simulated = json!({"jsonrpc": "2.0", "id": 4, "method": "eth_simulateV1",
        "params": [{"blockStateCalls": blocks}, at]});
    let answer =
        test_support::rpc_raw(&reqwest::Client::new(), &proxy, &simulated.to_string()).await;
    assert!(answer["error"].is_object(), "queries refused: {answer}");
    refusing.store(false, Ordering::SeqCst);
    test_support::eventually("the quote once the server answers", || async {
        let answer =
            test_support::rpc_raw(&reqwest::Client::new(), &proxy, &body.to_string()).await;
        let result = answer.get("result")?;
        assert_eq!(result, &now, "the quote at {at}");
        Some(())
    })
    .await;
    let answer =
        test_support::rpc_raw(&reqwest::Client::new(), &proxy, &simulated.to_string()).await;
    assert_eq!(
        answer["result"][0]["calls"][0]["returnData"], now,
        "the simulated quote at {at}: {answer}"
    );
}

//! The traffic shape the PIR server sees: with padding P every query batch
//! holds exactly P queries, whatever the wallet asks; cover lookups arrive
//! at the configured rate while the wallet is idle.

use crate::common;

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use common::*;
use pir_core::wire::decode_responses;
use serde_json::{json, Value};
use test_support::rpc_raw;

alloy_sol_types::sol! {
    /// What the traffic tests call of the pool market's token and router.
    interface IToken {
        function balanceOf(address holder) returns (uint256);
        function transfer(address to, uint256 amount) returns (bool);
        function allowance(address holder, address spender) returns (uint256);
    }
    interface IQuote {
        function quote(address pool, uint256 amountIn) returns (uint256);
    }
}

/// A relay that records the size of every query batch the server answers.
fn batch_sizes() -> (Rewrite, Arc<Mutex<Vec<usize>>>) {
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = sizes.clone();
    let rewrite: Rewrite = Arc::new(move |path: &str, b: Bytes| {
        if path.ends_with("/query") {
            // Each snapshot's batch in the multi-snapshot response.
            let parts = protocol::multi::decode_response(&b).unwrap_or_default();
            let mut seen = seen.lock().unwrap();
            for part in parts {
                seen.push(decode_responses(part).map(|r| r.len()).unwrap_or(0));
            }
        }
        b
    });
    (rewrite, sizes)
}

/// A proxy with `config` behind a batch-size recorder, its snapshots
/// loaded and the recorder emptied.
async fn counted_proxy(
    server: &str,
    cache: &std::path::Path,
    config: proxy::ProxyConfig,
) -> (String, Arc<Mutex<Vec<usize>>>) {
    let (rewrite, sizes) = batch_sizes();
    let (link, _) = start_relay(server, rewrite).await;
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: link,
        cache_dir: cache.to_path_buf(),
        ..config
    })
    .await;
    view_reaches(&proxy, 0).await;
    sizes.lock().unwrap().clear();
    (proxy, sizes)
}

fn addresses(n: usize) -> Vec<String> {
    genesis_balances()
        .into_iter()
        .take(n)
        .map(|(a, _)| a)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn padded_batches_and_cover_lookups() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let http = reqwest::Client::new();

    // Padding to 3: single calls, a JSON-RPC batch of 5 and of 2.
    let cache = tempfile::tempdir().unwrap();
    let padded = proxy::ProxyConfig {
        pad_batches_to: 3,
        ..Default::default()
    };
    let (proxy, sizes) = counted_proxy(&server, cache.path(), padded).await;
    let who = addresses(5);
    for a in &who[..2] {
        let v = test_support::rpc(&proxy, "eth_getBalance", json!([a, "latest"])).await;
        assert!(v.is_ok(), "{v:?}");
    }
    for n in [5, 2] {
        let calls: Vec<Value> = who[..n]
            .iter()
            .enumerate()
            .map(|(i, a)| json!({"jsonrpc": "2.0", "id": i, "method": "eth_getBalance", "params": [a, "0x0"]}))
            .collect();
        let answers = rpc_raw(&http, &proxy, &Value::Array(calls).to_string()).await;
        let answers = answers.as_array().unwrap();
        assert_eq!(answers.len(), n);
        assert!(
            answers.iter().all(|a| a.get("result").is_some()),
            "{answers:?}"
        );
    }
    let seen = sizes.lock().unwrap().clone();
    assert!(!seen.is_empty());
    assert!(seen.iter().all(|&n| n == 3), "batch sizes {seen:?}");

    // Cover lookups at 4 per second while the wallet is idle: they come
    // by themselves, each the size of a real lookup of one address (its
    // query and the canaries; a count over a fixed time would depend on
    // how loaded the machine is).
    let cache = tempfile::tempdir().unwrap();
    let covered = proxy::ProxyConfig {
        cover_lookups_per_hour: 4.0 * 3600.0,
        ..Default::default()
    };
    let (_idle_proxy, sizes) = counted_proxy(&server, cache.path(), covered).await;
    let four = || async { (sizes.lock().unwrap().len() >= 4).then_some(()) };
    test_support::eventually("4 cover lookups from an idle proxy", four).await;
    let one_lookup = 1 + proxy::ProxyConfig::default().canaries_per_request;
    assert!(sizes.lock().unwrap().iter().all(|&n| n == one_lookup));
}

/// Each query request the server answered: its query count per snapshot,
/// in the order they came.
/// A fresh proxy of `stack`'s server through a traced link (answers
/// `slower` later), set as `config` says otherwise, once it reads the view
/// of `block`: the proxy, the trace and its cache.
async fn traced_proxy(
    stack: &Stack,
    slower: std::time::Duration,
    block: u64,
    config: proxy::ProxyConfig,
) -> (String, Trace, tempfile::TempDir) {
    let (link, trace) = traced_server(&stack.server, slower).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: link,
        upstream: Some(stack.upstream.clone()),
        cache_dir: cache.path().to_path_buf(),
        ..config
    })
    .await;
    view_reaches(&proxy, block).await;
    (proxy, trace, cache)
}

/// `eth_call` through `proxy` as a page through a wallet extension sends
/// it (its origin): the answer, and how long it took.
async fn page_call(proxy: &str, call: &Value, at: &str) -> (Value, std::time::Duration) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_call", "params": [call, at]});
    let started = std::time::Instant::now();
    let answer: Value = reqwest::Client::new()
        .post(proxy)
        .header(
            "origin",
            "chrome-extension://nkbihfbeogaeaoehlefnkodbefgpgknn",
        )
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (answer, started.elapsed())
}

/// A chain (`chain`'s id, Multicall3 at its address) followed with the
/// whole state (every contract's storage) by a stack under `dir`, and a
/// token, its pool and a router deployed on it.
async fn whole_state_market(
    dir: &std::path::Path,
    chain: &str,
) -> (test_support::Anvil, Stack, PoolMarket) {
    let (anvil, genesis) = chain_with_multicall3(dir, chain).await;
    let store = dir.join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis, 0, 4, 256);
    config.source.storage = snapshotter::follow::StorageScope::All;
    let stack = Stack::start(config, &anvil, None).await;
    let market = deploy_pool_market(&anvil).await;
    (anvil, stack, market)
}

/// Under the defaults, with the whole state held: a wallet reads its
/// token balance (`balanceOf(W)`), then a page reads it again and reads
/// other holders' (fresh ones). The server sees the same requests with
/// the same query counts for the wallet's first read and for another
/// holder's read after it (a repeat of a holder is not asked sooner: no
/// key naming the last holder is carried into the next call's first
/// round); the page's repeat sends nothing and is answered no faster than
/// the fresh reads' tenth percentile (kept answers wait as requests do).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_first_read_and_a_repeat_look_alike_to_the_server_and_the_page() {
    use alloy_primitives::{Address, U256};
    use alloy_sol_types::SolCall;
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, stack, market) = whole_state_market(dir.path(), "4247").await;
    let wallet = dev(3);
    let pay = IToken::transferCall {
        to: wallet,
        amount: U256::from(5_000u64),
    };
    send(&anvil, 0, market.token, pay.abi_encode()).await;
    let block = view_reaches(&stack.proxy, anvil.head().await).await;
    let at = format!("{block:#x}");
    let slower = std::time::Duration::from_millis(150);
    let (proxy, trace, _cache) = traced_proxy(&stack, slower, block, Default::default()).await;
    let balance_of =
        |holder: Address| call_object(market.token, &IToken::balanceOfCall { holder }.abi_encode());
    let first = traced(
        &trace,
        same_as_anvil(&proxy, &anvil, &balance_of(wallet), &at),
    )
    .await;
    let other = Address::repeat_byte(0x5e);
    let another = traced(
        &trace,
        same_as_anvil(&proxy, &anvil, &balance_of(other), &at),
    )
    .await;
    assert!(!first.is_empty(), "the first read asks the server");
    assert_eq!(
        first, another,
        "the wallet's first read, then another holder's"
    );

    // The page: the wallet's balance again (kept), other holders' fresh.
    let mut kept = Vec::new();
    let mut fresh = Vec::new();
    for i in 0..20u8 {
        let (answer, took) = page_call(&proxy, &balance_of(wallet), &at).await;
        assert_eq!(
            answer["result"],
            json!(format!("{:#066x}", 5_000)),
            "{answer}"
        );
        kept.push(took);
        let holder = Address::with_last_byte(0x80 + i);
        let (answer, took) = page_call(&proxy, &balance_of(holder), &at).await;
        assert_eq!(answer["result"], json!(format!("{:#066x}", 0)), "{answer}");
        fresh.push(took);
    }
    let asked = traced(&trace, page_call(&proxy, &balance_of(wallet), &at)).await;
    assert!(asked.is_empty(), "a kept answer asks nothing: {asked:?}");
    kept.sort_unstable();
    fresh.sort_unstable();
    let (kept_median, fresh_tenth) = (kept[kept.len() / 2], fresh[fresh.len() / 10]);
    assert!(
        kept_median >= fresh_tenth,
        "kept answers in {kept:?}, fresh ones in {fresh:?}"
    );
    stack.follower.stop().await;
}

/// Under the defaults, with the whole state held: the calls a wallet
/// makes most (a token balance, an allowance, a swap's quote, a
/// Multicall3 refresh of a balance and an allowance with the ETH balance,
/// the ETH balance alone, and a direct `eth_getBalance`), each its first
/// read by a fresh holder, send the same number of requests
/// (`pad_call_rounds_to`, 2: a call or a read that settles in one round
/// sends a padding round), so that the server cannot tell which of them
/// a wallet made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_balance_an_allowance_a_quote_and_a_refresh_share_one_schedule() {
    use alloy_primitives::{Address, U256};
    use alloy_sol_types::SolCall;
    use protocol::tokens::{IMulticall3, MULTICALL3};
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, stack, market) = whole_state_market(dir.path(), "4248").await;
    let block = view_reaches(&stack.proxy, anvil.head().await).await;
    let at = format!("{block:#x}");
    let no_delay = std::time::Duration::ZERO;
    let (proxy, trace, _cache) = traced_proxy(&stack, no_delay, block, Default::default()).await;
    let token = market.token;
    let holder = |i: u8| Address::repeat_byte(0x40 + i);
    let refresh = |who: Address| {
        let calls = [
            (token, IToken::balanceOfCall { holder: who }.abi_encode()),
            (
                token,
                IToken::allowanceCall {
                    holder: who,
                    spender: market.router,
                }
                .abi_encode(),
            ),
            (
                MULTICALL3,
                IMulticall3::getEthBalanceCall { addr: who }.abi_encode(),
            ),
        ];
        call_object(MULTICALL3, &aggregate3(&calls, true))
    };
    let amount = U256::from(10u64).pow(U256::from(16u8));
    let calls = [
        (
            "balanceOf",
            call_object(
                token,
                &IToken::balanceOfCall { holder: holder(1) }.abi_encode(),
            ),
        ),
        (
            "allowance",
            call_object(
                token,
                &IToken::allowanceCall {
                    holder: holder(2),
                    spender: market.router,
                }
                .abi_encode(),
            ),
        ),
        (
            "quote",
            call_object(
                market.router,
                &IQuote::quoteCall {
                    pool: market.pool,
                    amountIn: amount,
                }
                .abi_encode(),
            ),
        ),
        ("refresh", refresh(holder(3))),
        (
            "ETH balance",
            call_object(
                MULTICALL3,
                &IMulticall3::getEthBalanceCall { addr: holder(4) }.abi_encode(),
            ),
        ),
    ];
    let mut schedules = Vec::new();
    for (name, call) in &calls {
        let wire = traced(&trace, same_as_anvil(&proxy, &anvil, call, &at)).await;
        eprintln!("{name}: {wire:?}");
        schedules.push((name, wire));
    }
    // Measured with no padding (`pad_call_rounds_to = 1`): [[4], [2]],
    // [[8], [2]], [[4], [4]], [[4], [4]], and the ETH balance alone
    // [[4]]: the default of 2 is what the first four take.
    // A direct read (one round) is padded as a call is.
    let who = holder(5);
    let direct = traced(&trace, async {
        let params = json!([who, at]);
        let balance = test_support::rpc(&proxy, "eth_getBalance", params.clone()).await;
        assert_eq!(balance, Ok(anvil.rpc("eth_getBalance", params).await));
    })
    .await;
    eprintln!("eth_getBalance: {direct:?}");
    schedules.push((&"eth_getBalance", direct));
    let rounds: Vec<usize> = schedules.iter().map(|(_, w)| w.len()).collect();
    let default = proxy::ProxyConfig::default().pad_call_rounds_to;
    assert!(rounds.iter().all(|&r| r == default), "{schedules:?}");

    // Cover requests replay the wallet's: a proxy with cover on reads an
    // allowance, then its cover requests come in that call's rounds with
    // its query counts, one after another (before it, one round of the
    // ladder's least count).
    let cover = proxy::ProxyConfig {
        cover_lookups_per_hour: 20.0 * 3600.0,
        ..Default::default()
    };
    let (covered, cover_trace, _cover_cache) = traced_proxy(&stack, no_delay, block, cover).await;
    let allowance = IToken::allowanceCall {
        holder: holder(6),
        spender: market.router,
    };
    let allowance = call_object(token, &allowance.abi_encode());
    same_as_anvil(&covered, &anvil, &allowance, &at).await;
    let after = cover_trace.lock().unwrap().len();
    let replayed = test_support::eventually("six cover requests after the call", || async {
        let seen = cover_trace.lock().unwrap()[after..].to_vec();
        (seen.len() >= 6).then_some(seen)
    })
    .await;
    let call = &schedules[1].1;
    eprintln!("the allowance {call:?}, cover after it {replayed:?}");
    // (A cover request in flight when the call ended may be the old one.)
    let start = replayed
        .iter()
        .position(|r| *r == call[0])
        .expect("a replay");
    assert!(start <= 1, "{replayed:?}");
    for (i, request) in replayed[start..].iter().enumerate() {
        assert_eq!(*request, call[i % call.len()], "{replayed:?}");
    }
    stack.follower.stop().await;
}

/// A proxy of `server` (a genesis one) under the defaults through a
/// traced link, once it reads the genesis: the proxy, the trace and its
/// cache.
async fn traced_default_proxy(server: &str) -> (String, Trace, tempfile::TempDir) {
    let (link, trace) = traced_server(server, std::time::Duration::ZERO).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: link,
        cache_dir: cache.path().to_path_buf(),
        ..Default::default()
    })
    .await;
    view_reaches(&proxy, 0).await;
    (proxy, trace, cache)
}

/// The PIR server going away during a read's padding round (under the
/// defaults a balance read sends its round, then one padding round): the
/// answer its own round verified is given, at once (the failed padding
/// round is not waited out nor retried); the reads after fail with the
/// server's error (-32003: never an answer from anywhere else) while it is
/// away, and are answered again once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_server_going_away_during_padding_rounds() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let (link, allowed) = going_away(&server).await;
    let (proxy, trace, _cache) = traced_default_proxy(&link).await;
    let accounts = genesis_balances();
    let balance = |i: usize| {
        let (address, _) = &accounts[i];
        test_support::rpc(&proxy, "eth_getBalance", json!([address, "0x0"]))
    };
    // Up: its round and a padding round.
    let shapes = traced(&trace, async {
        assert_eq!(balance(0).await, Ok(json!(accounts[0].1)))
    })
    .await;
    assert_eq!(shapes.len(), 2, "a read and its padding round: {shapes:?}");
    // Away after the read's own round.
    allowed.store(1, Ordering::SeqCst);
    let started = std::time::Instant::now();
    assert_eq!(
        balance(1).await,
        Ok(json!(accounts[1].1)),
        "its own round verified it"
    );
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(5),
        "answered in {took:?}"
    );
    for i in 2..4 {
        let error = balance(i).await.expect_err("the server is away");
        assert!(error.contains("-32003"), "{error}");
    }
    // Back.
    allowed.store(i64::MAX, Ordering::SeqCst);
    test_support::eventually("a read is answered again", || async {
        (balance(4).await == Ok(json!(accounts[4].1))).then_some(())
    })
    .await;
}

/// After a thousand calls the wire is the first call's: a thousand
/// `eth_getBalance` reads of distinct genesis accounts through one proxy
/// under the defaults, each answered as the genesis has it; the last
/// one's requests, each of the same shape, are the first one's (nothing
/// the proxy learned or kept is asked again or piles up into them).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_a_thousand_calls_the_wire_is_the_firsts() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let (proxy, trace, _cache) = traced_default_proxy(&server).await;
    let accounts = &genesis_balances();
    let proxy = &proxy;
    let read = |i: usize| async move {
        let (address, wei) = &accounts[i];
        let v = test_support::rpc(proxy, "eth_getBalance", json!([address, "0x0"])).await;
        assert_eq!(v, Ok(json!(wei)), "{address}");
    };
    let first = traced(&trace, read(0)).await;
    for i in 1..999 {
        read(i).await;
    }
    let last = traced(&trace, read(999)).await;
    assert_eq!(first, last, "the first call, then the thousandth");
}

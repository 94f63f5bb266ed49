//! The follower on a moving chain, end to end: anvil started from a genesis
//! file the test writes (`--init`, with accounts no transaction touches)
//! and a block every second; the follower (`ethpir-snapshot run`'s
//! library) builds the base and a delta per block, merging as it goes; a
//! PIR server and a proxy on loopback. While transfers to fresh addresses,
//! internal transfers through a contract and a contract creation happen,
//! 32 clients look up concurrently: every answer equals anvil's at the
//! block `ethpir_status` reports, `latest` answers equal anvil's at a block
//! between the views seen before and after, and none fails. Once caught
//! up, `latest` is at most one block behind the head; retired levels leave
//! the server's catalog and the proxy's views without a restart.

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use common::*;
use serde_json::json;
use test_support::{
    checking_client as client, forward_to, idle_genesis_accounts, proxy_status as status, quantity,
    write_genesis, Anvil, ALL_DEV_ACCOUNTS, DEV_ACCOUNTS, FORWARDER_INIT_CODE,
};

const CLIENTS: usize = 32;

fn fresh(byte: u8) -> String {
    format!("0x{}", format!("{byte:02x}").repeat(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_follower_keeps_views_complete_and_fresh_while_clients_read() {
    let dir = tempfile::tempdir().unwrap();
    let genesis = dir.path().join("genesis.json");
    write_genesis(&genesis);
    let anvil = Anvil::start_with(&[
        "--init",
        genesis.to_str().unwrap(),
        "--chain-id",
        "4242",
        "--block-time",
        "1",
    ])
    .await;
    let store = dir.path().join("store");
    // One confirmation: anvil answers for its head block from its live
    // state, which it is already changing while it mines the next block
    // (a rare read of the head's state then sees the next block's
    // transactions). Reth and geth serve a mined block's state as is.
    let follower = Follower::start(follow_config(&store, &anvil.url, &genesis, 1, 4, 6));
    let server = start_server(&store).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&server, Some(anvil.url.clone()), cache.path()).await;
    let http = reqwest::Client::new();
    view_reaches(&proxy, 0).await;
    assert_eq!(status(&proxy).await["chainId"], 4242);

    // Who the clients read: idle genesis accounts, the dev accounts, the
    // fee recipient, never-seen addresses; then whatever the chain creates.
    let mut who: Vec<String> = idle_genesis_accounts();
    who.extend(ALL_DEV_ACCOUNTS.iter().map(|a| a.to_string()));
    who.push(fresh(0x00));
    who.extend([fresh(0xbe), fresh(0xef)]);
    let addresses = Arc::new(RwLock::new(who));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            tokio::spawn(client(
                i,
                proxy.clone(),
                anvil.url.clone(),
                addresses.clone(),
                stop.clone(),
                progress.clone(),
            ))
        })
        .collect();

    // The chain moves: a contract, transfers to fresh addresses, and
    // transfers through the contract (internal, seen only in traces).
    let receipt = anvil
        .send(json!({"from": DEV_ACCOUNTS[0], "data": FORWARDER_INIT_CODE}))
        .await;
    let forwarder = receipt["contractAddress"].as_str().unwrap().to_string();
    addresses.write().unwrap().push(forwarder.clone());
    for k in 0..6u8 {
        let to = fresh(0x30 + k);
        anvil
            .send(json!({"from": DEV_ACCOUNTS[1], "to": to, "value": format!("{:#x}", 0x1000 + k as u64)}))
            .await;
        let inner = fresh(0x50 + k);
        let r = anvil
            .send(json!({"from": DEV_ACCOUNTS[2], "to": forwarder, "value": "0x777", "data": forward_to(&inner)}))
            .await;
        assert_eq!(quantity(&r["status"]), 1, "forwarding failed");
        addresses.write().unwrap().extend([to, inner]);
    }
    let head = anvil.head().await;
    assert_eq!(anvil.balance(&fresh(0x55), head).await, "0x777");
    // Every client goes on reading until the view holds the last change
    // (one confirmation behind the head) and then for five more lookups
    // each on average.
    let caught_up = || async {
        let s = status(&proxy).await;
        (s["viewBlock"].as_u64()? + 1 >= head).then_some(())
    };
    test_support::eventually("the proxy's view reaches the head", caught_up).await;
    let from = progress.load(Ordering::SeqCst);
    let more = || async { (progress.load(Ordering::SeqCst) >= from + CLIENTS * 5).then_some(()) };
    test_support::eventually("the clients read the newest view", more).await;
    stop.store(true, Ordering::SeqCst);
    let mut lookups = 0;
    for c in clients {
        lookups += c
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("a client failed: {e}"));
    }
    assert!(lookups >= CLIENTS * 5, "only {lookups} lookups");

    // Caught up: `latest` is at most one block behind the head (the one
    // confirmation above).
    let lag = || async {
        let s = status(&proxy).await;
        let lag = s["headBlock"].as_u64().unwrap() - s["viewBlock"].as_u64().unwrap();
        (lag <= 1).then_some(())
    };
    test_support::eventually("latest at most one block behind the head", lag).await;
    // The base is read by PIR, the small deltas locally: downloaded whole,
    // or (merges) built from the deltas the proxy held.
    let s = status(&proxy).await;
    let levels = s["levels"].as_array().unwrap();
    assert_eq!(levels.last().unwrap()["kind"], "full", "{s}");
    assert_eq!(levels.last().unwrap()["read"], "pir", "{s}");
    let deltas = &levels[..levels.len() - 1];
    assert!(
        deltas
            .iter()
            .all(|l| l["read"] == "whole" || l["read"] == "merged"),
        "{s}"
    );

    // Merges happened, and what retention removed left the server's
    // catalog and the proxy's views without a restart.
    let listed = || -> BTreeSet<String> {
        snapshotter::SnapshotStore::open(&store)
            .unwrap()
            .list()
            .unwrap()
            .iter()
            .map(|s| s.id.url_form())
            .collect()
    };
    let catalog = |http: reqwest::Client, server: String| async move {
        let c: protocol::api::Catalog = http
            .get(format!("{server}/v1/snapshots"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        c
    };
    let served: Arc<Mutex<BTreeSet<String>>> = Default::default();
    let same = || async {
        let c = catalog(http.clone(), server.clone()).await;
        *served.lock().unwrap() = c.snapshots.iter().map(|e| e.id.url_form()).collect();
        (*served.lock().unwrap() == listed()).then_some(())
    };
    let same = test_support::poll(test_support::PATIENCE, same)
        .await
        .is_some();
    let served = served.lock().unwrap().clone();
    assert!(same, "server {served:?} vs store {:?}", listed());
    assert!(
        served.iter().any(|id| {
            let id: protocol::SnapshotId = id.parse().unwrap();
            id.from.is_some_and(|from| id.block - from > 1)
        }),
        "no merged delta in {served:?}"
    );
    // Every snapshot left is recent or serves a view of the last
    // keep_blocks (6) blocks, give or take the blocks mined meanwhile.
    let newest = anvil.head().await;
    let c = catalog(http.clone(), server.clone()).await;
    let views = protocol::view::views(&c.snapshots);
    for e in &c.snapshots {
        let recent = |b: u64| b + 9 >= newest;
        assert!(
            recent(e.manifest.block_number)
                || views
                    .iter()
                    .any(|v| recent(v.block) && v.snapshots.contains(&e.id)),
            "{} is kept for no recent view (head {newest}): {views:?}",
            e.id
        );
    }
    // The proxy forgot the views of retired snapshots.
    let oldest_served = views.iter().map(|v| v.block).min().unwrap();
    let s = status(&proxy).await;
    let oldest_known = s["viewBlocks"][0].as_u64().unwrap();
    assert!(oldest_known >= oldest_served, "{s} vs {views:?}");

    follower.stop().await;
}

/// A node front that, once armed, replaces the newest block (a reorg) the
/// moment the follower next asks for the head: after the step's check of
/// its levels, before it reads the delta.
#[derive(Clone)]
struct ReorgingFront {
    node: String,
    http: reqwest::Client,
    /// The `evm_snapshot` to go back to, taken when armed.
    armed: Arc<Mutex<Option<serde_json::Value>>>,
    /// The payments of the new fork, from dev account 2, and the head
    /// they make.
    fork: Vec<(String, u64)>,
    fork_head: u64,
}

async fn reorg_at_head_read(
    axum::extract::State(front): axum::extract::State<ReorgingFront>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let asks_head = std::str::from_utf8(&body).is_ok_and(|b| b.contains("eth_blockNumber"));
    let armed = match asks_head {
        true => front.armed.lock().unwrap().take(),
        false => None,
    };
    if let Some(snapshot) = armed {
        let reverted = test_support::rpc(&front.node, "evm_revert", json!([snapshot])).await;
        assert_eq!(reverted, Ok(json!(true)));
        for (to, value) in &front.fork {
            let tx = json!({"from": DEV_ACCOUNTS[2], "to": to, "value": format!("{value:#x}")});
            test_support::rpc(&front.node, "eth_sendTransaction", json!([tx]))
                .await
                .unwrap();
        }
        // Announced as the head before this read is answered (anvil's
        // number can lag its blocks).
        let announced = || async {
            let n = test_support::rpc(&front.node, "eth_blockNumber", json!([])).await;
            n.ok().filter(|n| quantity(n) >= front.fork_head)
        };
        test_support::eventually("the new fork's head", announced).await;
    }
    let resp = front
        .http
        .post(&front.node)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    (resp.status(), resp.bytes().await.unwrap()).into_response()
}

/// A reorg that lands inside a follower's step, after its check of the
/// levels and before it reads the next delta: the blocks read then stand
/// on another block than the newest level, so the delta is not published
/// on that orphaned level (its parent hash is not the level's), and the
/// next step removes the orphan and rebuilds. No view mixes the forks:
/// the orphaned payment reads as the node has it (never made), the new
/// fork's as made. (Without the parent-hash check the new fork's delta
/// stood on the orphan, and the newest level's hash, on the chain, kept
/// the orphan below it forever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reorg_inside_a_step_leaves_no_mixed_fork() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let genesis = dir.path().join("genesis.json");
    write_genesis(&genesis);
    let anvil = Anvil::start_from_genesis(&genesis).await;
    let (orphaned, kept) = (fresh(0x91), fresh(0x92));
    let armed = Arc::new(Mutex::new(None));
    let front = ReorgingFront {
        node: anvil.url.clone(),
        http: reqwest::Client::new(),
        armed: armed.clone(),
        fork: vec![(kept.clone(), 5), (kept.clone(), 6)],
        fork_head: 2,
    };
    let app = axum::Router::new()
        .fallback(reorg_at_head_read)
        .with_state(front);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let store = dir.path().join("store");
    let config = follow_config(&store, &node, &genesis, 0, 4, 256);
    let mut follower = snapshotter::follow::Follower::new(config).unwrap();
    follower.step().await.unwrap();
    let snapshot = anvil.rpc("evm_snapshot", json!([])).await;
    let pay = json!({"from": DEV_ACCOUNTS[1], "to": orphaned, "value": "0x3e8"});
    anvil.send(pay).await;
    follower.step().await.unwrap();
    // The next step's head read replaces block 1 with two others.
    *armed.lock().unwrap() = Some(snapshot);
    // That step reads blocks of the new fork on top of the orphaned level:
    // refused, nothing published.
    let refused = follower.step().await;
    let reorged = |e: &snapshotter::follow::FollowError| e.to_string().contains("a reorg");
    assert!(matches!(&refused, Err(e) if reorged(e)), "{refused:?}");
    let mut settled = false;
    for _ in 0..10 {
        let outcome = follower.step().await;
        if matches!(
            outcome,
            Ok(snapshotter::follow::StepOutcome::UpToDate { block: 2 })
        ) {
            settled = true;
            break;
        }
    }
    assert!(settled, "the follower settles at block 2");
    assert!(armed.lock().unwrap().is_none(), "the reorg happened");
    let head = anvil.head().await;
    assert_eq!(head, 2);

    let server = start_server(&store).await;
    let proxy = start_proxy(&server, None, &dir.path().join("cache")).await;
    view_reaches(&proxy, head).await;
    for who in [&orphaned, &kept] {
        let at = format!("{head:#x}");
        let private = test_support::rpc(&proxy, "eth_getBalance", json!([who, at])).await;
        let node = anvil.rpc("eth_getBalance", json!([who, at])).await;
        assert_eq!(private.unwrap(), node, "{who} at {head}");
    }
    anvil.stop().await;
}

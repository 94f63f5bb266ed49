//! Pushed, not polled: a block reaches a proxy's view as each hop learns
//! of it, with every poll a minute apart. The follower subscribes to
//! anvil's new heads over `ws://` (`poll_ms` 60 s), the server watches its
//! store (`rescan_secs` 60 s), and the proxy holds a wait for the next
//! catalog (`refresh_secs` 60 s). The timings are a benchmark's
//! (docs/benchmarks.md); this test checks that the push path is taken: a
//! block seen within 30 s cannot have come by a 60-s poll.

use crate::common;

use common::*;
use serde_json::json;
use test_support::{write_genesis, Anvil, DEV_ACCOUNTS};

/// A PIR server over `store` rescanning it every `rescan_secs`.
async fn server_rescanning_every(store: &std::path::Path, rescan_secs: f64) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = server::ServerConfig {
        store: store.to_path_buf(),
        listen: addr,
        rescan_secs,
        ..Default::default()
    };
    tokio::spawn(server::serve_on(listener, config, std::future::pending()));
    format!("http://{addr}")
}

/// A proxy of `server` looking at its catalog every `refresh_secs`.
async fn proxy_refreshing_every(
    server: &str,
    cache: &std::path::Path,
    refresh_secs: f64,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = proxy::ProxyConfig {
        pir_server: server.to_string(),
        cache_dir: cache.to_path_buf(),
        listen: addr,
        refresh_secs,
        request_timeout_secs: 10,
        ..Default::default()
    };
    tokio::spawn(proxy::serve_on(listener, config, std::future::pending()));
    format!("http://{addr}")
}

/// Polls until the proxy's view is at `block`, within `limit`.
async fn view_within(proxy: &str, block: u64, limit: std::time::Duration) -> bool {
    let reached = || async {
        test_support::proxy_status(proxy).await["viewBlock"]
            .as_u64()
            .filter(|b| *b >= block)
    };
    test_support::poll(limit, reached).await.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_block_reaches_the_proxy_with_every_poll_a_minute_apart() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let genesis = dir.path().join("genesis.json");
    write_genesis(&genesis);
    let anvil = Anvil::start_from_genesis(&genesis).await;
    let store = dir.path().join("store");
    let mut config = follow_config(&store, &anvil.url, &genesis, 0, 4, 64);
    config.follow.poll_ms = 60_000;
    config.follow.ws_url = Some(anvil.url.replacen("http://", "ws://", 1));
    let follower = Follower::start(config);
    let server = server_rescanning_every(&store, 60.0).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = proxy_refreshing_every(&server, cache.path(), 60.0).await;
    // The base, and a first block, without a deadline: the subscription
    // to anvil's heads may open after the first head (then a 60-s poll
    // brings it). From then on every hop is ready.
    view_reaches(&proxy, 0).await;
    let warm = json!({"from": DEV_ACCOUNTS[1], "to": DEV_ACCOUNTS[2], "value": "0x9"});
    anvil.send(warm).await;
    view_reaches(&proxy, anvil.head().await).await;
    let limit = std::time::Duration::from_secs(30);
    for i in 0..3u64 {
        let tx = json!({"from": DEV_ACCOUNTS[1], "to": DEV_ACCOUNTS[2], "value": format!("{:#x}", i + 1)});
        anvil.send(tx).await;
        let head = anvil.head().await;
        assert!(
            view_within(&proxy, head, limit).await,
            "block {head} did not reach the proxy within 30 s: a hop polled"
        );
    }
    follower.stop().await;
}

/// The fallbacks: an HTTP-only node (no `ws_url`: the follower polls)
/// and a server that does not hold catalog requests (a relay in front of
/// it passes no headers: no announcement, no ETag), which the proxy
/// polls at its `refresh_secs`. New blocks still reach its view.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_push_each_hop_polls() {
    log_if_asked();
    let dir = tempfile::tempdir().unwrap();
    let (anvil, follower, server) = followed_chain(dir.path(), 64).await;
    let (old_server, _) = start_relay(&server, passthrough()).await;
    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy(&old_server, None, cache.path()).await;
    view_reaches(&proxy, 0).await;
    for i in 0..2u64 {
        let tx = json!({"from": DEV_ACCOUNTS[1], "to": DEV_ACCOUNTS[2], "value": format!("{:#x}", i + 1)});
        anvil.send(tx).await;
        view_reaches(&proxy, anvil.head().await).await;
    }
    follower.stop().await;
}

//! An idle proxy downloads nothing it does not need: anvil from a genesis
//! file, the follower publishing a delta per block, a PIR server, and a
//! proxy that goes idle after a second without a private read. While
//! idle, new blocks are followed and listed (the proxy sees them in the
//! catalog) but no setup, table or code table is downloaded; the next read
//! of every key catches up first and answers each right at the newest
//! view (anvil's at the head), also for a proxy that, idle, did not look at
//! the catalog at all. A cover lookup never wakes it. With `max_lag_blocks`
//! a read back from idle answers at once from the view already loaded, and
//! the newest loads in the background.

use crate::common;

use common::*;
use proxy::ProxyConfig;
use serde_json::{json, Value};
use test_support::{proxy_status, Anvil, ALL_DEV_ACCOUNTS};

/// The level downloads (setups, whole tables, code tables) a server has
/// been asked for, whatever it answered.
async fn level_downloads(server: &str) -> u64 {
    let mut n = 0;
    for route in ["setup", "table", "code_table"] {
        n += route_requests(server, route, false).await;
    }
    n
}

/// A proxy of `server` with anvil as its upstream, idle after a second
/// without a private read.
fn idle_after_a_second(server: &str, anvil: &Anvil, cache: &std::path::Path) -> ProxyConfig {
    ProxyConfig {
        pir_server: server.to_string(),
        upstream: Some(anvil.url.clone()),
        cache_dir: cache.to_path_buf(),
        idle_secs: 1.0,
        ..Default::default()
    }
}

async fn balance(url: &str, who: &str) -> Result<Value, String> {
    test_support::rpc(url, "eth_getBalance", json!([who, "latest"])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_proxy_downloads_no_level_and_catches_up_on_the_next_read() {
    let dir = tempfile::tempdir().unwrap();
    let (anvil, follower, server) = followed_chain(dir.path(), 1000).await;
    let caches = [(); 3].map(|()| tempfile::tempdir().unwrap());
    let proxy = start_proxy_with(ProxyConfig {
        idle_refresh_secs: 0.3,
        cover_lookups_per_hour: 3600.0 * 10.0,
        ..idle_after_a_second(&server, &anvil, caches[0].path())
    })
    .await;
    // A second proxy that, idle, does not look at the catalog at all: its
    // next read must fetch it first.
    let asleep = start_proxy_with(ProxyConfig {
        idle_refresh_secs: 3600.0,
        ..idle_after_a_second(&server, &anvil, caches[1].path())
    })
    .await;
    // A third that may answer `latest` from a view it holds up to 1000
    // blocks old: back from idle it answers at once from the view it had,
    // and the newest follows in the background.
    let lagging = start_proxy_with(ProxyConfig {
        idle_refresh_secs: 0.3,
        max_lag_blocks: Some(1000),
        ..idle_after_a_second(&server, &anvil, caches[2].path())
    })
    .await;
    let fresh = format!("0x{}", "22".repeat(20));
    let who = [ALL_DEV_ACCOUNTS[0], ALL_DEV_ACCOUNTS[1], fresh.as_str()];
    let at_genesis = json!(anvil.balance(who[0], 0).await);
    for url in [&proxy, &asleep, &lagging] {
        let got =
            test_support::eventually("a first read", || async { balance(url, who[0]).await.ok() })
                .await;
        assert_eq!(got, at_genesis);
    }

    // No read for a second: idle (cover lookups at 10 a second do not
    // count).
    for url in [&proxy, &asleep, &lagging] {
        test_support::eventually("the proxy goes idle", || async {
            (proxy_status(url).await["idle"] == json!(true)).then_some(())
        })
        .await;
    }
    let before = level_downloads(&server).await;

    // Three blocks, each followed and listed while the proxy is idle.
    for (from, value) in [(0, "0x100"), (1, "0x20"), (2, "0x3")] {
        let tx = json!({"from": ALL_DEV_ACCOUNTS[from], "to": fresh, "value": value});
        anvil.send(tx).await;
    }
    let head = anvil.head().await;
    test_support::eventually("the idle proxy sees the new blocks listed", || async {
        let s = proxy_status(&proxy).await;
        (s["viewBlock"].as_u64()? >= head).then_some(())
    })
    .await;
    let status = proxy_status(&proxy).await;
    assert_eq!(status["idle"], json!(true), "{status}");
    assert_eq!(
        level_downloads(&server).await,
        before,
        "an idle proxy downloaded levels"
    );

    // The next read catches up (the catalog first where it was not
    // looked at), and answers every key at the head.
    for url in [&asleep, &proxy] {
        for w in who {
            let got = balance(url, w).await.unwrap();
            assert_eq!(got, json!(anvil.balance(w, head).await), "{w}");
        }
    }
    let status = proxy_status(&proxy).await;
    assert_eq!(status["idle"], json!(false), "{status}");
    assert!(level_downloads(&server).await > before);

    // Within its lag: the view it held (block 0) at once, then the newest.
    test_support::eventually("the lagging proxy sees the new blocks", || async {
        let s = proxy_status(&lagging).await;
        (s["viewBlock"].as_u64()? >= head).then_some(())
    })
    .await;
    assert_eq!(balance(&lagging, who[0]).await.unwrap(), at_genesis);
    let newest = json!(anvil.balance(who[0], head).await);
    test_support::eventually("the newest view loaded in the background", || async {
        (balance(&lagging, who[0]).await.ok()? == newest).then_some(())
    })
    .await;
    follower.stop().await;
    anvil.stop().await;
}

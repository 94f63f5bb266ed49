//! Transport to the PIR server: through a real SOCKS5 server (Debian's
//! microsocks, binding its outgoing connections to 127.0.0.3) every
//! connection the PIR server accepts comes from the SOCKS server, never from
//! the proxy; with fresh connections, every lookup opens its own.

use crate::common;

use std::net::IpAddr;

use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn all_pir_traffic_goes_through_the_socks_proxy() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_genesis_server(dir.path()).await;
    let (front, peers) = recording_front(server.trim_start_matches("http://").to_string()).await;

    let (_socks, socks_port) = start_microsocks("127.0.0.3", None).await;

    let cache = tempfile::tempdir().unwrap();
    let proxy = start_proxy_with(proxy::ProxyConfig {
        pir_server: front.clone(),
        cache_dir: cache.path().to_path_buf(),
        pir_proxy: Some(format!("socks5h://127.0.0.1:{socks_port}")),
        fresh_connection_per_lookup: true,
        ..Default::default()
    })
    .await;
    view_reaches(&proxy, 0).await;
    let before = peers.lock().unwrap().len();
    let lookups = 4;
    for i in 0..lookups {
        let who = format!("0x{:040x}", 0xabc + i);
        let v = test_support::rpc(&proxy, "eth_getBalance", json!([who, "0x0"])).await;
        assert_eq!(v.unwrap(), "0x0");
    }
    let seen = peers.lock().unwrap().clone();
    assert!(!seen.is_empty());
    let socks_ip: IpAddr = "127.0.0.3".parse().unwrap();
    assert!(
        seen.iter().all(|&ip| ip == socks_ip),
        "a connection did not come through the SOCKS server: {seen:?}"
    );
    assert!(
        seen.len() - before >= lookups as usize,
        "{} connections for {lookups} lookups with fresh connections",
        seen.len() - before
    );

    // The control: without pir_proxy the server sees the proxy itself.
    let (front2, peers2) = recording_front(server.trim_start_matches("http://").to_string()).await;
    let cache2 = tempfile::tempdir().unwrap();
    let direct = start_proxy(&front2, None, cache2.path()).await;
    view_reaches(&direct, 0).await;
    assert!(peers2
        .lock()
        .unwrap()
        .iter()
        .all(|ip| ip.to_string() == "127.0.0.1"));
}

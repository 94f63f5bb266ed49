#![forbid(unsafe_code)]
//! The demo: a PIR snapshot of the bundled mainnet genesis (built once,
//! then reused), a PIR server and the proxy, all on loopback.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use protocol::manifest::{SnapshotId, SnapshotKind};
use snapshot_build::genesis;
use snapshot_build::pipeline::{build_and_publish, BuildOptions};
use snapshot_store::SnapshotStore;

use proxy::ProxyConfig;

/// Settings of the demo.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// Where the demo keeps its store and setup cache.
    pub dir: PathBuf,
    pub proxy_listen: SocketAddr,
    pub server_listen: SocketAddr,
    pub upstream: Option<String>,
}

/// Builds the mainnet genesis snapshot unless the store has it in a
/// format the proxy reads (one left by an older version is built again).
pub fn ensure_genesis_snapshot(store: &SnapshotStore) -> Result<()> {
    let id = SnapshotId::new(1, 0, &SnapshotKind::Full);
    if let Ok(kept) = store.get(&id) {
        if kept.manifest.format >= protocol::manifest::OLDEST_READ_FORMAT {
            tracing::info!(snapshot = %id, "reusing the mainnet genesis snapshot");
            return Ok(());
        }
        tracing::info!(snapshot = %id, format = kept.manifest.format, "the kept genesis snapshot is of an older format: building it again");
        store.remove(&id)?;
    }
    tracing::info!("building a PIR snapshot of the bundled mainnet genesis (8,893 accounts)");
    build_and_publish(store, genesis::mainnet(), &BuildOptions::default())?;
    Ok(())
}

/// Runs the demo until Ctrl-C.
pub async fn run(demo: DemoConfig) -> Result<()> {
    let store_dir = demo.dir.join("store");
    let store = SnapshotStore::open(&store_dir)
        .with_context(|| format!("opening {}", store_dir.display()))?;
    {
        let store = store.clone();
        tokio::task::spawn_blocking(move || ensure_genesis_snapshot(&store)).await??;
    }
    let server_listener = tokio::net::TcpListener::bind(demo.server_listen)
        .await
        .with_context(|| format!("binding the PIR server to {}", demo.server_listen))?;
    let server_addr = server_listener.local_addr()?;
    let server_config = server::ServerConfig {
        store: store_dir,
        listen: server_addr,
        ..Default::default()
    };
    tokio::spawn(async move {
        if let Err(e) =
            server::serve_on(server_listener, server_config, std::future::pending()).await
        {
            tracing::error!(error = %e, "PIR server stopped");
        }
    });
    let proxy_listener = tokio::net::TcpListener::bind(demo.proxy_listen)
        .await
        .with_context(|| {
            format!(
                "binding the proxy to {} (is something else on it? use --listen)",
                demo.proxy_listen
            )
        })?;
    let proxy_addr = proxy_listener.local_addr()?;
    let config = ProxyConfig {
        listen: proxy_addr,
        pir_server: format!("http://{server_addr}"),
        upstream: demo.upstream.clone(),
        cache_dir: demo.dir.join("cache"),
        ..Default::default()
    };
    let url = format!("http://{proxy_addr}");
    println!();
    println!("ethpir demo: private balances of Ethereum mainnet at block 0 (the genesis state)");
    println!("  PIR server : http://{server_addr}  (it never learns which address you read)");
    println!("  proxy      : {url}  (point a wallet or cast here)");
    println!();
    println!("Try:");
    println!("  cast balance --block 0 0x756f45e3fa69347a9a973a725e3c98bc4db0b5a0 --rpc-url {url}");
    println!("  cast nonce 0x756f45e3fa69347a9a973a725e3c98bc4db0b5a0 --rpc-url {url}");
    println!(
        "  curl -s -X POST {url} -H 'content-type: application/json' \\\n    -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_getBalance\",\"params\":[\"0x756f45e3fa69347a9a973a725e3c98bc4db0b5a0\",\"latest\"]}}'"
    );
    println!();
    println!("Press Ctrl-C to stop.");
    proxy::serve_on(proxy_listener, config, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

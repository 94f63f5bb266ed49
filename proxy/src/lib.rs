//! # proxy
//!
//! `ethpir-proxy`: the JSON-RPC endpoint a wallet points at. Balances and
//! nonces are read with PIR queries to an `ethpir-server`, which never
//! learns the address; other methods go to an upstream node of the user's
//! choice or are refused. Also: the historical replay.
//!
//! This crate is what a wallet user runs: it links `pir-core` and
//! `protocol`, never the operator's crates (snapshotter, server, GPU).

#![forbid(unsafe_code)]

pub mod block;
pub mod config;
pub mod reader;
pub mod replay;
pub mod rpc;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

pub use config::ProxyConfig;
use reader::PrivateReader;
use rpc::RpcService;

/// Largest JSON-RPC request body accepted.
const MAX_BODY: usize = 4 << 20;

async fn rpc_endpoint(State(service): State<Arc<RpcService>>, body: Bytes) -> Response {
    match service.handle(&body).await {
        Some(v) => ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

/// The proxy's router.
pub fn router(service: Arc<RpcService>) -> Router {
    Router::new()
        .route("/", post(rpc_endpoint))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(service)
}

/// Builds the reader and keeps its catalog fresh in the background.
pub async fn start_reader(config: &ProxyConfig) -> Arc<PrivateReader> {
    let reader = Arc::new(PrivateReader::new(config));
    match reader.refresh().await {
        Ok(n) => {
            tracing::info!(snapshots = n, server = %config.pir_server, "connected to the PIR server")
        }
        Err(e) => {
            tracing::warn!(error = %e, server = %config.pir_server, "PIR server not reachable yet; retrying in the background")
        }
    }
    let every = config.refresh_interval();
    let weak = Arc::downgrade(&reader);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(reader) = weak.upgrade() else { return };
            if let Err(e) = reader.refresh().await {
                tracing::warn!(error = %e, "catalog refresh failed");
            }
        }
    });
    reader
}

/// Runs the proxy on a bound listener until `shutdown` resolves.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    config: ProxyConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let reader = start_reader(&config).await;
    let service = Arc::new(RpcService::new(
        reader,
        config.upstream.clone(),
        config.private_fallback_to_upstream,
        config.timeout(),
    ));
    tracing::info!(
        addr = %listener.local_addr()?,
        upstream = config.upstream.as_deref().unwrap_or("none"),
        "ethpir-proxy listening (eth_getBalance and eth_getTransactionCount are private)"
    );
    axum::serve(listener, router(service))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

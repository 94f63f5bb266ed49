//! # server
//!
//! `ethpir-server`: serves the snapshots of a store to PIR clients.
//!
//! - `GET /v1/snapshots`: the catalog (JSON);
//! - `GET /v1/snapshots/{id}/setup`: setup data (binary), ETag = setup digest;
//! - `GET /v1/snapshots/{id}/table`: a small level's entries, ETag = digest;
//! - `POST /v1/query`: batches of queries to one or several snapshots
//!   (binary, framed by `protocol::multi`);
//! - `GET /healthz`, `GET /metrics` (Prometheus text);
//! - `GET /`: the operator's page (snapshots, the follower's lag, lookups
//!   and passes of the last ten minutes), and `GET /status.json`, its data.
//!
//! One process serves a store whole, one row shard of it (`shard = "i/S"`:
//! queries are slices of that shard's rows), or routes to the shards
//! (`[router] shards = [...]`: it splits each query by rows, forwards the
//! slices and adds the partial answers; docs/architecture.md).
//!
//! New snapshots in the store are picked up by a periodic rescan; removed
//! ones leave the catalog at once but keep answering the queries already in
//! flight (they hold an `Arc`). Query bytes are never logged.
#![forbid(unsafe_code)]

pub use protocol::api;
mod batch;
pub mod config;
mod error;
mod loaded;
mod metrics;
mod page;
mod routes;
mod shards;
mod state;

pub use config::{BatchSettings, Role, ServerConfig};
pub use error::{RouteError, ServerError};
pub use loaded::{LoadedSnapshot, Serving};
pub use routes::router;
pub use state::AppState;

use std::sync::Arc;

/// Runs the server until `shutdown` resolves.
pub async fn serve(
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
    serve_on(listener, config, shutdown).await
}

/// Runs the server on an already bound listener (tests bind port 0).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    serve_on_boxed(listener, config, Box::pin(shutdown)).await
}

/// A future that runs the server until `shutdown` resolves, boxed here.
/// Not generic, so that the whole stack is compiled once, in this crate: a
/// crate that awaits the unboxed future (the demo) would compile all of
/// it again (some 20 s of the demo's build on 2 cores).
pub fn serve_on_boxed(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
    shutdown: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ServerError>> + Send>> {
    Box::pin(run_until(listener, config, shutdown))
}

async fn run_until(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
    shutdown: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> Result<(), ServerError> {
    let state = Arc::new(AppState::new(&config)?);
    tracing::info!(role = %state.role, "serving the store");
    if let Some(shards) = &state.shards {
        shards.check_roles().await;
    }
    state.rescan().await;
    let rescanner = {
        let state = state.clone();
        let every = config.rescan_interval();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                state.rescan().await;
            }
        })
    };
    tracing::info!(addr = %listener.local_addr()?, store = %config.store.display(), "ethpir-server listening");
    let result = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await;
    rescanner.abort();
    result.map_err(Into::into)
}

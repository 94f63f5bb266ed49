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

pub use config::{AnswerDevice, AnswerSettings, BatchSettings, Role, ServerConfig};
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
    // A change in the store (a level published, retired, attested) wakes
    // the rescan at once; the interval stays for filesystems that tell
    // nothing (some network mounts) and as a fallback.
    let (watcher, mut changed) = match config.watch_store {
        true => watch_store(&config.store),
        false => (None, tokio::sync::mpsc::channel(1).1),
    };
    let rescanner = {
        let state = state.clone();
        let every = config.rescan_interval();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    Some(()) = changed.recv() => {
                        // A publish is a rename or two: let them land.
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                        while changed.try_recv().is_ok() {}
                    }
                }
                state.rescan().await;
            }
        })
    };
    let closing = state.clone();
    let shutdown = async move {
        shutdown.await;
        // Held catalog requests are answered now, not at their wait's end.
        closing.closing.send_replace(true);
    };
    tracing::info!(addr = %listener.local_addr()?, store = %config.store.display(), "ethpir-server listening");
    let result = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await;
    rescanner.abort();
    drop(watcher);
    result.map_err(Into::into)
}

/// Raises this process's soft limit of open files to its hard limit, and
/// says which limit is now in force (`None`: none). Each client and each
/// held catalog wait is a connection: under a soft limit of 1,024 (a
/// common default), accepting fails for every client once it is reached,
/// not only for the proxies waiting.
pub fn raise_open_file_limit() -> std::io::Result<Option<u64>> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current == limit.maximum {
        return Ok(limit.current);
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        },
    )?;
    Ok(limit.maximum)
}

/// Watches the store for changes outside its staging folder: a message
/// (coalesced: at most one waiting) for each. `None` watcher where the
/// filesystem offers no watch (the rescan interval then serves alone).
fn watch_store(
    root: &std::path::Path,
) -> (
    Option<notify::RecommendedWatcher>,
    tokio::sync::mpsc::Receiver<()>,
) {
    use notify::{EventKind, RecursiveMode, Watcher};
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let base = root.to_path_buf();
    let handler = move |event: notify::Result<notify::Event>| {
        // An error or an overflow (no paths) may hide a change: rescan.
        let relevant = event.map_or(true, |event| {
            let inside = |p: &std::path::Path| {
                let first = p.strip_prefix(&base).ok()?.components().next()?;
                Some(first.as_os_str().to_string_lossy().into_owned())
            };
            // Builds in progress, removals in progress and code files
            // change nothing served.
            let quiet = [".staging", ".trash", ".codes"];
            let served = |p: &std::path::PathBuf| {
                inside(p).is_none_or(|first| !quiet.contains(&first.as_str()))
            };
            !matches!(event.kind, EventKind::Access(_))
                && (event.paths.is_empty() || event.paths.iter().any(served))
        });
        if relevant {
            let _ = tx.try_send(());
        }
    };
    let watcher = notify::recommended_watcher(handler).and_then(|mut w| {
        w.watch(root, RecursiveMode::Recursive)?;
        Ok(w)
    });
    match watcher {
        Ok(w) => (Some(w), rx),
        Err(e) => {
            tracing::warn!(error = %e, store = %root.display(), "the store cannot be watched: new levels are served at the next rescan");
            (None, rx)
        }
    }
}

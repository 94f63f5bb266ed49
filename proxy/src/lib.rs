//! # proxy
//!
//! `ethpir-proxy`: the JSON-RPC endpoint a wallet points at. Balances and
//! nonces are read with PIR queries to an `ethpir-server`, which never
//! learns the address; other methods go to an upstream node of the user's
//! choice or are refused. Also: the historical replay.
//!
//! This crate is what a wallet user runs: the private reads are
//! `ethpir-client`'s; it links that, `pir-core` and `protocol`, never the
//! operator's crates (snapshotter, server, GPU).

#![forbid(unsafe_code)]

pub mod activity;
pub mod api;
pub mod calls;
pub mod config;
pub mod envelope;
pub mod error;
pub mod execute;
pub mod forward;
pub mod page;
pub mod replay;
pub mod rpc;
pub mod storage;
pub mod upstream;

use std::sync::Arc;

use jsonrpsee::server::middleware::rpc::RpcServiceBuilder;
use jsonrpsee::server::{BatchRequestConfig, Server, ServerConfig};

pub use config::ProxyConfig;
use config::MAX_RESPONSE_BYTES;
use envelope::{EnvelopeLayer, MAX_BODY};
pub use error::StartError;
use ethpir_client::PrivateReader;
use forward::{ForwardLayer, ForwardPolicy};
use protocol::url::redact;
use rpc::RpcContext;
use upstream::Upstream;

/// Most calls in one JSON-RPC batch.
pub const MAX_BATCH: u32 = 1024;

/// Says at start which checks of the PIR server's answers are off.
fn log_verification_policy(config: &ProxyConfig) {
    if config.canaries_per_request == 0 {
        tracing::warn!("canaries_per_request = 0: a PIR server that shifts some answers is not caught (docs/security.md, \"Blind shifts\")");
    }
    if config.read_unconfirmed_views && config.upstream.is_some() {
        tracing::warn!("read_unconfirmed_views is on: views the upstream cannot confirm (no block hash, a block it does not have, no answer) are read all the same");
    }
}

/// Says at start which forwarded methods reveal addresses to the upstream.
fn log_upstream_policy(config: &ProxyConfig) {
    let Some(url) = config.upstream.as_deref() else {
        return;
    };
    let reads = config::ADDRESS_READS.join(", ");
    match config.upstream_methods {
        config::UpstreamMethods::All => tracing::warn!(
            upstream = %redact(url),
            "these forwarded methods reveal the addresses they name to the upstream: {reads} (upstream_methods = \"no-address-reads\" refuses them)"
        ),
        config::UpstreamMethods::NoAddressReads => tracing::info!(
            upstream = %redact(url),
            "refusing the forwarded reads that name an address: {reads}"
        ),
        config::UpstreamMethods::Auto => tracing::info!(
            upstream = %redact(url),
            "the forwarded reads that name an address ({reads}) are refused while the newest view holds the whole state, and reveal those addresses to the upstream while it does not (upstream_methods = \"no-address-reads\" always refuses them)"
        ),
    }
    if config.private_fallback_to_upstream {
        tracing::warn!("private_fallback_to_upstream is on: a balance or nonce the snapshots cannot answer goes upstream with its address, and the PIR server can make that happen (an empty catalog)");
    }
}

/// The executor of `eth_call`s: an inner call of a batch that cannot be
/// answered privately goes upstream on its own where `eth_call` may go
/// upstream at all, else it fails.
fn executor_for(
    config: &ProxyConfig,
    reader: &Arc<PrivateReader>,
    upstream: &Option<Arc<Upstream>>,
    activity: &Arc<activity::Activity>,
) -> execute::Executor {
    let inner = match (upstream, config.upstream_methods) {
        (Some(_), config::UpstreamMethods::All) => execute::InnerPolicy::Upstream,
        (Some(_), config::UpstreamMethods::Auto) => execute::InnerPolicy::UpstreamUnlessWholeState,
        _ => execute::InnerPolicy::Fail,
    };
    execute::Executor::new(reader.clone(), upstream.clone(), inner)
        .pad_rounds_to(config.pad_call_rounds_to)
        .recording(activity.clone())
}

/// Runs the proxy (JSON-RPC over HTTP and WebSocket on the same address)
/// on a bound listener until `shutdown` resolves.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    config: ProxyConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    serve_on_boxed(listener, config, Box::pin(shutdown)).await
}

/// A future that runs the proxy until `shutdown` resolves, boxed here.
/// Not generic, so that the whole stack is compiled once, in this crate: a
/// crate that awaits the unboxed future (the demo) would compile all of
/// it again (some 20 s of the demo's build on 2 cores).
pub fn serve_on_boxed(
    listener: tokio::net::TcpListener,
    config: ProxyConfig,
    shutdown: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StartError>> + Send>> {
    Box::pin(run_until(listener, config, shutdown))
}

/// What one request may carry: body, response and batch bounds.
fn server_limits() -> jsonrpsee::server::ServerConfig {
    ServerConfig::builder()
        .max_request_body_size(MAX_BODY as u32)
        .max_response_body_size(MAX_RESPONSE_BYTES as u32)
        .set_batch_request_config(BatchRequestConfig::Limit(MAX_BATCH))
        .build()
}

/// The RPC middleware's policy and the page's source, sharing one record
/// of what was answered where.
fn policy_and_page(
    config: &ProxyConfig,
    ctx: RpcContext,
    local: std::collections::HashSet<&'static str>,
    private: std::collections::HashSet<&'static str>,
) -> Result<(Arc<ForwardPolicy>, Arc<page::PageSource>), StartError> {
    let (reader, upstream) = (ctx.reader.clone(), ctx.upstream.clone());
    let counted = reader.clone();
    let activity = Arc::new(activity::Activity::new(move || {
        page::reader_traffic(&counted)
    }));
    let page = Arc::new(page::PageSource {
        ctx,
        activity: activity.clone(),
        attesters: config.attesters.clone(),
        quorum: config.attest_quorum,
    });
    let executor = executor_for(config, &reader, &upstream, &activity);
    let policy = Arc::new(ForwardPolicy {
        executor,
        activity,
        reader,
        upstream,
        local,
        private,
        private_fallback: config.private_fallback_to_upstream,
        upstream_methods: config.upstream_methods,
        trusted_tokens: config.trusted_tokens()?,
        balance_checker: config.balance_checker,
    });
    Ok((policy, page))
}

async fn run_until(
    listener: tokio::net::TcpListener,
    config: ProxyConfig,
    shutdown: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> Result<(), StartError> {
    config.check_transport()?;
    let upstream = match config.upstream.as_deref() {
        Some(url) => Some(Arc::new(Upstream::new(url, config.timeouts())?)),
        None => None,
    };
    log_upstream_policy(&config);
    log_verification_policy(&config);
    // Listening does not wait for the PIR server: calls get a JSON-RPC
    // error until its catalog gives a view.
    let reader = PrivateReader::start_in_background(&config.client())?;
    if let Some(upstream) = &upstream {
        reader.check_blocks_with(upstream::header_source(upstream.clone()));
    }
    let ctx = RpcContext {
        reader: reader.clone(),
        upstream: upstream.clone(),
    };
    let (module, private) = rpc::module(ctx.clone());
    let local = module.method_names().collect();
    let (policy, page) = policy_and_page(&config, ctx, local, private)?;
    let server = Server::builder()
        .set_config(server_limits())
        .set_http_middleware(
            tower::ServiceBuilder::new()
                .layer(page::PageLayer(page))
                .layer(EnvelopeLayer),
        )
        .set_rpc_middleware(RpcServiceBuilder::new().layer(ForwardLayer(policy)))
        .build_from_tcp(listener.into_std()?)?;
    let addr = server.local_addr()?;
    let handle = server.start(module);
    tracing::info!(
        %addr,
        upstream = config.upstream.as_deref().map(redact).unwrap_or_else(|| "none".into()),
        "ethpir-proxy listening on http:// and ws://; its page (what stayed private) at http://{addr}/"
    );
    tracing::info!("private (never sent upstream): eth_getBalance, eth_getTransactionCount, eth_getCode (where the snapshots say which code), eth_getStorageAt of the contracts the catalog lists (of every contract under a whole-state view); eth_call, eth_estimateGas and eth_createAccessList executed here (revm) over privately read state, where every storage word they read is of a listed contract, or of any contract while the view holds the whole state (inside a batch, only an inner call that is not goes its own way, and never where gas is observed after it); eth_blockNumber is the upstream's head capped at the newest view");
    tokio::select! {
        _ = shutdown => {
            let _ = handle.stop();
        }
        _ = handle.clone().stopped() => {}
    }
    handle.stopped().await;
    Ok(())
}

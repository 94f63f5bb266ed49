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
pub mod browser;
pub mod calls;
pub mod config;
pub mod envelope;
pub mod error;
pub mod execute;
pub mod forward;
pub mod gate;
pub mod logs;
pub mod methods;
pub mod own_sends;
pub mod page;
pub mod replay;
pub mod rpc;
pub mod storage;
pub mod txpool;
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
    if config.hot_tier == ethpir_client::config::HotTierUse::Ahead && config.attesters.is_empty() {
        tracing::warn!("hot_tier = \"ahead\" with no attesters: the hot tier's values are the PIR server operator's word (checked only by their digests, which that operator computes). Keys that name the wallet are answered by PIR whatever the tier holds (a tier caught disagreeing is warned of); the rest (a pool's reserves, a proxy's implementation) is taken from the tier. List attesters, or set hot_tier = \"off\" to read every key by PIR");
    }
    if config.read_unconfirmed_views && config.upstream.is_some() {
        tracing::warn!("read_unconfirmed_views is on: views the upstream cannot confirm (no block hash, a block it does not have, no answer) are read all the same");
    }
}

/// Says loudly at start when the log holds what the wallet reads: at
/// `info` and above no line names an address, a key, a slot or call data
/// (errors and reasons are logged [`protocol::redact`]ed); at `debug`
/// lines do.
fn log_privacy_of_the_log() {
    let debug = tracing::enabled!(target: "proxy", tracing::Level::DEBUG)
        || tracing::enabled!(target: "ethpir_client", tracing::Level::DEBUG)
        || tracing::enabled!(target: "call_exec", tracing::Level::DEBUG);
    if debug {
        tracing::warn!("LOGGING AT DEBUG: this log names the addresses, storage slots and call data the wallet reads; anyone who reads it learns what the PIR server cannot (use --log info to keep them out)");
    }
}

/// Says at start which web pages may call the proxy.
fn log_browser_policy(config: &ProxyConfig) {
    if config.cors_origins.iter().any(|o| o.trim() == "*") {
        tracing::warn!("cors_origins lists \"*\": every web page the user visits may call this proxy (the sandboxed \"null\" origin included)");
    } else if !config.cors_origins.is_empty() {
        tracing::info!(origins = ?config.cors_origins, "these web pages may call the proxy (CORS granted)");
    }
}

/// Says at start which methods the gate lets go upstream.
fn log_upstream_policy(config: &ProxyConfig) {
    let Some(url) = config.upstream.as_deref() else {
        return;
    };
    match config.upstream_methods {
        config::UpstreamMethods::All => tracing::warn!(
            upstream = %redact(url),
            "upstream_methods = \"all\": every method the proxy does not answer itself goes upstream, and those that read state by address (eth_call, eth_getLogs, eth_getProof, ...) name those addresses to it"
        ),
        config::UpstreamMethods::NoAddressReads => tracing::info!(
            upstream = %redact(url),
            "upstream_methods = \"no-address-reads\": only methods that read no state by address go upstream (blocks, transactions, receipts, fees, sends, chain id, new heads)"
        ),
        config::UpstreamMethods::Auto => tracing::info!(
            upstream = %redact(url),
            "upstream_methods = \"auto\": only methods that read no state by address go upstream until the PIR server's view is known, while it holds the whole state, and after this server was seen holding it; every method the proxy does not answer itself goes while it holds a list"
        ),
    }
    if config.private_fallback_to_upstream {
        tracing::warn!("private_fallback_to_upstream is on: a balance or nonce the snapshots cannot answer goes upstream with its address, whatever upstream_methods says, and the PIR server can make that happen (an empty catalog)");
    }
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
    activity: Arc<activity::Activity>,
    sends: Option<Arc<Upstream>>,
    (local, private): (
        std::collections::HashSet<&'static str>,
        std::collections::HashSet<&'static str>,
    ),
) -> Result<(Arc<ForwardPolicy>, Arc<page::PageSource>), StartError> {
    let (reader, upstream) = (ctx.reader.clone(), ctx.upstream.clone());
    let page = Arc::new(page::PageSource {
        ctx,
        activity: activity.clone(),
        attesters: config.attesters.clone(),
        quorum: config.attest_quorum,
        sends_to: config.send_upstream.as_deref().map(redact),
    });
    let executor = execute::Executor::from_config(reader.clone(), upstream.clone(), config);
    let policy = Arc::new(ForwardPolicy {
        executor,
        activity,
        reader,
        upstream,
        sends,
        local,
        private,
        private_fallback: config.private_fallback_to_upstream,
        trusted_tokens: config.trusted_tokens()?,
        balance_checker: config.balance_checker,
        logs: logs::Logs::new(config.log_bounds()),
        own_sends: own_sends::OwnSends::new(config.receipts_by_block),
        start_wait_until: tokio::time::Instant::now() + config.start_wait(),
    });
    Ok((policy, page))
}

/// The upstream, and the endpoint sends go to (`send_upstream`).
struct Upstreams {
    reads: Option<Arc<Upstream>>,
    sends: Option<Arc<Upstream>>,
}

/// The upstream, and the endpoint sends go to (when set), behind the one
/// gate every request to either passes.
fn upstreams_behind_gate(
    config: &ProxyConfig,
    reader: &Arc<PrivateReader>,
    activity: &Arc<activity::Activity>,
) -> Result<Upstreams, StartError> {
    let memory = gate::WholeStateMemory::open(&config.cache_dir, &config.pir_server);
    let gate = Arc::new(gate::Gate::new(
        config.upstream_methods,
        config.private_fallback_to_upstream,
        reader.clone(),
        memory,
        activity.clone(),
    ));
    let routes = upstream::route::routes(config)?;
    upstream::route::log_routes(config);
    let behind_gate = |url: Option<&str>, socks: Option<reqwest::Proxy>| {
        url.map(|url| Upstream::new(url, config.timeouts(), socks, gate.clone()).map(Arc::new))
            .transpose()
    };
    let reads = behind_gate(config.upstream.as_deref(), routes.reads)?;
    // Sends never share the reads' connection (nor their SOCKS
    // credentials): to the send endpoint, or to the upstream on a client
    // of their own.
    let sends_url = config
        .send_upstream
        .as_deref()
        .or(config.upstream.as_deref());
    let sends = behind_gate(sends_url, routes.sends)?;
    if let Some(upstream) = &reads {
        reader.check_blocks_with(upstream::header_source(upstream.clone()));
    }
    Ok(Upstreams { reads, sends })
}

async fn run_until(
    listener: tokio::net::TcpListener,
    config: ProxyConfig,
    shutdown: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> Result<(), StartError> {
    config.check_transport()?;
    log_upstream_policy(&config);
    log_verification_policy(&config);
    log_privacy_of_the_log();
    log_browser_policy(&config);
    // Listening does not wait for the PIR server: a call at start waits
    // up to `start_wait_secs` for its first catalog, then gets a JSON-RPC
    // error until the catalog gives a view.
    let reader = PrivateReader::start_in_background(&config.client())?;
    let counted = reader.clone();
    let activity = Arc::new(activity::Activity::new(move || {
        page::reader_traffic(&counted)
    }));
    let Upstreams {
        reads: upstream,
        sends,
    } = upstreams_behind_gate(&config, &reader, &activity)?;
    let ctx = RpcContext {
        reader: reader.clone(),
        upstream: upstream.clone(),
        log_bounds: config.log_bounds(),
    };
    let (module, private) = rpc::module(ctx.clone());
    let local = module.method_names().collect();
    let (policy, page) = policy_and_page(&config, ctx, activity, sends, (local, private))?;
    let server = Server::builder()
        .set_config(server_limits())
        .set_http_middleware(
            tower::ServiceBuilder::new()
                .layer(browser::BrowserLayer::new(&config.cors_origins))
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
        sends = config.send_upstream.as_deref().map(redact).unwrap_or_else(|| "the upstream".into()),
        "ethpir-proxy listening on http:// and ws://; its page (what stayed private) at http://{addr}/"
    );
    tracing::info!("private (never sent upstream): eth_getBalance, eth_getTransactionCount, eth_getCode (where the snapshots say which code), eth_getStorageAt of the contracts the catalog lists (of every contract under a whole-state view); eth_call, eth_estimateGas, eth_createAccessList and eth_simulateV1 executed here (revm) over privately read state, where every storage word they read is of a listed contract, or of any contract while the view holds the whole state (inside a batch, only an inner call that is not goes its own way, and never where gas is observed after it); eth_blockNumber is the upstream's head capped at the newest view");
    tokio::select! {
        _ = shutdown => {
            let _ = handle.stop();
        }
        _ = handle.clone().stopped() => {}
    }
    handle.stopped().await;
    Ok(())
}

//! The upstream node the proxy forwards non-private methods to, through
//! jsonrpsee's clients: over HTTP(S) (`http://`, `https://`) or over a
//! WebSocket (`ws://`, `wss://`), which also carries subscriptions. Each answer is
//! bounded in bytes ([`MAX_RESPONSE_BYTES`], counted as it streams) and in
//! time (the configured connect and request timeouts). Errors never carry
//! the URL (hosted nodes put their API key in it). Nothing is sent that
//! the [`Gate`] has not admitted. An HTTP(S) upstream may be reached
//! through a SOCKS5 proxy ([`socks`], routed by [`route`]).

pub mod route;
mod socks;

use std::sync::Arc;

use alloy_primitives::B256;
use ethpir_client::config::Timeouts;
use jsonrpsee::core::client::{ClientT, Error as ClientError, Subscription, SubscriptionClientT};
use jsonrpsee::core::traits::ToRpcParams;
use jsonrpsee::http_client::{HttpClient, HttpClientBuilder, RpcLogger, RpcService};
use jsonrpsee::ws_client::{WsClient, WsClientBuilder};
use serde_json::value::RawValue;
use serde_json::Value;
use tokio::sync::Mutex;

use protocol::url::{redact, redact_urls_in};

use crate::activity::Reason;
use crate::config::MAX_RESPONSE_BYTES;
use crate::error::{ProxyError, UpstreamUrlError};
use crate::gate::Gate;

/// The raw params of a call, passed on untouched.
pub struct RawParams(pub Option<Box<RawValue>>);

impl ToRpcParams for RawParams {
    fn to_rpc_params(self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        Ok(self.0)
    }
}

/// How the upstream is reached.
enum Transport {
    Http(HttpClient<RpcLogger<RpcService<socks::Route>>>),
    Ws {
        url: String,
        timeouts: Timeouts,
        /// The connection, made when first needed and again after it drops.
        client: Mutex<Option<Arc<WsClient>>>,
    },
}

/// The upstream node, behind the gate.
pub struct Upstream {
    transport: Transport,
    gate: Arc<Gate>,
}

impl Upstream {
    /// An upstream from its URL, reached through `socks` where set (an
    /// HTTP(S) upstream only: [`route::routes`] refuses the rest); every
    /// request passes `gate` first.
    pub fn new(
        url: &str,
        timeouts: Timeouts,
        socks: Option<reqwest::Proxy>,
        gate: Arc<Gate>,
    ) -> Result<Self, UpstreamUrlError> {
        let refused = || UpstreamUrlError(redact(url));
        let transport = if url.starts_with("ws://") || url.starts_with("wss://") {
            if socks.is_some() {
                return Err(refused());
            }
            Transport::Ws {
                url: url.to_string(),
                timeouts,
                client: Mutex::new(None),
            }
        } else if url.starts_with("http://") || url.starts_with("https://") {
            let socks = socks
                .map(|proxy| socks_client(proxy, &timeouts))
                .transpose()
                .map_err(|_| refused())?;
            HttpClientBuilder::default()
                .max_response_size(MAX_RESPONSE_BYTES as u32)
                .connect_timeout(timeouts.connect)
                .request_timeout(timeouts.request)
                .set_http_middleware(
                    tower::ServiceBuilder::new().layer(socks::RouteLayer { socks }),
                )
                .build(url)
                .map(Transport::Http)
                .map_err(|_| refused())?
        } else {
            return Err(refused());
        };
        Ok(Upstream { transport, gate })
    }

    /// The gate every request passes.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Whether subscriptions can be forwarded.
    pub fn is_websocket(&self) -> bool {
        matches!(self.transport, Transport::Ws { .. })
    }

    /// Forwards a wallet's call (sent for `reason`) where the gate admits
    /// it: the upstream's result, or its error as it sent it, or
    /// [`ProxyError::UpstreamUnavailable`], or the gate's refusal.
    pub async fn call(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
        reason: Reason,
    ) -> Result<Box<RawValue>, ProxyError> {
        let text = params.as_deref().map(RawValue::get);
        self.gate.admit(method, text, reason)?;
        self.send(method, params).await
    }

    /// One of the proxy's own reads (headers, the head, the chain id):
    /// held to the gate's allowlist, not recorded on the page.
    async fn own_call(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<Box<RawValue>, ProxyError> {
        self.gate.admit_own(method)?;
        self.send(method, params).await
    }

    async fn send(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<Box<RawValue>, ProxyError> {
        let sent = match &self.transport {
            Transport::Http(client) => client.request(method, RawParams(params)).await,
            Transport::Ws { .. } => {
                let client = self.ws_client().await?;
                client.request(method, RawParams(params)).await
            }
        };
        sent.map_err(client_error)
    }

    /// Forwards a notification where the gate admits it; nothing comes
    /// back.
    pub async fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let text = params.as_deref().map(RawValue::get);
        if self
            .gate
            .admit(method, text, Reason::NotPrivateMethod)
            .is_err()
        {
            return;
        }
        let sent = match &self.transport {
            Transport::Http(client) => client
                .notification(method, RawParams(params))
                .await
                .map_err(client_error),
            Transport::Ws { .. } => match self.ws_client().await {
                Ok(c) => c
                    .notification(method, RawParams(params))
                    .await
                    .map_err(client_error),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = sent {
            tracing::debug!(method, error = %e, "forwarded notification failed");
        }
    }

    /// Opens an `eth_subscribe` subscription upstream (WebSocket only)
    /// where the gate admits it.
    pub async fn subscribe(
        &self,
        params: Vec<Value>,
    ) -> Result<Subscription<Box<RawValue>>, ProxyError> {
        let text = serde_json::to_string(&params).ok();
        let reason = Reason::NotPrivateMethod;
        self.gate.admit("eth_subscribe", text.as_deref(), reason)?;
        let client = self.ws_client().await?;
        client
            .subscribe("eth_subscribe", params, "eth_unsubscribe")
            .await
            .map_err(client_error)
    }

    async fn ws_client(&self) -> Result<Arc<WsClient>, ProxyError> {
        let Transport::Ws {
            url,
            timeouts,
            client,
        } = &self.transport
        else {
            return Err(ProxyError::SubscriptionsNeedWebSocket);
        };
        let mut slot = client.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_connected()) {
            return Ok(c.clone());
        }
        let made = WsClientBuilder::default()
            .max_response_size(MAX_RESPONSE_BYTES as u32)
            .request_timeout(timeouts.request)
            .connection_timeout(timeouts.connect)
            .build(url)
            .await
            .map_err(|e| {
                tracing::warn!(upstream = %redact(url), error = %e, "cannot connect to the upstream");
                ProxyError::UpstreamUnavailable("cannot connect".into())
            })?;
        let made = Arc::new(made);
        *slot = Some(made.clone());
        Ok(made)
    }
}

/// The HTTP client whose every connection goes through the SOCKS5 `proxy`:
/// no redirect followed (jsonrpsee's direct connection follows none), no
/// proxy from the environment.
fn socks_client(proxy: reqwest::Proxy, timeouts: &Timeouts) -> reqwest::Result<reqwest::Client> {
    api_client::http_builder()
        .proxy(proxy)
        .connect_timeout(timeouts.connect)
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

/// The upstream's own error as it sent it; anything else (transport,
/// timeout, size, an unreadable reply) is "unavailable", without the URL.
fn client_error(e: ClientError) -> ProxyError {
    match e {
        ClientError::Call(sent) => ProxyError::Upstream(sent),
        other => {
            tracing::debug!(error = %other, "upstream call failed");
            ProxyError::UpstreamUnavailable(redact_urls_in(&other.to_string()))
        }
    }
}

impl Upstream {
    /// The header of the block whose hash is `hash` (`eth_getBlockByHash`),
    /// checked against the hash. None when the upstream fails, has no such
    /// block, or gives a header that is not that hash's (logged).
    pub async fn header_by_hash(&self, hash: B256) -> Option<alloy_consensus::Header> {
        let params = serde_json::value::to_raw_value(&(hash, false)).ok()?;
        let raw = match self.own_call("eth_getBlockByHash", Some(params)).await {
            Ok(raw) => raw,
            Err(e) => {
                tracing::debug!(error = %e, "no header for the view's block");
                return None;
            }
        };
        let header: alloy_consensus::Header = match serde_json::from_str::<Option<_>>(raw.get()) {
            Ok(Some(header)) => header,
            _ => {
                tracing::warn!(%hash, "the upstream has no readable header for the view's block");
                return None;
            }
        };
        if header.hash_slow() != hash {
            tracing::warn!(%hash, "the upstream's header is not the view's block: not used");
            return None;
        }
        Some(header)
    }

    /// The upstream's head block (`eth_blockNumber`), if it answers.
    pub async fn head(&self) -> Option<u64> {
        let raw = self.own_call("eth_blockNumber", None).await.ok()?;
        serde_json::from_str::<alloy_primitives::U64>(raw.get())
            .ok()
            .map(|n| n.to::<u64>())
    }
}

/// The upstream as the header source of the private reads: its chain id
/// (`eth_chainId`) and the hash of its block at a number
/// (`eth_getBlockByNumber`); no address involved.
pub fn header_source(upstream: Arc<Upstream>) -> ethpir_client::canonical::HeaderSource {
    ethpir_client::canonical::HeaderSource {
        chain_id: chain_id_source(upstream.clone()),
        block_hash: block_hash_source(upstream),
    }
}

fn chain_id_source(upstream: Arc<Upstream>) -> ethpir_client::canonical::ChainIdSource {
    Arc::new(move || {
        let upstream = upstream.clone();
        Box::pin(async move {
            let raw = upstream
                .own_call("eth_chainId", None)
                .await
                .map_err(|e| e.to_string())?;
            serde_json::from_str::<alloy_primitives::U64>(raw.get())
                .map(|n| n.to::<u64>())
                .map_err(|e| format!("eth_chainId: {e}"))
        })
    })
}

fn block_hash_source(upstream: Arc<Upstream>) -> ethpir_client::canonical::BlockHashSource {
    Arc::new(move |number: u64| {
        let upstream = upstream.clone();
        Box::pin(async move { upstream.block_hash_at(number).await })
    })
}

impl Upstream {
    /// The hash of the upstream's block at `number` (None: it has none).
    pub async fn block_hash_at(&self, number: u64) -> Result<Option<B256>, String> {
        Ok(self.block_at(number).await?.map(|(hash, _)| hash))
    }

    /// The hash and time of the upstream's block at `number` (None: it
    /// has none).
    pub async fn block_at(&self, number: u64) -> Result<Option<(B256, u64)>, String> {
        let params = serde_json::value::to_raw_value(&(format!("{number:#x}"), false))
            .map_err(|e| e.to_string())?;
        let raw = self
            .own_call("eth_getBlockByNumber", Some(params))
            .await
            .map_err(|e| e.to_string())?;
        #[derive(serde::Deserialize)]
        struct Header {
            hash: B256,
            timestamp: alloy_primitives::U64,
        }
        let header: Option<Header> = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
        Ok(header.map(|h| (h.hash, h.timestamp.to())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_schemes_are_refused_without_echoing_secrets() {
        let gate = Arc::new(Gate::without_views(crate::config::UpstreamMethods::All));
        let e = Upstream::new("ftp://h/SECRET", Timeouts::default(), None, gate)
            .err()
            .unwrap();
        assert!(!e.to_string().contains("SECRET"), "{e}");
    }
}

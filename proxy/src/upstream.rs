//! The upstream node the proxy forwards non-private methods to: over HTTP(S)
//! (`http://`, `https://`) or over a WebSocket (`ws://`), which also carries
//! subscriptions. Errors never carry the URL (hosted nodes put their API key
//! in it).

use std::time::Duration;

use ethpir_client::config::Timeouts;
use ethpir_client::fetch::{fetch, Bounds, Size};
use jsonrpsee::core::client::Subscription;
use jsonrpsee::core::client::{ClientT, Error as ClientError, SubscriptionClientT};
use jsonrpsee::core::traits::ToRpcParams;
use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::ws_client::{WsClient, WsClientBuilder};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use protocol::url::redact;

use crate::forward::MAX_RESPONSE_BYTES;
use crate::rpc::{rpc_error, UPSTREAM_UNAVAILABLE};

/// The raw params of a call, passed on untouched.
pub struct RawParams(pub Option<Box<RawValue>>);

impl ToRpcParams for RawParams {
    fn to_rpc_params(self) -> Result<Option<Box<RawValue>>, serde_json::Error> {
        Ok(self.0)
    }
}

/// How the upstream is reached.
pub enum Upstream {
    Http {
        url: String,
        http: reqwest::Client,
        timeouts: Timeouts,
    },
    Ws {
        url: String,
        timeout: Duration,
        /// The connection, made when first needed and again after it drops.
        client: Mutex<Option<std::sync::Arc<WsClient>>>,
    },
}

/// Why an upstream URL was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("upstream URL must start with http://, https:// or ws:// (got {0})")]
pub struct UpstreamUrlError(String);

impl Upstream {
    /// An upstream from its URL.
    pub fn new(url: &str, timeouts: Timeouts) -> Result<Self, UpstreamUrlError> {
        if url.starts_with("ws://") {
            Ok(Upstream::Ws {
                url: url.to_string(),
                timeout: timeouts.request,
                client: Mutex::new(None),
            })
        } else if url.starts_with("http://") || url.starts_with("https://") {
            Ok(Upstream::Http {
                url: url.to_string(),
                http: reqwest::Client::builder()
                    .connect_timeout(timeouts.connect)
                    .build()
                    .map_err(|_| UpstreamUrlError(redact(url)))?,
                timeouts,
            })
        } else {
            Err(UpstreamUrlError(redact(url)))
        }
    }

    /// Whether subscriptions can be forwarded.
    pub fn is_websocket(&self) -> bool {
        matches!(self, Upstream::Ws { .. })
    }

    /// Forwards one call: the upstream's result, or its error as it sent
    /// it, or [`UPSTREAM_UNAVAILABLE`].
    pub async fn call(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> Result<Box<RawValue>, ErrorObjectOwned> {
        match self {
            Upstream::Http {
                url,
                http,
                timeouts,
            } => http_call(http, url, *timeouts, method, params, true).await,
            Upstream::Ws { .. } => {
                let client = self.ws_client().await?;
                client
                    .request::<Box<RawValue>, _>(method, RawParams(params))
                    .await
                    .map_err(client_error)
            }
        }
    }

    /// Forwards a notification; nothing comes back.
    pub async fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let sent = match self {
            Upstream::Http {
                url,
                http,
                timeouts,
            } => http_call(http, url, *timeouts, method, params, false)
                .await
                .map(|_| ()),
            Upstream::Ws { .. } => match self.ws_client().await {
                Ok(c) => c
                    .notification(method, RawParams(params))
                    .await
                    .map_err(client_error),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = sent {
            tracing::debug!(method, error = %e.message(), "forwarded notification failed");
        }
    }

    /// Opens an `eth_subscribe` subscription upstream (WebSocket only).
    pub async fn subscribe(
        &self,
        params: Option<Box<RawValue>>,
    ) -> Result<Subscription<Box<RawValue>>, ErrorObjectOwned> {
        if !self.is_websocket() {
            return Err(subscriptions_unavailable());
        }
        let client = self.ws_client().await?;
        client
            .subscribe::<Box<RawValue>, _>("eth_subscribe", RawParams(params), "eth_unsubscribe")
            .await
            .map_err(client_error)
    }

    async fn ws_client(&self) -> Result<std::sync::Arc<WsClient>, ErrorObjectOwned> {
        let Upstream::Ws {
            url,
            timeout,
            client,
        } = self
        else {
            return Err(subscriptions_unavailable());
        };
        let mut slot = client.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_connected()) {
            return Ok(c.clone());
        }
        let made = WsClientBuilder::default()
            .request_timeout(*timeout)
            .connection_timeout(*timeout)
            .build(url)
            .await
            .map_err(|e| {
                tracing::warn!(upstream = %redact(url), error = %e, "cannot connect to the upstream");
                unavailable("upstream unavailable")
            })?;
        let made = std::sync::Arc::new(made);
        *slot = Some(made.clone());
        Ok(made)
    }
}

/// The error a wallet gets for `eth_subscribe` without a WebSocket upstream.
pub fn subscriptions_unavailable() -> ErrorObjectOwned {
    rpc_error(
        crate::rpc::METHOD_NOT_FOUND,
        "subscriptions need a WebSocket upstream (upstream = \"ws://...\"); none is configured",
        None,
    )
}

fn unavailable(message: &str) -> ErrorObjectOwned {
    rpc_error(UPSTREAM_UNAVAILABLE, message, None)
}

fn client_error(e: ClientError) -> ErrorObjectOwned {
    match e {
        ClientError::Call(err) => err,
        other => {
            tracing::debug!(error = %other, "upstream call failed");
            rpc_error(
                UPSTREAM_UNAVAILABLE,
                "upstream unavailable",
                Some(json!(other.to_string())),
            )
        }
    }
}

/// One JSON-RPC call over HTTP (`with_id`: a call; else a notification),
/// its answer read within the proxy's response limit and timeouts.
async fn http_call(
    http: &reqwest::Client,
    url: &str,
    timeouts: Timeouts,
    method: &str,
    params: Option<Box<RawValue>>,
    with_id: bool,
) -> Result<Box<RawValue>, ErrorObjectOwned> {
    let mut body = json!({"jsonrpc": "2.0", "method": method});
    if with_id {
        body["id"] = json!(1);
    }
    if let Some(p) = params {
        body["params"] = serde_json::from_str(p.get()).unwrap_or(Value::Null);
    }
    let request = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    let bounds = Bounds {
        size: Size::AtMost(MAX_RESPONSE_BYTES as u64),
        first_byte: timeouts.first_byte,
        whole: timeouts.request,
    };
    let bytes = fetch(request, "upstream", bounds, &|_| {})
        .await
        .map_err(|e| {
            rpc_error(
                UPSTREAM_UNAVAILABLE,
                "upstream unavailable",
                Some(json!(e.to_string())),
            )
        })?
        .body;
    if !with_id {
        return Ok(RawValue::from_string("null".into()).expect("valid JSON"));
    }
    let reply: Value = serde_json::from_slice(&bytes).map_err(|e| {
        rpc_error(
            UPSTREAM_UNAVAILABLE,
            "upstream sent an unreadable reply",
            Some(json!(e.to_string())),
        )
    })?;
    if let Some(result) = reply.get("result") {
        return Ok(serde_json::value::to_raw_value(result).expect("a JSON value"));
    }
    match reply.get("error") {
        Some(err) => Err(rpc_error(
            err.get("code").and_then(Value::as_i64).unwrap_or(-32603),
            err.get("message")
                .and_then(Value::as_str)
                .unwrap_or("upstream error"),
            err.get("data").cloned(),
        )),
        None => Err(unavailable("upstream sent an unexpected reply")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_schemes_are_refused_without_echoing_secrets() {
        let e = Upstream::new("ftp://h/SECRET", Timeouts::default())
            .err()
            .unwrap();
        assert!(!e.to_string().contains("SECRET"), "{e}");
    }
}

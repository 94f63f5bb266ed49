//! The proxy's page for a person: `GET /` serves one self-contained HTML
//! page (no external assets: it works offline) that shows what stayed
//! private and what did not, refreshed every few seconds from `GET
//! /status.json` (the same data, documented in docs/operations.md).
//!
//! Both are read-only and answered only to a browser on this machine: a
//! request whose `Host` is not a loopback name is refused (403), so that a
//! web page elsewhere cannot read them through a rebound DNS name, and no
//! CORS header lets another origin read them. Other requests (JSON-RPC
//! POSTs, WebSocket upgrades) pass through untouched.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use alloy_primitives::Address;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use serde::Serialize;

use crate::activity::{Activity, Report, Traffic, WarningKind};
use crate::api::{PrivateReads, Status};
use crate::rpc::RpcContext;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The page's template ([`protocol::page`]).
const PAGE: &str = include_str!("../assets/status.html");

/// `GET /status.json`: the page's data.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageStatus {
    /// `ethpir_status`'s answer.
    pub status: Status,
    /// The newest view's block behind the upstream's head, in blocks.
    pub lag_blocks: Option<u64>,
    pub attestation: Attestation,
    pub activity: Report,
    /// Where `eth_sendRawTransaction` goes: `send_upstream`'s scheme and
    /// host, or `None` for the upstream.
    pub sends_to: Option<String>,
}

/// Who must have signed a view for this proxy to read it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Attestation {
    /// The attesters required (`attesters`); empty: none required.
    pub required: Vec<Address>,
    pub quorum: usize,
    /// Signatures the newest view's levels carry (checked only when
    /// attesters are required).
    pub signatures_on_view: usize,
}

/// What the page is made from.
pub struct PageSource {
    pub ctx: RpcContext,
    pub activity: Arc<Activity>,
    pub attesters: Vec<Address>,
    pub quorum: usize,
    /// `send_upstream`, redacted.
    pub sends_to: Option<String>,
}

impl PageSource {
    /// The page's data now.
    pub async fn status(&self) -> PageStatus {
        let status = self.ctx.status_now().await;
        if let PrivateReads::Stopped(reason) = &status.private_reads {
            self.activity.warn(
                WarningKind::Verification,
                format!("the PIR server failed verification: private reads stopped ({reason})"),
            );
        }
        for tier in &status.forged_tiers {
            self.activity.warn(
                WarningKind::ForgedTier,
                format!("the PIR server's hot tier {tier} holds a value its base disagrees with (forged by its operator): this wallet's own keys were answered by PIR; the values that name no one still come from the tier (set hot_tier = \"off\" to read them by PIR)"),
            );
        }
        let reader = &self.ctx.reader;
        let signatures_on_view = reader
            .newest_view()
            .iter()
            .flat_map(|v| v.snapshots.iter())
            .filter_map(|id| reader.entry(id))
            .map(|e| e.attestations.len())
            .sum();
        PageStatus {
            lag_blocks: status
                .head_block
                .zip(status.view_block)
                .map(|(head, view)| head.saturating_sub(view)),
            status,
            attestation: Attestation {
                required: self.attesters.clone(),
                quorum: self.quorum,
                signatures_on_view,
            },
            activity: self.activity.report(),
            sends_to: self.sends_to.clone(),
        }
    }
}

/// The reader's byte counters: lookups' queries up and answers down,
/// and the rest (catalogs, setups, tables) as background.
pub fn reader_traffic(reader: &ethpir_client::PrivateReader) -> Traffic {
    let (up, down) = reader.traffic();
    let (lookup_up, lookup_down) = reader.lookup_traffic();
    Traffic {
        up: lookup_up,
        down: lookup_down,
        background: (up + down).saturating_sub(lookup_up + lookup_down),
    }
}

/// The layer that serves the page in front of the JSON-RPC server.
#[derive(Clone)]
pub struct PageLayer(pub Arc<PageSource>);

impl<S> tower::Layer<S> for PageLayer {
    type Service = Page<S>;

    fn layer(&self, inner: S) -> Page<S> {
        Page {
            inner,
            source: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Page<S> {
    inner: S,
    source: Arc<PageSource>,
}

/// What a GET asks for.
enum Asked {
    Html,
    Json,
}

fn asked(req: &HttpRequest) -> Option<Asked> {
    if req.method() != http::Method::GET || req.headers().contains_key(http::header::UPGRADE) {
        return None;
    }
    match req.uri().path() {
        "/" => Some(Asked::Html),
        "/status.json" => Some(Asked::Json),
        _ => None,
    }
}

/// Whether the request's `Host` names this machine (a loopback address
/// or `localhost`, any port).
fn host_is_local(req: &HttpRequest) -> bool {
    let Some(host) = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn response(status: http::StatusCode, content_type: &'static str, body: String) -> HttpResponse {
    let mut r = HttpResponse::new(HttpBody::from(body));
    *r.status_mut() = status;
    let headers = r.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    headers.insert(
        http::header::CONTENT_SECURITY_POLICY,
        http::HeaderValue::from_static(protocol::page::CSP),
    );
    headers.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    r
}

/// The page with `status` in place.
fn html(status: &PageStatus) -> String {
    let json = serde_json::to_string(status).expect("the status serialises");
    protocol::page::fill(PAGE, &json)
}

impl<S> tower::Service<HttpRequest> for Page<S>
where
    S: tower::Service<HttpRequest, Response = HttpResponse, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: HttpRequest) -> Self::Future {
        let Some(asked) = asked(&req) else {
            // The clone that was made ready is the one that serves this call.
            let clone = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, clone);
            return Box::pin(async move { inner.call(req).await });
        };
        let source = self.source.clone();
        let local = host_is_local(&req);
        // A browser sends no `Origin` with the page's own GETs (same
        // origin); a browser extension's or another page's fetch carries
        // one, and any page can reach the proxy through a wallet
        // extension: the counters would tell it what the wallet read.
        let from_browser = req.headers().contains_key(http::header::ORIGIN);
        Box::pin(async move {
            let refused = match (local, from_browser) {
                (false, _) => Some("the status page is served to this machine only (Host must be localhost or a loopback address)"),
                (true, true) => Some("the status page's data is not served to web pages or browser extensions (a request with an Origin)"),
                (true, false) => None,
            };
            if let Some(why) = refused {
                return Ok(response(
                    http::StatusCode::FORBIDDEN,
                    "text/plain; charset=utf-8",
                    why.into(),
                ));
            }
            let status = source.status().await;
            Ok(match asked {
                Asked::Html => response(
                    http::StatusCode::OK,
                    "text/html; charset=utf-8",
                    html(&status),
                ),
                Asked::Json => response(
                    http::StatusCode::OK,
                    "application/json",
                    serde_json::to_string(&status).expect("the status serialises"),
                ),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(host: Option<&str>, path: &str) -> HttpRequest {
        let mut req = http::Request::get(path);
        if let Some(host) = host {
            req = req.header(http::header::HOST, host);
        }
        req.body(HttpBody::from(String::new())).unwrap()
    }

    #[test]
    fn only_this_machines_names_are_served() {
        for host in [
            "localhost:8545",
            "127.0.0.1:8545",
            "127.0.0.1",
            "[::1]:8545",
            "LOCALHOST",
        ] {
            assert!(host_is_local(&get(Some(host), "/")), "{host}");
        }
        for host in ["evil.example:8545", "10.0.0.1:8545", "[::2]:1", ""] {
            assert!(!host_is_local(&get(Some(host), "/")), "{host}");
        }
        assert!(!host_is_local(&get(None, "/")));
    }

    #[test]
    fn gets_of_the_page_and_its_data_are_answered_the_rest_passes() {
        assert!(matches!(asked(&get(None, "/")), Some(Asked::Html)));
        assert!(matches!(
            asked(&get(None, "/status.json")),
            Some(Asked::Json)
        ));
        assert!(asked(&get(None, "/other")).is_none());
        let upgrade = http::Request::get("/")
            .header(http::header::UPGRADE, "websocket")
            .body(HttpBody::from(String::new()))
            .unwrap();
        assert!(asked(&upgrade).is_none(), "a WebSocket upgrade passes");
        let post = http::Request::post("/")
            .body(HttpBody::from(String::new()))
            .unwrap();
        assert!(asked(&post).is_none());
    }

    #[test]
    fn the_page_is_a_template() {
        assert!(protocol::page::is_template(PAGE));
    }
}

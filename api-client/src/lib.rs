//! # api-client
//!
//! The PIR server's HTTP API as a client sees it: every request names its
//! route with [`protocol::routes::ApiPath`] (the one place paths are
//! spelled, shared with the server's router), and every answer is read
//! within bounds by [`fetch`] before a byte of it is used. The wallet's
//! client crate, the server's shard router, the replica's `pull` and the
//! benchmarks all talk to a server through [`ApiClient`].
#![forbid(unsafe_code)]

pub mod fetch;

use std::time::Duration;

use protocol::api::{ApiError, CatalogListing};
use protocol::routes::{ApiPath, Health};
use reqwest::header::{HeaderName, HeaderValue};

pub use fetch::{fetch, fetch_streamed, Bounds, FetchError, Fetched, Size, Streamed};

/// Where every HTTP client that talks to a PIR server starts: with the
/// `rustls` feature, TLS by rustls on ring (installed as the process's
/// provider unless the program installed one first: reqwest's rustls
/// panics without one).
pub fn http_builder() -> reqwest::ClientBuilder {
    #[cfg(feature = "rustls")]
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder().tls_backend_rustls()
    }
    #[cfg(not(feature = "rustls"))]
    reqwest::Client::builder()
}

/// Why a typed call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The server answered with an error status (and its message, if it
    /// sent one as the API's JSON error).
    #[error("{what}: HTTP {status} {message}")]
    Status {
        what: String,
        status: u16,
        message: String,
    },
    /// The answer is not the route's type, or fails its checks.
    #[error("{what}: {reason}")]
    Malformed { what: String, reason: String },
}

/// One PIR server: its base URL and the HTTP client that reaches it.
#[derive(Clone, Debug)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
}

impl ApiClient {
    pub fn new(http: reqwest::Client, base: &str) -> Self {
        ApiClient {
            http,
            base: base.trim_end_matches('/').to_string(),
        }
    }

    /// The server's URL (redact it before logging).
    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: ApiPath<'_>) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path` with `headers`, read within `bounds`.
    pub async fn get(
        &self,
        path: ApiPath<'_>,
        what: &str,
        headers: &[(HeaderName, HeaderValue)],
        bounds: Bounds,
        on_bytes: &(dyn Fn(u64) + Sync),
    ) -> Result<Fetched, FetchError> {
        let mut request = self.http.get(self.url(path));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        fetch(request, what, bounds, on_bytes).await
    }

    /// `POST /v1/query` of `body` (a [`protocol::multi`] request), the
    /// answer read within `bounds`.
    pub async fn query(
        &self,
        body: bytes::Bytes,
        what: &str,
        bounds: Bounds,
        on_bytes: &(dyn Fn(u64) + Sync),
    ) -> Result<Fetched, FetchError> {
        let request = self.http.post(self.url(ApiPath::Query)).body(body);
        fetch(request, what, bounds, on_bytes).await
    }

    /// `GET path` with its successful body streamed into `sink`.
    pub async fn get_streamed(
        &self,
        path: ApiPath<'_>,
        what: &str,
        bounds: Bounds,
        sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
    ) -> Result<Streamed, FetchError> {
        fetch_streamed(self.http.get(self.url(path)), what, bounds, sink).await
    }

    /// `GET /healthz`, within `timeout`.
    pub async fn health(&self, timeout: Duration) -> Result<Health, CallError> {
        self.get_json(ApiPath::Health, "healthz", timeout).await
    }

    /// `GET /v1/snapshots` (no ETag), within `timeout`, checked as a client
    /// checks a catalog before it uses any of it.
    pub async fn catalog(&self, timeout: Duration) -> Result<CatalogListing, CallError> {
        let listing: CatalogListing = self.get_json(ApiPath::Catalog, "catalog", timeout).await?;
        listing.checked().map_err(|e| CallError::Malformed {
            what: "catalog".into(),
            reason: e.to_string(),
        })
    }

    /// A JSON answer of a route whose answers have a fixed bound.
    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: ApiPath<'_>,
        what: &str,
        timeout: Duration,
    ) -> Result<T, CallError> {
        let bounds = Bounds {
            // Typed calls are made on routes with a fixed bound only.
            size: Size::AtMost(
                path.route()
                    .max_answer_bytes()
                    .unwrap_or(fetch::MAX_ERROR_BODY),
            ),
            first_byte: timeout,
            whole: timeout,
            idle: None,
        };
        let fetched = self.get(path, what, &[], bounds, &|_| {}).await?;
        let body = success(fetched, what)?;
        serde_json::from_slice(&body).map_err(|e| CallError::Malformed {
            what: what.into(),
            reason: e.to_string(),
        })
    }
}

/// The body of a successful answer, or the server's error.
pub fn success(fetched: Fetched, what: &str) -> Result<Vec<u8>, CallError> {
    if fetched.status.is_success() {
        return Ok(fetched.body);
    }
    Err(CallError::Status {
        what: what.into(),
        status: fetched.status.as_u16(),
        message: serde_json::from_slice::<ApiError>(&fetched.body)
            .map(|e| e.error)
            .unwrap_or_default(),
    })
}

//! The HTTP connection under jsonrpsee's client, made through a SOCKS5
//! proxy where one is set (`upstream_proxy`, `send_proxy`). jsonrpsee's own
//! connector dials the node directly, so a route through SOCKS hands each
//! request to reqwest, whose connector speaks SOCKS5 (with the route's
//! credentials: Tor puts each pair on a circuit of its own). jsonrpsee
//! still frames the calls, bounds the answer's bytes and times the
//! request; only the connection changes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use jsonrpsee::core::http_helpers::HttpError;
use jsonrpsee::core::BoxError;
use jsonrpsee::http_client::transport::Error as TransportError;
use jsonrpsee::http_client::{HttpBackend, HttpRequest, HttpResponse};
use tower::{Layer, Service};

/// An answer's body, whichever route brought it.
pub type AnswerBody = UnsyncBoxBody<bytes::Bytes, BoxError>;

/// Picks the route of every request: jsonrpsee's direct connection, or
/// `socks` (a reqwest client whose every connection goes through the
/// SOCKS5 proxy) when set.
#[derive(Clone)]
pub struct RouteLayer {
    pub socks: Option<reqwest::Client>,
}

impl Layer<HttpBackend> for RouteLayer {
    type Service = Route;

    fn layer(&self, direct: HttpBackend) -> Route {
        match &self.socks {
            Some(client) => Route::Socks(client.clone()),
            None => Route::Direct(Box::new(direct)),
        }
    }
}

/// How an upstream's HTTP requests travel.
#[derive(Clone)]
pub enum Route {
    /// jsonrpsee's own connection, straight to the node.
    Direct(Box<HttpBackend>),
    /// Through the SOCKS5 proxy.
    Socks(reqwest::Client),
}

type Answer = Result<HttpResponse<AnswerBody>, TransportError>;

fn stream_error(e: impl Into<BoxError>) -> TransportError {
    TransportError::Http(HttpError::Stream(e.into()))
}

impl Service<HttpRequest> for Route {
    type Response = HttpResponse<AnswerBody>;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Answer> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TransportError>> {
        match self {
            Route::Direct(direct) => direct.poll_ready(cx),
            Route::Socks(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, request: HttpRequest) -> Self::Future {
        match self {
            Route::Direct(direct) => {
                let answer = direct.call(request);
                Box::pin(async move {
                    let answer = answer.await?;
                    Ok(answer.map(|body| body.map_err(BoxError::from).boxed_unsync()))
                })
            }
            Route::Socks(client) => Box::pin(through_socks(client.clone(), request)),
        }
    }
}

/// One request through the SOCKS5 proxy: the body (a JSON-RPC call,
/// bounded by jsonrpsee before it gets here) collected, sent by reqwest,
/// the answer's body streamed back for jsonrpsee to bound.
async fn through_socks(client: reqwest::Client, request: HttpRequest) -> Answer {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.map_err(stream_error)?.to_bytes();
    let request = reqwest::Request::try_from(http::Request::from_parts(parts, body))
        .map_err(|e| stream_error(e.without_url()))?;
    let answer = client
        .execute(request)
        .await
        .map_err(|e| stream_error(e.without_url()))?;
    let answer = http::Response::from(answer);
    Ok(answer.map(|body| body.map_err(BoxError::from).boxed_unsync()))
}

//! Browsers, as geth treats them. A proxy on loopback is reachable from
//! any web page the user visits: a page's "simple" request (a POST of
//! `text/plain`, a form, a body without a type) needs no CORS preflight
//! and would be executed, and a WebSocket is not subject to CORS at all.
//! So, in front of everything else:
//!
//! - a request whose `Origin` is neither a browser extension's
//!   (`chrome-extension://`, `moz-extension://`: wallets such as MetaMask
//!   run there, and are not subject to CORS) nor listed in `cors_origins`
//!   is refused with 403, WebSocket upgrades included;
//! - a POST whose body is not `application/json` gets 415 (a request
//!   without a `Content-Type` and without an `Origin` is read as JSON:
//!   curl users forget the header, and no browser sends such a request);
//! - CORS is granted only to the listed origins (a preflight `OPTIONS`
//!   and the response's `Access-Control-Allow-Origin`);
//! - a request that carries an `Origin` is marked ([`FromBrowser`]), so
//!   that a method only the user may call (`ethpir_trustReset`) is never
//!   run for a page or an extension.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Set in a request's extensions when it carried an `Origin` header: it
/// came from a web page or a browser extension, not from the user.
#[derive(Clone, Copy, Debug)]
pub struct FromBrowser;

/// Where a request came from, by its `Origin`.
#[derive(Debug, PartialEq, Eq)]
enum Source {
    /// No `Origin`: a program (curl, cast, a script, a desktop wallet).
    Program,
    /// A browser extension (a wallet).
    Extension,
    /// An origin the user listed in `cors_origins`.
    Listed(http::HeaderValue),
    /// Any other web page.
    Foreign,
}

/// The origins a user allows, from `cors_origins`.
#[derive(Clone, Debug, Default)]
pub struct BrowserLayer {
    allowed: Arc<Vec<String>>,
}

impl BrowserLayer {
    pub fn new(cors_origins: &[String]) -> Self {
        let allowed = cors_origins
            .iter()
            .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
            .collect();
        BrowserLayer {
            allowed: Arc::new(allowed),
        }
    }

    fn source(&self, req: &HttpRequest) -> Source {
        let Some(origin) = req.headers().get(http::header::ORIGIN) else {
            return Source::Program;
        };
        let text = origin.to_str().unwrap_or_default().to_ascii_lowercase();
        if text.starts_with("chrome-extension://") || text.starts_with("moz-extension://") {
            return Source::Extension;
        }
        match self.allowed.iter().any(|a| a == "*" || *a == text) {
            true => Source::Listed(origin.clone()),
            false => Source::Foreign,
        }
    }
}

impl<S> tower::Layer<S> for BrowserLayer {
    type Service = Browser<S>;

    fn layer(&self, inner: S) -> Browser<S> {
        Browser {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Browser<S> {
    inner: S,
    layer: BrowserLayer,
}

fn plain(status: http::StatusCode, text: &'static str) -> HttpResponse {
    let mut r = HttpResponse::new(HttpBody::from(text));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Whether a POST's `Content-Type` says JSON (parameters such as a
/// charset allowed).
fn is_json(req: &HttpRequest) -> Option<bool> {
    let value = req.headers().get(http::header::CONTENT_TYPE)?;
    let media = value.to_str().unwrap_or_default();
    let media = media.split(';').next().unwrap_or_default().trim();
    Some(media.eq_ignore_ascii_case("application/json"))
}

/// A preflight's answer for a listed origin.
fn preflight(origin: http::HeaderValue) -> HttpResponse {
    let mut r = HttpResponse::new(HttpBody::from(Vec::new()));
    *r.status_mut() = http::StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    h.insert(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        http::header::ACCESS_CONTROL_ALLOW_METHODS,
        http::HeaderValue::from_static("POST, GET, OPTIONS"),
    );
    h.insert(
        http::header::ACCESS_CONTROL_ALLOW_HEADERS,
        http::HeaderValue::from_static("content-type"),
    );
    h.insert(
        http::header::ACCESS_CONTROL_MAX_AGE,
        http::HeaderValue::from_static("600"),
    );
    h.insert(http::header::VARY, http::HeaderValue::from_static("origin"));
    r
}

/// What to do with a request before the rest of the stack sees it: an
/// answer now, or pass it on (granting CORS to `grant`).
fn judge(
    layer: &BrowserLayer,
    req: &HttpRequest,
) -> Result<Option<http::HeaderValue>, Box<HttpResponse>> {
    let source = layer.source(req);
    if source == Source::Foreign {
        tracing::info!(origin = ?req.headers().get(http::header::ORIGIN), "a request from a web page not in cors_origins: refused");
        return Err(Box::new(plain(
            http::StatusCode::FORBIDDEN,
            "origin not allowed (cors_origins)\n",
        )));
    }
    if req.method() == http::Method::OPTIONS {
        return match source {
            Source::Listed(origin) => Err(Box::new(preflight(origin))),
            _ => Err(Box::new(plain(http::StatusCode::NO_CONTENT, ""))),
        };
    }
    if req.method() == http::Method::POST {
        let json_ok = match is_json(req) {
            Some(json) => json,
            None => source == Source::Program,
        };
        if !json_ok {
            return Err(Box::new(plain(
                http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "JSON-RPC needs Content-Type: application/json\n",
            )));
        }
    }
    Ok(match source {
        Source::Listed(origin) => Some(origin),
        _ => None,
    })
}

impl<S> tower::Service<HttpRequest> for Browser<S>
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

    fn call(&mut self, mut req: HttpRequest) -> Self::Future {
        // The clone that was made ready is the one that serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let judged = judge(&self.layer, &req);
        if req.headers().contains_key(http::header::ORIGIN) {
            req.extensions_mut().insert(FromBrowser);
        }
        Box::pin(async move {
            let grant = match judged {
                Err(answer) => return Ok(*answer),
                Ok(grant) => grant,
            };
            let mut resp = inner.call(req).await?;
            if let Some(origin) = grant {
                let h = resp.headers_mut();
                h.insert(http::header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
                h.insert(http::header::VARY, http::HeaderValue::from_static("origin"));
            }
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: http::Method, headers: &[(&str, &str)]) -> HttpRequest {
        let mut b = http::Request::builder().method(method).uri("/");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(HttpBody::from(Vec::new())).unwrap()
    }

    fn status(layer: &BrowserLayer, req: HttpRequest) -> Option<http::StatusCode> {
        judge(layer, &req).err().map(|r| r.status())
    }

    #[test]
    fn pages_are_refused_and_extensions_and_programs_pass() {
        use http::Method;
        let layer = BrowserLayer::new(&["http://wallet.example".into()]);
        let json = ("content-type", "application/json");
        let evil = ("origin", "http://evil.example");
        // A simple request from a page: no preflight, refused here.
        let text = ("content-type", "text/plain;charset=UTF-8");
        assert_eq!(
            status(&layer, request(Method::POST, &[evil, text])),
            Some(http::StatusCode::FORBIDDEN)
        );
        assert_eq!(
            status(&layer, request(Method::POST, &[evil, json])),
            Some(http::StatusCode::FORBIDDEN)
        );
        let upgrade = [evil, ("upgrade", "websocket"), ("connection", "upgrade")];
        assert_eq!(
            status(&layer, request(Method::GET, &upgrade)),
            Some(http::StatusCode::FORBIDDEN)
        );
        // An extension wallet: JSON passes, anything else is 415.
        let ext = (
            "origin",
            "chrome-extension://nkbihfbeogaeaoehlefnkodbefgpgknn",
        );
        assert_eq!(status(&layer, request(Method::POST, &[ext, json])), None);
        assert_eq!(
            status(&layer, request(Method::POST, &[ext, text])),
            Some(http::StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
        assert_eq!(
            status(&layer, request(Method::POST, &[ext])),
            Some(http::StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
        // curl without a type still works; with a wrong one, 415.
        assert_eq!(status(&layer, request(Method::POST, &[])), None);
        assert_eq!(
            status(&layer, request(Method::POST, &[text])),
            Some(http::StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
        assert_eq!(
            status(
                &layer,
                request(
                    Method::POST,
                    &[("content-type", "application/json; charset=utf-8")]
                )
            ),
            None
        );
        // A listed origin gets a preflight's grant.
        let listed = ("origin", "http://wallet.example");
        let pre = judge(&layer, &request(Method::OPTIONS, &[listed])).unwrap_err();
        assert_eq!(
            pre.headers()[http::header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "http://wallet.example"
        );
        assert_eq!(
            judge(&layer, &request(Method::POST, &[listed, json]))
                .unwrap()
                .unwrap(),
            "http://wallet.example"
        );
        // Unlisted: no grant anywhere.
        let none = BrowserLayer::new(&[]);
        assert_eq!(
            status(&none, request(Method::OPTIONS, &[listed])),
            Some(http::StatusCode::FORBIDDEN)
        );
        assert_eq!(
            status(&none, request(Method::POST, &[("origin", "null"), json])),
            Some(http::StatusCode::FORBIDDEN)
        );
    }
}

//! An HTTP layer in front of jsonrpsee that holds JSON-RPC 2.0's envelope
//! rules where jsonrpsee is lenient, so that a malformed request gets the
//! error the specification names and never a silent drop:
//!
//! - a body that is JSON but neither an object nor an array: -32600
//!   (jsonrpsee says -32700);
//! - an `id` that is not a string, a number or null: -32600 (jsonrpsee reads
//!   the call as a notification and answers nothing);
//! - a body of notifications only: `204 No Content`;
//! - no `Content-Type`: read as JSON (curl users forget it);
//! - a body over the limit: `413`, judged from its declared length first.
//!
//! WebSocket upgrades pass through untouched.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use serde_json::Value;

use crate::error::ProxyError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Largest JSON-RPC request body accepted.
pub const MAX_BODY: usize = 4 << 20;
/// Largest oversized body read (and dropped) before answering 413.
const DRAIN_LIMIT: usize = 4 * MAX_BODY;

#[derive(Clone, Copy, Debug, Default)]
pub struct EnvelopeLayer;

impl<S> tower::Layer<S> for EnvelopeLayer {
    type Service = Envelope<S>;

    fn layer(&self, inner: S) -> Envelope<S> {
        Envelope { inner }
    }
}

#[derive(Clone, Debug)]
pub struct Envelope<S> {
    inner: S,
}

/// What to do with a request body.
enum Verdict {
    /// Pass these bytes on.
    Pass(Vec<u8>),
    /// Answer this JSON at once.
    Answer(Value),
}

fn invalid(message: &'static str) -> Value {
    ProxyError::InvalidRequest(message).response_without_id()
}

fn id_ok(call: &serde_json::Map<String, Value>) -> bool {
    matches!(
        call.get("id"),
        None | Some(Value::Null | Value::String(_) | Value::Number(_))
    )
}

/// Checks the envelope of a parsed body.
fn judge(body: Vec<u8>) -> Verdict {
    let Ok(parsed) = serde_json::from_slice::<Value>(&body) else {
        return Verdict::Pass(body); // not JSON: jsonrpsee's -32700
    };
    match parsed {
        Value::Object(call) if !id_ok(&call) => {
            Verdict::Answer(invalid("id must be a string, a number or null"))
        }
        Value::Object(_) => Verdict::Pass(body),
        Value::Array(calls)
            if calls
                .iter()
                .any(|c| c.as_object().is_some_and(|o| !id_ok(o))) =>
        {
            // Such an entry becomes `null`, which jsonrpsee answers with
            // -32600 in its place; the others run as usual.
            let calls: Vec<Value> = calls
                .into_iter()
                .map(|c| match c.as_object() {
                    Some(o) if !id_ok(o) => Value::Null,
                    _ => c,
                })
                .collect();
            Verdict::Pass(Value::Array(calls).to_string().into_bytes())
        }
        Value::Array(_) => Verdict::Pass(body),
        _ => Verdict::Answer(invalid("a request must be an object or an array of them")),
    }
}

fn json_response(status: http::StatusCode, body: Vec<u8>) -> HttpResponse {
    let mut r = HttpResponse::new(HttpBody::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn too_large() -> HttpResponse {
    let body = invalid("request body too large").to_string();
    json_response(http::StatusCode::PAYLOAD_TOO_LARGE, body.into_bytes())
}

impl<S> tower::Service<HttpRequest> for Envelope<S>
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
        // The clone that was made ready is the one that serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            if req.method() != http::Method::POST {
                return inner.call(req).await; // WebSocket upgrades, health checks
            }
            let (mut parts, body) = req.into_parts();
            let declared = parts
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(n) = declared.filter(|&n| n > MAX_BODY as u64) {
                // A body a little over the limit is read and dropped, so that
                // the client finishes sending and reads the 413; a far larger
                // one is refused at once and the connection closed.
                if n <= DRAIN_LIMIT as u64 {
                    let drained = http_body_util::Limited::new(body, DRAIN_LIMIT);
                    let _ = http_body_util::BodyExt::collect(drained).await;
                }
                return Ok(too_large());
            }
            let limited = http_body_util::Limited::new(body, MAX_BODY);
            let bytes = match http_body_util::BodyExt::collect(limited).await {
                Ok(b) => b.to_bytes().to_vec(),
                Err(_) => return Ok(too_large()),
            };
            let body = match judge(bytes) {
                Verdict::Answer(v) => {
                    return Ok(json_response(
                        http::StatusCode::OK,
                        v.to_string().into_bytes(),
                    ))
                }
                Verdict::Pass(b) => b,
            };
            parts.headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            parts.headers.insert(
                http::header::CONTENT_LENGTH,
                http::HeaderValue::from(body.len()),
            );
            let resp = inner
                .call(HttpRequest::from_parts(parts, HttpBody::from(body)))
                .await?;
            notification_to_no_content(resp).await
        })
    }
}

/// jsonrpsee answers a body of notifications with a 200 whose body is
/// empty or `null` (never a JSON-RPC response); HTTP says 204 for "nothing
/// to send".
async fn notification_to_no_content(resp: HttpResponse) -> Result<HttpResponse, BoxError> {
    if resp.status() != http::StatusCode::OK {
        return Ok(resp);
    }
    let (parts, body) = resp.into_parts();
    let bytes = http_body_util::BodyExt::collect(body).await?.to_bytes();
    if bytes.trim_ascii().is_empty() || bytes.trim_ascii() == b"null" {
        let mut r = HttpResponse::new(HttpBody::from(Vec::new()));
        *r.status_mut() = http::StatusCode::NO_CONTENT;
        return Ok(r);
    }
    Ok(HttpResponse::from_parts(
        parts,
        HttpBody::new(http_body_util::Full::new(bytes)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonrpsee::types::error::INVALID_REQUEST_CODE as INVALID_REQUEST;

    fn answer(body: &str) -> Option<Value> {
        match judge(body.as_bytes().to_vec()) {
            Verdict::Answer(v) => Some(v),
            Verdict::Pass(_) => None,
        }
    }

    #[test]
    fn envelopes() {
        assert_eq!(answer("42").unwrap()["error"]["code"], INVALID_REQUEST);
        assert_eq!(answer("\"x\"").unwrap()["error"]["code"], INVALID_REQUEST);
        assert_eq!(
            answer(r#"{"jsonrpc":"2.0","id":{},"method":"m"}"#).unwrap()["error"]["code"],
            INVALID_REQUEST
        );
        assert!(answer(r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#).is_none());
        assert!(answer("{not json").is_none());
        match judge(
            br#"[{"jsonrpc":"2.0","id":[1],"method":"m"},{"jsonrpc":"2.0","id":2,"method":"m"}]"#
                .to_vec(),
        ) {
            Verdict::Pass(b) => {
                let v: Value = serde_json::from_slice(&b).unwrap();
                assert_eq!(v[0], Value::Null);
                assert_eq!(v[1]["id"], 2);
            }
            Verdict::Answer(v) => panic!("{v}"),
        }
    }
}

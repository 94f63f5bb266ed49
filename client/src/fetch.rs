//! The one bounded reader of what a peer sends. Every download from the
//! PIR server (catalog, setup, table, query response) and every answer of
//! the proxy's upstream goes through [`fetch`]: the body is counted as it
//! streams (chunked bodies too) and refused the moment it passes its
//! limit; a declared length that cannot be right is refused before a byte
//! of the body is read; the response's headers must come within the
//! first-byte timeout and the whole body within the whole-request one. A
//! hostile or broken peer costs at most the limit in memory and the
//! timeout in time, and gets a clear error.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use tokio::time::Instant;

/// Largest body read from a response that is not a success (a JSON error
/// message).
pub const MAX_ERROR_BODY: u64 = 64 << 10;

/// How big a successful body may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Up to this many bytes.
    AtMost(u64),
    /// Exactly this many bytes (a query response, whose size the setup
    /// fixes): anything else is refused before it is parsed.
    Exactly(u64),
}

impl Size {
    fn limit(self) -> u64 {
        match self {
            Size::AtMost(n) | Size::Exactly(n) => n,
        }
    }
}

/// The bounds of one request.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub size: Size,
    /// From sending the request to the response's headers.
    pub first_byte: Duration,
    /// From sending the request to the body's last byte.
    pub whole: Duration,
}

/// Why a response was not read.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum FetchError {
    /// The connection could not be made or broke (no URL in the reason:
    /// hosted nodes put secrets in it).
    #[error("{what}: {reason}")]
    Transport { what: String, reason: String },
    #[error("{what}: no response within {secs} s")]
    FirstByte { what: String, secs: f64 },
    #[error("{what}: not received within {secs} s (the peer sends too slowly)")]
    Slow { what: String, secs: f64 },
    #[error("{what}: over the limit of {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    #[error("{what}: {got} bytes where exactly {expected} are expected")]
    WrongSize {
        what: String,
        got: u64,
        expected: u64,
    },
}

impl FetchError {
    /// Whether the peer sent more, or other, than it may (as opposed to a
    /// peer that is unreachable or slow).
    pub fn is_oversized(&self) -> bool {
        matches!(
            self,
            FetchError::TooLarge { .. } | FetchError::WrongSize { .. }
        )
    }
}

/// A response read whole within its bounds.
#[derive(Debug)]
pub struct Fetched {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

/// Sends `request` and reads its response within `bounds`; `what` names
/// it in errors, `on_bytes` is told of every chunk as it arrives (traffic
/// counters). A response that is not a success is read up to
/// [`MAX_ERROR_BODY`] and returned for the caller to judge.
pub async fn fetch(
    request: reqwest::RequestBuilder,
    what: &str,
    bounds: Bounds,
    on_bytes: &(dyn Fn(u64) + Sync),
) -> Result<Fetched, FetchError> {
    let deadline = Instant::now() + bounds.whole;
    let first_byte = bounds.first_byte.min(bounds.whole);
    let response = match tokio::time::timeout(first_byte, request.send()).await {
        Err(_) => {
            return Err(FetchError::FirstByte {
                what: what.into(),
                secs: first_byte.as_secs_f64(),
            })
        }
        Ok(Err(e)) => {
            return Err(FetchError::Transport {
                what: what.into(),
                reason: transport_reason(&e),
            })
        }
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    let size = match status.is_success() {
        true => bounds.size,
        false => Size::AtMost(MAX_ERROR_BODY),
    };
    if let Some(declared) = response.content_length() {
        check_size(what, size, declared, false)?;
    }
    let headers = response.headers().clone();
    let body = tokio::time::timeout_at(deadline, read_body(response, what, size, on_bytes))
        .await
        .map_err(|_| FetchError::Slow {
            what: what.into(),
            secs: bounds.whole.as_secs_f64(),
        })??;
    check_size(what, size, body.len() as u64, true)?;
    Ok(Fetched {
        status,
        headers,
        body,
    })
}

/// The body, refused as soon as it passes the limit.
async fn read_body(
    mut response: reqwest::Response,
    what: &str,
    size: Size,
    on_bytes: &(dyn Fn(u64) + Sync),
) -> Result<Vec<u8>, FetchError> {
    let limit = size.limit();
    // Reserve what a declared length promises, within the limit: a lying
    // header costs nothing more than the limit allows.
    let reserve = response.content_length().unwrap_or(0).min(limit);
    let mut body = Vec::with_capacity(reserve as usize);
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(body),
            Err(e) => {
                return Err(FetchError::Transport {
                    what: what.into(),
                    reason: transport_reason(&e),
                })
            }
        };
        on_bytes(chunk.len() as u64);
        if body.len() as u64 + chunk.len() as u64 > limit {
            return Err(FetchError::TooLarge {
                what: what.into(),
                limit,
            });
        }
        body.extend_from_slice(&chunk);
    }
}

/// Checks a declared (`complete` false) or received length against `size`.
fn check_size(what: &str, size: Size, got: u64, complete: bool) -> Result<(), FetchError> {
    match size {
        Size::AtMost(limit) | Size::Exactly(limit) if got > limit => Err(FetchError::TooLarge {
            what: what.into(),
            limit,
        }),
        Size::Exactly(expected) if got != expected && (complete || got < expected) => {
            Err(FetchError::WrongSize {
                what: what.into(),
                got,
                expected,
            })
        }
        _ => Ok(()),
    }
}

/// A transport error without the URL reqwest would print, and with its
/// causes (reqwest's own message is often just "error sending request").
fn transport_reason(e: &reqwest::Error) -> String {
    let mut reason = if e.is_connect() {
        "cannot connect".to_string()
    } else if e.is_body() || e.is_decode() {
        "the response broke off".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        reason.push_str(": ");
        reason.push_str(&s.to_string());
        source = s.source();
    }
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert!(check_size("x", Size::AtMost(10), 10, true).is_ok());
        assert!(check_size("x", Size::AtMost(10), 11, false).is_err());
        assert!(check_size("x", Size::Exactly(10), 10, false).is_ok());
        assert!(check_size("x", Size::Exactly(10), 9, false).is_err());
        assert!(check_size("x", Size::Exactly(10), 9, true).is_err());
        assert!(matches!(
            check_size("x", Size::Exactly(10), 11, true),
            Err(FetchError::TooLarge { .. })
        ));
    }
}

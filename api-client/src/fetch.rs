//! The one bounded reader of what a PIR server sends. Every download
//! from it (catalog, setup, table, code, file, query answer) goes through
//! [`fetch`] or [`fetch_streamed`]: the body is counted as it streams
//! (chunked bodies too) and refused the moment it passes its limit; a
//! declared length that cannot be right is refused before a byte of the
//! body is read; the response's headers must come within the first-byte
//! timeout and the whole body within the whole-request one. A hostile or
//! broken peer costs at most the limit in memory and the timeout in time,
//! and gets a clear error.

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
    /// The most bytes it allows.
    pub fn limit(self) -> u64 {
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
    /// Longest wait for the body's next bytes (`None`: only `whole`): a
    /// peer that stops sending is given up on without waiting out the
    /// whole, however large the body.
    pub idle: Option<Duration>,
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
    #[error("{what}: no bytes for {secs} s (the peer stopped sending)")]
    Stalled { what: String, secs: f64 },
    #[error("{what}: over the limit of {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    #[error("{what}: {got} bytes where exactly {expected} are expected")]
    WrongSize {
        what: String,
        got: u64,
        expected: u64,
    },
    /// A streamed body's sink failed (a disk full): not the peer's fault.
    #[error("{what}: keeping it failed: {reason}")]
    Sink { what: String, reason: String },
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
    let (response, size) = send(request, what, bounds).await?;
    let read = Reading::new(deadline, bounds, what, size, on_bytes);
    read.whole(response).await
}

/// A successful body streamed into a sink (a file) instead of memory.
#[derive(Debug)]
pub enum Streamed {
    /// The body went to the sink: this many bytes.
    Done(u64),
    /// Not a success: the status and its (bounded) error body; the sink
    /// was not called.
    Refused(Fetched),
}

/// [`fetch`] whose successful body goes to `sink` chunk by chunk as it
/// arrives, within the same bounds (a replica's files, never held whole).
pub async fn fetch_streamed(
    request: reqwest::RequestBuilder,
    what: &str,
    bounds: Bounds,
    sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
) -> Result<Streamed, FetchError> {
    let deadline = Instant::now() + bounds.whole;
    let (response, size) = send(request, what, bounds).await?;
    let read = Reading::new(deadline, bounds, what, size, &|_| {});
    if !response.status().is_success() {
        return Ok(Streamed::Refused(read.whole(response).await?));
    }
    let mut sunk = |chunk: &[u8]| {
        sink(chunk).map_err(|e| FetchError::Sink {
            what: what.into(),
            reason: e.to_string(),
        })
    };
    Ok(Streamed::Done(read.into(response, &mut sunk).await?))
}

/// Sends the request and waits for the headers within the first-byte
/// timeout; the response and the size its body may have (a failure's
/// body is read up to [`MAX_ERROR_BODY`]), its declared length checked.
async fn send(
    request: reqwest::RequestBuilder,
    what: &str,
    bounds: Bounds,
) -> Result<(reqwest::Response, Size), FetchError> {
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
    let size = match response.status().is_success() {
        true => bounds.size,
        false => Size::AtMost(MAX_ERROR_BODY),
    };
    if let Some(declared) = response.content_length() {
        check_size(what, size, declared, false)?;
    }
    Ok((response, size))
}

/// A sink's callback: takes one chunk of a body.
type Sink<'a> = dyn FnMut(&[u8]) -> Result<(), FetchError> + Send + 'a;

/// How one body is read: by when, how much, and who counts the bytes.
struct Reading<'a> {
    deadline: Instant,
    whole: Duration,
    idle: Option<Duration>,
    what: &'a str,
    size: Size,
    on_bytes: &'a (dyn Fn(u64) + Sync),
}

impl<'a> Reading<'a> {
    fn new(
        deadline: Instant,
        bounds: Bounds,
        what: &'a str,
        size: Size,
        on_bytes: &'a (dyn Fn(u64) + Sync),
    ) -> Self {
        Reading {
            deadline,
            whole: bounds.whole,
            idle: bounds.idle,
            what,
            size,
            on_bytes,
        }
    }

    /// The response with its body read whole into memory (reserving what
    /// a declared length promises, within the limit: a lying header costs
    /// nothing more than the limit allows).
    async fn whole(self, response: reqwest::Response) -> Result<Fetched, FetchError> {
        let status = response.status();
        let headers = response.headers().clone();
        let reserve = response
            .content_length()
            .unwrap_or(0)
            .min(self.size.limit());
        let mut body = Vec::with_capacity(reserve as usize);
        let mut keep = |chunk: &[u8]| {
            body.extend_from_slice(chunk);
            Ok(())
        };
        self.into(response, &mut keep).await?;
        Ok(Fetched {
            status,
            headers,
            body,
        })
    }

    /// Reads the body into `sink` by the deadline, refused as soon as it
    /// passes the limit and checked against the size when complete; the
    /// bytes read.
    async fn into(
        self,
        response: reqwest::Response,
        sink: &mut Sink<'_>,
    ) -> Result<u64, FetchError> {
        let what = self.what;
        let got = tokio::time::timeout_at(self.deadline, self.chunks(response, sink))
            .await
            .map_err(|_| FetchError::Slow {
                what: what.into(),
                secs: self.whole.as_secs_f64(),
            })??;
        check_size(what, self.size, got, true)?;
        Ok(got)
    }

    /// The body, chunk by chunk into `sink` (each counted as it arrives),
    /// refused as soon as it passes the limit.
    async fn chunks(
        &self,
        mut response: reqwest::Response,
        sink: &mut Sink<'_>,
    ) -> Result<u64, FetchError> {
        let limit = self.size.limit();
        let mut got = 0u64;
        loop {
            let next = match self.idle {
                Some(idle) => tokio::time::timeout(idle, response.chunk())
                    .await
                    .map_err(|_| FetchError::Stalled {
                        what: self.what.into(),
                        secs: idle.as_secs_f64(),
                    })?,
                None => response.chunk().await,
            };
            let chunk = match next {
                Ok(Some(c)) => c,
                Ok(None) => return Ok(got),
                Err(e) => {
                    return Err(FetchError::Transport {
                        what: self.what.into(),
                        reason: transport_reason(&e),
                    })
                }
            };
            (self.on_bytes)(chunk.len() as u64);
            got += chunk.len() as u64;
            if got > limit {
                return Err(FetchError::TooLarge {
                    what: self.what.into(),
                    limit,
                });
            }
            sink(&chunk)?;
        }
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

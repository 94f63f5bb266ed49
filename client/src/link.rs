//! The connection to one PIR server: its base URL, the HTTP client, the
//! timeouts, the traffic counters and the trust in it. Every request to
//! the server goes through here, and so through [`api_client`]'s typed
//! routes and bounds.

use api_client::ApiClient;
use protocol::routes::ApiPath;
use reqwest::header::{HeaderName, HeaderValue};

use crate::config::Timeouts;
use crate::fetch::{Bounds, FetchError, Fetched, Size};
use crate::traffic::{Kind, Traffic};
use crate::trust::Trust;
use crate::ReadError;

/// How long a request may take as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duration {
    /// A catalog or a query: `timeouts.request`.
    Short,
    /// A setup or a table: `timeouts.download`.
    Long,
    /// A request the server may hold this long before it answers (a wait
    /// for a new catalog): `timeouts.request` and its first byte later by
    /// as much.
    Held(std::time::Duration),
}

pub struct ServerLink {
    api: ApiClient,
    timeouts: Timeouts,
    pub traffic: Traffic,
    pub trust: Trust,
}

/// What a 412 to a request for `level`'s build ([`ServerLink::same_build`])
/// means: the level was replaced since the catalog named it, so it is
/// retired, not a verification failure.
pub fn refuse_replaced(status: reqwest::StatusCode, level: &str) -> Result<(), ReadError> {
    match status == reqwest::StatusCode::PRECONDITION_FAILED {
        true => Err(ReadError::Retired(format!(
            "{level} (replaced since the catalog was read)"
        ))),
        false => Ok(()),
    }
}

/// How long a download of at most `bytes` is given: the first byte's
/// wait and the bytes at `min_download_rate`, within `download`. A server
/// that trickles a small level so is given up on in seconds, not in the
/// ten minutes a base's setup may take.
fn download_deadline(t: &Timeouts, bytes: u64) -> std::time::Duration {
    let sending = bytes as f64 / t.min_download_rate.max(1) as f64;
    let sending = std::time::Duration::from_secs_f64(sending.min(t.download.as_secs_f64()));
    (t.first_byte + sending).min(t.download)
}

impl ServerLink {
    pub fn new(http: reqwest::Client, base: &str, timeouts: Timeouts) -> Self {
        ServerLink {
            api: ApiClient::new(http, base),
            timeouts,
            traffic: Traffic::default(),
            trust: Trust::default(),
        }
    }

    fn bounds(&self, size: Size, duration: Duration) -> Bounds {
        let held = match duration {
            Duration::Held(held) => held,
            _ => std::time::Duration::ZERO,
        };
        let t = &self.timeouts;
        Bounds {
            size,
            first_byte: t.first_byte + held,
            whole: match duration {
                Duration::Short | Duration::Held(_) => t.request + held,
                Duration::Long => download_deadline(t, size.limit()),
            },
            idle: (duration == Duration::Long).then_some(t.idle),
        }
    }

    /// `GET path` with `headers`, within `size` and `duration`.
    pub async fn get(
        &self,
        path: ApiPath<'_>,
        what: &str,
        headers: &[(HeaderName, HeaderValue)],
        size: Size,
        duration: Duration,
    ) -> Result<Fetched, FetchError> {
        let count = |n| self.traffic.received(Kind::Background, n);
        let bounds = self.bounds(size, duration);
        self.api.get(path, what, headers, bounds, &count).await
    }

    /// A download (`GET path` with `headers`) within `size`: a body
    /// over its bound is not what the server stated, so the server's
    /// verification failure; other failures are the backend's.
    pub async fn download(
        &self,
        path: ApiPath<'_>,
        what: &str,
        headers: &[(HeaderName, HeaderValue)],
        size: Size,
        duration: Duration,
    ) -> Result<Fetched, ReadError> {
        self.get(path, what, headers, size, duration)
            .await
            .map_err(|e| match e.is_oversized() {
                true => self.distrust(e.to_string()),
                false => e.into(),
            })
    }

    /// `POST /v1/query` of a lookup's `body` (shared bytes: a resend
    /// copies nothing); the answer within `size`.
    pub async fn post_lookup(
        &self,
        what: &str,
        body: bytes::Bytes,
        size: Size,
    ) -> Result<Fetched, FetchError> {
        self.traffic.sent(Kind::Lookup, body.len() as u64);
        let count = |n| self.traffic.received(Kind::Lookup, n);
        let bounds = self.bounds(size, Duration::Short);
        self.api.query(body, what, bounds, &count).await
    }

    /// The header that asks for the build of a level the catalog named
    /// (`tag`: its bytes' digest, or its code table's root): a server
    /// whose level was replaced under the same id since (a reorg rebuilds
    /// a block's delta) answers 412, which is not tampering
    /// ([`refuse_replaced`]).
    pub fn same_build(tag: impl std::fmt::Display) -> [(HeaderName, HeaderValue); 1] {
        let value = HeaderValue::from_str(&format!("\"{tag}\"")).expect("hex digits");
        [(reqwest::header::IF_MATCH, value)]
    }

    /// Records a verification failure of this server (see [`Trust`]).
    pub fn distrust(&self, reason: String) -> ReadError {
        self.trust.distrust(reason, self.api.base())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_download_is_given_time_for_its_size() {
        let t = Timeouts::default();
        let s = |secs| std::time::Duration::from_secs(secs);
        // 16 MiB at 128 KiB/s: 128 s, after the first byte's 30.
        assert_eq!(download_deadline(&t, 16 << 20), s(158));
        assert_eq!(download_deadline(&t, 0), s(30));
        // A base's setup is bounded by `download`.
        assert_eq!(download_deadline(&t, 1 << 30), s(600));
        assert_eq!(download_deadline(&t, u64::MAX), s(600));
        let link = ServerLink::new(reqwest::Client::new(), "http://127.0.0.1:1", t);
        let long = link.bounds(Size::Exactly(1 << 20), Duration::Long);
        assert_eq!(long.idle, Some(s(30)));
        assert_eq!(long.whole, s(38));
        assert_eq!(link.bounds(Size::AtMost(1), Duration::Short).idle, None);
    }
}

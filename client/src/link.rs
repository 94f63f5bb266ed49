//! The connection to one PIR server: its base URL, the HTTP client, the
//! timeouts, the traffic counters and the trust in it. Every request to
//! the server goes through here, and so through [`crate::fetch`]'s bounds.

use reqwest::header::{HeaderName, HeaderValue};

use crate::config::Timeouts;
use crate::fetch::{fetch, Bounds, FetchError, Fetched, Size};
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
}

pub struct ServerLink {
    http: reqwest::Client,
    base: String,
    timeouts: Timeouts,
    pub traffic: Traffic,
    pub trust: Trust,
}

impl ServerLink {
    pub fn new(http: reqwest::Client, base: &str, timeouts: Timeouts) -> Self {
        ServerLink {
            http,
            base: base.trim_end_matches('/').to_string(),
            timeouts,
            traffic: Traffic::default(),
            trust: Trust::default(),
        }
    }

    /// The server's URL (redact it before logging).
    pub fn base(&self) -> &str {
        &self.base
    }

    fn bounds(&self, size: Size, duration: Duration) -> Bounds {
        Bounds {
            size,
            first_byte: self.timeouts.first_byte,
            whole: match duration {
                Duration::Short => self.timeouts.request,
                Duration::Long => self.timeouts.download,
            },
        }
    }

    /// `GET {base}{path}` with `headers`, within `size` and `duration`.
    pub async fn get(
        &self,
        path: &str,
        what: &str,
        headers: &[(HeaderName, HeaderValue)],
        size: Size,
        duration: Duration,
    ) -> Result<Fetched, FetchError> {
        let mut request = self.http.get(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let count = |n| self.traffic.received(Kind::Background, n);
        fetch(request, what, self.bounds(size, duration), &count).await
    }

    /// A download (`GET {base}{path}`, no headers) within `size`: a body
    /// over its bound is not what the server stated, so the server's
    /// verification failure; other failures are the backend's.
    pub async fn download(
        &self,
        path: &str,
        what: &str,
        size: Size,
        duration: Duration,
    ) -> Result<Fetched, ReadError> {
        self.get(path, what, &[], size, duration)
            .await
            .map_err(|e| match e.is_oversized() {
                true => self.distrust(e.to_string()),
                false => e.into(),
            })
    }

    /// `POST {base}{path}` of a lookup's `body` (shared bytes: a resend
    /// copies nothing); the answer within `size`.
    pub async fn post_lookup(
        &self,
        path: &str,
        what: &str,
        body: bytes::Bytes,
        size: Size,
    ) -> Result<Fetched, FetchError> {
        self.traffic.sent(Kind::Lookup, body.len() as u64);
        let request = self.http.post(format!("{}{path}", self.base)).body(body);
        let count = |n| self.traffic.received(Kind::Lookup, n);
        fetch(request, what, self.bounds(size, Duration::Short), &count).await
    }

    /// Records a verification failure of this server (see [`Trust`]).
    pub fn distrust(&self, reason: String) -> ReadError {
        self.trust.distrust(reason, &self.base)
    }
}

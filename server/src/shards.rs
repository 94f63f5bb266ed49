//! The router in front of row shards. A query is cut by rows into one
//! slice per shard ([`pir_core::shard`]); every shard gets, in one request,
//! the slices of every part of the wallet's request; the partial answers
//! are added (mod 2^32) into the answer over all rows, which the client
//! checks exactly as a whole server's (a shard answering for other rows
//! fails that check). A shard that cannot answer makes the request fail
//! with 503 "unavailable", never with a partial sum.
//!
//! Every shard answer is read through the API client's bounded fetch:
//! exactly the bytes its queries fix, within the router's timeout.

use std::time::Duration;

use api_client::{ApiClient, Bounds, CallError, FetchError, Size};
use futures::future::try_join_all;
use pir_core::shard::{add_answer, shard_rows, slice_query};
use pir_core::wire::{self, Response};

use crate::config::RouterSettings;
use crate::error::{RouteError, ServerError};
use crate::loaded::Part;

/// The shard servers behind this router, shard 0 first.
pub struct ShardRouter {
    shards: Vec<ApiClient>,
    timeout: Duration,
}

/// One shard's request: its slices of every part, and the exact size of
/// its answer.
struct ShardRequest {
    body: Vec<u8>,
    response_bytes: u64,
}

impl ShardRouter {
    pub fn new(settings: &RouterSettings) -> Result<Self, ServerError> {
        let count = settings.shards.len();
        if count > u16::MAX as usize {
            return Err(ServerError::Settings(format!(
                "{count} shards: at most {}",
                u16::MAX
            )));
        }
        for url in &settings.shards {
            url::Url::parse(url)
                .map_err(|e| ServerError::Settings(format!("shard URL {url:?}: {e}")))?;
        }
        let http = api_client::http_builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ServerError::Settings(format!("HTTP client for the shards: {e}")))?;
        Ok(ShardRouter {
            shards: settings
                .shards
                .iter()
                .map(|url| ApiClient::new(http.clone(), url))
                .collect(),
            timeout: settings.timeout(),
        })
    }

    pub fn count(&self) -> u32 {
        self.shards.len() as u32
    }

    /// Answers a checked request through the shards: each part's answers,
    /// in order.
    pub async fn answer(&self, work: Vec<Part>) -> Result<Vec<Vec<Response>>, RouteError> {
        let count = self.count();
        let (requests, work) = tokio::task::spawn_blocking(move || {
            let requests: Result<Vec<ShardRequest>, RouteError> =
                (0..count).map(|i| shard_request(&work, i, count)).collect();
            (requests, work)
        })
        .await
        .map_err(|_| RouteError::Internal)?;
        let requests = requests?;
        let replies = try_join_all(
            requests
                .into_iter()
                .enumerate()
                .map(|(i, request)| self.ask(i, request, &work)),
        )
        .await?;
        combine(replies)
    }

    /// Sends one shard its slices; its answers, part by part.
    async fn ask(
        &self,
        shard: usize,
        request: ShardRequest,
        work: &[Part],
    ) -> Result<Vec<Vec<Response>>, RouteError> {
        let unavailable = |reason: String| RouteError::ShardUnavailable { shard, reason };
        let bounds = Bounds {
            size: Size::Exactly(request.response_bytes),
            first_byte: self.timeout,
            whole: self.timeout,
            idle: None,
        };
        let fetched = self.shards[shard]
            .query(request.body.into(), "shard answer", bounds, &|_| {})
            .await
            .map_err(|e: FetchError| unavailable(e.to_string()))?;
        // A shard that has not picked up a snapshot yet (or has retired it)
        // says so as a whole server would: the client refreshes.
        let body = api_client::success(fetched, "shard answer").map_err(|e| match e {
            CallError::Status {
                status: 404,
                message,
                ..
            } => RouteError::UnknownSnapshot(format!("shard {shard}: {message}")),
            CallError::Status {
                status, message, ..
            } => unavailable(format!("HTTP {status} {message}")),
            other => unavailable(other.to_string()),
        })?;
        let parts = protocol::multi::decode_response(&body)
            .map_err(|e| unavailable(format!("malformed answer: {e}")))?;
        if parts.len() != work.len() {
            return Err(unavailable(format!(
                "{} answers for {} parts",
                parts.len(),
                work.len()
            )));
        }
        parts
            .into_iter()
            .zip(work)
            .map(|(part, (snap, queries))| {
                let responses = wire::decode_responses(part)
                    .map_err(|e| unavailable(format!("malformed answer: {e}")))?;
                let cols = snap.setup().shape().cols();
                if responses.len() != queries.len()
                    || responses.iter().any(|r| r.elems.len() != cols)
                {
                    return Err(unavailable(format!(
                        "{}: answers of the wrong shape",
                        snap.url_id
                    )));
                }
                Ok(responses)
            })
            .collect()
    }

    /// Logs, once at start, whether each shard says it is the shard this
    /// router takes it for (a misordered list would make every answer
    /// fail the client's check).
    pub async fn check_roles(&self) {
        for (i, shard) in self.shards.iter().enumerate() {
            let expected = format!("shard {i}/{}", self.count());
            match shard.health(self.timeout).await.map(|h| h.role) {
                Ok(role) if role == expected => tracing::info!(shard = i, "shard ready"),
                Ok(role) => {
                    tracing::error!(shard = i, %role, %expected, "shard misplaced: it serves other rows (answers would fail the clients' checks)")
                }
                Err(e) => tracing::warn!(shard = i, error = %e, "shard not reachable yet"),
            }
        }
    }
}

/// Shard `index`'s request: the slice of its rows of every query of every
/// part.
fn shard_request(work: &[Part], index: u32, count: u32) -> Result<ShardRequest, RouteError> {
    let mut bodies = Vec::with_capacity(work.len());
    let mut response_parts = Vec::with_capacity(work.len());
    for (snap, queries) in work {
        let rows = shard_rows(snap.query_rows(), index, count).map_err(|e| {
            RouteError::ShardUnavailable {
                shard: index as usize,
                reason: e.to_string(),
            }
        })?;
        let sliced: Vec<_> = queries
            .iter()
            .map(|q| slice_query(q, rows.clone()))
            .collect();
        bodies.push(wire::encode_queries(&sliced));
        let cols = snap.setup().shape().cols();
        response_parts.push(wire::response_bytes(cols, queries.len()));
    }
    let parts: Vec<(&str, &[u8])> = work
        .iter()
        .zip(&bodies)
        .map(|((snap, _), body)| (snap.url_id.as_str(), body.as_slice()))
        .collect();
    // The parts are those of a request this router decoded: within the
    // limits, so an error here is an internal one.
    let body = protocol::multi::encode_request(&parts).map_err(|_| RouteError::Internal)?;
    Ok(ShardRequest {
        body,
        response_bytes: protocol::multi::response_bytes(response_parts.into_iter()),
    })
}

/// Every query's answer over all rows: the other shards' partial answers
/// added into shard 0's, in place (each shard's answers were checked for
/// their shape when read).
fn combine(replies: Vec<Vec<Vec<Response>>>) -> Result<Vec<Vec<Response>>, RouteError> {
    let mut replies = replies.into_iter().enumerate();
    let (_, mut sums) = replies.next().ok_or(RouteError::Internal)?;
    for (shard, reply) in replies {
        for (sum_part, part) in sums.iter_mut().zip(&reply) {
            for (sum, answer) in sum_part.iter_mut().zip(part) {
                add_answer(sum, answer).map_err(|e| RouteError::ShardUnavailable {
                    shard,
                    reason: format!("partial answers disagree: {e}"),
                })?;
            }
        }
    }
    Ok(sums)
}

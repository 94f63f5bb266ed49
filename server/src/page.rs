//! The operator's page: `GET /` serves one self-contained HTML page (no
//! external assets) over `GET /status.json`, which it fetches every few
//! seconds: the snapshots served (block, records, sizes, attestations),
//! the follower's lag behind its node (from the mark it leaves in the
//! store), lookups, queries and passes of the last ten minutes with their
//! time (a small plot), batching and the queue. Read-only; nothing on it
//! is secret (the catalog and `/metrics` say as much).

use std::sync::Arc;

use alloy_primitives::Address;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use snapshot_store::FollowerMark;

use crate::metrics::{Step, STEP_SECS};
use crate::state::AppState;

/// The page's template ([`protocol::page`]).
const PAGE: &str = include_str!("../assets/status.html");

/// `GET /status.json`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// Unix seconds.
    pub now: u64,
    /// `whole`, `shard i/n` or `router`.
    pub role: String,
    pub snapshots: Vec<SnapshotRow>,
    /// Store entries that could not be served (`<id>:<setup digest>`),
    /// and why (also logged once).
    pub unserved: Vec<Unserved>,
    pub follower: Option<FollowerRow>,
    /// The last ten minutes, oldest first.
    pub recent: Vec<Step>,
    pub step_secs: u64,
    pub batching: Batching,
    /// Query batches waiting or being answered, and the most allowed.
    pub queued: usize,
    pub queue_limit: usize,
}

/// One snapshot served.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRow {
    pub id: String,
    pub kind: String,
    pub block: u64,
    pub records: u64,
    pub storage_records: u64,
    pub whole_state: bool,
    /// Its files on disk.
    pub bytes: u64,
    pub hint_bytes: u64,
    pub query_bytes: u64,
    pub response_bytes: u64,
    /// Who signed it (checked when the store took the signature).
    pub attested_by: Vec<Address>,
    /// Where its passes run (`cpu`, `cuda`), and the GPU's name or why
    /// the CPU.
    pub device: String,
    pub device_detail: String,
}

/// A store entry that could not be served.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unserved {
    pub entry: String,
    pub error: String,
}

/// What the follower last saw of its node.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FollowerRow {
    #[serde(flatten)]
    pub mark: FollowerMark,
    /// The newest view's block behind the node's head.
    pub lag_blocks: u64,
    /// Seconds since the follower looked.
    pub age_secs: u64,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Batching {
    pub enabled: bool,
    pub window_ms: f64,
    pub max_queries: usize,
}

fn status(state: &AppState) -> ServerStatus {
    let now = protocol::unix_secs();
    let catalog = state.catalog();
    let snapshots = catalog
        .entries()
        .iter()
        .rev()
        .map(|e| (e, state.get(&e.id.url_form())))
        .map(|(e, loaded)| SnapshotRow {
            device: loaded
                .as_ref()
                .map_or("", |s| s.answers_device())
                .to_string(),
            device_detail: loaded.map(|s| s.answers_detail()).unwrap_or_default(),
            id: e.id.url_form(),
            kind: e.manifest.kind.name().to_string(),
            block: e.manifest.block_number,
            records: e.manifest.record_count,
            storage_records: e.manifest.storage_records,
            whole_state: e.manifest.storage.whole_state,
            bytes: e.manifest.files.values().map(|f| f.bytes).sum(),
            hint_bytes: e.manifest.pir.hint_bytes,
            query_bytes: e.manifest.pir.query_bytes,
            response_bytes: e.manifest.pir.response_bytes,
            attested_by: e.attestations.iter().map(|a| a.signer).collect(),
        })
        .collect();
    let follower = state.store.follower_mark().map(|mark| FollowerRow {
        lag_blocks: mark.node_head.saturating_sub(mark.newest_view),
        age_secs: now.saturating_sub(mark.at),
        mark,
    });
    ServerStatus {
        now,
        role: state.role.to_string(),
        snapshots,
        unserved: state
            .unserved()
            .into_iter()
            .map(|(entry, error)| Unserved { entry, error })
            .collect(),
        follower,
        recent: state.metrics.recent.steps(),
        step_secs: STEP_SECS,
        batching: Batching {
            enabled: state.batching.enabled,
            window_ms: state.batching.window_ms,
            max_queries: state.batching.max_queries,
        },
        queued: state.in_queue.load(std::sync::atomic::Ordering::Relaxed),
        queue_limit: state.queue_limit,
    }
}

/// `GET /status.json`.
pub async fn status_json(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(status(&state)).into_response()
}

/// `GET /`: the page with the status in place.
pub async fn page(State(state): State<Arc<AppState>>) -> Response {
    let json = serde_json::to_string(&status(&state)).expect("the status serialises");
    let html = protocol::page::fill(PAGE, &json);
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::CONTENT_SECURITY_POLICY, protocol::page::CSP),
        ],
        html,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_a_template() {
        assert!(protocol::page::is_template(PAGE));
    }
}

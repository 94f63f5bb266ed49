//! HTTP routes.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use pir_core::server::ServeError;
use pir_core::wire;

use crate::api::{ApiError, Catalog, CatalogEntry};
use crate::state::{AppState, LoadedSnapshot};

/// The router over a shared state.
pub fn router(state: Arc<AppState>) -> Router {
    let body_limit = state.max_body_bytes();
    Router::new()
        .route("/v1/snapshots", get(catalog))
        .route("/v1/snapshots/{id}/setup", get(setup))
        .route("/v1/snapshots/{id}/table", get(table))
        .route("/v1/snapshots/{id}/query", post(query))
        .route("/v1/query", post(multi_query))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

impl AppState {
    fn max_body_bytes(&self) -> usize {
        self.body_limit
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(ApiError {
            error: message.into(),
        }),
    )
        .into_response()
}

fn count(state: &AppState, route: &str, status: StatusCode) {
    state
        .metrics
        .requests
        .with_label_values(&[route, status.as_str()])
        .inc();
}

/// The catalog, with an ETag (SHA3 of its bytes) so that a client polling
/// for new levels gets a 304 while nothing changed.
async fn catalog(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let mut snapshots: Vec<CatalogEntry> = state
        .all()
        .iter()
        .map(|s| CatalogEntry {
            id: s.url_id.clone(),
            manifest: s.stored.manifest.clone(),
        })
        .collect();
    snapshots.sort_by_key(|e| (e.manifest.chain_id, e.manifest.block_number, e.id.clone()));
    let views = protocol::view::views(&snapshots);
    let body = serde_json::to_vec(&Catalog {
        snapshots,
        max_batch: state.max_batch,
        views,
    })
    .expect("catalog serialises");
    let etag = format!("\"{}\"", snapshot_store::sha3_hex(&body));
    if etag_matches(&headers, &etag) {
        count(&state, "catalog", StatusCode::NOT_MODIFIED);
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    count(&state, "catalog", StatusCode::OK);
    let mut response = (
        StatusCode::OK,
        [
            (header::ETAG, etag),
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::VARY, "accept-encoding".to_string()),
        ],
    )
        .into_response();
    // Gzip when asked: a follower changes the catalog every block and
    // always-on proxies fetch it each time (its JSON compresses ~5x).
    if accepts_gzip(&headers) {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let zipped = std::io::Write::write_all(&mut gz, &body).and_then(|()| gz.finish());
        if let Ok(zipped) = zipped {
            response.headers_mut().insert(
                header::CONTENT_ENCODING,
                header::HeaderValue::from_static("gzip"),
            );
            *response.body_mut() = axum::body::Body::from(zipped);
            return response;
        }
    }
    *response.body_mut() = axum::body::Body::from(body);
    response
}

/// Whether `Accept-Encoding` allows gzip.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.split(';').next().is_some_and(|e| e.trim() == "gzip"))
        })
}

/// The request's declared `Content-Length`, if any (bodies are refused by
/// it before a byte is read).
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Whether `If-None-Match` names `etag` (or `*`).
fn etag_matches(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
}

async fn setup(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(snap) = state.get(&id) else {
        count(&state, "setup", StatusCode::NOT_FOUND);
        return error(
            StatusCode::NOT_FOUND,
            format!("no snapshot '{id}' (it may have been retired)"),
        );
    };
    let digest = &snap.stored.manifest.pir.setup_digest;
    download(&state, "setup", &headers, digest, snap.pir.setup_bytes())
}

/// A binary download whose ETag is its digest; 304 when `If-None-Match`
/// names it.
fn download(
    state: &AppState,
    route: &str,
    headers: &HeaderMap,
    digest: &str,
    bytes: &[u8],
) -> Response {
    let etag = format!("\"{digest}\"");
    if etag_matches(headers, &etag) {
        count(state, route, StatusCode::NOT_MODIFIED);
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response();
    }
    count(state, route, StatusCode::OK);
    (
        StatusCode::OK,
        [
            (header::ETAG, etag),
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
        ],
        Bytes::copy_from_slice(bytes),
    )
        .into_response()
}

/// `GET /v1/snapshots/{id}/table`: a small level's entries, for clients
/// that download it whole (everyone gets the same bytes). ETag: its digest.
async fn table(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    // A loaded table was read against the manifest's digest of it.
    let snap = state.get(&id);
    let found = snap.as_ref().and_then(|snap| {
        let file = snap.stored.manifest.files.get(snapshot_store::TABLE_FILE)?;
        Some((file.sha3_256.as_str(), snap.table.as_deref()?))
    });
    let Some((digest, bytes)) = found else {
        count(&state, "table", StatusCode::NOT_FOUND);
        return error(
            StatusCode::NOT_FOUND,
            format!("no table for snapshot '{id}' (retired, or too large to download whole)"),
        );
    };
    download(&state, "table", &headers, digest, bytes)
}

/// `POST /v1/snapshots/{id}/query`: read the batch (bounded), wait for a
/// queue slot and a worker, answer off the async threads, count.
async fn query(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: header::HeaderMap,
    body: axum::body::Body,
) -> Response {
    let Some(snap) = state.get(&id) else {
        count(&state, "query", StatusCode::NOT_FOUND);
        return error(
            StatusCode::NOT_FOUND,
            format!("no snapshot '{id}' (it may have been retired)"),
        );
    };
    let body = match read_batch(&state, &snap, &headers, body).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let (slot, permit) = match wait_for_worker(&state, "query").await {
        Ok(turn) => turn,
        Err(refused) => return refused,
    };
    let started = Instant::now();
    let worker_snap = snap.clone();
    let result = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        worker_snap.pir.answer_bytes(&body)
    })
    .await;
    drop(slot);
    let (status, response) = answer_response(&state, &snap, result, started.elapsed());
    if status != StatusCode::OK {
        tracing::info!(snapshot = %snap.url_id, status = status.as_u16(), "refused query");
    }
    count(&state, "query", status);
    response
}

/// A place in the bounded queue, then a worker; 503 when the queue is full.
async fn wait_for_worker(
    state: &Arc<AppState>,
    route: &str,
) -> Result<(crate::state::QueueSlot, tokio::sync::OwnedSemaphorePermit), Response> {
    let Some(slot) = state.enter_queue() else {
        count(state, route, StatusCode::SERVICE_UNAVAILABLE);
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            Json(ApiError {
                error: "queue full, retry shortly".into(),
            }),
        )
            .into_response());
    };
    let Ok(permit) = state.workers.clone().acquire_owned().await else {
        return Err(error(StatusCode::SERVICE_UNAVAILABLE, "shutting down"));
    };
    Ok((slot, permit))
}

/// `POST /v1/query`: one request that queries several snapshots (every
/// level of a view), framed by `protocol::multi`. Every part is checked
/// (known snapshot, size within its largest batch) before any is
/// answered; the parts are answered in order by one worker.
async fn multi_query(
    State(state): State<Arc<AppState>>,
    headers: header::HeaderMap,
    body: axum::body::Body,
) -> Response {
    const ROUTE: &str = "multi_query";
    let refuse = |status: StatusCode, message: String| {
        count(&state, ROUTE, status);
        error(status, message)
    };
    let limit = state.body_limit;
    let allowed = format!("at most {limit} bytes allowed");
    let body = match read_bounded(&state, ROUTE, &headers, body, limit, &allowed).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let parts = match protocol::multi::decode_request(&body) {
        Ok(p) => p,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, format!("malformed request: {e}")),
    };
    let mut work: Vec<(Arc<LoadedSnapshot>, Bytes)> = Vec::new();
    for (id, part) in &parts {
        let Some(snap) = state.get(id) else {
            return refuse(
                StatusCode::NOT_FOUND,
                format!("no snapshot '{id}' (it may have been retired)"),
            );
        };
        let largest = wire::query_bytes(snap.pir.db().shape().rows(), state.max_batch);
        if part.len() > largest {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{id}: {} bytes, a batch takes at most {largest}",
                    part.len()
                ),
            );
        }
        work.push((snap, body.slice_ref(part)));
    }
    let (slot, permit) = match wait_for_worker(&state, ROUTE).await {
        Ok(turn) => turn,
        Err(refused) => return refused,
    };
    let started = Instant::now();
    let worker_work = work.clone();
    let result = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        worker_work
            .iter()
            .map(|(snap, part)| {
                snap.pir
                    .answer_bytes(part)
                    .map_err(|e| (snap.url_id.clone(), e))
            })
            .collect::<Result<Vec<(Vec<u8>, usize)>, _>>()
    })
    .await;
    drop(slot);
    let elapsed = started.elapsed();
    match result {
        Ok(Ok(answers)) => {
            state.metrics.answer_seconds.observe(elapsed.as_secs_f64());
            for ((snap, _), (_, batch)) in work.iter().zip(&answers) {
                state
                    .metrics
                    .queries
                    .with_label_values(&[&snap.url_id])
                    .inc_by(*batch as u64);
            }
            tracing::info!(
                parts = work.len(),
                ms = elapsed.as_secs_f64() * 1e3,
                "answered"
            );
            count(&state, ROUTE, StatusCode::OK);
            let bodies: Vec<Vec<u8>> = answers.into_iter().map(|(b, _)| b).collect();
            (
                [(header::CONTENT_TYPE, "application/octet-stream")],
                protocol::multi::encode_response(&bodies),
            )
                .into_response()
        }
        Ok(Err((id, e))) => refuse(StatusCode::BAD_REQUEST, format!("{id}: {e}")),
        Err(e) => {
            tracing::error!(error = %e, "answer task failed");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
        }
    }
}

/// The query body, refused (413) from its declared length before a byte is
/// read, and never read past this snapshot's largest batch.
async fn read_batch(
    state: &AppState,
    snap: &LoadedSnapshot,
    headers: &header::HeaderMap,
    body: axum::body::Body,
) -> Result<axum::body::Bytes, Response> {
    let largest = wire::query_bytes(snap.pir.db().shape().rows(), state.max_batch);
    let explain = format!(
        "a batch of at most {} queries takes at most {largest} bytes",
        state.max_batch
    );
    read_bounded(state, "query", headers, body, largest, &explain).await
}

/// A request body of at most `limit` bytes: refused (413, `explain` says
/// why) from its declared length before a byte is read, and never read
/// past the limit.
async fn read_bounded(
    state: &AppState,
    route: &str,
    headers: &HeaderMap,
    body: axum::body::Body,
    limit: usize,
    explain: &str,
) -> Result<Bytes, Response> {
    let too_large = |what: String| {
        count(state, route, StatusCode::PAYLOAD_TOO_LARGE);
        error(StatusCode::PAYLOAD_TOO_LARGE, format!("{what}: {explain}"))
    };
    if let Some(len) = declared_length(headers).filter(|&len| len > limit as u64) {
        return Err(too_large(format!("{len} bytes declared")));
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| too_large("body longer than allowed".into()))
}

/// The HTTP response (and its status) for an answer task's outcome.
fn answer_response(
    state: &AppState,
    snap: &LoadedSnapshot,
    result: Result<Result<(Vec<u8>, usize), ServeError>, tokio::task::JoinError>,
    elapsed: std::time::Duration,
) -> (StatusCode, Response) {
    let bad_request = |message: String| {
        (
            StatusCode::BAD_REQUEST,
            error(StatusCode::BAD_REQUEST, message),
        )
    };
    match result {
        Ok(Ok((bytes, batch))) => {
            state.metrics.answer_seconds.observe(elapsed.as_secs_f64());
            state
                .metrics
                .queries
                .with_label_values(&[&snap.url_id])
                .inc_by(batch as u64);
            tracing::info!(snapshot = %snap.url_id, batch, ms = elapsed.as_secs_f64() * 1e3, "answered");
            (
                StatusCode::OK,
                ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
            )
        }
        Ok(Err(ServeError::Wire(e))) => bad_request(format!("malformed query: {e}")),
        Ok(Err(ServeError::Answer(e))) => {
            bad_request(format!("query does not fit this snapshot: {e}"))
        }
        Err(e) => {
            tracing::error!(snapshot = %snap.url_id, error = %e, "answer task failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                error(StatusCode::INTERNAL_SERVER_ERROR, "internal error"),
            )
        }
    }
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    let n = state.all().len();
    count(&state, "healthz", StatusCode::OK);
    Json(serde_json::json!({"status": "ok", "snapshots": n})).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

//! HTTP routes. Around them, from the outside in: the request counter (one
//! middleware: every response by route and status, refusals by the layers
//! below included), gzip for JSON answers (the catalog changes every block
//! and compresses ~5x; setup and answers are random-looking bytes and are
//! sent as they are), and the request body limit (a declared length over
//! it is refused before a byte is read, a streamed body at the limit).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use pir_core::wire::{self};
use protocol::routes::{Health, Route};
use tower::ServiceExt;
use tower_http::compression::predicate::{DefaultPredicate, NotForContentType, Predicate};
use tower_http::compression::CompressionLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::services::ServeFile;

use crate::batch;
use crate::error::RouteError;
use crate::loaded::{LoadedSnapshot, Part};
use crate::state::{AppState, CatalogBody};

/// The router over a shared state.
pub fn router(state: Arc<AppState>) -> Router {
    let json_only =
        DefaultPredicate::new().and(NotForContentType::const_new("application/octet-stream"));
    Router::new()
        .route(Route::Catalog.template(), get(catalog))
        .route(Route::Setup.template(), get(setup))
        .route(Route::Table.template(), get(table))
        .route(Route::File.template(), get(file))
        .route(Route::CodeTable.template(), get(code_table))
        .route(Route::CodeEntry.template(), get(code_entry))
        .route(Route::Code.template(), get(code))
        .route(Route::Query.template(), post(query))
        .route(Route::Health.template(), get(healthz))
        .route(Route::Metrics.template(), get(metrics))
        .route(Route::Page.template(), get(crate::page::page))
        .route(Route::Status.template(), get(crate::page::status_json))
        .layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(state.body_limit))
        .layer(CompressionLayer::new().gzip(true).compress_when(json_only))
        .layer(middleware::from_fn_with_state(state.clone(), count_request))
        .with_state(state)
}

/// The metrics middleware: counts each response by route and status.
async fn count_request(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let route = route_name(request.extensions().get::<MatchedPath>());
    let response = next.run(request).await;
    state
        .metrics
        .requests
        .with_label_values(&[route, response.status().as_str()])
        .inc();
    response
}

/// The metric label of a route (a fixed set: no label from client input).
fn route_name(path: Option<&MatchedPath>) -> &'static str {
    path.and_then(|p| Route::of_template(p.as_str()))
        .map_or("unrouted", Route::label)
}

/// The catalog, with an ETag (SHA3 of its bytes) so that a client polling
/// for new levels gets a 304 while nothing changed. Made when the served
/// set changes ([`crate::state::CatalogBody`]), gzipped then too: a poll
/// copies nothing.
async fn catalog(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let (mut response, holds) = match wait_for_change(&state, &headers).await {
        Waited::Answer(status) => (status.into_response(), state.long_poll),
        Waited::NotAWait => (catalog_now(&state, &headers), state.long_poll),
        // No room to hold it: the catalog, and no announcement, so that
        // the client polls.
        Waited::NoRoom => (catalog_now(&state, &headers), false),
    };
    if holds {
        response.headers_mut().insert(
            protocol::api::CATALOG_LONG_POLL_HEADER,
            header::HeaderValue::from_static("1"),
        );
    }
    response
}

/// What became of a request that may wait for a new catalog.
enum Waited {
    /// It does not ask to wait.
    NotAWait,
    /// 204 (the catalog changed) or 304 (the wait ended).
    Answer(StatusCode),
    /// As many are held already as the server holds
    /// (`held_catalog_waits`).
    NoRoom,
}

/// A request that waits for a new catalog
/// ([`protocol::api::CATALOG_WAIT_HEADER`]): held while its
/// `If-None-Match` names the catalog served, until that changes (204) or
/// the wait ends (304); answered at once while the server shuts down.
async fn wait_for_change(state: &AppState, headers: &HeaderMap) -> Waited {
    let asked = headers
        .get(protocol::api::CATALOG_WAIT_HEADER)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    let Some(secs) = asked else {
        return Waited::NotAWait;
    };
    let wait = std::time::Duration::from_secs(secs.min(protocol::api::MAX_CATALOG_WAIT_SECS));
    let deadline = tokio::time::Instant::now() + wait;
    // Subscribed before the catalog is compared: a change in between
    // still wakes it.
    let mut changed = state.catalog_version.subscribe();
    let mut closing = state.closing.subscribe();
    let same = |state: &AppState| etag_matches(headers, &state.catalog().etag);
    if !same(state) {
        return Waited::Answer(StatusCode::NO_CONTENT);
    }
    let Ok(_held) = state.waiters.try_acquire() else {
        return Waited::NoRoom;
    };
    // A remade catalog of the same bytes (an attestation reread, a
    // retire and a load in one rescan) does not end the wait.
    while same(state) && !*closing.borrow_and_update() {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            _ = changed.changed() => {}
            _ = closing.changed() => {}
        }
    }
    Waited::Answer(match same(state) {
        true => StatusCode::NOT_MODIFIED,
        false => StatusCode::NO_CONTENT,
    })
}

/// The catalog as served now: 304 while `If-None-Match` names it, its
/// difference from a catalog the client holds, or the whole of it.
fn catalog_now(state: &AppState, headers: &HeaderMap) -> Response {
    let body = state.catalog();
    if etag_matches(headers, &body.etag) {
        return (
            StatusCode::NOT_MODIFIED,
            [(header::ETAG, body.etag.clone())],
        )
            .into_response();
    }
    if let Some(diff) = catalog_diff(state, headers, &body) {
        return diff;
    }
    let gzip = headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| coding.split(';').next().is_some_and(|c| c.trim() == "gzip"));
    let mut response = (
        [
            (header::ETAG, body.etag.clone()),
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::VARY, "accept-encoding".to_string()),
        ],
        match gzip {
            true => body.gzip.clone(),
            false => body.json.clone(),
        },
    )
        .into_response();
    if gzip {
        response.headers_mut().insert(
            header::CONTENT_ENCODING,
            header::HeaderValue::from_static("gzip"),
        );
    }
    response
}

/// The difference from the catalog `If-None-Match` names to `body`, for a
/// client that asks for differences ([`protocol::api::ACCEPT_CATALOG_DIFF`])
/// and holds a catalog served recently; `None`: the whole catalog.
fn catalog_diff(state: &AppState, headers: &HeaderMap, body: &CatalogBody) -> Option<Response> {
    let wanted = headers
        .get(protocol::api::ACCEPT_CATALOG_DIFF)
        .is_some_and(|v| v.as_bytes() == b"1");
    let since = headers.get(header::IF_NONE_MATCH)?.to_str().ok()?;
    let old = state.catalog_before(since).filter(|_| wanted)?;
    let json = serde_json::to_vec(&body.diff_from(&old)).expect("a diff serialises");
    let response = (
        [
            (header::ETAG, body.etag.clone()),
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::VARY, "accept-encoding".to_string()),
            (
                header::HeaderName::from_static(protocol::api::CATALOG_DIFF_HEADER),
                old.etag.clone(),
            ),
        ],
        json,
    );
    Some(response.into_response())
}

/// Whether `If-None-Match` names `etag` (or `*`).
fn etag_matches(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| lists_etag(v, etag))
}

/// Whether an `If-Match` or `If-None-Match` value names `etag` (or `*`).
fn lists_etag(value: &header::HeaderValue, etag: &str) -> bool {
    value
        .to_str()
        .is_ok_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
}

/// `GET /v1/snapshots/{id}/setup`: the setup data; ETag: its digest.
async fn setup(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, RouteError> {
    let snap = state
        .get(&id)
        .ok_or(RouteError::UnknownSnapshot(id.clone()))?;
    let digest = &snap.stored.manifest.pir.setup_digest;
    same_build(&headers, &format!("\"{digest}\""), &id)?;
    Ok(download(&headers, digest, snap.setup().shared_bytes()))
}

/// `GET /v1/snapshots/{id}/table`: a small level's entries, for clients
/// that download it whole (everyone gets the same bytes). ETag: its digest.
async fn table(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, RouteError> {
    // A loaded table was read against the manifest's digest of it.
    let snap = state.get(&id);
    let found = snap.as_ref().and_then(|snap| {
        let file = snap.stored.manifest.files.get(snapshot_store::TABLE_FILE)?;
        Some((&file.sha3_256, snap.table.clone()?))
    });
    let (digest, bytes) = found.ok_or(RouteError::NoTable(id.clone()))?;
    same_build(&headers, &format!("\"{digest}\""), &id)?;
    Ok(download(&headers, digest, bytes))
}

/// `GET /v1/snapshots/{id}/files/{name}` (with `export_files` on): one
/// file of a served snapshot as it lies in the store (its manifest, or a
/// file the manifest lists), for replicas that pull the store; ranges
/// allowed, so that a broken download of a large database resumes.
async fn file(
    State(state): State<Arc<AppState>>,
    Path((id, name)): Path<(String, String)>,
    request: Request,
) -> Result<Response, RouteError> {
    if !state.export_files {
        return Err(RouteError::NotExported);
    }
    let snap = state.get(&id).ok_or(RouteError::UnknownSnapshot(id))?;
    let listed =
        name == snapshot_store::MANIFEST_FILE || snap.stored.manifest.files.contains_key(&name);
    if !listed {
        return Err(RouteError::NoFile(name));
    }
    let path = snap.stored.path.join(&name);
    let served = ServeFile::new(path)
        .oneshot(request)
        .await
        .map_err(|_| RouteError::Internal)?;
    Ok(served.map(axum::body::Body::new))
}

/// `GET /v1/snapshots/{id}/codes`: the snapshot's whole code table, 32
/// bytes a hash (`protocol::codes::parse_table` reads it). The same
/// bytes for every client: a small level's code table is downloaded with
/// the level, so that reading a code names no level.
async fn code_table(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, RouteError> {
    let snap = state
        .get(&id)
        .ok_or(RouteError::UnknownSnapshot(id.clone()))?;
    if let Some(etag) = code_table_etag(&snap) {
        same_build(&headers, &etag, &id)?;
    }
    let tree = snap.codes.as_ref().ok_or(RouteError::NoCodeEntry {
        id,
        index: "any".into(),
    })?;
    let bytes: Vec<u8> = tree.leaves().iter().flat_map(|h| h.0).collect();
    Ok(bytes.into_response())
}

/// `GET /v1/snapshots/{id}/codes/{index}`: entry `index` (from 1) of the
/// snapshot's code table and its Merkle proof (`protocol::codes`).
async fn code_entry(
    State(state): State<Arc<AppState>>,
    Path((id, index)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, RouteError> {
    let snap = state
        .get(&id)
        .ok_or(RouteError::UnknownSnapshot(id.clone()))?;
    if let Some(etag) = code_table_etag(&snap) {
        same_build(&headers, &etag, &id)?;
    }
    let proof = index
        .parse::<u32>()
        .ok()
        .and_then(|n| snap.codes.as_ref()?.proof(n))
        .ok_or(RouteError::NoCodeEntry { id, index })?;
    Ok(Json(proof).into_response())
}

/// `GET /v1/code/{hash}`: a contract's code by its keccak256 (0x and 64
/// hex digits), as the store keeps it; the same bytes for every client,
/// so the hash is its ETag.
async fn code(
    State(state): State<Arc<AppState>>,
    Path(hash): Path<String>,
    headers: HeaderMap,
) -> Result<Response, RouteError> {
    let parsed = hash
        .strip_prefix("0x")
        .filter(|h| h.len() == 64)
        .and_then(|h| h.parse::<alloy_primitives::B256>().ok());
    let Some(parsed) = parsed else {
        return Err(RouteError::NoCode(hash));
    };
    let etag = format!("\"{parsed:x}\"");
    if let Some(unchanged) = not_modified(&headers, &etag) {
        return Ok(unchanged);
    }
    let store = state.store.clone();
    let code = tokio::task::spawn_blocking(move || store.read_code(&parsed))
        .await
        .map_err(|_| RouteError::Internal)?;
    match code {
        Ok(Some(code)) => Ok(binary(etag, code)),
        Ok(None) => Err(RouteError::NoCode(hash)),
        Err(e) => {
            tracing::warn!(error = %e, "a kept code is unreadable or not its hash's");
            Err(RouteError::Internal)
        }
    }
}

/// A binary download whose ETag is its digest; 304 when `If-None-Match`
/// names it. The bytes are shared with the loaded snapshot (no copy).
fn download(headers: &HeaderMap, digest: &protocol::Sha3Digest, bytes: Bytes) -> Response {
    let etag = format!("\"{digest}\"");
    not_modified(headers, &etag).unwrap_or_else(|| binary(etag, bytes))
}

/// Refuses (412) a request whose `If-Match` names another build of
/// snapshot `id` than `etag` (its bytes' digest, or its code table's
/// root): the client read the catalog before the snapshot was replaced
/// under the same id (a reorg rebuilds a block's delta) and asks for the
/// build it read, which is gone. Answering the new bytes would make the
/// client find other bytes than its catalog names, which it must take for
/// tampering.
fn same_build(headers: &HeaderMap, etag: &str, id: &str) -> Result<(), RouteError> {
    match headers.get(header::IF_MATCH) {
        Some(wanted) if !lists_etag(wanted, etag) => Err(RouteError::Replaced(id.to_string())),
        _ => Ok(()),
    }
}

/// The ETag of a level's code table: its Merkle root.
fn code_table_etag(snap: &LoadedSnapshot) -> Option<String> {
    Some(format!("\"{}\"", snap.stored.manifest.codes?.root))
}

/// A 304 when `If-None-Match` names `etag`.
fn not_modified(headers: &HeaderMap, etag: &str) -> Option<Response> {
    etag_matches(headers, etag)
        .then(|| (StatusCode::NOT_MODIFIED, [(header::ETAG, etag.to_string())]).into_response())
}

/// Bytes the same for every client, with their ETag.
fn binary(etag: String, bytes: impl Into<Bytes>) -> Response {
    (
        [
            (header::ETAG, etag),
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
        ],
        bytes.into(),
    )
        .into_response()
}

/// `POST /v1/query`: one request that queries one or several snapshots
/// (every level of a view), framed by `protocol::multi`. Every part is
/// checked (known snapshot, size within its largest batch, every query
/// made for that snapshot) before any is answered; then, with batching
/// on, each part joins its snapshot's next pass (shared with other
/// requests'), or, with it off, one worker answers the parts in order.
async fn query(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, RouteError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => RouteError::BodyTooLarge {
            limit: state.body_limit,
        },
        _ => RouteError::BodyUnreadable(e.body_text()),
    })?;
    let started = Instant::now();
    let parts = checked_parts(&state, &body)?;
    let _slot = state.enter_queue().ok_or(RouteError::QueueFull)?;
    let work = tokio::task::spawn_blocking(move || decode_parts(parts))
        .await
        .map_err(|_| RouteError::Internal)?
        .inspect_err(|e| tracing::info!(error = %e, "refused query"))?;
    let answers = match (&state.shards, state.batching.enabled) {
        (Some(shards), _) => shards.answer(work).await?,
        (None, true) => answer_batched(&state, work).await?,
        (None, false) => answer_alone(&state, work).await?,
    };
    let bodies: Vec<Vec<u8>> = answers.iter().map(|r| wire::encode_responses(r)).collect();
    let queries = answers.iter().map(|r| r.len()).sum();
    state.metrics.recent.lookup(queries, started.elapsed());
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        protocol::multi::encode_response(&bodies),
    )
        .into_response())
}

/// The request's parts, each a known snapshot's batch of at most
/// `max_batch` queries (zero-copy slices of the body).
fn checked_parts(
    state: &AppState,
    body: &Bytes,
) -> Result<Vec<(Arc<LoadedSnapshot>, Bytes)>, RouteError> {
    protocol::multi::decode_request(body)?
        .into_iter()
        .map(|(id, part)| {
            let snap = state
                .get(id)
                .ok_or_else(|| RouteError::UnknownSnapshot(id.to_string()))?;
            let largest = wire::query_bytes(snap.query_rows(), state.max_batch);
            if part.len() > largest {
                return Err(RouteError::PartTooLarge {
                    id: id.to_string(),
                    bytes: part.len(),
                    largest,
                });
            }
            Ok((snap, body.slice_ref(part)))
        })
        .collect()
}

/// Each part's queries, parsed and checked against its snapshot (off the
/// async threads: a part can be megabytes).
fn decode_parts(parts: Vec<(Arc<LoadedSnapshot>, Bytes)>) -> Result<Vec<Part>, RouteError> {
    parts
        .into_iter()
        .map(|(snap, bytes)| match snap.checked_queries(&bytes) {
            Ok(queries) => Ok((snap, queries)),
            Err(error) => Err(RouteError::Query {
                id: snap.url_id.clone(),
                error,
            }),
        })
        .collect()
}

/// Every part queued at once (each in its snapshot's next pass), then
/// their answers, in order.
async fn answer_batched(
    state: &Arc<AppState>,
    work: Vec<Part>,
) -> Result<Vec<Vec<wire::Response>>, RouteError> {
    let waiting: Vec<batch::Answered> = work
        .into_iter()
        .map(|(snap, queries)| batch::submit(state, &snap, queries))
        .collect();
    let mut answers = Vec::with_capacity(waiting.len());
    for answered in waiting {
        answers.push(answered.wait().await?);
    }
    Ok(answers)
}

/// Batching off: a worker, then the parts in order, each a pass of its own.
async fn answer_alone(
    state: &Arc<AppState>,
    work: Vec<Part>,
) -> Result<Vec<Vec<wire::Response>>, RouteError> {
    let permit = state
        .workers
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| RouteError::ShuttingDown)?;
    let pass_state = state.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work.iter()
            .map(|(snap, queries)| {
                let started = Instant::now();
                let answers = snap.answer_batch(queries, &pass_state.metrics);
                let metrics = &pass_state.metrics;
                metrics.observe_pass(&snap.url_id, 1, queries.len(), started.elapsed());
                answers.map_err(|error| RouteError::Query {
                    id: snap.url_id.clone(),
                    error: error.into(),
                })
            })
            .collect()
    })
    .await
    .map_err(|_| RouteError::Internal)?
}

/// Liveness and what this process serves: `role` is `whole`, `shard i/S`
/// or `router` (a router checks its shards' roles with this).
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    Json(Health {
        status: "ok".into(),
        snapshots: state.all().len(),
        role: state.role.to_string(),
    })
    .into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    state.metrics.follower(state.store.follower_mark().as_ref());
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

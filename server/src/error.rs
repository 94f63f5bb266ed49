//! The one error type of the HTTP routes: each refusal is a status and a
//! JSON body `{"error": "..."}` (`protocol::api::ApiError`), made in one
//! place.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pir_core::server::ServeError;

use crate::api::ApiError;

/// Why the server cannot start, or cannot serve a snapshot of its store.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Config(#[from] protocol::config::ConfigError),
    /// Settings that do not go together, or do not parse.
    #[error("{0}")]
    Settings(String),
    #[error(transparent)]
    Store(#[from] snapshot_store::StoreError),
    #[error("{0}: its code table is not the manifest's")]
    CodeTable(protocol::manifest::SnapshotId),
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
    /// `[answer] device = "cuda"` and the level cannot be held on the GPU.
    #[error("answers on the GPU: {0}")]
    Gpu(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("no snapshot '{0}' (it may have been retired)")]
    UnknownSnapshot(String),
    #[error("no table for snapshot '{0}' (retired, or too large to download whole)")]
    NoTable(String),
    /// `If-Match` named another build of the snapshot than the one served
    /// (it was replaced under the same id since the client read the
    /// catalog: a reorg rebuilds a block's delta).
    #[error("snapshot '{0}' was replaced since that build was listed; read the catalog again")]
    Replaced(String),
    #[error("this server does not export its store's files (export_files)")]
    NotExported,
    #[error("no file '{0}' in that snapshot")]
    NoFile(String),
    #[error("snapshot '{id}' has no code table entry {index}")]
    NoCodeEntry { id: String, index: String },
    #[error("no code with hash '{0}' here")]
    NoCode(String),
    #[error("body longer than allowed: at most {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("{id}: {bytes} bytes, a batch takes at most {largest}")]
    PartTooLarge {
        id: String,
        bytes: usize,
        largest: usize,
    },
    #[error("reading the body: {0}")]
    BodyUnreadable(String),
    #[error("malformed request: {0}")]
    Malformed(#[from] protocol::multi::MultiError),
    #[error("{id}: {error}")]
    Query { id: String, error: ServeError },
    #[error("unavailable: row shard {shard}: {reason}")]
    ShardUnavailable { shard: usize, reason: String },
    #[error("queue full, retry shortly")]
    QueueFull,
    #[error("shutting down")]
    ShuttingDown,
    #[error("internal error")]
    Internal,
}

impl RouteError {
    pub fn status(&self) -> StatusCode {
        match self {
            RouteError::UnknownSnapshot(_)
            | RouteError::NoTable(_)
            | RouteError::NotExported
            | RouteError::NoFile(_)
            | RouteError::NoCodeEntry { .. }
            | RouteError::NoCode(_) => StatusCode::NOT_FOUND,
            RouteError::Replaced(_) => StatusCode::PRECONDITION_FAILED,
            RouteError::BodyTooLarge { .. } | RouteError::PartTooLarge { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            RouteError::BodyUnreadable(_) | RouteError::Malformed(_) | RouteError::Query { .. } => {
                StatusCode::BAD_REQUEST
            }
            RouteError::QueueFull
            | RouteError::ShuttingDown
            | RouteError::ShardUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            RouteError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for RouteError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = Json(ApiError {
            error: self.to_string(),
        });
        if matches!(self, RouteError::QueueFull) {
            return (status, [(header::RETRY_AFTER, "1")], body).into_response();
        }
        (status, body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_messages() {
        let e = RouteError::UnknownSnapshot("1-5-full".into());
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            e.to_string(),
            "no snapshot '1-5-full' (it may have been retired)"
        );
        let full = RouteError::QueueFull.into_response();
        assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(full.headers()[header::RETRY_AFTER], "1");
        assert_eq!(
            RouteError::BodyTooLarge { limit: 9 }.status(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }
}

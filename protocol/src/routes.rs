//! The routes of the PIR server's HTTP API, each once: its method, its
//! path template (what the server's router matches), its metric label and
//! the most a client reads of a fixed-size answer. A request names a route
//! with its parameters ([`ApiPath`]); nothing else spells a path.

use std::fmt;

use alloy_primitives::B256;

use crate::manifest::SnapshotId;

/// A route of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// `GET /v1/snapshots`: the catalog ([`crate::api::Catalog`]).
    Catalog,
    /// `GET /v1/snapshots/{id}/setup`: a snapshot's setup (hint).
    Setup,
    /// `GET /v1/snapshots/{id}/table`: a small level's whole table.
    Table,
    /// `GET /v1/snapshots/{id}/files/{name}`: a stored file (replicas).
    File,
    /// `GET /v1/snapshots/{id}/codes`: a level's whole code table (32
    /// bytes a hash, in order), which a client downloads with the level so
    /// that reading a code names no level.
    CodeTable,
    /// `GET /v1/snapshots/{id}/codes/{index}`: a code table entry and its
    /// proof ([`crate::codes::CodeProof`]).
    CodeEntry,
    /// `GET /v1/code/{hash}`: a contract's code by its hash.
    Code,
    /// `POST /v1/query`: PIR queries to one or more snapshots.
    Query,
    /// `GET /healthz`: [`Health`].
    Health,
    /// `GET /metrics`: Prometheus text.
    Metrics,
    /// `GET /`: the operator's page (HTML, for a browser).
    Page,
    /// `GET /status.json`: the page's data.
    Status,
}

/// An HTTP method of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

/// Largest catalog a client or a replica reads, compressed or not (some
/// ten thousand snapshots).
pub const MAX_CATALOG_BYTES: u64 = 16 << 20;
/// Largest code table entry with its proof (a proof is ~32 hashes).
pub const MAX_CODE_ENTRY_BYTES: u64 = 8 << 10;
/// Largest `/healthz` answer.
pub const MAX_HEALTH_BYTES: u64 = 64 << 10;

impl Route {
    /// Every route, in the order the server lists them.
    pub const ALL: [Route; 12] = [
        Route::Catalog,
        Route::Setup,
        Route::Table,
        Route::File,
        Route::CodeTable,
        Route::CodeEntry,
        Route::Code,
        Route::Query,
        Route::Health,
        Route::Metrics,
        Route::Page,
        Route::Status,
    ];

    pub fn method(self) -> Method {
        match self {
            Route::Query => Method::Post,
            _ => Method::Get,
        }
    }

    /// The path with its parameters in braces, as the server's router
    /// matches it.
    pub fn template(self) -> &'static str {
        match self {
            Route::Catalog => "/v1/snapshots",
            Route::Setup => "/v1/snapshots/{id}/setup",
            Route::Table => "/v1/snapshots/{id}/table",
            Route::File => "/v1/snapshots/{id}/files/{name}",
            Route::CodeTable => "/v1/snapshots/{id}/codes",
            Route::CodeEntry => "/v1/snapshots/{id}/codes/{index}",
            Route::Code => "/v1/code/{hash}",
            Route::Query => "/v1/query",
            Route::Health => "/healthz",
            Route::Metrics => "/metrics",
            Route::Page => "/",
            Route::Status => "/status.json",
        }
    }

    /// The route whose template is `template`.
    pub fn of_template(template: &str) -> Option<Route> {
        Route::ALL.into_iter().find(|r| r.template() == template)
    }

    /// Its label in the server's metrics.
    pub fn label(self) -> &'static str {
        match self {
            Route::Catalog => "catalog",
            Route::Setup => "setup",
            Route::Table => "table",
            Route::File => "file",
            Route::CodeTable => "code_table",
            Route::CodeEntry => "code_entry",
            Route::Code => "code",
            Route::Query => "query",
            Route::Health => "healthz",
            Route::Metrics => "metrics",
            Route::Page => "page",
            Route::Status => "status",
        }
    }

    /// The most a client reads of a successful answer when the route's
    /// answers have a fixed bound; `None` where the manifest states the
    /// size (setup, table, file, query answer) or nobody but an operator
    /// reads it (metrics).
    pub fn max_answer_bytes(self) -> Option<u64> {
        match self {
            Route::Catalog => Some(MAX_CATALOG_BYTES),
            Route::CodeEntry => Some(MAX_CODE_ENTRY_BYTES),
            Route::Code => Some(crate::codes::MAX_CODE_BYTES as u64),
            Route::Health => Some(MAX_HEALTH_BYTES),
            Route::Setup
            | Route::Table
            | Route::File
            | Route::CodeTable
            | Route::Query
            | Route::Metrics
            | Route::Page
            | Route::Status => None,
        }
    }
}

/// A request's path: a route with its parameters. Its `Display` is the
/// path a client requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiPath<'a> {
    Catalog,
    Setup(&'a SnapshotId),
    Table(&'a SnapshotId),
    File(&'a SnapshotId, &'a str),
    CodeTable(&'a SnapshotId),
    CodeEntry(&'a SnapshotId, u32),
    Code(&'a B256),
    Query,
    Health,
    Metrics,
    Page,
    Status,
}

impl ApiPath<'_> {
    pub fn route(&self) -> Route {
        match self {
            ApiPath::Catalog => Route::Catalog,
            ApiPath::Setup(_) => Route::Setup,
            ApiPath::Table(_) => Route::Table,
            ApiPath::File(..) => Route::File,
            ApiPath::CodeTable(_) => Route::CodeTable,
            ApiPath::CodeEntry(..) => Route::CodeEntry,
            ApiPath::Code(_) => Route::Code,
            ApiPath::Query => Route::Query,
            ApiPath::Health => Route::Health,
            ApiPath::Metrics => Route::Metrics,
            ApiPath::Page => Route::Page,
            ApiPath::Status => Route::Status,
        }
    }
}

impl fmt::Display for ApiPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = |id: &SnapshotId| id.url_form();
        match self {
            ApiPath::Setup(s) => write!(f, "/v1/snapshots/{}/setup", id(s)),
            ApiPath::Table(s) => write!(f, "/v1/snapshots/{}/table", id(s)),
            ApiPath::File(s, name) => write!(f, "/v1/snapshots/{}/files/{name}", id(s)),
            ApiPath::CodeTable(s) => write!(f, "/v1/snapshots/{}/codes", id(s)),
            ApiPath::CodeEntry(s, n) => write!(f, "/v1/snapshots/{}/codes/{n}", id(s)),
            ApiPath::Code(hash) => write!(f, "/v1/code/{hash}"),
            fixed => f.write_str(fixed.route().template()),
        }
    }
}

/// `GET /healthz`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Health {
    /// `ok` while the server answers.
    pub status: String,
    /// Snapshots it serves.
    pub snapshots: usize,
    /// `whole`, `shard i/n` or `router over n shards`.
    pub role: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each concrete path matches its route's template, parameter for
    /// parameter (the server's router and the clients agree by
    /// construction).
    #[test]
    fn paths_fill_their_templates() {
        let id = SnapshotId::new(1, 7, &crate::manifest::SnapshotKind::Full);
        let hash = B256::repeat_byte(0xab);
        let paths = [
            ApiPath::Catalog,
            ApiPath::Setup(&id),
            ApiPath::Table(&id),
            ApiPath::File(&id, "db.bin"),
            ApiPath::CodeTable(&id),
            ApiPath::CodeEntry(&id, 3),
            ApiPath::Code(&hash),
            ApiPath::Query,
            ApiPath::Health,
            ApiPath::Metrics,
            ApiPath::Page,
            ApiPath::Status,
        ];
        for path in paths {
            let route = path.route();
            let text = path.to_string();
            let template = route.template();
            let (got, want): (Vec<_>, Vec<_>) =
                (text.split('/').collect(), template.split('/').collect());
            assert_eq!(got.len(), want.len(), "{text} vs {template}");
            for (g, w) in got.iter().zip(&want) {
                assert!(w.starts_with('{') || g == w, "{text} vs {template}");
            }
            assert_eq!(Route::of_template(template), Some(route));
        }
        assert_eq!(
            ApiPath::Setup(&id).to_string(),
            "/v1/snapshots/1-7-full/setup"
        );
        assert_eq!(Route::ALL.len(), paths.len());
    }
}

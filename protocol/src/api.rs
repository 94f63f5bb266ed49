//! JSON types of the HTTP API, shared with clients.

use crate::manifest::Manifest;
use serde::{Deserialize, Serialize};

/// One snapshot in `GET /v1/snapshots`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// The id in URLs: `<chain>-<block>-<kind>`.
    pub id: String,
    #[serde(flatten)]
    pub manifest: Manifest,
}

/// `GET /v1/snapshots`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Catalog {
    pub snapshots: Vec<CatalogEntry>,
    /// Most queries the server takes in one batch.
    pub max_batch: usize,
    /// How the snapshots chain into views (computed by
    /// [`crate::view::views`]; clients recompute it from the manifests).
    #[serde(default)]
    pub views: Vec<crate::view::View>,
}

/// Body of every error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    pub error: String,
}

//! `ethpir-snapshot pull`: keeps a replica's store a copy of a primary's.
//! The follower publishes once, on the primary; every other machine pulls
//! what the primary's server lists (`GET /v1/snapshots`, whose entries
//! carry the manifests) through its read-only file export
//! (`export_files = true`: `GET /v1/snapshots/{id}/files/{name}`). Each
//! file is streamed to the replica's staging folder, never held whole,
//! refused past the size its manifest gives, and checked against the
//! manifest's digest before the snapshot is published with the same
//! atomic rename as a build. Snapshots the primary no longer lists are
//! removed, as its retention removed them.

use std::io::Write;
use std::time::Duration;

use api_client::{ApiClient, Bounds, FetchError, Size, Streamed};
use protocol::api::{CatalogEntry, CatalogListing};
use protocol::manifest::{FileDigest, SnapshotId};
use protocol::routes::ApiPath;
use snapshot_store::{SnapshotStore, StoreError};

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{what}: {reason}")]
    Http { what: String, reason: String },
    #[error("{what}: {got} bytes, the manifest says {expected}")]
    Size {
        what: String,
        got: u64,
        expected: u64,
    },
    #[error("{0}: does not match its digest in the manifest (nothing published)")]
    Digest(String),
    #[error("the primary's catalog: {0}")]
    Catalog(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// What one pull did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PullReport {
    /// Snapshots fetched and published, oldest first.
    pub fetched: Vec<String>,
    /// Snapshots removed because the primary no longer lists them.
    pub removed: Vec<String>,
    pub bytes: u64,
    /// Attestations the primary lists that this store now keeps too.
    pub attestations: usize,
}

/// Pulls from a primary's server into a store.
pub struct Puller {
    primary: ApiClient,
    /// Longest a single file may take to download.
    file_timeout: Duration,
}

impl Puller {
    pub fn new(from: &str, file_timeout: Duration) -> Result<Self, PullError> {
        let http = api_client::http_builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| PullError::Http {
                what: "HTTP client".into(),
                reason: e.to_string(),
            })?;
        Ok(Puller {
            primary: ApiClient::new(http, from),
            file_timeout,
        })
    }

    /// One pass: fetches every listed snapshot the store lacks, then
    /// removes those of the listed chains that the primary no longer has.
    pub async fn pull_once(&self, store: &SnapshotStore) -> Result<PullReport, PullError> {
        let catalog = self.catalog().await?;
        let mut report = PullReport::default();
        for entry in &catalog.snapshots {
            let id = entry.manifest.id();
            match store.get(&id) {
                // The same build: nothing to fetch.
                Ok(local) if local.manifest.pir.setup_digest == entry.manifest.pir.setup_digest => {
                    continue
                }
                // Another build under the same id (the primary rebuilt a
                // block's delta after a reorg): the old one goes.
                Ok(_) => {
                    store.remove(&id)?;
                    tracing::info!(snapshot = %entry.id, "replaced on the primary (a reorg rebuilt it): fetching the new build");
                }
                Err(StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            report.bytes += self.fetch_snapshot(store, entry).await?;
            tracing::info!(snapshot = %entry.id, "pulled and published");
            report.fetched.push(entry.id.url_form());
        }
        report.attestations = copy_attestations(store, &catalog.snapshots)?;
        let listed: std::collections::BTreeSet<_> =
            catalog.snapshots.iter().map(|e| e.manifest.id()).collect();
        let chains: std::collections::BTreeSet<u64> = listed.iter().map(|id| id.chain_id).collect();
        for local in store.list()? {
            if chains.contains(&local.id.chain_id) && !listed.contains(&local.id) {
                store.remove(&local.id)?;
                tracing::info!(snapshot = %local.id.url_form(), "removed (the primary retired it)");
                report.removed.push(local.id.url_form());
            }
        }
        Ok(report)
    }

    /// The primary's catalog, checked as a proxy checks one (ids, digests,
    /// plain file names: they become paths here).
    async fn catalog(&self) -> Result<CatalogListing, PullError> {
        self.primary
            .catalog(Duration::from_secs(60))
            .await
            .map_err(|e| PullError::Catalog(e.to_string()))
    }

    /// Downloads one snapshot's files into staging, checks them and
    /// publishes; the bytes downloaded.
    async fn fetch_snapshot(
        &self,
        store: &SnapshotStore,
        entry: &CatalogEntry,
    ) -> Result<u64, PullError> {
        let staged = store.stage(&entry.manifest.id())?;
        let mut total = 0;
        for (name, digest) in &entry.manifest.files {
            let path = staged.dir().join(name);
            total += self.fetch_file(&entry.id, name, digest, &path).await?;
        }
        if entry.manifest.files.contains_key(crate::store::CODES_FILE) {
            let table =
                std::fs::read(staged.dir().join(crate::store::CODES_FILE)).map_err(|source| {
                    PullError::Io {
                        path: crate::store::CODES_FILE.into(),
                        source,
                    }
                })?;
            total += self.fetch_codes(store, &table).await?;
        }
        store.publish(staged, &entry.manifest)?;
        Ok(total)
    }

    /// Keeps every code a snapshot's code table (already checked against
    /// its digest) names that the store lacks, each checked by its hash,
    /// before the snapshot that names it is published; the bytes.
    async fn fetch_codes(&self, store: &SnapshotStore, table: &[u8]) -> Result<u64, PullError> {
        let mut total = 0;
        for hash in table
            .chunks_exact(32)
            .map(alloy_primitives::B256::from_slice)
        {
            if store.has_code(&hash) {
                continue;
            }
            let what = format!("code {hash}");
            let mut code = Vec::new();
            let limit = protocol::codes::MAX_CODE_BYTES as u64;
            total += self
                .stream(ApiPath::Code(&hash), &what, limit, &mut |chunk| {
                    code.extend_from_slice(chunk);
                    Ok(())
                })
                .await?;
            protocol::codes::check_code(&hash, &code).map_err(|_| PullError::Digest(what))?;
            store.put_code(&code)?;
        }
        Ok(total)
    }

    /// Streams one file to `path` (fsynced), at most its manifest's size,
    /// and checks its digest.
    async fn fetch_file(
        &self,
        id: &SnapshotId,
        name: &str,
        expected: &FileDigest,
        path: &std::path::Path,
    ) -> Result<u64, PullError> {
        let what = format!("{}/{name}", id.url_form());
        let io = |source| PullError::Io {
            path: path.display().to_string(),
            source,
        };
        // Hashed as it is written: the file is not read back.
        let mut file = protocol::Sha3Writer::new(std::fs::File::create(path).map_err(io)?);
        let got = self
            .stream(
                ApiPath::File(id, name),
                &what,
                expected.bytes,
                &mut |chunk| file.write_all(chunk),
            )
            .await?;
        let (file, digest, _) = file.finish();
        file.sync_all().map_err(io)?;
        if got != expected.bytes {
            return Err(PullError::Size {
                what,
                got,
                expected: expected.bytes,
            });
        }
        if digest != expected.sha3_256 {
            return Err(PullError::Digest(what));
        }
        Ok(got)
    }

    /// `GET path` from the primary, its body streamed into `sink`, refused
    /// once it passes `limit` bytes or the file timeout; the bytes read.
    async fn stream(
        &self,
        path: ApiPath<'_>,
        what: &str,
        limit: u64,
        sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
    ) -> Result<u64, PullError> {
        let bounds = Bounds {
            size: Size::AtMost(limit),
            first_byte: self.file_timeout,
            whole: self.file_timeout,
            idle: None,
        };
        let http = |reason: String| PullError::Http {
            what: what.to_string(),
            reason,
        };
        match self.primary.get_streamed(path, what, bounds, sink).await {
            Ok(Streamed::Done(got)) => Ok(got),
            Ok(Streamed::Refused(answer)) => Err(http(format!("HTTP {}", answer.status))),
            Err(FetchError::Sink { reason, .. }) => Err(PullError::Io {
                path: what.to_string(),
                source: std::io::Error::other(reason),
            }),
            Err(e) => Err(http(e.to_string())),
        }
    }
}

/// Keeps the attestations the primary lists of snapshots this store holds,
/// each checked against the local manifest (they verify themselves: a
/// replica relays its primary's attesters' signatures). Returns how many
/// were new.
fn copy_attestations(store: &SnapshotStore, listed: &[CatalogEntry]) -> Result<usize, PullError> {
    let mut kept = 0;
    for entry in listed.iter().filter(|e| !e.attestations.is_empty()) {
        let Ok(local) = store.get(&entry.manifest.id()) else {
            continue;
        };
        let have = store.attestations(&local);
        for a in &entry.attestations {
            if have.contains(a) || a.verify(&local.manifest).is_err() {
                continue;
            }
            store.add_attestation(&local, a)?;
            kept += 1;
        }
    }
    Ok(kept)
}

//! Verified downloads: a snapshot's setup data or whole table, read from
//! the disk cache when its SHA3-256 matches the digest the manifest lists,
//! else downloaded within its size bound, checked, and cached (written
//! atomically). A download over its bound or off its digest is the
//! server's verification failure.

use std::path::{Path, PathBuf};

use protocol::api::CatalogEntry;
use protocol::Sha3Digest;
use reqwest::StatusCode;

use crate::fetch::Size;
use crate::link::{Duration, ServerLink};
use crate::ReadError;
use protocol::routes::ApiPath;

/// What is downloaded: its route below `/v1/snapshots/{id}/` and its
/// cache file's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Artifact {
    Setup,
    Table,
}

impl Artifact {
    pub fn name(self) -> &'static str {
        match self {
            Artifact::Setup => "setup",
            Artifact::Table => "table",
        }
    }
}

/// The on-disk cache of downloads, by digest.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    pub fn new(dir: PathBuf) -> Self {
        DiskCache { dir }
    }

    /// A [`Sha3Digest`] is 64 hex digits: the name stays in the folder.
    fn path(&self, artifact: Artifact, digest: &Sha3Digest) -> PathBuf {
        self.dir.join(format!("{digest}.{}", artifact.name()))
    }

    /// The cached bytes of `artifact` whose SHA3-256 is `digest`, if they
    /// are here and match it.
    pub async fn cached(&self, artifact: Artifact, digest: &Sha3Digest) -> Option<Vec<u8>> {
        let cached = self.path(artifact, digest);
        match tokio::fs::read(&cached).await {
            Ok(b) if protocol::sha3_hex(&b) == *digest => Some(b),
            Ok(_) => {
                tracing::warn!(file = %cached.display(), "cached {} does not match its digest", artifact.name());
                None
            }
            Err(_) => None,
        }
    }

    /// Caches `bytes` of `artifact`, already checked against `digest`
    /// (written atomically; a failure is only logged).
    pub async fn keep(&self, artifact: Artifact, digest: &Sha3Digest, bytes: &[u8]) {
        let path = self.path(artifact, digest);
        if let Err(e) = write_atomically(&self.dir, &path, bytes, Readers::Anyone).await {
            tracing::warn!(error = %e, "cannot cache {} data", artifact.name());
        }
    }

    /// The bytes of `artifact` of `entry`, whose SHA3-256 is `digest`, at
    /// most (or exactly) `size`.
    pub async fn verified(
        &self,
        link: &ServerLink,
        entry: &CatalogEntry,
        artifact: Artifact,
        digest: &Sha3Digest,
        size: Size,
    ) -> Result<Vec<u8>, ReadError> {
        if let Some(bytes) = self.cached(artifact, digest).await {
            return Ok(bytes);
        }
        let bytes = download(link, entry, artifact, digest, size).await?;
        if protocol::sha3_hex(&bytes) != *digest {
            return Err(link.distrust(format!(
                "snapshot {}: downloaded {} does not match the catalog digest",
                entry.id.url_form(),
                artifact.name()
            )));
        }
        self.keep(artifact, digest, &bytes).await;
        Ok(bytes)
    }
}

/// Downloads `artifact` of `entry` within `size`: more (or other) than
/// that is the server's verification failure; a missing table means the
/// snapshot was retired.
async fn download(
    link: &ServerLink,
    entry: &CatalogEntry,
    artifact: Artifact,
    digest: &Sha3Digest,
    size: Size,
) -> Result<Vec<u8>, ReadError> {
    let name = artifact.name();
    let id = entry.id.url_form();
    let path = match artifact {
        Artifact::Setup => ApiPath::Setup(&entry.id),
        Artifact::Table => ApiPath::Table(&entry.id),
    };
    let what = format!("snapshot {id}: {name}");
    let build = ServerLink::same_build(digest);
    let resp = link
        .download(path, &what, &build, size, Duration::Long)
        .await?;
    if resp.status == StatusCode::NOT_FOUND && artifact == Artifact::Table {
        return Err(ReadError::Retired(id));
    }
    crate::link::refuse_replaced(resp.status, &id)?;
    if !resp.status.is_success() {
        return Err(ReadError::Setup {
            snapshot: id,
            reason: match artifact {
                Artifact::Setup => format!("HTTP {}", resp.status),
                Artifact::Table => format!("table: HTTP {}", resp.status),
            },
        });
    }
    Ok(resp.body)
}

/// Who may read a file the cache writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readers {
    /// As the umask allows (setups and tables: every client gets the same).
    Anyone,
    /// Its owner only (mode 0600): what says which accounts or contracts
    /// the user read.
    Owner,
}

/// Writes `bytes` to `path` whole: to a temporary file beside it, then
/// renamed into place, so that a reader never sees half of it.
pub(crate) async fn write_atomically(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    readers: Readers,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    tokio::fs::create_dir_all(dir).await?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut options = tokio::fs::OpenOptions::new();
    options.create(true).write(true).truncate(true);
    #[cfg(unix)]
    if readers == Readers::Owner {
        options.mode(0o600);
    }
    let mut file = options.open(&tmp).await?;
    file.write_all(bytes).await?;
    file.flush().await?;
    drop(file);
    tokio::fs::rename(&tmp, path).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_written_whole_and_owner_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("a");
        write_atomically(dir.path(), &private, b"code", Readers::Owner)
            .await
            .unwrap();
        assert_eq!(std::fs::read(&private).unwrap(), b"code");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&private).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Written again: replaced whole, no temporary file left.
        write_atomically(dir.path(), &private, b"other", Readers::Anyone)
            .await
            .unwrap();
        assert_eq!(std::fs::read(&private).unwrap(), b"other");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}

//! The snapshot store: a directory `<root>/<chain id>/<block>-<kind>/`, one
//! folder per snapshot, each with `manifest.json`, `records.bin`, `db.bin`
//! (the encoded database), `setup.bin` (filter parameters and hint, what
//! clients download) and, for small levels, `table.bin` (the entries, for
//! clients that download such a level whole).
//!
//! Publishing is atomic: a snapshot is written under `<root>/.staging/`,
//! every file and the folder are fsynced, and one `rename` makes it visible.
//! A build killed at any moment leaves at most a folder under `.staging/`,
//! which listing ignores and the next build removes. Removal is the
//! reverse: rename into `<root>/.trash/`, then delete.
//!
//! Its own crate so that the server reads the store without linking the
//! build pipeline (sources, GPU, progress bars).
// `unsafe` only in `mapped` (one memory map, with its `# Safety` contract).
#![deny(unsafe_code)]

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use pir_core::db::{DbShape, SharedBytes};
use pir_core::encode::PanelSink;
use pir_core::shard::Shard;
use pir_core::wire::{db_header, decode_db_header};
use pir_core::{EncodedDb, PirServer, PublishedSetup};
use protocol::manifest::{
    FileDigest, KindTag, Manifest, SnapshotId, MANIFEST_FORMAT, OLDEST_MANIFEST_FORMAT,
};

mod codes;
pub mod failpoint;
#[allow(unsafe_code)]
mod mapped;

pub const MANIFEST_FILE: &str = "manifest.json";
pub const RECORDS_FILE: &str = "records.bin";
pub const DB_FILE: &str = "db.bin";
pub const SETUP_FILE: &str = "setup.bin";
pub use codes::{code_table_bytes, CODES_FILE};
/// A small level's entries, for clients that download it whole
/// (`protocol::table`); absent from large snapshots.
pub use protocol::manifest::TABLE_FILE;
const STAGING: &str = ".staging";
const TRASH: &str = ".trash";
/// Attestations, beside the snapshots (a published snapshot's folder is
/// never written): `.attestations/<chain>/<folder>/<signer>.json`.
const ATTESTATIONS: &str = ".attestations";
/// Most bytes of one attestation file read.
const MAX_ATTESTATION_BYTES: u64 = 4096;
/// What the follower last saw of its node ([`FollowerMark`]).
const FOLLOWER_FILE: &str = "follower.json";
/// Largest follower mark read.
const MAX_FOLLOWER_BYTES: u64 = 4096;

/// What the follower (`ethpir-snapshot run`) last saw of its node, kept
/// beside the snapshots so that the server's page can say how far the
/// newest view is behind the chain. Advisory: written in place by rename,
/// never read by a client.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FollowerMark {
    pub chain_id: u64,
    /// The node's head block.
    pub node_head: u64,
    /// The newest view's block in the store.
    pub newest_view: u64,
    /// Blocks the follower stays behind the head on purpose.
    pub confirmations: u64,
    /// Unix seconds of the look.
    pub at: u64,
}

/// Store errors, with the path involved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: bad manifest: {reason}")]
    Manifest { path: PathBuf, reason: String },
    #[error("snapshot {0} is not in the store")]
    NotFound(SnapshotId),
    #[error("snapshot {0} is already published (same block and kind)")]
    Exists(SnapshotId),
    #[error("snapshot {id}: {problem}")]
    Invalid { id: SnapshotId, problem: String },
    #[error("{path}: {problem}")]
    Code { path: PathBuf, problem: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub use protocol::sha3_hex;

/// What the manifest says of one of the snapshot's files.
fn listed<'a>(snap: &'a StoredSnapshot, name: &str) -> Result<&'a FileDigest, StoreError> {
    snap.manifest
        .files
        .get(name)
        .ok_or_else(|| StoreError::Invalid {
            id: snap.id,
            problem: format!("manifest lists no {name}"),
        })
}

/// A file's length and digest against what its manifest says.
fn check_digest(
    snap: &StoredSnapshot,
    name: &str,
    expected: &FileDigest,
    bytes: u64,
    digest: &protocol::Sha3Digest,
) -> Result<(), StoreError> {
    if expected.bytes != bytes || expected.sha3_256 != *digest {
        return Err(StoreError::Invalid {
            id: snap.id,
            problem: format!("{name} does not match its digest in the manifest"),
        });
    }
    Ok(())
}

/// A published snapshot found in the store.
#[derive(Clone, Debug)]
pub struct StoredSnapshot {
    pub id: SnapshotId,
    pub path: PathBuf,
    pub manifest: Manifest,
}

/// A snapshot being written; dropped unpublished, it is removed.
pub struct StagedSnapshot {
    dir: PathBuf,
    files: std::collections::BTreeMap<String, FileDigest>,
    published: bool,
}

/// The catalog entries of stored snapshots (what `protocol::view::views`
/// reads).
pub fn as_entries(snaps: &[StoredSnapshot]) -> Vec<protocol::api::CatalogEntry> {
    snaps
        .iter()
        .map(|s| protocol::api::CatalogEntry {
            id: s.id,
            manifest: s.manifest.clone(),
            attestations: Vec::new(),
        })
        .collect()
}

impl StagedSnapshot {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes and fsyncs one file, recording its digest.
    pub fn write_file(&mut self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_file_with(name, |w| w.write_all(bytes))?;
        Ok(())
    }

    /// Writes one file by streaming it through `write` (hashed as it
    /// goes, buffered, never held whole), fsyncs it and records its
    /// digest, which it returns.
    pub fn write_file_with(
        &mut self,
        name: &str,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<FileDigest, StoreError> {
        let path = self.dir.join(name);
        let file = File::create(&path).map_err(io(&path))?;
        let mut hashed =
            protocol::Sha3Writer::new(std::io::BufWriter::with_capacity(8 << 20, file));
        write(&mut hashed).map_err(io(&path))?;
        let (buffered, sha3_256, bytes) = hashed.finish();
        let file = buffered
            .into_inner()
            .map_err(|e| io(&path)(e.into_error()))?;
        file.sync_all().map_err(io(&path))?;
        let digest = FileDigest { bytes, sha3_256 };
        self.files.insert(name.to_string(), digest.clone());
        Ok(digest)
    }

    /// Digests of the files written so far (for the manifest).
    pub fn file_digests(&self) -> &std::collections::BTreeMap<String, FileDigest> {
        &self.files
    }

    /// A file written by [`StagedSnapshot::write_file_with`], mapped
    /// read-only (the encoder reads `records.bin` from the page cache,
    /// never whole into memory).
    pub fn map_file(&self, name: &str) -> Result<SharedBytes, StoreError> {
        let path = self.dir.join(name);
        assert!(
            self.files.contains_key(name),
            "only files written whole are mapped"
        );
        mapped::map_staged(&path).map_err(io(&path))
    }

    /// `db.bin`, to be laid out in place by the encoder
    /// ([`pir_core::encode::encode_into`]) and then [`StagedDb::finish`]ed.
    pub fn db_in_place(&mut self) -> StagedDb<'_> {
        StagedDb {
            path: self.dir.join(DB_FILE),
            staged: self,
            header_len: 0,
            map: None,
        }
    }
}

/// A staged `db.bin` whose panels the encoder writes through a memory
/// map: the database lives in the page cache (written back as it is
/// made), never whole in the process's own memory.
pub struct StagedDb<'s> {
    staged: &'s mut StagedSnapshot,
    path: PathBuf,
    header_len: usize,
    map: Option<(File, memmap2::MmapMut)>,
}

impl PanelSink for StagedDb<'_> {
    fn panels(&mut self, shape: &DbShape) -> std::io::Result<&mut [i8]> {
        self.map = None;
        let header_len = db_header(shape).len();
        let len = header_len as u64 + shape.rows() as u64 * shape.padded_cols() as u64;
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.path)?;
        file.set_len(len)?;
        let map = mapped::map_staged_mut(&file, &self.path, len)?;
        self.header_len = header_len;
        let (_, map) = self.map.insert((file, map));
        Ok(bytemuck::cast_slice_mut(&mut map[header_len..]))
    }
}

impl StagedDb<'_> {
    /// Writes the header of the database the encoder made (`shape`),
    /// fsyncs the file and records its digest; the database, answered
    /// from the file.
    pub fn finish(self, shape: &DbShape) -> Result<EncodedDb, StoreError> {
        let path = self.path;
        let Some((file, mut map)) = self.map else {
            return Err(io(&path)(std::io::Error::other(
                "the encoder wrote no database",
            )));
        };
        let head = db_header(shape);
        assert_eq!(
            head.len(),
            self.header_len,
            "the header reserved for this shape"
        );
        map[..head.len()].copy_from_slice(&head);
        map.flush().map_err(io(&path))?;
        file.sync_all().map_err(io(&path))?;
        let digest = FileDigest {
            bytes: map.len() as u64,
            sha3_256: sha3_hex(&map),
        };
        self.staged.files.insert(DB_FILE.to_string(), digest);
        let bytes: SharedBytes = std::sync::Arc::new(map.make_read_only().map_err(io(&path))?);
        EncodedDb::from_shared(shape.clone(), bytes, head.len(), 0..shape.rows())
            .map_err(|e| io(&path)(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
    }
}

impl Drop for StagedSnapshot {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A snapshot store rooted at a directory.
#[derive(Clone, Debug)]
pub struct SnapshotStore {
    root: PathBuf,
}

fn fsync_dir(path: &Path) -> Result<(), StoreError> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(io(path))
}

impl SnapshotStore {
    /// Opens (creating if needed) a store.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, StoreError> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(io(&root))?;
        Ok(SnapshotStore { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a snapshot lives (published or not).
    pub fn path_of(&self, id: &SnapshotId) -> PathBuf {
        self.root.join(id.chain_id.to_string()).join(id.folder())
    }

    /// Records what the follower saw of its node (a temporary file renamed
    /// over the last mark: a reader never sees half of one).
    pub fn write_follower_mark(&self, mark: &FollowerMark) -> Result<(), StoreError> {
        let path = self.root.join(FOLLOWER_FILE);
        let tmp = self.root.join(format!(".{FOLLOWER_FILE}.tmp"));
        let json = serde_json::to_vec(mark).expect("a mark serialises");
        fs::write(&tmp, json).map_err(io(&tmp))?;
        fs::rename(&tmp, &path).map_err(io(&path))
    }

    /// The follower's last mark, if there is a readable one.
    pub fn follower_mark(&self) -> Option<FollowerMark> {
        use std::io::Read;
        let file = File::open(self.root.join(FOLLOWER_FILE)).ok()?;
        let mut bytes = Vec::new();
        file.take(MAX_FOLLOWER_BYTES).read_to_end(&mut bytes).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Removes what killed builds left under `.staging` and `.trash`.
    pub fn clean_leftovers(&self) -> Result<usize, StoreError> {
        let mut removed = 0;
        for dir in [STAGING, TRASH] {
            let path = self.root.join(dir);
            if let Ok(entries) = fs::read_dir(&path) {
                for e in entries.flatten() {
                    fs::remove_dir_all(e.path()).map_err(io(&e.path()))?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }

    /// A folder for one build's scratch files (sorted runs), under
    /// `.staging`: removed with the other leftovers if the build is
    /// interrupted. Not created here.
    pub fn scratch_dir(&self, name: &str) -> PathBuf {
        self.root
            .join(STAGING)
            .join(format!("{name}-{}", std::process::id()))
    }

    /// Starts a new snapshot under `.staging`.
    pub fn stage(&self, id: &SnapshotId) -> Result<StagedSnapshot, StoreError> {
        let staging = self.root.join(STAGING);
        fs::create_dir_all(&staging).map_err(io(&staging))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = staging.join(format!(
            "{}-{}-{}",
            id.url_form(),
            std::process::id(),
            nanos
        ));
        fs::create_dir(&dir).map_err(io(&dir))?;
        Ok(StagedSnapshot {
            dir,
            files: Default::default(),
            published: false,
        })
    }

    /// Writes the manifest last, fsyncs, and renames the staged folder into
    /// place. Refuses to replace a published snapshot.
    pub fn publish(
        &self,
        mut staged: StagedSnapshot,
        manifest: &Manifest,
    ) -> Result<StoredSnapshot, StoreError> {
        let id = manifest.id();
        let target = self.path_of(&id);
        if target.exists() {
            return Err(StoreError::Exists(id));
        }
        let json = serde_json::to_vec_pretty(manifest).expect("manifest serialises");
        let path = staged.dir.join(MANIFEST_FILE);
        let mut f = File::create(&path).map_err(io(&path))?;
        f.write_all(&json).map_err(io(&path))?;
        f.sync_all().map_err(io(&path))?;
        fsync_dir(&staged.dir)?;
        let parent = target.parent().expect("snapshot path has a chain folder");
        fs::create_dir_all(parent).map_err(io(parent))?;
        failpoint::hit("publish");
        fs::rename(&staged.dir, &target).map_err(io(&target))?;
        staged.published = true;
        fsync_dir(parent)?;
        Ok(StoredSnapshot {
            id,
            path: target,
            manifest: manifest.clone(),
        })
    }

    /// Every published snapshot, oldest block first. Folders without a
    /// readable manifest are skipped (and reported by `verify`).
    pub fn list(&self) -> Result<Vec<StoredSnapshot>, StoreError> {
        let mut out = Vec::new();
        let entries = fs::read_dir(&self.root).map_err(io(&self.root))?;
        for chain in entries.flatten() {
            let name = chain.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name.parse::<u64>().is_err() || !chain.path().is_dir() {
                continue;
            }
            for snap in fs::read_dir(chain.path())
                .map_err(io(&chain.path()))?
                .flatten()
            {
                if let Ok(s) = self.read_snapshot(&snap.path()) {
                    out.push(s);
                }
            }
        }
        out.sort_by(|a, b| {
            (a.id.chain_id, a.id.block, a.id.kind, a.id.from).cmp(&(
                b.id.chain_id,
                b.id.block,
                b.id.kind,
                b.id.from,
            ))
        });
        Ok(out)
    }

    fn read_snapshot(&self, path: &Path) -> Result<StoredSnapshot, StoreError> {
        let mpath = path.join(MANIFEST_FILE);
        let bytes = fs::read(&mpath).map_err(io(&mpath))?;
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Manifest {
                path: mpath.clone(),
                reason: e.to_string(),
            })?;
        if !(OLDEST_MANIFEST_FORMAT..=MANIFEST_FORMAT).contains(&manifest.format) {
            return Err(StoreError::Manifest {
                path: mpath,
                reason: format!("format {} is not supported", manifest.format),
            });
        }
        let id = manifest.id();
        if self.path_of(&id) != path {
            return Err(StoreError::Manifest {
                path: mpath,
                reason: format!("describes {id}, which belongs elsewhere"),
            });
        }
        Ok(StoredSnapshot {
            id,
            path: path.to_path_buf(),
            manifest,
        })
    }

    fn attestations_dir(&self, id: &SnapshotId) -> PathBuf {
        self.root
            .join(ATTESTATIONS)
            .join(id.chain_id.to_string())
            .join(id.folder())
    }

    /// When `snap`'s attestations last changed (their folder's mtime: an
    /// attestation is renamed into it whole); `None` while it has none.
    pub fn attestations_stamp(&self, snap: &StoredSnapshot) -> Option<std::time::SystemTime> {
        fs::metadata(self.attestations_dir(&snap.id))
            .and_then(|m| m.modified())
            .ok()
    }

    /// The attestations kept for `snap` (at most
    /// [`protocol::attest::MAX_PER_SNAPSHOT`], in signer order): each whose
    /// signature holds over this manifest; others are skipped with a
    /// warning (a file for a snapshot rebuilt since, or damaged).
    pub fn attestations(&self, snap: &StoredSnapshot) -> Vec<protocol::attest::Attestation> {
        use std::io::Read;
        let dir = self.attestations_dir(&snap.id);
        let Ok(entries) = fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.retain(|p| p.extension().is_some_and(|e| e == "json"));
        paths.sort();
        let mut out = Vec::new();
        for path in paths {
            let mut text = Vec::new();
            let read = File::open(&path)
                .and_then(|f| f.take(MAX_ATTESTATION_BYTES).read_to_end(&mut text));
            let parsed = read
                .map_err(|e| e.to_string())
                .and_then(|_| {
                    serde_json::from_slice::<protocol::attest::Attestation>(&text)
                        .map_err(|e| e.to_string())
                })
                .and_then(|a| {
                    a.verify(&snap.manifest)
                        .map(|()| a)
                        .map_err(|e| e.to_string())
                });
            match parsed {
                Ok(a) if out.len() < protocol::attest::MAX_PER_SNAPSHOT => out.push(a),
                Ok(_) => {}
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "attestation skipped"),
            }
        }
        out
    }

    /// Keeps `attestation` of `snap` (written whole, then renamed into
    /// place: a reader never sees half of one).
    pub fn add_attestation(
        &self,
        snap: &StoredSnapshot,
        attestation: &protocol::attest::Attestation,
    ) -> Result<(), StoreError> {
        let dir = self.attestations_dir(&snap.id);
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = dir.join(format!("{:#x}.json", attestation.signer));
        let partial = path.with_extension("json.partial");
        let json = serde_json::to_vec_pretty(attestation).expect("an attestation serialises");
        fs::write(&partial, json).map_err(io(&partial))?;
        fs::rename(&partial, &path).map_err(io(&path))
    }

    /// One published snapshot.
    pub fn get(&self, id: &SnapshotId) -> Result<StoredSnapshot, StoreError> {
        let path = self.path_of(id);
        if !path.join(MANIFEST_FILE).exists() {
            return Err(StoreError::NotFound(*id));
        }
        self.read_snapshot(&path)
    }

    /// Reads one file of a snapshot and checks it against the manifest.
    pub fn read_checked(&self, snap: &StoredSnapshot, name: &str) -> Result<Vec<u8>, StoreError> {
        let expected = listed(snap, name)?;
        let path = snap.path.join(name);
        let bytes = fs::read(&path).map_err(io(&path))?;
        check_digest(snap, name, expected, bytes.len() as u64, &sha3_hex(&bytes))?;
        Ok(bytes)
    }

    /// Checks one file of a snapshot against the manifest, streaming it
    /// (a database of gigabytes is never held to be hashed); its path.
    pub fn check_file(&self, snap: &StoredSnapshot, name: &str) -> Result<PathBuf, StoreError> {
        let expected = listed(snap, name)?;
        let path = snap.path.join(name);
        let file = File::open(&path).map_err(io(&path))?;
        let (digest, bytes) = protocol::sha3_hex_of_reader(file).map_err(io(&path))?;
        check_digest(snap, name, expected, bytes, &digest)?;
        Ok(path)
    }

    /// One file of a snapshot checked against the manifest (streamed) and
    /// memory-mapped: read in place, from the page cache, never held
    /// whole (`verify` samples a mainnet base's `records.bin` this way).
    pub fn map_checked(
        &self,
        snap: &StoredSnapshot,
        name: &str,
    ) -> Result<SharedBytes, StoreError> {
        let path = self.check_file(snap, name)?;
        mapped::map_published(&path).map_err(io(&path))
    }

    /// Loads a snapshot to answer from: `db.bin` checked against its
    /// digest (streamed) and then memory-mapped, one copy in the page
    /// cache shared by every worker and every process serving the store;
    /// `setup.bin` read, checked and parsed once. A shard (`Some`) answers
    /// only its rows, and only their pages are ever read after the check.
    pub fn load_server(
        &self,
        snap: &StoredSnapshot,
        shard: Option<Shard>,
    ) -> Result<PirServer, StoreError> {
        let invalid = |problem: String| StoreError::Invalid {
            id: snap.id,
            problem,
        };
        let bytes = self.map_checked(snap, DB_FILE)?;
        let (shape, offset) =
            decode_db_header((*bytes).as_ref()).map_err(|e| invalid(format!("{DB_FILE}: {e}")))?;
        let served = match shard {
            Some(shard) => shard
                .rows(shape.rows())
                .map_err(|e| invalid(format!("shard {shard}: {e}")))?,
            None => 0..shape.rows(),
        };
        let db = EncodedDb::from_shared(shape, bytes, offset, served)
            .map_err(|e| invalid(format!("{DB_FILE}: {e}")))?;
        let setup = self.load_setup(snap)?;
        let server = PirServer::from_setup_bytes(db, setup.bytes().to_vec())
            .map_err(|e| invalid(format!("{SETUP_FILE}: {e}")))?;
        Ok(server)
    }

    /// A snapshot's setup data, checked against the manifest (file digest
    /// and setup digest) and parsed once: what a router in front of row
    /// shards serves without the database.
    pub fn load_setup(&self, snap: &StoredSnapshot) -> Result<PublishedSetup, StoreError> {
        let invalid = |problem: String| StoreError::Invalid {
            id: snap.id,
            problem,
        };
        let setup = PublishedSetup::from_bytes(self.read_checked(snap, SETUP_FILE)?)
            .map_err(|e| invalid(format!("{SETUP_FILE}: {e}")))?;
        if protocol::Sha3Digest::from_bytes(setup.digest()) != snap.manifest.pir.setup_digest {
            return Err(invalid("setup digest differs from the manifest".into()));
        }
        Ok(setup)
    }

    /// Removes a snapshot (rename into `.trash`, then delete).
    pub fn remove(&self, id: &SnapshotId) -> Result<(), StoreError> {
        let path = self.path_of(id);
        if !path.exists() {
            return Err(StoreError::NotFound(*id));
        }
        let trash = self.root.join(TRASH);
        fs::create_dir_all(&trash).map_err(io(&trash))?;
        let dest = trash.join(format!("{}-{}", id.url_form(), std::process::id()));
        fs::rename(&path, &dest).map_err(io(&path))?;
        fs::remove_dir_all(&dest).map_err(io(&dest))
    }

    /// Applies the retention policy to one chain: keeps the newest
    /// `keep_latest` full and active snapshots, every historical snapshot,
    /// every delta and hot tier (the follower retires those, by the views
    /// and levels they serve)
    /// and every snapshot at a pinned height. Returns what was removed.
    pub fn apply_retention(
        &self,
        chain_id: u64,
        keep_latest: usize,
        pinned: &[u64],
    ) -> Result<Vec<SnapshotId>, StoreError> {
        let mut latest: Vec<StoredSnapshot> = self
            .list()?
            .into_iter()
            .filter(|s| {
                s.id.chain_id == chain_id
                    && !matches!(
                        s.id.kind,
                        KindTag::Historical | KindTag::Delta | KindTag::Hot
                    )
                    && !pinned.contains(&s.id.block)
            })
            .collect();
        latest.sort_by_key(|s| std::cmp::Reverse(s.id.block));
        let mut removed = Vec::new();
        for s in latest.into_iter().skip(keep_latest) {
            self.remove(&s.id)?;
            removed.push(s.id);
        }
        Ok(removed)
    }
}

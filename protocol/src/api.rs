//! JSON types of the HTTP API, shared with clients, and the checks a
//! client makes of a catalog before it uses any of it: the server may lie,
//! so every field a client acts on is bounded and checked at adoption
//! ([`CatalogListing::checked`]).

use std::collections::BTreeSet;

use crate::manifest::{
    Manifest, SnapshotId, SnapshotKind, MANIFEST_FORMAT, OLDEST_MANIFEST_FORMAT,
};
use serde::{Deserialize, Serialize};

/// One snapshot in `GET /v1/snapshots`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// The id in URLs: `<chain>-<block>-<kind>[-<from>]`.
    pub id: SnapshotId,
    #[serde(flatten)]
    pub manifest: Manifest,
    /// Signatures of operators who checked the snapshot against their own
    /// node (`ethpir-snapshot attest`): each verifies itself, so any
    /// server relays them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attestations: Vec<crate::attest::Attestation>,
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
    pub views: Vec<View>,
}

/// The snapshots that give the state at `block`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    pub chain_id: u64,
    pub block: u64,
    /// Snapshot ids, base first, freshest last.
    pub snapshots: Vec<SnapshotId>,
    /// The base is a full snapshot: an address absent from every level
    /// has balance 0 and nonce 0.
    pub complete: bool,
}

/// What a client reads of `GET /v1/snapshots`: the entries and the batch
/// limit. The server's `views` are skipped unread (not even allocated):
/// a client computes views from the manifests itself.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct CatalogListing {
    pub snapshots: Vec<CatalogEntry>,
    pub max_batch: usize,
}

/// The request header by which a client asks for a catalog by difference
/// (`1`): with `If-None-Match` naming a catalog the server served
/// recently, the answer is a [`CatalogDiff`] from it (marked by
/// [`CATALOG_DIFF_HEADER`] naming that catalog's ETag); otherwise the whole
/// catalog, as without it.
pub const ACCEPT_CATALOG_DIFF: &str = "x-ethpir-accept-diff";
/// The response header that marks a body as a [`CatalogDiff`]: the ETag
/// of the catalog it starts from.
pub const CATALOG_DIFF_HEADER: &str = "x-ethpir-diff-since";
/// The request header by which a client waits for a new catalog (seconds,
/// at most [`MAX_CATALOG_WAIT_SECS`]): with `If-None-Match` naming the
/// current catalog, the server holds the request until the catalog
/// changes (answered 204, no body: the client then fetches it as usual)
/// or the wait ends (304). A client asks only a server that announces it
/// ([`CATALOG_LONG_POLL_HEADER`]) and polls otherwise.
pub const CATALOG_WAIT_HEADER: &str = "x-ethpir-wait";
/// The longest wait a server grants.
pub const MAX_CATALOG_WAIT_SECS: u64 = 30;
/// The response header (`1`) by which a server announces, on every
/// catalog answer, that it holds waiting requests.
pub const CATALOG_LONG_POLL_HEADER: &str = "x-ethpir-long-poll";

/// What changed in `GET /v1/snapshots` since a catalog the client holds:
/// the entries added (or changed: listed whole again) and the ids no
/// longer listed (or changed). Applied to the catalog it starts from, it
/// gives the catalog whose ETag the response carries; the client checks
/// the result as it checks a whole catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CatalogDiff {
    pub added: Vec<CatalogEntry>,
    pub retired: Vec<SnapshotId>,
    pub max_batch: usize,
}

impl CatalogDiff {
    /// `held`'s entries with this diff applied, sorted by chain, block
    /// and id (as the server sorts them).
    pub fn apply(self, held: &[CatalogEntry]) -> CatalogListing {
        let gone: BTreeSet<SnapshotId> = self
            .retired
            .iter()
            .chain(self.added.iter().map(|e| &e.id))
            .copied()
            .collect();
        let mut snapshots: Vec<CatalogEntry> = held
            .iter()
            .filter(|e| !gone.contains(&e.id))
            .cloned()
            .chain(self.added)
            .collect();
        snapshots.sort_by_key(|e| (e.manifest.chain_id, e.manifest.block_number, e.id));
        CatalogListing {
            snapshots,
            max_batch: self.max_batch,
        }
    }
}

/// Most snapshots a catalog may list (a store following the head holds a
/// few hundred; more is a server's attempt to take the client's memory).
pub const MAX_CATALOG_ENTRIES: usize = 20_000;
/// Largest size or count a manifest may state (bytes of a file, setup,
/// query or answer; records): 2^44, some 17 TB.
pub const MAX_STATED_SIZE: u64 = 1 << 44;
/// Most files a manifest may list.
pub const MAX_FILES: usize = 16;
/// Longest free-text field (source, creation time, build device).
pub const MAX_TEXT: usize = 1024;
/// Most contracts a manifest may list as held (tokens and others).
pub const MAX_CONTRACTS: usize = 4096;

/// Why a catalog, or one of its entries, is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("{0} snapshots listed (at most {MAX_CATALOG_ENTRIES})")]
    TooMany(usize),
    #[error("snapshot {0} is listed twice")]
    Duplicate(SnapshotId),
    #[error("snapshot {id}: {why}")]
    Entry { id: SnapshotId, why: String },
}

impl CatalogEntry {
    /// Checks what a client uses of the entry: its id is its manifest's,
    /// the manifest's format is known, a delta spans blocks forward, sizes
    /// and counts are bounded, file names are plain names, free text is
    /// short. Digests and ids are checked by their types when parsed.
    pub fn check(&self) -> Result<(), CatalogError> {
        self.check_fields()
            .map_err(|why| CatalogError::Entry { id: self.id, why })
    }

    fn check_fields(&self) -> Result<(), String> {
        let m = &self.manifest;
        if !(OLDEST_MANIFEST_FORMAT..=MANIFEST_FORMAT).contains(&m.format) {
            return Err(format!(
                "manifest format {} (this client reads {OLDEST_MANIFEST_FORMAT} to {MANIFEST_FORMAT})",
                m.format
            ));
        }
        let count = m.codes.map_or(0, |c| c.count);
        if m.common_codes.len() > crate::codes::MAX_COMMON_CODES
            || m.common_codes.iter().any(|&p| p == 0 || p > count)
        {
            return Err("common codes outside the code table, or too many".into());
        }
        if m.id() != self.id {
            return Err(format!(
                "listed under another id than its manifest's ({})",
                m.id()
            ));
        }
        if let SnapshotKind::Delta { from } = m.kind {
            if from >= m.block_number {
                return Err(format!(
                    "a delta from block {from} to block {}",
                    m.block_number
                ));
            }
        }
        if self.attestations.len() > crate::attest::MAX_PER_SNAPSHOT {
            return Err(format!(
                "{} attestations (at most {})",
                self.attestations.len(),
                crate::attest::MAX_PER_SNAPSHOT
            ));
        }
        check_sizes(m)?;
        check_names_and_text(m)
    }
}

/// Every size and count a manifest states within [`MAX_STATED_SIZE`].
fn check_sizes(m: &Manifest) -> Result<(), String> {
    let p = &m.pir;
    let sizes = [
        ("record count", m.record_count),
        ("storage records", m.storage_records),
        ("setup bytes", p.hint_bytes),
        ("query bytes", p.query_bytes),
        ("response bytes", p.response_bytes),
        ("rows", p.rows),
        ("columns", p.cols),
    ];
    let files = m.files.values().map(|f| ("file bytes", f.bytes));
    if let Some((what, n)) = sizes
        .into_iter()
        .chain(files)
        .find(|(_, n)| *n > MAX_STATED_SIZE)
    {
        return Err(format!("{what} {n} (at most {MAX_STATED_SIZE})"));
    }
    if m.storage_records > m.record_count {
        return Err("more storage records than records".into());
    }
    Ok(())
}

/// File names plain and few, free text short, contracts few.
fn check_names_and_text(m: &Manifest) -> Result<(), String> {
    if m.files.len() > MAX_FILES {
        return Err(format!("{} files (at most {MAX_FILES})", m.files.len()));
    }
    let plain = |n: &str| {
        (1..=64).contains(&n.len())
            && !n.starts_with('.')
            && n.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
    };
    if let Some(name) = m.files.keys().find(|n| !plain(n)) {
        let shown: String = name.chars().take(80).collect();
        return Err(format!("file name '{shown}' is not a plain name"));
    }
    let texts = [&m.source, &m.created_at, &m.build.hint_device];
    if texts.iter().any(|t| t.len() > MAX_TEXT) {
        return Err(format!("a text field over {MAX_TEXT} bytes"));
    }
    let contracts = m.storage.tokens.len() + m.storage.contracts.len();
    if contracts > MAX_CONTRACTS {
        return Err(format!(
            "{contracts} contracts held (at most {MAX_CONTRACTS})"
        ));
    }
    check_canaries(m)
}

/// Few canaries, each a value of the snapshot's width.
fn check_canaries(m: &Manifest) -> Result<(), String> {
    let most = crate::manifest::CANARIES_PER_BASE;
    if m.canaries.len() > most {
        return Err(format!("{} canaries (at most {most})", m.canaries.len()));
    }
    let width = m.pir.value_bytes as usize;
    if m.canaries.iter().any(|c| c.value.len() != width) {
        return Err(format!("a canary's value is not {width} bytes"));
    }
    Ok(())
}

impl CatalogListing {
    /// The listing if every entry passes [`CatalogEntry::check`], no id is
    /// listed twice and there are at most [`MAX_CATALOG_ENTRIES`]; else
    /// why not. A refused catalog is not adopted at all: a server that
    /// lies in one entry is not believed in the others.
    pub fn checked(self) -> Result<Self, CatalogError> {
        if self.snapshots.len() > MAX_CATALOG_ENTRIES {
            return Err(CatalogError::TooMany(self.snapshots.len()));
        }
        let mut seen = BTreeSet::new();
        for e in &self.snapshots {
            if !seen.insert(e.id) {
                return Err(CatalogError::Duplicate(e.id));
            }
            e.check()?;
        }
        Ok(self)
    }
}

/// Body of every error response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::FileDigest;

    fn listing(snapshots: Vec<CatalogEntry>) -> CatalogListing {
        CatalogListing {
            snapshots,
            max_batch: 8,
        }
    }

    #[test]
    fn honest_entries_pass() {
        let files = [(
            "table.bin",
            FileDigest {
                bytes: 40,
                sha3_256: Default::default(),
            },
        )];
        let base = crate::testing::entry(1, 5, SnapshotKind::Full, &[]);
        let delta = crate::testing::entry(1, 6, SnapshotKind::Delta { from: 5 }, &files);
        assert!(listing(vec![base, delta]).checked().is_ok());
    }

    #[test]
    fn lying_entries_are_refused() {
        let base = || crate::testing::entry(1, 5, SnapshotKind::Full, &[]);
        let refused = |e: CatalogEntry| listing(vec![e]).checked().unwrap_err();
        let mut other_id = base();
        other_id.id = "1-6-full".parse().unwrap();
        assert!(matches!(refused(other_id), CatalogError::Entry { .. }));
        let mut backwards = crate::testing::entry(1, 5, SnapshotKind::Delta { from: 5 }, &[]);
        assert!(matches!(
            refused(backwards.clone()),
            CatalogError::Entry { .. }
        ));
        backwards.manifest.kind = SnapshotKind::Delta { from: 9 };
        assert!(matches!(refused(backwards), CatalogError::Entry { .. }));
        let mut huge = base();
        huge.manifest.pir.hint_bytes = u64::MAX;
        assert!(refused(huge).to_string().contains("setup bytes"));
        let mut path = base();
        let file = FileDigest {
            bytes: 1,
            sha3_256: Default::default(),
        };
        path.manifest.files.insert("../../x".into(), file);
        assert!(refused(path).to_string().contains("plain name"));
        let mut format = base();
        format.manifest.format = 99;
        assert!(refused(format).to_string().contains("format"));
        let mut text = base();
        text.manifest.source = "x".repeat(MAX_TEXT + 1);
        assert!(matches!(refused(text), CatalogError::Entry { .. }));
        assert_eq!(
            listing(vec![base(), base()]).checked().unwrap_err(),
            CatalogError::Duplicate(base().id)
        );
        let many = (0..=MAX_CATALOG_ENTRIES as u64)
            .map(|b| crate::testing::entry(1, b, SnapshotKind::Full, &[]))
            .collect();
        assert_eq!(
            listing(many).checked().unwrap_err(),
            CatalogError::TooMany(MAX_CATALOG_ENTRIES + 1)
        );
    }

    #[test]
    fn ids_and_digests_from_the_wire_are_parsed_strictly() {
        let entry = crate::testing::entry(1, 5, SnapshotKind::Full, &[]);
        let good = serde_json::to_value(listing_json(&entry)).unwrap();
        assert!(serde_json::from_value::<CatalogListing>(good.clone()).is_ok());
        for (field, bad) in [
            ("id", "1-5_full"),
            ("id", "../1-5-full"),
            ("id", ""),
            ("content_digest", "../../etc/passwd"),
        ] {
            let mut v = good.clone();
            v["snapshots"][0][field] = serde_json::Value::String(bad.into());
            assert!(
                serde_json::from_value::<CatalogListing>(v).is_err(),
                "{field} {bad}"
            );
        }
        let mut long = good.clone();
        long["snapshots"][0]["id"] = serde_json::Value::String("1".repeat(300));
        assert!(serde_json::from_value::<CatalogListing>(long).is_err());
        let mut setup = good;
        setup["snapshots"][0]["pir"]["setup_digest"] = "/tmp/x".into();
        assert!(serde_json::from_value::<CatalogListing>(setup).is_err());
    }

    fn listing_json(entry: &CatalogEntry) -> Catalog {
        Catalog {
            snapshots: vec![entry.clone()],
            max_batch: 8,
            views: vec![],
        }
    }
}

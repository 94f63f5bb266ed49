//! Private `eth_getCode`. The account's PIR value (read like its balance,
//! in the same request) names its code by place in the code table of the
//! level it was found in. A base's place names a code and nothing more
//! (its table holds every distinct code once), so its hash comes from the
//! server with a Merkle proof checked against the base's manifest
//! (`protocol::codes`). A delta's place would name the delta, and so
//! nearly the account: a delta's whole table is downloaded when the level
//! is opened ([`CodeCache::hold_table`]; every client downloads the same
//! bytes, read or not) and its places are looked up here. The code itself
//! comes from the server's content-addressed route, checked by
//! keccak256 and kept on disk (mode 0600), so that a code is downloaded
//! once for every account, level and restart that has it. What the
//! server learns from that download (one hash, shared by every account
//! with that code) is argued in docs/security.md, "Code".

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use alloy_primitives::{Bytes, B256};
use protocol::codes::{check_code, CodeProof, CodeTable, MAX_CODE_BYTES};
use protocol::manifest::SnapshotId;
use protocol::routes::{ApiPath, MAX_CODE_ENTRY_BYTES};
use protocol::CodeRef;
use reqwest::StatusCode;

use crate::cache::{write_atomically, Readers};
use crate::fetch::Size;
use crate::link::{Duration, ServerLink};
use crate::{AccountState, ReadError};

/// Codes known here: each level's entries already proved, and the codes
/// kept on disk by hash.
pub struct CodeCache {
    dir: PathBuf,
    /// `(table root, place)` to hash, for entries proved this run (by the
    /// table's root, not the level's id: a level rebuilt under its id by a
    /// reorg has another table).
    places: Mutex<HashMap<(B256, u32), B256>>,
    /// The whole code tables of the deltas opened, by level and root.
    tables: Mutex<HashMap<(String, B256), HeldTable>>,
}

/// A level's whole code table: its hashes, in place order.
type HeldTable = std::sync::Arc<Vec<B256>>;

impl CodeCache {
    pub fn new(cache_dir: &Path) -> Self {
        CodeCache {
            dir: cache_dir.join("codes"),
            places: Mutex::new(HashMap::new()),
            tables: Mutex::new(HashMap::new()),
        }
    }

    fn path(&self, hash: &B256) -> PathBuf {
        self.dir.join(format!("{hash:x}"))
    }

    /// The code of `account` as its level says: empty for none; its bytes
    /// checked against the level's table and their hash.
    pub async fn code_of(
        &self,
        link: &ServerLink,
        account: &AccountState,
    ) -> Result<Bytes, ReadError> {
        let index = match account.code {
            CodeRef::None => return Ok(Bytes::new()),
            CodeRef::Unknown => {
                return Err(ReadError::CodeUnknown {
                    snapshot: account.snapshot.clone(),
                })
            }
            CodeRef::Table(index) => index,
        };
        let table = account.code_table.ok_or_else(|| {
            ReadError::Unverifiable(format!(
                "{}: a code entry without a code table",
                account.snapshot
            ))
        })?;
        let held = self
            .tables
            .lock()
            .expect("code tables")
            .get(&(account.snapshot.clone(), table.root))
            .cloned();
        let hash = match held {
            Some(hashes) => *hashes.get(index as usize - 1).ok_or_else(|| {
                ReadError::Unverifiable(format!(
                    "{}: code entry {index} outside its table",
                    account.snapshot
                ))
            })?,
            // A delta's entry is never asked for by place.
            None if is_delta(&account.snapshot) => {
                return Err(ReadError::Backend(format!(
                    "{}: its code table is not held",
                    account.snapshot
                )))
            }
            None => self.hash_at(link, &account.snapshot, &table, index).await?,
        };
        self.code(link, &hash).await
    }

    /// Downloads `level`'s whole code table (a delta's, when the level is
    /// opened) and holds it, checked against the manifest's root. A table
    /// that is not the manifest's is a failed verification.
    pub async fn hold_table(
        &self,
        link: &ServerLink,
        level: &SnapshotId,
        summary: &CodeTable,
        max_bytes: u64,
    ) -> Result<(), ReadError> {
        let name = level.url_form();
        if self.holds_table(&name, summary.root) {
            return Ok(());
        }
        let bytes = summary.count as u64 * 32;
        let what = format!("snapshot {name}: code table");
        if bytes > max_bytes {
            return Err(link.distrust(format!(
                "{what}: {} entries, over the setup limit",
                summary.count
            )));
        }
        let resp = link
            .download(
                ApiPath::CodeTable(level),
                &what,
                &ServerLink::same_build(summary.root),
                Size::Exactly(bytes),
                Duration::Long,
            )
            .await?;
        crate::link::refuse_replaced(resp.status, &name)?;
        if resp.status == StatusCode::NOT_FOUND {
            return Err(ReadError::Retired(name));
        }
        if !resp.status.is_success() {
            return Err(ReadError::Backend(format!("{what}: HTTP {}", resp.status)));
        }
        let hashes = protocol::codes::parse_table(&resp.body, summary)
            .map_err(|e| link.distrust(format!("{what}: {e}")))?;
        self.tables
            .lock()
            .expect("code tables")
            .insert((name, summary.root), std::sync::Arc::new(hashes));
        Ok(())
    }

    /// Whether `level`'s whole code table of root `root` is held.
    pub fn holds_table(&self, level: &str, root: B256) -> bool {
        let key = (level.to_string(), root);
        self.tables.lock().expect("code tables").contains_key(&key)
    }

    /// Drops the tables of levels no longer held.
    pub fn retain_tables(&self, keep: impl Fn(&str) -> bool) {
        self.tables
            .lock()
            .expect("code tables")
            .retain(|(level, _), _| keep(level));
    }

    /// The codes at `places` of `level`'s table, proved and kept; how
    /// many. A failure stops the prefetch (a lying proof has already
    /// stopped private reads).
    pub async fn prefetch(
        &self,
        link: &ServerLink,
        level: &str,
        table: &CodeTable,
        places: &[u32],
    ) -> usize {
        let mut fetched = 0;
        for &index in places {
            let got = async {
                let hash = self.hash_at(link, level, table, index).await?;
                self.code(link, &hash).await
            };
            if let Err(e) = got.await {
                tracing::debug!(error = %e, "prefetching codes stopped");
                break;
            }
            fetched += 1;
        }
        fetched
    }

    /// The hash at `index` of `level`'s table, proved.
    async fn hash_at(
        &self,
        link: &ServerLink,
        level: &str,
        table: &CodeTable,
        index: u32,
    ) -> Result<B256, ReadError> {
        let key = (table.root, index);
        if let Some(hash) = self.places.lock().expect("code places").get(&key) {
            return Ok(*hash);
        }
        let what = format!("snapshot {level}: code entry {index}");
        let id: SnapshotId = level
            .parse()
            .map_err(|e| ReadError::Backend(format!("{what}: {e}")))?;
        let size = Size::AtMost(MAX_CODE_ENTRY_BYTES);
        let resp = link
            .get(
                ApiPath::CodeEntry(&id, index),
                &what,
                &ServerLink::same_build(table.root),
                size,
                Duration::Short,
            )
            .await?;
        crate::link::refuse_replaced(resp.status, level)?;
        if !resp.status.is_success() {
            return Err(ReadError::Backend(format!("{what}: HTTP {}", resp.status)));
        }
        let proof: CodeProof = serde_json::from_slice(&resp.body)
            .map_err(|e| link.distrust(format!("{what}: unreadable proof: {e}")))?;
        let hash = table
            .verify(index, &proof)
            .map_err(|e| link.distrust(format!("snapshot {level}: {e}")))?;
        self.places.lock().expect("code places").insert(key, hash);
        Ok(hash)
    }

    /// The code whose hash is `hash`: from disk, else downloaded and kept.
    async fn code(&self, link: &ServerLink, hash: &B256) -> Result<Bytes, ReadError> {
        let path = self.path(hash);
        if let Ok(code) = tokio::fs::read(&path).await {
            if check_code(hash, &code).is_ok() {
                return Ok(code.into());
            }
            tracing::warn!(file = %protocol::redact::Redacted(path.display()), "a cached code is not its hash's; downloading it again");
        }
        let what = format!("code {hash}");
        let size = Size::AtMost(MAX_CODE_BYTES as u64);
        let resp = link
            .download(ApiPath::Code(hash), &what, &[], size, Duration::Long)
            .await?;
        if resp.status == StatusCode::NOT_FOUND {
            return Err(ReadError::Backend(format!(
                "{what}: the server does not keep it"
            )));
        }
        if !resp.status.is_success() {
            return Err(ReadError::Backend(format!("{what}: HTTP {}", resp.status)));
        }
        check_code(hash, &resp.body).map_err(|e| link.distrust(format!("{what}: {e}")))?;
        // Owner only: which codes a user read says which contracts they use.
        if let Err(e) = write_atomically(&self.dir, &path, &resp.body, Readers::Owner).await {
            tracing::warn!(error = %e, "cannot cache a code");
        }
        Ok(resp.body.into())
    }
}

/// The code table of a delta or a hot tier, which is held whole (`None`:
/// a base, or a level whose accounts have no code). A place in such a
/// level's table would name a few accounts.
pub(crate) fn delta_code_table(entry: &protocol::CatalogEntry) -> Option<CodeTable> {
    match entry.manifest.kind {
        protocol::SnapshotKind::Delta { .. } | protocol::SnapshotKind::Hot { .. } => {
            entry.manifest.codes
        }
        _ => None,
    }
}

/// Whether a level's id names a delta or a hot tier (an id that does not
/// parse is taken for one: its entries are never asked for by place).
pub(crate) fn is_delta(level: &str) -> bool {
    use protocol::manifest::KindTag;
    level
        .parse::<SnapshotId>()
        .map_or(true, |id| matches!(id.kind, KindTag::Delta | KindTag::Hot))
}

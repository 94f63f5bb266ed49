//! Private `eth_getCode`. The account's PIR value (read like its balance,
//! in the same request) names its code by place in the code table of the
//! level it was found in; the place's hash comes from the server with a
//! Merkle proof checked against the level's manifest (`protocol::codes`),
//! and the code from the server's content-addressed route, checked by
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
    /// `(level, place)` to hash, for entries proved this run.
    places: Mutex<HashMap<(String, u32), B256>>,
}

impl CodeCache {
    pub fn new(cache_dir: &Path) -> Self {
        CodeCache {
            dir: cache_dir.join("codes"),
            places: Mutex::new(HashMap::new()),
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
        let hash = self.hash_at(link, &account.snapshot, &table, index).await?;
        self.code(link, &hash).await
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
        let key = (level.to_string(), index);
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
                &[],
                size,
                Duration::Short,
            )
            .await?;
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
            tracing::warn!(file = %path.display(), "a cached code is not its hash's; downloading it again");
        }
        let what = format!("code {hash}");
        let size = Size::AtMost(MAX_CODE_BYTES as u64);
        let resp = link
            .download(ApiPath::Code(hash), &what, size, Duration::Long)
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

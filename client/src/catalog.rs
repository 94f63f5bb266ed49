//! The PIR server's catalog: its snapshots (of the chain read) and the
//! views they form, recomputed here from the manifests whatever the
//! server says of them; fetched with its ETag (a 304 while unchanged),
//! gzip when the server offers it, never more than [`MAX_CATALOG_BYTES`].

use std::collections::BTreeMap;
use std::sync::{Mutex, RwLock};

use protocol::api::{Catalog as CatalogBody, CatalogEntry};
use protocol::view::View;
use reqwest::header::{HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, ETAG, IF_NONE_MATCH};
use reqwest::StatusCode;

use crate::block::BlockSelector;
use crate::fetch::Size;
use crate::link::{Duration, ServerLink};
use crate::ReadError;

/// Largest catalog accepted, compressed or not (some ten thousand
/// snapshots).
pub const MAX_CATALOG_BYTES: u64 = 16 << 20;

/// The catalog as last fetched.
#[derive(Debug, Default)]
pub struct Catalog {
    /// The configured chain, if any.
    chain_id: Option<u64>,
    entries: RwLock<BTreeMap<String, CatalogEntry>>,
    views: RwLock<Vec<View>>,
    etag: Mutex<Option<String>>,
    /// The server's most queries per batch.
    max_batch: RwLock<usize>,
    /// Why the last fetch failed, while no catalog has been fetched since:
    /// the answer to a read when there is no view at all.
    failure: Mutex<Option<ReadError>>,
}

impl Catalog {
    pub fn new(chain_id: Option<u64>) -> Self {
        Catalog {
            chain_id,
            max_batch: RwLock::new(1),
            ..Default::default()
        }
    }

    /// Fetches the catalog; `None` when it has not changed since the last
    /// fetch.
    pub async fn fetch(&self, link: &ServerLink) -> Result<Option<CatalogBody>, ReadError> {
        let fetched = self.fetch_once(link).await;
        *self.failure.lock().expect("failure lock") = fetched.as_ref().err().cloned();
        fetched
    }

    async fn fetch_once(&self, link: &ServerLink) -> Result<Option<CatalogBody>, ReadError> {
        let etag = self.etag.lock().expect("etag lock").clone();
        let mut headers = vec![(ACCEPT_ENCODING, HeaderValue::from_static("gzip"))];
        if let Some(value) = etag.as_deref().and_then(|e| HeaderValue::from_str(e).ok()) {
            headers.push((IF_NONE_MATCH, value));
        }
        let size = Size::AtMost(MAX_CATALOG_BYTES);
        let resp = link
            .get("/v1/snapshots", "catalog", &headers, size, Duration::Short)
            .await?;
        if resp.status == StatusCode::NOT_MODIFIED && etag.is_some() {
            return Ok(None);
        }
        if !resp.status.is_success() {
            return Err(ReadError::Backend(format!("catalog: HTTP {}", resp.status)));
        }
        let new_etag = resp
            .headers
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let zipped = resp
            .headers
            .get(CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes() == b"gzip");
        let bytes = match zipped {
            true => gunzip(&resp.body, MAX_CATALOG_BYTES)?,
            false => resp.body,
        };
        let catalog: CatalogBody = serde_json::from_slice(&bytes)
            .map_err(|e| ReadError::Backend(format!("catalog: {e}")))?;
        *self.etag.lock().expect("etag lock") = new_etag;
        Ok(Some(catalog))
    }

    /// Adopts a fetched catalog: its entries of the chain read and the
    /// views they form. Returns the entries, or `None` when the catalog is
    /// behind the one adopted (its newest view older) and `force` is off:
    /// behind a load balancer a replica that has not yet picked up the
    /// newest snapshot must not take back a view already shown. A lookup
    /// that finds its view retired forces it (a reorg removes levels).
    pub fn adopt(
        &self,
        catalog: CatalogBody,
        force: bool,
    ) -> Option<BTreeMap<String, CatalogEntry>> {
        let wanted: BTreeMap<String, CatalogEntry> = catalog
            .snapshots
            .into_iter()
            .filter(|e| self.chain_id.is_none_or(|c| c == e.manifest.chain_id))
            .map(|e| (e.id.clone(), e))
            .collect();
        let entries: Vec<CatalogEntry> = wanted.values().cloned().collect();
        let views = protocol::view::views(&entries);
        let newest = |views: &[View]| views.iter().map(|v| v.block).max();
        if !force && newest(&views) < newest(&self.views.read().expect("lock")) {
            tracing::debug!(
                "catalog behind the one adopted (a replica catching up); kept the newer"
            );
            return None;
        }
        *self.max_batch.write().expect("lock") = catalog.max_batch.max(1);
        *self.views.write().expect("lock") = views;
        *self.entries.write().expect("lock") = wanted.clone();
        Some(wanted)
    }

    /// Snapshots listed.
    pub fn len(&self) -> usize {
        self.entries.read().expect("lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The server's most queries per batch.
    pub fn max_batch(&self) -> usize {
        *self.max_batch.read().expect("lock")
    }

    /// The views of the chain read, oldest block first.
    pub fn views(&self) -> Vec<View> {
        self.views.read().expect("lock").clone()
    }

    /// The catalog entry of a snapshot.
    pub fn entry(&self, id: &str) -> Option<CatalogEntry> {
        self.entries.read().expect("lock").get(id).cloned()
    }

    /// Every snapshot listed.
    pub fn entries(&self) -> Vec<CatalogEntry> {
        self.entries
            .read()
            .expect("lock")
            .values()
            .cloned()
            .collect()
    }

    /// The chain read: configured, or the only one the server has.
    pub fn chain_id(&self) -> Result<Option<u64>, ReadError> {
        if self.chain_id.is_some() {
            return Ok(self.chain_id);
        }
        let mut chains: Vec<u64> = self
            .entries
            .read()
            .expect("lock")
            .values()
            .map(|e| e.manifest.chain_id)
            .collect();
        chains.sort_unstable();
        chains.dedup();
        match chains.len() {
            0 => Ok(None),
            1 => Ok(Some(chains[0])),
            _ => Err(ReadError::AmbiguousChain(chains)),
        }
    }

    /// The newest view of the chain read.
    pub fn newest(&self) -> Option<View> {
        let chain = self.chain_id().ok()?;
        protocol::view::newest(&self.views(), chain).cloned()
    }

    /// The view a block selector names.
    pub fn view_for(&self, sel: &BlockSelector) -> Result<View, ReadError> {
        let chain = self.chain_id()?;
        let views: Vec<View> = self
            .views()
            .into_iter()
            .filter(|v| chain.is_none_or(|c| v.chain_id == c))
            .collect();
        let at_block = |n: u64| views.iter().find(|v| v.block == n).cloned();
        let found = match sel {
            BlockSelector::Newest => protocol::view::newest(&views, chain).cloned(),
            BlockSelector::Number(n) => at_block(*n),
            BlockSelector::Hash(h) => self.block_of_hash(h).and_then(at_block),
        };
        if found.is_none() && views.is_empty() {
            if let Some(failure) = self.failure.lock().expect("failure lock").clone() {
                return Err(failure);
            }
        }
        found.ok_or_else(|| ReadError::NoSnapshot {
            requested: match sel {
                BlockSelector::Newest => "the latest block".into(),
                BlockSelector::Number(n) => format!("block {n}"),
                BlockSelector::Hash(h) => format!("block hash {h}"),
            },
            available: views.iter().map(|v| v.block).collect(),
        })
    }

    fn block_of_hash(&self, hash: &alloy_primitives::B256) -> Option<u64> {
        self.entries
            .read()
            .expect("lock")
            .values()
            .find(|e| e.manifest.block_hash == Some(*hash))
            .map(|e| e.manifest.block_number)
    }
}

/// Decompresses a gzip body of at most `limit` bytes.
fn gunzip(bytes: &[u8], limit: u64) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| ReadError::Backend(format!("catalog: bad gzip: {e}")))?;
    if out.len() as u64 > limit {
        return Err(ReadError::Backend(format!(
            "catalog: over {limit} bytes uncompressed"
        )));
    }
    Ok(out)
}

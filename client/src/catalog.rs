//! The PIR server's catalog: its snapshots (of the chain read) and the
//! views they form, recomputed here from the manifests whatever the
//! server says of them; fetched with its ETag (a 304 while unchanged),
//! gzip when the server offers it, never more than [`MAX_CATALOG_BYTES`].
//! Every field is checked before it is adopted
//! ([`protocol::api::CatalogListing::checked`]): a catalog that lies in
//! one entry is refused whole, the one adopted before stays.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use protocol::api::{CatalogEntry, CatalogListing};
use protocol::view::{View, Views};
use protocol::{Sha3Digest, SnapshotId};
use reqwest::header::{HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, ETAG, IF_NONE_MATCH};
use reqwest::StatusCode;

use crate::block::BlockSelector;
use crate::fetch::Size;
use crate::link::{Duration, ServerLink};
use crate::ReadError;
use protocol::routes::{ApiPath, MAX_CATALOG_BYTES};

/// What an adopted catalog says, replaced whole on adoption (readers
/// hold an `Arc` of it, never a copy).
#[derive(Debug, Default)]
pub struct Adopted {
    /// The entries of the chain read that stand in some view, by id.
    pub entries: BTreeMap<SnapshotId, CatalogEntry>,
    pub views: Views,
    /// The server's most queries per batch.
    pub max_batch: usize,
    /// Entries of the chain read set aside for lacking the attestations
    /// required, with how many valid ones they carry: in no view.
    pub unattested: BTreeMap<SnapshotId, usize>,
}

/// Catalogs in a row behind the one adopted after which one is adopted
/// all the same (replicas behind a load balancer catch up within a rescan
/// or two; a catalog that stays behind is the server's truth).
pub const MAX_BEHIND: u32 = 10;

/// A catalog as fetched and checked, not adopted yet.
#[derive(Debug)]
pub struct Fetched {
    pub listing: CatalogListing,
    /// Its ETag, kept once it is adopted (a refused one is fetched again).
    pub etag: Option<String>,
    /// The SHA3-256 of its body.
    pub digest: Sha3Digest,
}

/// The catalog as last fetched.
#[derive(Debug)]
pub struct Catalog {
    /// The configured chain, if any.
    chain_id: Option<u64>,
    /// The attestations an entry needs to be read.
    attest: crate::config::AttestPolicy,
    adopted: RwLock<Arc<Adopted>>,
    /// The ETag of the catalog adopted (one refused is fetched again).
    etag: Mutex<Option<String>>,
    /// Catalogs in a row found behind the one adopted.
    behind: Mutex<u32>,
    /// The digest of the last catalog body adopted (`None`) or refused by
    /// the checks (`Some`: why): the same bytes again are not parsed again
    /// (a server without ETags, or a hostile one, costs a hash a poll).
    judged: Mutex<Option<(Sha3Digest, Option<ReadError>)>>,
    /// Why the last fetch failed, while no catalog has been fetched since:
    /// the answer to a read when there is no view at all.
    failure: Mutex<Option<ReadError>>,
}

impl Catalog {
    pub fn new(chain_id: Option<u64>, attest: crate::config::AttestPolicy) -> Self {
        Catalog {
            chain_id,
            attest,
            adopted: RwLock::new(Arc::new(Adopted {
                max_batch: 1,
                ..Default::default()
            })),
            etag: Mutex::new(None),
            behind: Mutex::new(0),
            judged: Mutex::new(None),
            failure: Mutex::new(Some(ReadError::Backend(
                "the PIR server's catalog is not fetched yet".into(),
            ))),
        }
    }

    /// The catalog adopted now.
    pub fn adopted(&self) -> Arc<Adopted> {
        self.adopted.read().expect("lock").clone()
    }

    /// Fetches the catalog; `None` when it has not changed since the last
    /// fetch.
    pub async fn fetch(&self, link: &ServerLink) -> Result<Option<Fetched>, ReadError> {
        let fetched = self.fetch_once(link).await;
        *self.failure.lock().expect("failure lock") = fetched.as_ref().err().cloned();
        fetched
    }

    async fn fetch_once(&self, link: &ServerLink) -> Result<Option<Fetched>, ReadError> {
        let etag = self.etag.lock().expect("etag lock").clone();
        let mut headers = vec![(ACCEPT_ENCODING, HeaderValue::from_static("gzip"))];
        if let Some(value) = etag.as_deref().and_then(|e| HeaderValue::from_str(e).ok()) {
            headers.push((IF_NONE_MATCH, value));
        }
        let size = Size::AtMost(MAX_CATALOG_BYTES);
        let resp = link
            .get(ApiPath::Catalog, "catalog", &headers, size, Duration::Short)
            .await?;
        if resp.status == StatusCode::NOT_MODIFIED && etag.is_some() {
            return Ok(None);
        }
        if !resp.status.is_success() {
            return Err(ReadError::Backend(format!("catalog: HTTP {}", resp.status)));
        }
        let etag = resp
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
        let digest = Sha3Digest::of(&bytes);
        if let Some((seen, verdict)) = self.judged.lock().expect("lock").as_ref() {
            if *seen == digest {
                return match verdict {
                    None => Ok(None),
                    Some(refused) => Err(refused.clone()),
                };
            }
        }
        let listing = serde_json::from_slice::<CatalogListing>(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|l| l.checked().map_err(|e| e.to_string()));
        drop(bytes);
        match listing {
            Ok(listing) => Ok(Some(Fetched {
                listing,
                etag,
                digest,
            })),
            Err(why) => {
                let refused = ReadError::Backend(format!("catalog refused: {why}"));
                *self.judged.lock().expect("lock") = Some((digest, Some(refused.clone())));
                Err(refused)
            }
        }
    }

    /// Adopts a fetched (and checked) catalog: its entries of the chain
    /// read that stand in some view, and the views they form. Returns the
    /// adopted catalog, or `None` when it is behind the one adopted (its
    /// newest view older) and `force` is off: behind a load balancer a
    /// replica that has not yet picked up the newest snapshot must not
    /// take back a view already shown. A lookup that finds its view
    /// retired forces it (a reorg removes levels), and so do
    /// [`MAX_BEHIND`] such catalogs in a row: levels really were removed
    /// (or the catalog adopted was a lie), and a catalog once adopted must
    /// not keep out every later one.
    pub fn adopt(&self, fetched: Fetched, force: bool) -> Option<Arc<Adopted>> {
        let Fetched {
            listing: catalog,
            etag,
            digest,
        } = fetched;
        let (mut entries, unattested) = self.attested(catalog.snapshots);
        let views = Views::build(&entries);
        // Entries that stand in no view (a delta on a missing or too deep
        // base) are never read: not kept.
        entries.retain(|e| views.holds(&e.id));
        let newest = |views: &Views| views.newest(self.chain_id).map(|v| v.block);
        if !force && newest(&views) < newest(&self.adopted().views) {
            let mut behind = self.behind.lock().expect("lock");
            *behind += 1;
            if *behind < MAX_BEHIND {
                tracing::debug!(
                    "catalog behind the one adopted (a replica catching up); kept the newer"
                );
                return None;
            }
            tracing::warn!(
                fetches = *behind,
                "the server's catalog stays behind the one adopted; adopting it (levels were removed)"
            );
        }
        *self.behind.lock().expect("lock") = 0;
        *self.etag.lock().expect("etag lock") = etag;
        *self.judged.lock().expect("lock") = Some((digest, None));
        let adopted = Arc::new(Adopted {
            entries: entries.into_iter().map(|e| (e.id, e)).collect(),
            views,
            max_batch: catalog.max_batch.clamp(1, pir_core::wire::MAX_BATCH),
            unattested,
        });
        *self.adopted.write().expect("lock") = adopted.clone();
        Some(adopted)
    }

    /// The entries of the chain read that carry the attestations
    /// required, and the others with how many valid ones they carry.
    fn attested(
        &self,
        snapshots: Vec<CatalogEntry>,
    ) -> (Vec<CatalogEntry>, BTreeMap<SnapshotId, usize>) {
        let mut unattested = BTreeMap::new();
        let entries = snapshots
            .into_iter()
            .filter(|e| self.chain_id.is_none_or(|c| c == e.manifest.chain_id))
            .filter(|e| match self.attest.short_of_quorum(e) {
                None => true,
                Some(signed) => {
                    unattested.insert(e.id, signed);
                    false
                }
            })
            .collect();
        if !unattested.is_empty() {
            tracing::debug!(
                unattested = unattested.len(),
                "snapshots without the attestations required set aside"
            );
        }
        (entries, unattested)
    }

    /// The error for a block whose view is missing because a snapshot at
    /// it lacks attestations (`None`: no such snapshot).
    fn unattested_at(&self, adopted: &Adopted, block: Option<u64>) -> Option<ReadError> {
        let (id, signed) = adopted
            .unattested
            .iter()
            .rev()
            .find(|(id, _)| block.is_none_or(|b| id.block == b))?;
        Some(ReadError::Unattested {
            snapshot: id.url_form(),
            signed: *signed,
            quorum: self.attest.quorum,
            attesters: self.attest.attesters.clone(),
        })
    }

    /// Snapshots listed.
    pub fn len(&self) -> usize {
        self.adopted().entries.len()
    }

    /// The server's most queries per batch.
    pub fn max_batch(&self) -> usize {
        self.adopted().max_batch
    }

    /// The catalog entry of a snapshot.
    pub fn entry(&self, id: &SnapshotId) -> Option<CatalogEntry> {
        self.adopted().entries.get(id).cloned()
    }

    /// The block hash a snapshot's manifest records (no copy of the entry:
    /// asked on every read).
    pub fn block_hash(&self, id: &SnapshotId) -> Option<alloy_primitives::B256> {
        self.adopted().entries.get(id)?.manifest.block_hash
    }

    /// The chain read: configured, or the only one the server has.
    pub fn chain_id(&self) -> Result<Option<u64>, ReadError> {
        if self.chain_id.is_some() {
            return Ok(self.chain_id);
        }
        let mut chains: Vec<u64> = self
            .adopted()
            .entries
            .values()
            .map(|e| e.manifest.chain_id)
            .collect();
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
        self.adopted().views.newest(chain)
    }

    /// The blocks the chain read has a view at, oldest first.
    pub fn view_blocks(&self) -> Vec<u64> {
        match self.chain_id() {
            Ok(chain) => self.adopted().views.blocks(chain),
            Err(_) => Vec::new(),
        }
    }

    /// The view a block selector names.
    pub fn view_for(&self, sel: &BlockSelector) -> Result<View, ReadError> {
        let chain = self.chain_id()?;
        let adopted = self.adopted();
        let at_block = |n: u64| match chain {
            Some(c) => adopted.views.at(c, n),
            None => None,
        };
        // The block asked for (`None`: the newest, or a hash not known).
        let block = match sel {
            BlockSelector::Newest => None,
            BlockSelector::Number(n) => Some(*n),
            BlockSelector::Hash(h) => block_of_hash(&adopted, h),
        };
        let found = match (sel, block) {
            (BlockSelector::Newest, _) => adopted.views.newest(chain),
            (_, block) => block.and_then(at_block),
        };
        if found.is_none() {
            if let Some(unattested) = self.unattested_at(&adopted, block) {
                return Err(unattested);
            }
        }
        if found.is_none() && adopted.views.is_empty() {
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
            available: adopted.views.blocks(chain),
        })
    }
}

fn block_of_hash(adopted: &Adopted, hash: &alloy_primitives::B256) -> Option<u64> {
    adopted
        .entries
        .values()
        .find(|e| e.manifest.block_hash == Some(*hash))
        .map(|e| e.manifest.block_number)
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

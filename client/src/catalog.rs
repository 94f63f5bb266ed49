//! The PIR server's catalog: its snapshots (of the chain read) and the
//! views they form, recomputed here from the manifests whatever the
//! server says of them; fetched with its ETag (a 304 while unchanged),
//! gzip when the server offers it, never more than [`MAX_CATALOG_BYTES`].
//! Every field is checked before it is adopted
//! ([`protocol::api::CatalogListing::checked`]): a catalog that lies in
//! one entry is refused whole, the one adopted before stays.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use alloy_primitives::B256;
use protocol::api::{CatalogEntry, CatalogListing};
use protocol::view::{View, Views};
use protocol::{Sha3Digest, SnapshotId};
use reqwest::header::{
    HeaderName, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, ETAG, IF_NONE_MATCH,
};
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
    /// Entries of the chain read set aside (in no view), and why.
    pub set_aside: BTreeMap<SnapshotId, SetAside>,
    /// The chains of the entries of other chains than the one read.
    pub other_chains: Vec<u64>,
    /// Whether a fetched catalog was adopted (false only for the empty
    /// one a reader starts with): until then a read is not ready, not
    /// unanswerable.
    pub fetched: bool,
}

/// Why an entry of the chain read stands in no view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetAside {
    /// Short of the attestations required: how many valid ones it carries.
    Unattested(usize),
    /// A manifest format this reader does not read.
    Format(u32),
}

/// A fetched catalog's entries sorted: those that may be read, and the
/// rest with why not.
#[derive(Debug)]
pub struct Judged {
    /// The listing as fetched (what a later difference applies to).
    raw: Arc<Vec<CatalogEntry>>,
    entries: Vec<CatalogEntry>,
    set_aside: BTreeMap<SnapshotId, SetAside>,
    other_chains: Vec<u64>,
    max_batch: usize,
    etag: Option<String>,
    digest: Sha3Digest,
}

/// The attestation policy and what its signature checks found before:
/// a recovery per (signed hash, signature) ever, off the async runtime.
#[derive(Debug)]
struct AttestCheck {
    policy: crate::config::AttestPolicy,
    /// Whether a signature over a hash recovers to its signer, by
    /// keccak256(hash || signer || signature).
    recovered: Mutex<HashMap<B256, bool>>,
}

/// Signature verdicts remembered (a catalog's entries times their
/// attestations, several catalogs over).
const REMEMBERED_VERDICTS: usize = 1 << 18;

impl AttestCheck {
    /// How many distinct listed attesters signed `entry`'s manifest
    /// validly (each signature recovered once ever).
    fn signed(&self, entry: &CatalogEntry) -> usize {
        let Ok(hash) = protocol::attest::signing_hash(&entry.manifest) else {
            return 0;
        };
        let mut seen = Vec::new();
        for a in &entry.attestations {
            if !self.policy.attesters.contains(&a.signer) || seen.contains(&a.signer) {
                continue;
            }
            let key = alloy_primitives::keccak256(
                [
                    hash.as_slice(),
                    a.signer.as_slice(),
                    &a.signature.as_bytes(),
                ]
                .concat(),
            );
            let known = self.recovered.lock().expect("lock").get(&key).copied();
            let valid = known.unwrap_or_else(|| {
                let valid = a.verify_hash(&hash).is_ok();
                let mut recovered = self.recovered.lock().expect("lock");
                if recovered.len() >= REMEMBERED_VERDICTS {
                    recovered.clear();
                }
                recovered.insert(key, valid);
                valid
            });
            if valid {
                seen.push(a.signer);
            }
        }
        seen.len()
    }

    /// Why `entry` may not be read, if it may not.
    fn set_aside(&self, entry: &CatalogEntry) -> Option<SetAside> {
        if entry.manifest.format < protocol::manifest::OLDEST_READ_FORMAT {
            return Some(SetAside::Format(entry.manifest.format));
        }
        if !self.policy.required() {
            return None;
        }
        let signed = self.signed(entry);
        (signed < self.policy.quorum).then_some(SetAside::Unattested(signed))
    }
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
    /// The chain read: configured, or the upstream's once it said.
    chain_id: RwLock<Option<u64>>,
    /// The attestations an entry needs to be read, and the signatures
    /// checked so far.
    attest: Arc<AttestCheck>,
    adopted: RwLock<Arc<Adopted>>,
    /// The ETag of the catalog adopted (one refused is fetched again).
    etag: Mutex<Option<String>>,
    /// The entries of the catalog adopted, as listed: what a difference
    /// the server sends applies to.
    held: Mutex<Option<Arc<Vec<CatalogEntry>>>>,
    /// Catalogs in a row found behind the one adopted.
    behind: Mutex<u32>,
    /// The digest of the last catalog body adopted (`None`) or refused by
    /// the checks (`Some`: why): the same bytes again are not parsed again
    /// (a server without ETags, or a hostile one, costs a hash a poll).
    judged: Mutex<Option<(Sha3Digest, Option<ReadError>)>>,
    /// Why the last fetch failed, while no catalog has been fetched since:
    /// the answer to a read when there is no view at all.
    failure: Mutex<Option<ReadError>>,
    /// Whether the server announced that it holds requests waiting for
    /// a new catalog ([`protocol::api::CATALOG_LONG_POLL_HEADER`]).
    long_poll: std::sync::atomic::AtomicBool,
    /// The ETag of the last catalog the server sent, adopted or not (a
    /// refused or lagging one included): what a wait names, so that a
    /// catalog this reader will not adopt does not end every wait at once.
    seen_etag: Mutex<Option<String>>,
    /// Catalogs adopted and chains bound so far: what a wait at start
    /// watches ([`Self::settled_by`]).
    changes: tokio::sync::watch::Sender<u64>,
}

impl Catalog {
    pub fn new(chain_id: Option<u64>, attest: crate::config::AttestPolicy) -> Self {
        Catalog {
            chain_id: RwLock::new(chain_id),
            attest: Arc::new(AttestCheck {
                policy: attest,
                recovered: Mutex::new(HashMap::new()),
            }),
            adopted: RwLock::new(Arc::new(Adopted {
                max_batch: 1,
                ..Default::default()
            })),
            etag: Mutex::new(None),
            held: Mutex::new(None),
            behind: Mutex::new(0),
            judged: Mutex::new(None),
            failure: Mutex::new(Some(ReadError::Backend(
                "the PIR server's catalog is not fetched yet".into(),
            ))),
            long_poll: Default::default(),
            seen_etag: Mutex::new(None),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Waits until a read would find what it finds for good (at once if
    /// it would: [`Self::settled`]) or until `deadline`: whether it would.
    pub async fn settled_by(&self, deadline: tokio::time::Instant) -> bool {
        if self.settled() {
            return true;
        }
        let mut changes = self.changes.subscribe();
        let settled = changes.wait_for(|_| self.settled());
        let waited = tokio::time::timeout_at(deadline, settled).await;
        matches!(waited, Ok(Ok(_)))
    }

    /// Whether waiting no longer changes what a read finds: the chain read
    /// has a view, or a catalog was adopted that says why it has none for
    /// good (snapshots set aside: unsigned, of a format not read; or only
    /// other chains than the one decided). An empty catalog is not
    /// settled: a follower's base may be on its way.
    fn settled(&self) -> bool {
        if self.newest().is_some() {
            return true;
        }
        let adopted = self.adopted();
        let decided = || matches!(self.chain_id(), Ok(Some(_)));
        let other_chain = !adopted.other_chains.is_empty() && decided();
        adopted.fetched && (!adopted.set_aside.is_empty() || other_chain)
    }

    /// Tells the waits ([`Self::settled_by`]) that the catalog or the
    /// chain changed.
    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The ETag of the last catalog the server sent.
    pub fn seen_etag(&self) -> Option<String> {
        self.seen_etag.lock().expect("lock").clone()
    }

    /// Whether the server holds waits for a new catalog, as its answer's
    /// headers say.
    fn note_long_poll(&self, headers: &reqwest::header::HeaderMap) {
        let holds = headers
            .get(protocol::api::CATALOG_LONG_POLL_HEADER)
            .is_some_and(|v| v.as_bytes() == b"1");
        self.long_poll
            .store(holds, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits up to `hold` for the server's catalog to change from the one
    /// held, when the server announced that it holds such requests:
    /// `Some(true)` when it changed (fetch it), `Some(false)` when the
    /// wait ended without a change, `None` when the server does not hold
    /// requests (or this one failed: poll instead, until the next fetch
    /// says otherwise).
    pub async fn wait_for_change(
        &self,
        link: &ServerLink,
        hold: std::time::Duration,
    ) -> Option<bool> {
        use std::sync::atomic::Ordering;
        if !self.long_poll.load(Ordering::Relaxed) {
            return None;
        }
        // No ETag (a front that drops it): nothing to wait on; poll.
        let etag = self.seen_etag()?;
        let headers = vec![
            (IF_NONE_MATCH, HeaderValue::from_str(&etag).ok()?),
            (
                HeaderName::from_static(protocol::api::CATALOG_WAIT_HEADER),
                HeaderValue::from(hold.as_secs()),
            ),
        ];
        let started = std::time::Instant::now();
        let waited = link
            .get(
                ApiPath::Catalog,
                "catalog wait",
                &headers,
                Size::AtMost(MAX_CATALOG_BYTES),
                Duration::Held(hold),
            )
            .await;
        match waited.map(|r| r.status) {
            Ok(StatusCode::NO_CONTENT) => Some(true),
            // A 304 long before the wait's end is not a held wait (a
            // front answering conditional requests itself): poll.
            Ok(StatusCode::NOT_MODIFIED) if started.elapsed() >= hold / 2 => Some(false),
            other => {
                tracing::debug!(answer = ?other.map(|s| s.as_u16()), "the server does not hold catalog requests: polling");
                self.long_poll.store(false, Ordering::Relaxed);
                None
            }
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
        let sent = self.etag.lock().expect("etag lock").clone();
        let held = self.held.lock().expect("lock").clone();
        let headers = request_headers(sent.as_deref(), held.is_some());
        let size = Size::AtMost(MAX_CATALOG_BYTES);
        let resp = link
            .get(ApiPath::Catalog, "catalog", &headers, size, Duration::Short)
            .await?;
        self.note_long_poll(&resp.headers);
        if let Some(etag) = resp.headers.get(ETAG).and_then(|v| v.to_str().ok()) {
            *self.seen_etag.lock().expect("lock") = Some(etag.to_string());
        }
        if resp.status == StatusCode::NOT_MODIFIED && sent.is_some() {
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
        let bytes = unzipped(&resp.headers, resp.body)?;
        let digest = Sha3Digest::of(&bytes);
        if let Some((seen, verdict)) = self.judged.lock().expect("lock").as_ref() {
            if *seen == digest {
                return match verdict {
                    None => Ok(None),
                    Some(refused) => Err(refused.clone()),
                };
            }
        }
        let diff_since = resp
            .headers
            .get(protocol::api::CATALOG_DIFF_HEADER)
            .and_then(|v| v.to_str().ok());
        let listing = match diff_since {
            None => serde_json::from_slice::<CatalogListing>(&bytes).map_err(|e| e.to_string()),
            Some(since) => apply_diff(&bytes, since, sent.as_deref(), held.as_deref()),
        }
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
                if diff_since.is_some() {
                    // The whole catalog next time, not the same difference.
                    *self.held.lock().expect("lock") = None;
                }
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
    pub fn adopt(&self, judged: Judged, force: bool) -> Option<Arc<Adopted>> {
        let Judged {
            raw,
            mut entries,
            set_aside,
            other_chains,
            max_batch,
            etag,
            digest,
        } = judged;
        let views = Views::build(&entries);
        // Entries that stand in no view (a delta on a missing or too deep
        // base) are never read: not kept. A hot tier is kept while it
        // stands on a level of some view (a view reads the one on its
        // levels); one of another fork, chain or storage claim is not.
        let standing = standing_tiers(&entries, &views);
        entries.retain(|e| views.holds(&e.id) || standing.contains(&e.id));
        let newest = |views: &Views| views.newest(self.configured_chain()).map(|v| v.block);
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
        // A catalog without an ETag cannot be named in a request: no
        // difference from it is asked for.
        *self.held.lock().expect("lock") = etag.is_some().then_some(raw);
        *self.etag.lock().expect("etag lock") = etag;
        *self.judged.lock().expect("lock") = Some((digest, None));
        let adopted = Arc::new(Adopted {
            entries: entries.into_iter().map(|e| (e.id, e)).collect(),
            views,
            max_batch: max_batch.clamp(1, pir_core::wire::MAX_BATCH),
            set_aside,
            other_chains,
            fetched: true,
        });
        *self.adopted.write().expect("lock") = adopted.clone();
        self.changed();
        Some(adopted)
    }

    /// Sorts a fetched catalog's entries (its signatures checked off the
    /// async runtime): those of the chain read that may be read, those set
    /// aside and why, and the other chains listed.
    pub async fn judge(&self, fetched: Fetched) -> Result<Judged, ReadError> {
        let chain = self.configured_chain();
        let check = self.attest.clone();
        tokio::task::spawn_blocking(move || judge(fetched, chain, &check))
            .await
            .map_err(|e| ReadError::Backend(format!("checking the catalog failed: {e}")))
    }

    /// The chain this reader is bound to (configured, or the upstream's
    /// once it said), if any.
    pub fn configured_chain(&self) -> Option<u64> {
        *self.chain_id.read().expect("lock")
    }

    /// Binds the reader to `chain` (the upstream's): the entries of other
    /// chains are set aside from the next catalog on, which is fetched
    /// again whole (its ETag forgotten). Returns whether it changed.
    pub fn bind_chain(&self, chain: u64) -> bool {
        let mut bound = self.chain_id.write().expect("lock");
        if *bound == Some(chain) {
            return false;
        }
        *bound = Some(chain);
        *self.etag.lock().expect("etag lock") = None;
        *self.held.lock().expect("lock") = None;
        *self.judged.lock().expect("lock") = None;
        drop(bound);
        self.changed();
        true
    }

    /// The error for a block whose view is missing because a snapshot was
    /// set aside: one at that block, else the newest below it (a view's
    /// base or delta); `None`: no such snapshot.
    fn set_aside_at(&self, adopted: &Adopted, block: Option<u64>) -> Option<ReadError> {
        let newest =
            |at: &dyn Fn(u64) -> bool| adopted.set_aside.iter().rev().find(|(id, _)| at(id.block));
        let (id, why) = match block {
            None => newest(&|_| true),
            Some(b) => newest(&|n| n == b).or_else(|| newest(&|n| n < b)),
        }?;
        Some(match why {
            SetAside::Unattested(signed) => ReadError::Unattested {
                snapshot: id.url_form(),
                signed: *signed,
                quorum: self.attest.policy.quorum,
                attesters: self.attest.policy.attesters.clone(),
            },
            SetAside::Format(format) => ReadError::Unreadable {
                snapshot: id.url_form(),
                why: format!(
                    "manifest format {format}: this reader reads format {} on (the operator rebuilds it with this version)",
                    protocol::manifest::OLDEST_READ_FORMAT
                ),
            },
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
        if let Some(chain) = self.configured_chain() {
            return Ok(Some(chain));
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
            if let Some(set_aside) = self.set_aside_at(&adopted, block) {
                return Err(set_aside);
            }
            if let (Some(chain), true) = (chain, adopted.entries.is_empty()) {
                if !adopted.other_chains.is_empty() {
                    return Err(ReadError::OtherChain {
                        chain,
                        catalog: adopted.other_chains.clone(),
                    });
                }
            }
        }
        if found.is_none() && adopted.views.is_empty() {
            if let Some(failure) = self.failure.lock().expect("failure lock").clone() {
                return Err(failure);
            }
            // Fetched but still being checked (its attestations): a read
            // at start is early, not at a block the server lacks.
            if !adopted.fetched {
                return Err(ReadError::NotReady(
                    "the PIR server's catalog is being checked".into(),
                ));
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

/// A catalog request's headers: gzip, and with the ETag of the catalog
/// adopted (`sent`) a 304 while unchanged, and a difference from it when
/// its listing is `held`.
fn request_headers(sent: Option<&str>, held: bool) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = vec![(ACCEPT_ENCODING, HeaderValue::from_static("gzip"))];
    if let Some(value) = sent.and_then(|e| HeaderValue::from_str(e).ok()) {
        headers.push((IF_NONE_MATCH, value));
        if held {
            let accept = HeaderName::from_static(protocol::api::ACCEPT_CATALOG_DIFF);
            headers.push((accept, HeaderValue::from_static("1")));
        }
    }
    headers
}

/// The listing a difference makes from the catalog held, when it starts
/// from that catalog (the one whose ETag was sent); else why not.
fn apply_diff(
    bytes: &[u8],
    since: &str,
    sent: Option<&str>,
    held: Option<&Vec<CatalogEntry>>,
) -> Result<CatalogListing, String> {
    let held = match (sent, held) {
        (Some(sent), Some(held)) if sent == since => held,
        _ => return Err(format!("a difference from {since}, a catalog not held")),
    };
    let diff: protocol::api::CatalogDiff =
        serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if diff.added.len() > protocol::api::MAX_CATALOG_ENTRIES {
        return Err(format!("{} entries added", diff.added.len()));
    }
    Ok(diff.apply(held))
}

/// [`Catalog::judge`]'s work: entries of other chains apart, the rest
/// either read or set aside.
fn judge(fetched: Fetched, chain: Option<u64>, check: &AttestCheck) -> Judged {
    let Fetched {
        listing,
        etag,
        digest,
    } = fetched;
    let raw = Arc::new(listing.snapshots.clone());
    let mut other_chains: Vec<u64> = Vec::new();
    let mut set_aside = BTreeMap::new();
    let mut entries = Vec::new();
    for e in listing.snapshots {
        if chain.is_some_and(|c| c != e.manifest.chain_id) {
            if !other_chains.contains(&e.manifest.chain_id) {
                other_chains.push(e.manifest.chain_id);
            }
            continue;
        }
        match check.set_aside(&e) {
            Some(why) => {
                set_aside.insert(e.id, why);
            }
            None => entries.push(e),
        }
    }
    if !set_aside.is_empty() {
        tracing::debug!(
            set_aside = set_aside.len(),
            "snapshots without the attestations required, or of an older format, set aside"
        );
    }
    Judged {
        raw,
        entries,
        set_aside,
        other_chains,
        max_batch: listing.max_batch,
        etag,
        digest,
    }
}

/// The hot tiers of `entries` that stand on a level of some view
/// ([`protocol::view::stands_on`]): one lookup by block each.
fn standing_tiers(
    entries: &[CatalogEntry],
    views: &Views,
) -> std::collections::BTreeSet<SnapshotId> {
    let mut at_block: BTreeMap<(u64, u64), Vec<&protocol::Manifest>> = BTreeMap::new();
    for level in entries.iter().filter(|e| views.holds(&e.id)) {
        let m = &level.manifest;
        at_block
            .entry((m.chain_id, m.block_number))
            .or_default()
            .push(m);
    }
    entries
        .iter()
        .filter(|hot| hot.id.kind == protocol::manifest::KindTag::Hot)
        .filter(|hot| {
            let m = &hot.manifest;
            at_block
                .get(&(m.chain_id, m.block_number))
                .is_some_and(|levels| levels.iter().any(|l| protocol::view::stands_on(m, l)))
        })
        .map(|hot| hot.id)
        .collect()
}

fn block_of_hash(adopted: &Adopted, hash: &alloy_primitives::B256) -> Option<u64> {
    adopted
        .entries
        .values()
        .find(|e| e.manifest.block_hash == Some(*hash))
        .map(|e| e.manifest.block_number)
}

/// A catalog body as sent, gunzipped when its headers say gzip.
fn unzipped(headers: &reqwest::header::HeaderMap, body: Vec<u8>) -> Result<Vec<u8>, ReadError> {
    let zipped = headers
        .get(CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes() == b"gzip");
    match zipped {
        true => gunzip(&body, MAX_CATALOG_BYTES),
        false => Ok(body),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Fetched but not yet adopted (its attestations being checked): a
    /// read is not ready (-32003 at the proxy), not "no snapshot at that
    /// block"; once an empty catalog is adopted, it is that.
    #[test]
    fn a_read_between_fetching_and_adopting_is_not_ready() {
        let policy = crate::config::AttestPolicy {
            attesters: vec![],
            quorum: 0,
        };
        let catalog = Catalog::new(Some(1), policy);
        let at = BlockSelector::Number(1);
        let before_fetch = catalog.view_for(&at).unwrap_err();
        assert!(
            matches!(before_fetch, ReadError::Backend(_)),
            "{before_fetch:?}"
        );
        *catalog.failure.lock().unwrap() = None;
        let judging = catalog.view_for(&at).unwrap_err();
        assert!(matches!(judging, ReadError::NotReady(_)), "{judging:?}");
        *catalog.adopted.write().unwrap() = Arc::new(Adopted {
            max_batch: 1,
            fetched: true,
            ..Default::default()
        });
        let adopted = catalog.view_for(&at).unwrap_err();
        assert!(
            matches!(adopted, ReadError::NoSnapshot { .. }),
            "{adopted:?}"
        );
    }

    /// A wait at start ends at its deadline while no catalog is adopted,
    /// or one whose chain is not decided (an empty one, nothing
    /// configured); as soon as a catalog with a view is adopted; and at
    /// once when the chain is decided, view or not.
    #[tokio::test]
    async fn a_wait_at_start_ends_once_a_read_would_not_change() {
        use std::time::Duration;
        let policy = || crate::config::AttestPolicy {
            attesters: vec![],
            quorum: 0,
        };
        let judged = |entries: Vec<CatalogEntry>| Judged {
            raw: Arc::new(entries.clone()),
            entries,
            set_aside: BTreeMap::new(),
            other_chains: vec![],
            max_batch: 1,
            etag: None,
            digest: Sha3Digest::of(b"catalog"),
        };
        let catalog = Catalog::new(None, policy());
        let soon = tokio::time::Instant::now() + Duration::from_millis(50);
        assert!(!catalog.settled_by(soon).await, "no catalog yet");
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        let base = protocol::testing::entry(1, 9, protocol::SnapshotKind::Full, &[]);
        let adopting = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(catalog.adopt(judged(vec![]), false).is_some());
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!catalog.settled(), "an empty catalog, no chain decided");
            assert!(catalog.adopt(judged(vec![base]), false).is_some());
            tokio::time::Instant::now()
        };
        let waiting = async { (catalog.settled_by(later).await, tokio::time::Instant::now()) };
        let ((settled, ended), adopted_at) = tokio::join!(waiting, adopting);
        assert!(settled);
        assert!(ended >= adopted_at, "the wait ended with the view");
        assert!(catalog.settled_by(tokio::time::Instant::now()).await);

        // An empty catalog of a chain decided (the upstream's): not
        // settled (a base may be on its way).
        let bound = Catalog::new(None, policy());
        assert!(bound.adopt(judged(vec![]), false).is_some());
        assert!(bound.bind_chain(1));
        assert!(!bound.settled(), "an empty catalog");
        // Only another chain's snapshots: settled once the chain is
        // decided (binding it ends a wait).
        let other = Judged {
            other_chains: vec![2],
            ..judged(vec![])
        };
        let elsewhere = Catalog::new(None, policy());
        assert!(elsewhere.adopt(other, false).is_some());
        assert!(!elsewhere.settled(), "no chain decided yet");
        let binding = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(elsewhere.bind_chain(1));
        };
        let (settled, ()) = tokio::join!(elsewhere.settled_by(later), binding);
        assert!(settled, "only another chain: nothing to wait for");
        // Snapshots set aside (unsigned): settled once adopted.
        let unsigned = Judged {
            set_aside: BTreeMap::from([(base_id(), SetAside::Unattested(0))]),
            ..judged(vec![])
        };
        let unread = Catalog::new(None, policy());
        assert!(unread.adopt(unsigned, false).is_some());
        assert!(unread.settled(), "set aside for good");
    }

    fn base_id() -> SnapshotId {
        protocol::testing::entry(1, 9, protocol::SnapshotKind::Full, &[]).id
    }

    /// A signature counts only when it is a listed attester's, over this
    /// very manifest, once per attester; a manifest of an older format is
    /// set aside whatever it carries.
    #[test]
    fn attestations_count_for_their_manifest_and_listed_signers() {
        use alloy_signer::SignerSync;
        let signer: alloy_signer_local::PrivateKeySigner =
            "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
                .parse()
                .unwrap();
        let mut entry = protocol::testing::entry(1, 9, protocol::SnapshotKind::Full, &[]);
        entry.manifest.block_hash = Some(B256::repeat_byte(1));
        entry.manifest.state_root = Some(B256::repeat_byte(2));
        let hash = protocol::attest::signing_hash(&entry.manifest).unwrap();
        let signed = protocol::attest::Attestation {
            signer: signer.address(),
            signature: signer.sign_hash_sync(&hash).unwrap(),
        };
        let check = |attesters: Vec<alloy_primitives::Address>, quorum| AttestCheck {
            policy: crate::config::AttestPolicy { attesters, quorum },
            recovered: Mutex::new(HashMap::new()),
        };
        let one = check(vec![signer.address()], 1);
        assert_eq!(one.set_aside(&entry), Some(SetAside::Unattested(0)));
        entry.attestations = vec![signed.clone(), signed.clone()];
        assert_eq!(one.set_aside(&entry), None);
        assert_eq!(one.signed(&entry), 1, "once per attester");
        assert_eq!(one.recovered.lock().unwrap().len(), 1, "recovered once");
        assert_eq!(one.signed(&entry), 1, "from what was recovered before");
        let two = check(
            vec![signer.address(), alloy_primitives::Address::repeat_byte(7)],
            2,
        );
        assert_eq!(two.set_aside(&entry), Some(SetAside::Unattested(1)));
        // The same signature relayed on a forged snapshot (other records,
        // or any other field changed) does not count.
        let mut forged = entry.clone();
        forged.manifest.content_digest = protocol::sha3_hex(b"forged records");
        assert_eq!(one.set_aside(&forged), Some(SetAside::Unattested(0)));
        let mut reformatted = entry.clone();
        reformatted.manifest.pir.value_bytes += 1;
        assert_eq!(one.set_aside(&reformatted), Some(SetAside::Unattested(0)));
        let stranger = check(vec![alloy_primitives::Address::repeat_byte(7)], 1);
        assert_eq!(stranger.set_aside(&entry), Some(SetAside::Unattested(0)));
        assert_eq!(
            check(vec![], 0).set_aside(&forged),
            None,
            "nothing required"
        );
        let mut old = entry.clone();
        old.manifest.format = 2;
        assert_eq!(check(vec![], 0).set_aside(&old), Some(SetAside::Format(2)));
    }
}

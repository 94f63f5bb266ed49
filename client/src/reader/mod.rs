//! [`PrivateReader`]: private reads of accounts at any block the server
//! has a view of. It keeps the catalog fresh, loads the newest view's
//! setups in the background (older views' when first read), and answers
//! a lookup by asking every level of the view in one request, so that
//! what the server sees never depends on the address or on the level that
//! holds it.
//!
//! By job: [`reading`] (a call's keys), [`queries`] (the PIR requests
//! they make), [`opening`] (levels downloaded and kept), [`fresh`] (the
//! catalog, its waits, a selector's view) and [`cover`] (cover traffic).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock, Weak};

use alloy_primitives::{Address, B256};
use pir_core::wire::encode_queries;
use pir_core::PirClient;
use protocol::api::{ApiError, CatalogEntry};
use protocol::view::View;
use protocol::SnapshotId;
use reqwest::StatusCode;

use crate::answers::AnswerCache;
use crate::block::BlockSelector;
use crate::cache::{Artifact, DiskCache};
use crate::canary;
use crate::catalog::Catalog;
use crate::config::{ClientConfig, ConfigError};
use crate::fetch::{FetchError, Size};
use crate::levels::{
    cheapest_cover, decode_level, whole_table_bytes, Found, KeyState, Level, ReadKey, ReadMode,
    SlotState, ViewClient, WholeLevel,
};
use crate::link::ServerLink;
use crate::pool::{refill, SnapshotClient};
use crate::{AccountState, ReadError};

mod audit;
mod cover;
mod fresh;
mod opening;
mod queries;
mod reading;

use cover::cover_traffic;
pub use cover::{counting_requests, Sent};
use fresh::keep_fresh;

/// Keys of one read to be asked of some PIR levels, and what those
/// answered before ([`PrivateReader::part`]).
struct Part<'a> {
    levels: &'a [(usize, &'a Arc<SnapshotClient>)],
    keys: Vec<Option<B256>>,
    known: Vec<Vec<Option<Found>>>,
    /// Keys some level has not answered yet, each once.
    unknown: Vec<B256>,
    /// Keys the view cannot hold (asked as random ones).
    unheld: usize,
    /// Keys every level answered before, each once: asked again as
    /// random ones in a request that goes anyway (so that its query count
    /// is a first read's), and in every read when kept answers are to look
    /// fresh.
    kept: usize,
    /// Kept answers send a request of their own (`answer_kept_as_fresh`).
    kept_asks: bool,
}

impl Part<'_> {
    /// Whether reading it needs a request.
    fn asks(&self) -> bool {
        let kept = self.kept_asks && self.kept > 0;
        !self.levels.is_empty() && (!self.unknown.is_empty() || self.unheld > 0 || kept)
    }
}

/// Request times kept for [`PrivateReader::fresh_like_delay`].
const TIMES_KEPT: usize = 64;
/// Schedules kept for cover requests.
const SCHEDULES_KEPT: usize = 32;
/// What a kept answer waits before any request was timed (a loopback
/// request at 2^24 keys takes about this long on 2 cores).
const UNTIMED_ROUND: std::time::Duration = std::time::Duration::from_millis(150);
/// The most a kept answer waits: a server that answered slowly for a while
/// does not hold up kept reads past it.
const MOST_KEPT_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long a hot tier whose download failed is left alone.
const HOT_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

pub struct PrivateReader {
    link: Arc<ServerLink>,
    catalog: Catalog,
    cache: DiskCache,
    /// Codes proved and kept, for `eth_getCode`.
    codes: Arc<crate::code::CodeCache>,
    /// Of each base opened, its most common codes downloaded ahead.
    prefetch_codes: usize,
    hot_tier: crate::config::HotTierUse,
    /// Keys asked of the PIR levels so far (each once per request, not
    /// counting canaries and fillers): what the hot tier saves.
    pir_keys: std::sync::atomic::AtomicU64,
    /// A hot tier whose download failed, and when: not tried again for
    /// [`HOT_RETRY`].
    hot_failed: std::sync::Mutex<Option<(SnapshotId, std::time::Instant)>>,
    /// Hot tiers caught holding a value their base disagrees with (a key
    /// that names the wallet, read by PIR): shown, and nothing else.
    forged_tiers: std::sync::Mutex<std::collections::BTreeSet<SnapshotId>>,
    /// The tier's keys the wallet read from it, waiting for an audit in a
    /// request's free queries ([`audit`]).
    audits: std::sync::Mutex<audit::TierAudits>,
    /// What each PIR level answered before, per key.
    answers: AnswerCache,
    pool_size: usize,
    /// The most queries one request took of a PIR level so far: a new
    /// level's pool is filled to it ahead of its first refresh.
    largest_request: std::sync::atomic::AtomicUsize,
    limits: pir_core::ClientLimits,
    /// Setup data and tables of one view's levels together, bytes.
    max_view_bytes: u64,
    /// PIR levels (by setup digest) of requests that failed verification:
    /// their kept answers are dropped then and again at a trust reset.
    suspect_levels: std::sync::Mutex<std::collections::BTreeSet<protocol::Sha3Digest>>,
    /// Queries per batch sent (1: as many as asked).
    pad_to: usize,
    /// Without `pad_to`: the least count of the ladder of query counts a
    /// request is padded to (0: none).
    ladder: usize,
    /// A read answered from kept answers still sends the request a first
    /// read would (random keys in their place), and waits for it.
    kept_as_fresh: bool,
    /// A round answered from kept answers alone (no request) is released
    /// no sooner than a request would have been answered
    /// ([`Self::fresh_like_delay`]).
    kept_delay: bool,
    /// How long recent requests took, with their queries per level,
    /// newest last (at most [`TIMES_KEPT`]): what a kept answer waits.
    request_times: std::sync::Mutex<std::collections::VecDeque<(usize, std::time::Duration)>>,
    /// The rungs of recent private requests' rounds (at most
    /// [`SCHEDULES_KEPT`]): cover requests replay one.
    schedules: std::sync::Mutex<std::collections::VecDeque<Vec<usize>>>,
    /// Canaries mixed into each request (when padding: at least; fillers
    /// are canaries where there are known answers).
    canaries_per_request: usize,
    /// Snapshots whose setup data (or whole table) is loaded.
    snapshots: RwLock<BTreeMap<SnapshotId, Level>>,
    /// Held, per level, while its setup (or table) is fetched, so that two
    /// lookups of a cold view do not download it twice, and a download
    /// that a server stalls holds up no read of another level.
    opening: std::sync::Mutex<HashMap<SnapshotId, Arc<tokio::sync::Mutex<()>>>>,
    /// This reader, once shared (started): a hot tier is downloaded in a
    /// task of its own, never by a read that waits for it.
    me: std::sync::OnceLock<std::sync::Weak<PrivateReader>>,
    /// The header source views are checked against, once set.
    canonical: std::sync::OnceLock<Arc<crate::canonical::CanonicalCheck>>,
    /// Read views the header source cannot confirm (or that name no block
    /// hash) all the same.
    read_unconfirmed: bool,
    /// When to go idle, how often to look at the catalog then, and how old
    /// a loaded view `latest` may be read from.
    idle: crate::config::IdlePolicy,
    /// The last private read (cover lookups not counted), or the start.
    last_read: std::sync::Mutex<std::time::Instant>,
    /// The block the wallet's last read named: cover lookups read there,
    /// so that they look like its reads (a wallet that pins a number is
    /// not told apart from the cover by its view).
    last_selector: std::sync::Mutex<BlockSelector>,
    /// The last catalog fetch.
    last_catalog: std::sync::Mutex<Option<std::time::Instant>>,
    /// Held while a catalog is fetched and adopted: one at a time (a
    /// catalog can be 16 MiB, parsed; lookups that refresh it and the
    /// background refresh take turns).
    refreshing: tokio::sync::Mutex<()>,
}

/// Whether a read counts as the user's (and wakes an idle reader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waking {
    Yes,
    /// A cover lookup.
    No,
}

/// Catalog fetches a lookup may make for a view it did not find.
const CATALOG_RETRIES: usize = 5;

/// Whether `result` is "no snapshot" for a block newer than every view
/// of the catalog (one the server may be about to list).
fn ahead_of_catalog(sel: &BlockSelector, result: &Result<KeyState, ReadError>) -> bool {
    match (sel, result) {
        (BlockSelector::Number(n), Err(ReadError::NoSnapshot { available, .. })) => {
            available.iter().max().is_some_and(|newest| n > newest)
        }
        _ => false,
    }
}

/// A wide word's low part joined with its high part, which must come from
/// the same level (both records are written together).
fn join_high_part(
    low: Result<KeyState, ReadError>,
    high: Result<KeyState, ReadError>,
) -> Result<KeyState, ReadError> {
    let Ok(KeyState::Slot(mut low)) = low else {
        return Err(ReadError::Backend(
            "a wide word's low part is not a slot".into(),
        ));
    };
    let high = match high? {
        KeyState::Slot(h) if h.snapshot == low.snapshot => h.word,
        _ => {
            return Err(ReadError::Unverifiable(format!(
                "{}: a wide word's high part is not of its level",
                low.snapshot
            )))
        }
    };
    low.word = protocol::storage::join_word(low.word, high, protocol::account::COMPACT_VALUE_BYTES);
    low.low_part = false;
    Ok(KeyState::Slot(low))
}

/// Results, one per address, all the same error.
fn all_failed<T>(n: usize, e: &ReadError) -> Vec<Result<T, ReadError>> {
    (0..n).map(|_| Err(e.clone())).collect()
}

impl PrivateReader {
    /// A reader of `config.pir_server`; nothing is fetched yet.
    pub fn new(config: &ClientConfig) -> Result<Self, ConfigError> {
        config.check_transport()?;
        config.attest.check()?;
        config.prepare_cache_dir()?;
        Ok(PrivateReader {
            link: Arc::new(ServerLink::new(
                config.pir_http_client()?,
                &config.pir_server,
                config.timeouts,
            )),
            catalog: Catalog::new(config.chain_id, config.attest.clone()),
            cache: DiskCache::new(config.cache_dir.clone()),
            codes: Arc::new(crate::code::CodeCache::new(&config.cache_dir)),
            prefetch_codes: config.prefetch_codes,
            hot_tier: config.hot_tier,
            pir_keys: Default::default(),
            hot_failed: Default::default(),
            forged_tiers: Default::default(),
            audits: Default::default(),
            answers: AnswerCache::new(config.cache_dir.clone()),
            pool_size: config.prepared_pool,
            largest_request: Default::default(),
            limits: config.limits.client_limits(),
            max_view_bytes: config.limits.max_view_setup_bytes(),
            suspect_levels: Default::default(),
            pad_to: config.pad_batches_to.max(1),
            ladder: config.pad_queries_ladder,
            kept_as_fresh: config.answer_kept_as_fresh,
            kept_delay: config.kept_answer_delay,
            request_times: Default::default(),
            schedules: Default::default(),
            canaries_per_request: config.canaries_per_request,
            snapshots: RwLock::new(BTreeMap::new()),
            opening: Default::default(),
            me: std::sync::OnceLock::new(),
            canonical: std::sync::OnceLock::new(),
            read_unconfirmed: config.read_unconfirmed_views,
            idle: config.idle_policy(),
            last_read: std::sync::Mutex::new(std::time::Instant::now()),
            last_selector: std::sync::Mutex::new(BlockSelector::Newest),
            last_catalog: std::sync::Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// A reader that fetches the catalog now (a server not reachable yet
    /// is retried in the background), keeps it fresh every
    /// `config.refresh`, and sends cover lookups if configured, until the
    /// reader is dropped. For a caller that wants a view before it goes on
    /// (a script, a replay); a server that answers slowly holds it up to
    /// the catalog's timeout.
    pub async fn start(config: &ClientConfig) -> Result<Arc<Self>, ConfigError> {
        let reader = Arc::new(PrivateReader::new(config)?);
        let server = protocol::url::redact(&config.pir_server);
        match reader.refresh().await {
            Ok(n) => tracing::info!(snapshots = n, %server, "connected to the PIR server"),
            Err(e) => {
                tracing::warn!(error = %e, %server, "PIR server not reachable yet; retrying in the background")
            }
        }
        reader.spawn_background(config, false);
        Ok(reader)
    }

    /// [`Self::start`] without waiting for anything: the first catalog is
    /// fetched in the background at once, and reads get an error until a
    /// view is ready. What a server for wallets wants (the proxy listens
    /// at once, whatever the PIR server does).
    pub fn start_in_background(config: &ClientConfig) -> Result<Arc<Self>, ConfigError> {
        let reader = Arc::new(PrivateReader::new(config)?);
        reader.spawn_background(config, true);
        Ok(reader)
    }

    /// The catalog kept fresh (fetched at once with `fetch_now`) and cover
    /// lookups, until the reader is dropped.
    fn spawn_background(self: &Arc<Self>, config: &ClientConfig, fetch_now: bool) {
        let _ = self.me.set(Arc::downgrade(self));
        if config.cover_lookups_per_hour > 0.0 {
            tokio::spawn(cover_traffic(
                Arc::downgrade(self),
                config.cover_lookups_per_hour,
            ));
        }
        let server = fetch_now.then(|| protocol::url::redact(&config.pir_server));
        tokio::spawn(keep_fresh(
            Arc::downgrade(self),
            config.refresh.max(std::time::Duration::from_millis(50)),
            server,
        ));
    }

    /// Bytes sent to and received from the PIR server since start
    /// (queries, responses, catalogs, setup downloads).
    pub fn traffic(&self) -> (u64, u64) {
        self.link.traffic.total()
    }

    /// The part of [`Self::traffic`] that lookups moved (the rest is
    /// catalogs and setup downloads: background traffic).
    pub fn lookup_traffic(&self) -> (u64, u64) {
        self.link.traffic.lookups()
    }

    /// Lookup requests sent (each one batch of queries to every PIR
    /// level of a view).
    pub fn lookup_requests(&self) -> u64 {
        self.link.traffic.lookup_requests()
    }

    /// Why private reads are stopped, if they are.
    pub fn distrusted(&self) -> Option<String> {
        self.link.trust.stopped()
    }

    /// Trusts the server again (`ethpir_trustReset`); returns the reason
    /// that had stopped private reads, if any.
    pub fn trust_reset(&self) -> Option<String> {
        let suspects = std::mem::take(&mut *self.suspect_levels.lock().expect("lock"));
        for level in &suspects {
            self.answers.forget(level);
        }
        self.link.trust.reset()
    }

    /// A request to `view` failed verification: what its PIR levels
    /// answered before is dropped (kept answers may be from requests that
    /// a partial tamper let through), in memory and on disk.
    fn forget_answers_of(&self, view: &ViewClient) {
        let mut suspects = self.suspect_levels.lock().expect("lock");
        for level in &view.levels {
            if let Level::Pir(snap) = level {
                self.answers.forget(snap.setup_digest());
                suspects.insert(snap.setup_digest().clone());
            }
        }
    }

    /// Whether the reader is idle: no private read for the policy's time.
    /// It then loads no new view and looks at the catalog rarely; the
    /// next read catches up first.
    pub fn is_idle(&self) -> bool {
        self.idle
            .after
            .is_some_and(|after| self.last_read.lock().expect("lock").elapsed() >= after)
    }

    /// Counts a private read; returns whether the reader was idle.
    fn wake(&self) -> bool {
        let was = self.is_idle();
        *self.last_read.lock().expect("lock") = std::time::Instant::now();
        if was {
            tracing::info!("a private read: catching up from idle");
        }
        was
    }

    /// Whether the catalog is due while idle.
    fn idle_catalog_due(&self) -> bool {
        self.last_catalog
            .lock()
            .expect("lock")
            .is_none_or(|at| at.elapsed() >= self.idle.refresh)
    }

    /// Snapshots whose setup data is loaded now.
    pub fn snapshots(&self) -> Vec<Level> {
        self.snapshots
            .read()
            .expect("lock")
            .values()
            .cloned()
            .collect()
    }

    /// How a loaded snapshot is read (`None`: not loaded yet).
    pub fn read_mode(&self, id: &SnapshotId) -> Option<ReadMode> {
        self.loaded(id).map(|level| level.mode())
    }

    /// Every view of the chain read, spelled out, oldest block first (for
    /// tools and tests: a wallet wants [`Self::newest_view`]).
    pub fn views(&self) -> Vec<View> {
        let chain = self.catalog.chain_id().ok().flatten();
        let adopted = self.catalog.adopted();
        let all = adopted.views.all();
        all.into_iter()
            .filter(|v| chain.is_none_or(|c| v.chain_id == c))
            .collect()
    }

    /// Waits until a read would find what it finds for good (a view, or a
    /// catalog that says why there is none: snapshots set aside, only
    /// other chains) or until `deadline`:
    /// whether it would. A request at start waits on this rather than
    /// fail while the first catalog is on its way.
    pub async fn settled_by(&self, deadline: tokio::time::Instant) -> bool {
        self.catalog.settled_by(deadline).await
    }

    /// The newest view of the chain read.
    pub fn newest_view(&self) -> Option<View> {
        self.catalog.newest()
    }

    /// The blocks the chain read has a view at, oldest first.
    pub fn view_blocks(&self) -> Vec<u64> {
        self.catalog.view_blocks()
    }

    /// The catalog entry of a snapshot.
    pub fn entry(&self, id: &SnapshotId) -> Option<CatalogEntry> {
        self.catalog.entry(id)
    }

    /// The chain and the timestamp (when recorded) of block `block`, as
    /// the catalog's snapshots at that block say (every view's top level
    /// is one).
    pub fn block_record(&self, block: u64) -> Option<(u64, Option<u64>)> {
        let adopted = self.catalog.adopted();
        let at_block = adopted
            .entries
            .values()
            .filter(|e| e.manifest.block_number == block);
        let mut chain = None;
        for e in at_block {
            if e.manifest.block_time.is_some() {
                return Some((e.manifest.chain_id, e.manifest.block_time));
            }
            chain = Some(e.manifest.chain_id);
        }
        chain.map(|c| (c, None))
    }

    /// The contracts whose storage the view at `sel` holds (its base's
    /// list), as the catalog says: which storage reads can be private.
    pub fn private_storage(
        &self,
        sel: &BlockSelector,
    ) -> Option<protocol::storage::PrivateStorage> {
        let view = self.catalog.view_for(sel).ok()?;
        let base = self.catalog.entry(view.snapshots.first()?)?;
        Some(base.manifest.storage)
    }

    /// Whether the newest view holds the whole state (its base's manifest
    /// claims every slot of every contract).
    pub fn holds_whole_state(&self) -> bool {
        self.private_storage(&BlockSelector::Newest)
            .is_some_and(|s| s.whole_state)
    }

    /// The chain read: configured, or the only one the server has.
    pub fn chain_id(&self) -> Result<Option<u64>, ReadError> {
        self.catalog.chain_id()
    }

    /// Records that `view`'s hot tier holds a value its base disagrees
    /// with. Nothing else changes: the wire stays what it would have
    /// been (a proxy that stopped, failed a call or changed its requests
    /// on catching a forgery would tell the forger which key it read), and
    /// the keys that name no one are still read from the tier (they are
    /// the operator's word, as the start-up log says).
    pub(super) fn tier_forged(&self, view: &ViewClient) {
        let Some(hot) = &view.hot else { return };
        let first = self
            .forged_tiers
            .lock()
            .expect("lock")
            .insert(hot.level.entry.id);
        if first {
            tracing::warn!(
                tier = %hot.level.entry.id,
                "the PIR server's hot tier holds a value its base disagrees with (a forgery by its operator): the wallet's own keys are answered by PIR and the forged values found are corrected, but values that name no one (pools, tokens, proxies) not audited yet still come from this tier; set hot_tier = \"off\" to read every key by PIR"
            );
        }
    }

    /// The hot tiers caught forging, by id.
    pub fn forged_tiers(&self) -> Vec<String> {
        let tiers = self.forged_tiers.lock().expect("lock");
        tiers.iter().map(SnapshotId::url_form).collect()
    }

    /// Keys asked of the PIR levels so far (canaries and fillers not
    /// counted).
    pub fn pir_keys(&self) -> u64 {
        self.pir_keys.load(std::sync::atomic::Ordering::Relaxed)
    }
}

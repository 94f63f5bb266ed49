//! [`PrivateReader`]: private reads of accounts at any block the server
//! has a view of. It keeps the catalog fresh, loads the newest view's
//! setups in the background (older views' when first read), and answers
//! a lookup by asking every level of the view in one request, so that
//! what the server sees never depends on the address or on the level that
//! holds it.

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
    /// random ones when kept answers are to look fresh.
    kept: usize,
}

impl Part<'_> {
    /// Whether reading it needs a request.
    fn asks(&self) -> bool {
        !self.levels.is_empty() && (!self.unknown.is_empty() || self.unheld > 0 || self.kept > 0)
    }
}

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
    /// Reads that sent PIR requests (one or two requests each: see
    /// [`Self::read_batch`]): what a call's rounds are padded in.
    lookup_rounds: std::sync::atomic::AtomicU64,
    /// A hot tier whose download failed, and when: not tried again for
    /// [`HOT_RETRY`].
    hot_failed: std::sync::Mutex<Option<(SnapshotId, std::time::Instant)>>,
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
            lookup_rounds: Default::default(),
            hot_failed: Default::default(),
            answers: AnswerCache::new(config.cache_dir.clone()),
            pool_size: config.prepared_pool,
            largest_request: Default::default(),
            limits: config.limits.client_limits(),
            max_view_bytes: config.limits.max_view_setup_bytes(),
            suspect_levels: Default::default(),
            pad_to: config.pad_batches_to.max(1),
            ladder: config.pad_queries_ladder,
            kept_as_fresh: config.answer_kept_as_fresh,
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

    /// One lookup of a random address in the newest snapshot, sent exactly
    /// like a real one (cover traffic).
    /// While idle there is none (it would wake the reader, and downloads
    /// would follow), and it never counts as a read.
    pub async fn cover_lookup(&self) {
        let at = self.last_selector.lock().expect("lock").clone();
        self.cover_lookup_at(&at).await;
    }

    /// [`Self::cover_lookup`] at the view `sel` names (a call's padding
    /// rounds: at the view its real rounds read).
    pub async fn cover_lookup_at(&self, sel: &BlockSelector) {
        if self.is_idle() {
            return;
        }
        let key = ReadKey::Account(Address::from(rand::random::<[u8; 20]>()));
        let _ = self.lookup_keys_as(sel, &[key], Waking::No).await;
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

    /// Fetches the catalog (a 304 when unchanged), drops clients of
    /// vanished snapshots and loads the newest view's setups. Returns how
    /// many snapshots the catalog lists.
    pub async fn refresh(&self) -> Result<usize, ReadError> {
        self.refresh_with(false).await
    }

    /// [`Self::refresh`]; `force` adopts a catalog even if it is behind
    /// the one adopted (see [`Catalog::adopt`]).
    async fn refresh_with(&self, force: bool) -> Result<usize, ReadError> {
        let listed = self.refresh_catalog(force).await?;
        if let Some(view) = self.catalog.newest() {
            if let Err(e) = self.open_view(view).await {
                tracing::warn!(error = %e, "newest view not loaded");
            }
        }
        Ok(listed)
    }

    /// Fetches and adopts the catalog, and drops the levels it no longer
    /// lists; loads nothing. Returns how many snapshots it lists.
    async fn refresh_catalog(&self, force: bool) -> Result<usize, ReadError> {
        let one_at_a_time = self.refreshing.lock().await;
        *self.last_catalog.lock().expect("lock") = Some(std::time::Instant::now());
        let judged = match self.catalog.fetch(&self.link).await? {
            Some(fetched) => Some(self.catalog.judge(fetched).await?),
            None => None,
        };
        if let Some(adopted) = judged.and_then(|body| self.catalog.adopt(body, force)) {
            self.snapshots.write().expect("lock").retain(|id, s| {
                adopted
                    .entries
                    .get(id)
                    .is_some_and(|e| e.manifest == s.entry().manifest)
            });
            self.codes.retain_tables(|level| {
                level
                    .parse::<SnapshotId>()
                    .is_ok_and(|id| adopted.entries.contains_key(&id))
            });
            self.answers.retain(|digest| {
                adopted
                    .entries
                    .values()
                    .any(|e| e.manifest.pir.setup_digest == *digest)
            });
        }
        drop(one_at_a_time);
        Ok(self.catalog.len())
    }

    /// Reads a view only when `source` confirms it (its chain, its block
    /// hash at its number): see [`crate::canonical`]. The reader is bound
    /// to the source's chain as soon as it says which (the catalog's
    /// entries of other chains set aside). Set once; a second call is
    /// ignored.
    pub fn check_blocks_with(self: &Arc<Self>, source: crate::canonical::HeaderSource) {
        let check = crate::canonical::CanonicalCheck::new(source, self.read_unconfirmed);
        if self.canonical.set(Arc::new(check)).is_err() {
            return;
        }
        tokio::spawn(bind_to_source_chain(Arc::downgrade(self)));
    }

    /// The view a block selector names, every level loaded; with a header
    /// source, only if the source confirms it.
    pub async fn select(&self, sel: &BlockSelector) -> Result<ViewClient, ReadError> {
        self.select_as(sel, Waking::Yes).await
    }

    async fn select_as(
        &self,
        sel: &BlockSelector,
        waking: Waking,
    ) -> Result<ViewClient, ReadError> {
        if waking == Waking::Yes {
            *self.last_selector.lock().expect("lock") = sel.clone();
        }
        let lagging = self.loaded_view_within_lag(sel);
        if waking == Waking::Yes && self.wake() && lagging.is_none() {
            // Back from idle: the catalog as it is now, and its newest
            // view loaded, before the answer.
            if let Err(e) = self.refresh().await {
                tracing::debug!(error = %e, "catching up from idle failed");
            }
        }
        let view = match lagging {
            Some(view) => view,
            None => self.catalog.view_for(sel)?,
        };
        if let Some(check) = self.canonical.get() {
            let hash = view
                .snapshots
                .last()
                .and_then(|id| self.catalog.block_hash(id));
            check.check(view.chain_id, view.block, hash).await?;
        }
        self.open_view(view).await
    }

    /// For `latest` with a `max_lag`: the newest view whose levels are all
    /// loaded, when it is at most that many blocks older than the
    /// catalog's newest.
    fn loaded_view_within_lag(&self, sel: &BlockSelector) -> Option<View> {
        let (BlockSelector::Newest, Some(lag)) = (sel, self.idle.max_lag) else {
            return None;
        };
        let newest = self.catalog.newest()?.block;
        let loaded = self.snapshots.read().expect("lock");
        self.views()
            .into_iter()
            .rev()
            .take_while(|v| v.block.saturating_add(lag) >= newest)
            .find(|v| v.snapshots.iter().all(|id| loaded.contains_key(id)))
    }

    /// Reads accounts at the block `sel` names: one result per address.
    pub async fn lookup(
        &self,
        sel: &BlockSelector,
        addresses: &[Address],
    ) -> Vec<Result<AccountState, ReadError>> {
        let keys: Vec<ReadKey> = addresses.iter().map(|a| ReadKey::Account(*a)).collect();
        self.lookup_keys(sel, &keys)
            .await
            .into_iter()
            .map(|r| {
                r.map(|state| match state {
                    KeyState::Account(a) => a,
                    KeyState::Slot(_) => unreachable!("an account key reads an account"),
                })
            })
            .collect()
    }

    /// The code of an account read privately ([`Self::lookup`]): none,
    /// or its bytes, proved against the level's code table and checked by
    /// their hash (see [`crate::code`]).
    pub async fn code_of(
        &self,
        account: &AccountState,
    ) -> Result<alloy_primitives::Bytes, ReadError> {
        if let Some(reason) = self.distrusted() {
            return Err(ReadError::Distrusted(reason));
        }
        let held =
            |t: &protocol::codes::CodeTable| self.codes.holds_table(&account.snapshot, t.root);
        if crate::code::is_delta(&account.snapshot)
            && !account.code_table.as_ref().is_some_and(held)
        {
            // Not downloaded in the background yet (or it failed): every
            // missing one now.
            self.hold_missing_code_tables().await?;
        }
        self.codes.code_of(&self.link, account).await
    }

    /// Reads storage slots `(contract, slot)` at the block `sel` names:
    /// one result per slot. A contract whose storage the view does not
    /// hold is [`ReadError::NotListed`] (nothing about it is sent).
    pub async fn lookup_slots(
        &self,
        sel: &BlockSelector,
        slots: &[(Address, B256)],
    ) -> Vec<Result<SlotState, ReadError>> {
        let keys: Vec<ReadKey> = slots
            .iter()
            .map(|(contract, slot)| ReadKey::Slot {
                contract: *contract,
                slot: *slot,
            })
            .collect();
        self.lookup_keys(sel, &keys)
            .await
            .into_iter()
            .map(|r| {
                r.map(|state| match state {
                    KeyState::Slot(s) => s,
                    KeyState::Account(_) => unreachable!("a slot key reads a slot"),
                })
            })
            .collect()
    }

    /// Reads accounts and slots at the block `sel` names, together (one
    /// request per batch): one result per key.
    ///
    /// When a level of the view was retired in the meantime (a merge, a
    /// reorg), or the block asked for is newer than the catalog's newest
    /// (behind a load balancer, a replica still picking up a snapshot
    /// another replica already listed), the catalog is fetched again and
    /// the lookup repeated: at most [`CATALOG_RETRIES`] times, a little
    /// longer apart each time (1.5 s in all), since replicas pick up a
    /// snapshot within their rescan interval.
    pub async fn lookup_keys(
        &self,
        sel: &BlockSelector,
        keys: &[ReadKey],
    ) -> Vec<Result<KeyState, ReadError>> {
        self.lookup_keys_as(sel, keys, Waking::Yes).await
    }

    async fn lookup_keys_as(
        &self,
        sel: &BlockSelector,
        keys: &[ReadKey],
        waking: Waking,
    ) -> Vec<Result<KeyState, ReadError>> {
        let mut attempt = 0;
        loop {
            let results = match self.select_as(sel, waking).await {
                Ok(view) => self.read(&view, keys).await,
                Err(e) => all_failed(keys.len(), &e),
            };
            let retired = results
                .iter()
                .any(|r| matches!(r, Err(ReadError::Retired(_))));
            let ahead = results.iter().any(|r| ahead_of_catalog(sel, r));
            if !(retired || ahead) || attempt == CATALOG_RETRIES {
                return results;
            }
            attempt += 1;
            tracing::debug!(
                retired,
                ahead,
                "view not in this catalog; fetching it again"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100 * attempt as u64)).await;
            // A retired level is first retried on the catalog as it is
            // (a lagging replica catches up within its rescan); only then
            // is an older catalog forced on (a reorg removed levels).
            if let Err(e) = self.refresh_with(retired && attempt >= 3).await {
                return all_failed(keys.len(), &e);
            }
        }
    }

    /// Reads keys privately from every level of one view, in as few
    /// requests as the server's batch limit allows. One result per key.
    /// A wide storage word (format 4) is read whole: its high part in one
    /// more request, after the value that says so. Every key is read as
    /// if no hot tier held it (see [`Self::read_sharing`]).
    pub async fn read(
        &self,
        view: &ViewClient,
        keys: &[ReadKey],
    ) -> Vec<Result<KeyState, ReadError>> {
        self.read_sharing(view, keys, &vec![false; keys.len()])
            .await
    }

    /// [`Self::read`], where the keys marked in `shared` (one flag per
    /// key) may be read from the hot tier: keys that do not name the
    /// wallet (a pool's reserves, a token's supply, a proxy's
    /// implementation slot). Every other key is asked of every PIR level
    /// whether or not the tier holds it, so that what the server sees
    /// never depends on whether its tier holds the wallet's keys: a
    /// server that chose a tier holding a candidate's account and slots
    /// would otherwise see that wallet's requests shrink.
    pub async fn read_sharing(
        &self,
        view: &ViewClient,
        keys: &[ReadKey],
        shared: &[bool],
    ) -> Vec<Result<KeyState, ReadError>> {
        let mut out = self.read_values(view, keys, shared).await;
        let wide: Vec<(usize, ReadKey)> = out
            .iter()
            .zip(keys)
            .enumerate()
            .filter_map(|(i, (result, key))| match (result, key) {
                (Ok(KeyState::Slot(s)), ReadKey::Slot { contract, slot }) if s.low_part => {
                    let high = ReadKey::HighPart {
                        contract: *contract,
                        slot: *slot,
                    };
                    Some((i, high))
                }
                _ => None,
            })
            .collect();
        if wide.is_empty() {
            return out;
        }
        let high_keys: Vec<ReadKey> = wide.iter().map(|(_, k)| *k).collect();
        let high_shared: Vec<bool> = wide.iter().map(|(i, _)| shared[*i]).collect();
        let highs = self.read_values(view, &high_keys, &high_shared).await;
        for ((i, _), high) in wide.into_iter().zip(highs) {
            let low = std::mem::replace(&mut out[i], Err(ReadError::Backend(String::new())));
            out[i] = join_high_part(low, high);
        }
        out
    }

    /// [`Self::read`] without completing wide words.
    async fn read_values(
        &self,
        view: &ViewClient,
        keys: &[ReadKey],
        shared: &[bool],
    ) -> Vec<Result<KeyState, ReadError>> {
        // A request has at most the server's batch of queries, exactly
        // `pad_batches_to` when padding; room is left for the canaries.
        let max_batch = self.catalog.max_batch();
        let canaries = self.canaries_per_request;
        let (per_batch, pad_to) = match self.pad_to > 1 {
            true => {
                let total = self.pad_to.min(max_batch);
                (total.saturating_sub(canaries).max(1), total)
            }
            false => (max_batch.saturating_sub(canaries).max(1), 0),
        };
        let mut out = Vec::with_capacity(keys.len());
        for (chunk, shared) in keys.chunks(per_batch).zip(shared.chunks(per_batch)) {
            if let Some(reason) = self.distrusted() {
                out.extend(all_failed(chunk.len(), &ReadError::Distrusted(reason)));
                continue;
            }
            let results = match self.read_batch(view, chunk, shared, pad_to).await {
                Ok(results) => results,
                Err(e) => all_failed(chunk.len(), &e),
            };
            // A failed verification anywhere fails the whole batch, and
            // every read after it (fail closed).
            let failed = results.iter().find_map(|r| match r {
                Err(ReadError::Unverifiable(why)) => Some(why.clone()),
                _ => None,
            });
            match failed {
                Some(why) => {
                    self.forget_answers_of(view);
                    out.extend(all_failed(chunk.len(), &self.link.distrust(why)))
                }
                None => out.extend(results),
            }
        }
        out
    }

    /// One request: the same queries (the keys not answered before, the
    /// canaries, then random fillers up to `pad_to` when padding) to every
    /// PIR level of the view, in a random order; none at all when every
    /// PIR level answered every key before (see [`crate::answers`]). What
    /// the server sees never depends on the keys' kind or on the level
    /// that holds them, but for the hot tier: a `shared` key it holds (a
    /// set every client downloads) goes in a request of its own, to the
    /// PIR levels above the tier only (none, when the tier stands on the
    /// newest PIR level); a key that names the wallet is read as if no
    /// tier held it. A key the view cannot hold (a slot of a contract
    /// it does not list) is replaced by a random one, and answered with
    /// why.
    async fn read_batch(
        &self,
        view: &ViewClient,
        asked: &[ReadKey],
        shared: &[bool],
        pad_to: usize,
    ) -> Result<Vec<Result<KeyState, ReadError>>, ReadError> {
        let held: Vec<Result<(), ReadError>> = asked.iter().map(|k| view.holds(k)).collect();
        let keys: Vec<Option<B256>> = asked
            .iter()
            .zip(&held)
            .map(|(k, held)| held.is_ok().then(|| k.pir_key()))
            .collect();
        // found[level][key]: the value each level holds, if any.
        let mut found: Vec<Vec<Found>> = vec![Vec::new(); view.levels.len()];
        let mut pir: Vec<(usize, &Arc<SnapshotClient>)> = Vec::new();
        for (i, level) in view.levels.iter().enumerate() {
            match level {
                Level::Whole(w) => found[i] = w.read(&keys),
                Level::Pir(snap) => pir.push((i, snap)),
            }
        }
        if !pir.is_empty() {
            for (l, values) in self
                .read_pir_parts(view, &pir, &keys, shared, pad_to)
                .await?
            {
                found[l] = values;
            }
        }
        Ok(asked
            .iter()
            .zip(held)
            .enumerate()
            .map(|(i, (key, held))| {
                held?;
                view.freshest(&found, i, key)
            })
            .collect())
    }

    /// What each PIR level holds for `keys`, one list per level.
    ///
    /// A `shared` key the hot tier holds is asked only of the PIR levels
    /// above it (every client holds the tier: reading it names nothing);
    /// the rest, the wallet's own keys whether the tier holds them or
    /// not, of every PIR level. With PIR levels above the tier, a
    /// read that asks anything sends both requests at once (one with a
    /// random filler when its part has nothing to ask), as a cover
    /// lookup does: the server sees the same shape whatever the keys.
    async fn read_pir_parts(
        &self,
        view: &ViewClient,
        pir: &[(usize, &Arc<SnapshotClient>)],
        keys: &[Option<B256>],
        shared: &[bool],
        pad_to: usize,
    ) -> Result<Vec<(usize, Vec<Found>)>, ReadError> {
        let (hot, cold): (Vec<usize>, Vec<usize>) = (0..keys.len())
            .partition(|&i| shared[i] && keys[i].is_some_and(|k| view.hot_holds(&k)));
        let above: Vec<(usize, &Arc<SnapshotClient>)> = pir
            .iter()
            .filter(|(l, _)| view.above_hot().is_some_and(|above| *l >= above))
            .copied()
            .collect();
        let (cold_part, hot_part) = (self.part(pir, keys, &cold), self.part(&above, keys, &hot));
        let round = cold_part.asks() || hot_part.asks();
        let both = round && !above.is_empty();
        if round {
            self.lookup_rounds
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let (cold_found, hot_found) = tokio::join!(
            self.read_part(cold_part, pad_to, both),
            self.read_part(hot_part, pad_to, both)
        );
        let mut found: BTreeMap<usize, Vec<Found>> = pir
            .iter()
            .map(|(l, _)| (*l, vec![None; keys.len()]))
            .collect();
        for (part, found_in) in [(&cold, cold_found?), (&hot, hot_found?)] {
            for (l, values) in found_in {
                let level = found.get_mut(&l).expect("a PIR level");
                for (&i, value) in part.iter().zip(values) {
                    level[i] = value;
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    /// The keys at `part` (indices into `keys`) to be read from `levels`,
    /// with what each level answered before (looked up once a read).
    fn part<'a>(
        &self,
        levels: &'a [(usize, &'a Arc<SnapshotClient>)],
        keys: &[Option<B256>],
        part: &[usize],
    ) -> Part<'a> {
        let keys: Vec<Option<B256>> = part.iter().map(|&i| keys[i]).collect();
        let present: Vec<B256> = keys.iter().flatten().copied().collect();
        let known: Vec<Vec<Option<Found>>> = levels
            .iter()
            .map(|(_, snap)| self.answers.known(snap.setup_digest(), &present))
            .collect();
        // Keys some PIR level has not answered yet, each once.
        let mut unknown: Vec<B256> = present
            .iter()
            .enumerate()
            .filter(|(j, _)| known.iter().any(|level| level[*j].is_none()))
            .map(|(_, k)| *k)
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        let unheld = keys.len() - present.len();
        let kept = match self.kept_as_fresh {
            true => {
                let distinct: std::collections::HashSet<&B256> = present.iter().collect();
                distinct.len() - unknown.len()
            }
            false => 0,
        };
        Part {
            levels,
            keys,
            known,
            unknown,
            unheld,
            kept,
        }
    }

    /// What each level of `part` holds for its keys (`None`: a key the
    /// view does not hold): the answers kept from before, and one request
    /// for the rest, whose verified answers are kept in turn. Nothing
    /// when it has no level, or no key and no `force`; with `force`, a
    /// request goes even when every key was answered before (one random
    /// filler then: see [`Self::read_pir_parts`]).
    async fn read_part(
        &self,
        part: Part<'_>,
        pad_to: usize,
        force: bool,
    ) -> Result<Vec<(usize, Vec<Found>)>, ReadError> {
        let Part {
            levels,
            keys,
            known,
            unknown,
            unheld,
            kept,
        } = part;
        if levels.is_empty() || (keys.is_empty() && !force) {
            return Ok(Vec::new());
        }
        // Kept answers to look fresh: a random key in place of each, so
        // the request is the one a first read would send.
        let unheld = unheld + kept;
        let nothing = unknown.is_empty() && unheld == 0;
        let fresh = match nothing && !force {
            true => vec![HashMap::new(); levels.len()],
            false => {
                let unheld = unheld + usize::from(nothing);
                self.request(levels, &unknown, unheld, pad_to).await?
            }
        };
        Ok(levels
            .iter()
            .zip(known)
            .zip(fresh)
            .map(|(((i, _), known), fresh)| {
                let mut known = known.into_iter();
                let values = keys
                    .iter()
                    .map(|k| {
                        let k = (*k)?;
                        let before = known.next().flatten();
                        before.unwrap_or_else(|| fresh.get(&k).cloned().flatten())
                    })
                    .collect();
                (*i, values)
            })
            .collect())
    }

    /// One request reading `unknown` from every PIR level, with `unheld`
    /// random keys, the canaries and (to `pad_to`) random fillers mixed
    /// in; the canaries checked, each level's answers to `unknown` kept
    /// and returned.
    async fn request(
        &self,
        pir: &[(usize, &Arc<SnapshotClient>)],
        unknown: &[B256],
        unheld: usize,
        pad_to: usize,
    ) -> Result<Vec<HashMap<B256, Found>>, ReadError> {
        // With padding, every query beyond the real ones is a canary where
        // answers are known, a random filler where not.
        let real = unknown.len() + unheld;
        let padded = match (pad_to > 0, self.ladder > 0) {
            (true, _) => Some(pad_to),
            (false, true) => Some(ladder_count(
                real + self.canaries_per_request,
                self.ladder,
                self.catalog.max_batch(),
            )),
            (false, false) => None,
        };
        let slots = match padded {
            Some(total) => total.saturating_sub(real),
            None => self.canaries_per_request,
        };
        let canaries = canary::choose(&self.answers, pir, unknown, slots)?;
        let fillers = slots - canaries.len();
        self.pir_keys
            .fetch_add(unknown.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let arranged = canary::arrange(unknown, unheld + fillers, &canaries, pir.len());
        let answered = self.query_levels(pir, &arranged.keys).await?;
        let found: Vec<Vec<Found>> = answered.into_iter().map(|(_, v)| v).collect();
        let roles = arranged.roles;
        // Only answers whose request's canaries held are kept.
        canary::check(&roles, &canaries, &found, pir)?;
        let mut fresh = vec![HashMap::new(); pir.len()];
        for (l, values) in found.into_iter().enumerate() {
            let mut by_key: HashMap<B256, Found> = HashMap::new();
            for (role, value) in roles.iter().zip(values) {
                if let canary::Role::Real(i) = role {
                    by_key.insert(unknown[*i], value);
                }
            }
            let kept: Vec<Found> = unknown.iter().map(|k| by_key[k].clone()).collect();
            self.answers.keep(pir[l].1.setup_digest(), unknown, &kept);
            fresh[l] = by_key;
        }
        Ok(fresh)
    }

    /// One request with as many queries to every PIR level (`level_keys`:
    /// each level's keys, in order); each level's decoded values.
    async fn query_levels(
        &self,
        levels: &[(usize, &Arc<SnapshotClient>)],
        level_keys: &[Vec<B256>],
    ) -> Result<Vec<(usize, Vec<Found>)>, ReadError> {
        let mut bodies = Vec::with_capacity(levels.len());
        let mut pendings = Vec::with_capacity(levels.len());
        let per_level = level_keys.first().map_or(0, Vec::len);
        self.largest_request
            .fetch_max(per_level, std::sync::atomic::Ordering::Relaxed);
        for ((_, snap), keys) in levels.iter().zip(level_keys) {
            let mut queries = Vec::with_capacity(keys.len());
            let mut level_pendings = Vec::with_capacity(keys.len());
            let prepared = snap.take_prepared(keys.len()).await?;
            for (key, prepared) in keys.iter().zip(prepared) {
                let (q, p) = snap
                    .client
                    .query(prepared, key.as_slice())
                    .map_err(|e| ReadError::Unverifiable(e.to_string()))?;
                queries.push(q);
                level_pendings.push(p);
            }
            bodies.push(encode_queries(&queries));
            pendings.push(level_pendings);
        }
        let ids: Vec<String> = levels.iter().map(|(_, s)| s.entry.id.url_form()).collect();
        let parts: Vec<(&str, &[u8])> = ids
            .iter()
            .zip(&bodies)
            .map(|(id, b)| (id.as_str(), b.as_slice()))
            .collect();
        // Views are at most a request deep (protocol::view::MAX_DEPTH):
        // an error here is a bug, answered as one, never a panic.
        let request = protocol::multi::encode_request(&parts)
            .map_err(|e| ReadError::Backend(format!("request not encodable: {e}")))?;
        let expected = protocol::multi::response_bytes(
            levels.iter().map(|(_, s)| s.response_bytes(per_level)),
        );
        let body = self.post_query(request, expected).await?;
        let answers = protocol::multi::decode_response(&body)
            .map_err(|e| ReadError::Unverifiable(format!("malformed response: {e}")))?;
        if answers.len() != levels.len() {
            return Err(ReadError::Unverifiable(format!(
                "{} answers for {} snapshots",
                answers.len(),
                levels.len()
            )));
        }
        let mut out = Vec::with_capacity(levels.len());
        for (((i, snap), answer), level_pendings) in levels.iter().zip(&answers).zip(pendings) {
            out.push((*i, decode_level(snap, answer, level_pendings)?));
            // Answered: refill the pool now, off the request path.
            snap.want_more();
        }
        Ok(out)
    }

    /// POSTs a multi-snapshot request whose answer must be exactly
    /// `expected` bytes; the response body.
    ///
    /// A request that meets a broken connection or a 5xx (a replica dying
    /// behind a load balancer, a shard missing behind a router) is sent
    /// once more with the same bytes: the server sees nothing it has not
    /// seen (docs/security.md, "Retries"). Nothing else is retried: not a
    /// wrong-sized answer, and never a verification failure.
    async fn post_query(&self, request: Vec<u8>, expected: u64) -> Result<Vec<u8>, ReadError> {
        let request = bytes::Bytes::from(request);
        let mut attempt = 0;
        let resp = loop {
            let sent = self
                .link
                .post_lookup("query", request.clone(), Size::Exactly(expected))
                .await;
            let retry = match &sent {
                Err(e) => matches!(e, FetchError::Transport { .. }),
                Ok(resp) => resp.status.is_server_error(),
            };
            if !retry || attempt == 1 {
                break sent;
            }
            attempt += 1;
            tracing::debug!("query failed on the way; sending the same bytes once more");
        }
        .map_err(|e| match e.is_oversized() {
            // An answer of another size than the setups fix is not an
            // answer to these queries.
            true => ReadError::Unverifiable(e.to_string()),
            false => e.into(),
        })?;
        if resp.status.is_success() {
            return Ok(resp.body);
        }
        let reason = serde_json::from_slice::<ApiError>(&resp.body)
            .map(|e| e.error)
            .unwrap_or_default();
        match resp.status {
            StatusCode::NOT_FOUND => Err(ReadError::Retired(reason)),
            status => Err(ReadError::Backend(format!("HTTP {status} {reason}"))),
        }
    }

    /// Downloads ahead, in the background, the codes the manifest of a
    /// base lists as its most common (at most `prefetch_codes`), so that
    /// an `eth_getCode` of one of them asks the server nothing.
    fn prefetch_codes(&self, entry: &CatalogEntry) {
        let (Some(table), n) = (entry.manifest.codes, self.prefetch_codes) else {
            return;
        };
        let places: Vec<u32> = entry
            .manifest
            .common_codes
            .iter()
            .take(n)
            .copied()
            .collect();
        if places.is_empty() {
            return;
        }
        let (codes, link, level) = (self.codes.clone(), self.link.clone(), entry.id.url_form());
        tokio::spawn(async move {
            let fetched = codes.prefetch(&link, &level, &table, &places).await;
            tracing::debug!(snapshot = %level, fetched, "common codes prefetched");
        });
    }

    /// Clients for every level of `view`, loading setups not loaded yet.
    async fn open_view(&self, view: View) -> Result<ViewClient, ReadError> {
        let adopted = self.catalog.adopted();
        let needed: u64 = view
            .snapshots
            .iter()
            .filter_map(|id| adopted.entries.get(id))
            .map(crate::levels::opening_bytes)
            .fold(0, u64::saturating_add);
        if needed > self.max_view_bytes {
            return Err(ReadError::Unreadable {
                snapshot: view.snapshots.last().map(|id| id.url_form()).unwrap_or_default(),
                why: format!(
                    "its view's {} levels need {} MiB of setup data and tables, over max_view_setup_mib ({} MiB)",
                    view.snapshots.len(),
                    needed >> 20,
                    self.max_view_bytes >> 20
                ),
            });
        }
        drop(adopted);
        let mut levels = Vec::with_capacity(view.snapshots.len());
        for id in &view.snapshots {
            levels.push(self.open(id).await?);
        }
        let hot = match self.hot_tier {
            crate::config::HotTierUse::Ahead => self.open_hot(&levels).await,
            crate::config::HotTierUse::Off => None,
        };
        Ok(ViewClient { view, levels, hot })
    }

    /// The hot tier standing on one of `levels` ([`protocol::view::hot_for`]),
    /// held whole. `None` when there is none, or it cannot be had now (the
    /// view is then read by PIR as without one); a table that fails its
    /// digest stops private reads, as any level's.
    async fn open_hot(&self, levels: &[Level]) -> Option<crate::levels::HotTier> {
        let manifests: Vec<&protocol::Manifest> =
            levels.iter().map(|l| &l.entry().manifest).collect();
        let (entry, on) = self.hot_standing(&manifests)?;
        if let Some(Level::Whole(level)) = self.loaded(&entry.id) {
            return Some(crate::levels::HotTier { level, on });
        }
        // Only whole, within the budgets a view's levels have: a tier is
        // never opened by PIR (its setup is not needed).
        let bytes = entry.manifest.files.get(crate::levels::TABLE_FILE)?.bytes;
        let view_bytes = levels
            .iter()
            .map(|l| crate::levels::opening_bytes(l.entry()))
            .fold(bytes, u64::saturating_add);
        let failed = *self.hot_failed.lock().expect("lock");
        let recently = failed.is_some_and(|(id, at)| id == entry.id && at.elapsed() < HOT_RETRY);
        if bytes > self.limits.max_setup_bytes || view_bytes > self.max_view_bytes || recently {
            return None;
        }
        // Being downloaded: read by PIR meanwhile rather than wait for it
        // (a server may stall it). A started reader downloads it in a task
        // of its own; one not shared yet, here.
        if self.opening_now(&entry.id) {
            return None;
        }
        if let Some(me) = self.me.get().cloned() {
            let id = entry.id;
            tokio::spawn(async move {
                if let Some(reader) = me.upgrade() {
                    reader.load_hot(id).await;
                }
            });
            return None;
        }
        match self.load_hot(entry.id).await {
            Some(Level::Whole(level)) => Some(crate::levels::HotTier { level, on }),
            _ => None,
        }
    }

    /// Downloads the hot tier `id`; a failure is remembered (not tried
    /// again for [`HOT_RETRY`]).
    async fn load_hot(&self, id: SnapshotId) -> Option<Level> {
        match self.open(&id).await {
            Ok(level) => Some(level),
            Err(e) => {
                tracing::info!(snapshot = %id.url_form(), error = %e, "hot tier not loaded: its keys are read by PIR");
                *self.hot_failed.lock().expect("lock") = Some((id, std::time::Instant::now()));
                None
            }
        }
    }

    /// The hot tier `view` reads, if the reader uses one and it has
    /// loaded it.
    pub fn hot_of(&self, view: &View) -> Option<CatalogEntry> {
        if self.hot_tier == crate::config::HotTierUse::Off {
            return None;
        }
        let entries: Vec<CatalogEntry> = view
            .snapshots
            .iter()
            .filter_map(|id| self.entry(id))
            .collect();
        let manifests: Vec<&protocol::Manifest> = entries.iter().map(|e| &e.manifest).collect();
        let (hot, _) = self.hot_standing(&manifests)?;
        self.loaded(&hot.id).map(|l| l.entry().clone())
    }

    /// The catalog's hot tier standing on one of a view's levels
    /// (`levels`, base first), and the index of that level.
    fn hot_standing(&self, levels: &[&protocol::Manifest]) -> Option<(CatalogEntry, usize)> {
        let adopted = self.catalog.adopted();
        let (entry, on) = protocol::view::hot_for(levels, adopted.entries.values())?;
        Some((entry.clone(), on))
    }

    /// Reads that sent PIR requests so far (a cover lookup is one).
    pub fn lookup_rounds(&self) -> u64 {
        self.lookup_rounds
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keys asked of the PIR levels so far (canaries and fillers not
    /// counted).
    pub fn pir_keys(&self) -> u64 {
        self.pir_keys.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn loaded(&self, id: &SnapshotId) -> Option<Level> {
        self.snapshots.read().expect("lock").get(id).cloned()
    }

    /// Whether `id` is being opened (its download under way) now.
    fn opening_now(&self, id: &SnapshotId) -> bool {
        let opening = self.opening.lock().expect("opening");
        opening.get(id).is_some_and(|lock| lock.try_lock().is_err())
    }

    /// The client of one listed snapshot, its setup (or table) loaded if
    /// need be.
    async fn open(&self, id: &SnapshotId) -> Result<Level, ReadError> {
        if let Some(level) = self.loaded(id) {
            return Ok(level);
        }
        let lock = {
            let mut opening = self.opening.lock().expect("opening");
            // Levels no one is opening now are forgotten.
            opening.retain(|_, lock| Arc::strong_count(lock) > 1);
            opening.entry(*id).or_default().clone()
        };
        let _one_at_a_time = lock.lock().await;
        if let Some(level) = self.loaded(id) {
            return Ok(level);
        }
        let entry = self
            .catalog
            .entry(id)
            .ok_or_else(|| ReadError::Retired(id.url_form()))?;
        let held = match self.cached_table(&entry).await {
            Some(table) => Some(table),
            None => self.built_here(&entry).await,
        };
        let level = match held {
            Some(table) => Level::Whole(table),
            None => match whole_table_bytes(&entry) {
                Some(bytes) if bytes <= self.limits.max_setup_bytes => {
                    Level::Whole(self.open_whole(entry, bytes).await?)
                }
                _ => {
                    self.prefetch_codes(&entry);
                    let snap = self.open_snapshot(entry).await?;
                    tokio::spawn(refill(Arc::downgrade(&snap)));
                    Level::Pir(snap)
                }
            },
        };
        self.hold_code_table(level.entry());
        tracing::info!(snapshot = %id.url_form(), read = ?level.mode(), "private snapshot ready");
        self.snapshots
            .write()
            .expect("lock")
            .insert(*id, level.clone());
        Ok(level)
    }

    /// A delta's whole code table, downloaded in the background when the
    /// level is opened (every client alike, read or not), so that reading
    /// a code of one of its accounts names no level (see [`crate::code`]).
    fn hold_code_table(&self, entry: &CatalogEntry) {
        let Some(summary) = crate::code::delta_code_table(entry) else {
            return;
        };
        if self.codes.holds_table(&entry.id.url_form(), summary.root) {
            return;
        }
        let (codes, link, id) = (self.codes.clone(), self.link.clone(), entry.id);
        let most = self.limits.max_setup_bytes;
        tokio::spawn(async move {
            if let Err(e) = codes.hold_table(&link, &id, &summary, most).await {
                tracing::debug!(snapshot = %id.url_form(), error = %e, "code table not held yet");
            }
        });
    }

    /// The code tables of every delta loaded that lacks one, fetched now
    /// (all of them, so the fetch names no level); the first error.
    async fn hold_missing_code_tables(&self) -> Result<(), ReadError> {
        let mut first = Ok(());
        for level in self.snapshots() {
            let entry = level.entry();
            let Some(summary) = crate::code::delta_code_table(entry) else {
                continue;
            };
            let most = self.limits.max_setup_bytes;
            let held = self
                .codes
                .hold_table(&self.link, &entry.id, &summary, most)
                .await;
            if first.is_ok() {
                first = held;
            }
        }
        first
    }

    /// A level's table already in the disk cache (downloaded, or built
    /// here, before a restart), whatever its size against its setup.
    async fn cached_table(&self, entry: &CatalogEntry) -> Option<Arc<WholeLevel>> {
        let file = entry.manifest.files.get(crate::levels::TABLE_FILE)?;
        if file.bytes > self.limits.max_setup_bytes {
            return None;
        }
        let bytes = self.cache.cached(Artifact::Table, &file.sha3_256).await?;
        let table = protocol::table::Table::parse(bytes, self.limits.max_setup_bytes).ok()?;
        Some(Arc::new(WholeLevel {
            entry: entry.clone(),
            table,
            mode: ReadMode::Whole,
        }))
    }

    /// A merged delta's table built here from the levels it merges, when
    /// that costs fewer downloaded bytes than its table or setup: a reader
    /// that follows the head holds the small deltas whole already, so each
    /// merge above them costs it nothing (and is read with no query). The
    /// table built is the one published only if its digest is the
    /// manifest's; anything else (another value width, a piece retired
    /// meanwhile) leaves the level to be downloaded as before.
    async fn built_here(&self, entry: &CatalogEntry) -> Option<Arc<WholeLevel>> {
        let file = entry.manifest.files.get(crate::levels::TABLE_FILE)?.clone();
        if file.bytes > self.limits.max_setup_bytes {
            return None;
        }
        let direct = whole_table_bytes(entry).unwrap_or(entry.manifest.pir.hint_bytes);
        let held: BTreeMap<SnapshotId, Arc<WholeLevel>> = self
            .snapshots
            .read()
            .expect("lock")
            .iter()
            .filter_map(|(id, level)| match level {
                Level::Whole(w) => Some((*id, w.clone())),
                Level::Pir(_) => None,
            })
            .collect();
        let adopted = self.catalog.adopted();
        let (chain, cost) =
            cheapest_cover(entry, adopted.entries.values(), |id| held.contains_key(id))?;
        if cost >= direct {
            return None;
        }
        let mut pieces = Vec::with_capacity(chain.len());
        for id in &chain {
            let piece = match held.get(id) {
                Some(w) => w.clone(),
                None => self.open_piece(id).await?,
            };
            pieces.push(piece);
        }
        let expected = file.clone();
        let built = tokio::task::spawn_blocking(move || {
            let tables: Vec<&protocol::table::Table> = pieces.iter().map(|w| &w.table).collect();
            let bytes = protocol::table::overlay(&tables)?;
            let matches = bytes.len() as u64 == expected.bytes
                && protocol::sha3_hex(&bytes) == expected.sha3_256;
            matches.then_some(bytes)
        })
        .await
        .ok()?;
        let Some(bytes) = built else {
            tracing::debug!(snapshot = %entry.id.url_form(), "the levels it merges do not make its table; downloading it");
            return None;
        };
        self.cache
            .keep(Artifact::Table, &file.sha3_256, &bytes)
            .await;
        let table = protocol::table::Table::parse(bytes, self.limits.max_setup_bytes).ok()?;
        Some(Arc::new(WholeLevel {
            entry: entry.clone(),
            table,
            mode: ReadMode::Merged,
        }))
    }

    /// A piece of a merge not held yet: its table downloaded (or read from
    /// the cache) and kept as a level of its own. `None` when it cannot
    /// be had (the merge is then downloaded instead).
    async fn open_piece(&self, id: &SnapshotId) -> Option<Arc<WholeLevel>> {
        let entry = self.catalog.entry(id)?;
        let bytes = entry.manifest.files.get(crate::levels::TABLE_FILE)?.bytes;
        if bytes > self.limits.max_setup_bytes {
            return None;
        }
        self.hold_code_table(&entry);
        match self.open_whole(entry, bytes).await {
            Ok(piece) => {
                self.snapshots
                    .write()
                    .expect("lock")
                    .entry(*id)
                    .or_insert_with(|| Level::Whole(piece.clone()));
                Some(piece)
            }
            Err(e) => {
                tracing::debug!(snapshot = %id.url_form(), error = %e, "a piece of a merge not loaded");
                None
            }
        }
    }

    /// Downloads (or reads from the cache) a level's table of exactly
    /// `bytes`, checked against the digest its manifest lists.
    async fn open_whole(
        &self,
        entry: CatalogEntry,
        bytes: u64,
    ) -> Result<Arc<WholeLevel>, ReadError> {
        let digest = entry.manifest.files[crate::levels::TABLE_FILE]
            .sha3_256
            .clone();
        let table_bytes = self
            .cache
            .verified(
                &self.link,
                &entry,
                Artifact::Table,
                &digest,
                Size::Exactly(bytes),
            )
            .await?;
        let max_entries = self.limits.max_setup_bytes;
        let table = protocol::table::Table::parse(table_bytes, max_entries).map_err(|e| {
            self.link
                .distrust(format!("snapshot {}: table: {e}", entry.id.url_form()))
        })?;
        Ok(Arc::new(WholeLevel {
            entry,
            table,
            mode: ReadMode::Whole,
        }))
    }

    async fn open_snapshot(&self, entry: CatalogEntry) -> Result<Arc<SnapshotClient>, ReadError> {
        let announced = entry.manifest.pir.hint_bytes;
        let limit = self.limits.max_setup_bytes;
        if announced > limit {
            return Err(self.link.distrust(format!(
                "snapshot {} announces {announced} bytes of setup data, over the limit of {limit}",
                entry.id.url_form()
            )));
        }
        let digest = entry.manifest.pir.setup_digest.clone();
        let bytes = self
            .cache
            .verified(
                &self.link,
                &entry,
                Artifact::Setup,
                &digest,
                // (The manifest's setup length: more is a lie, and the
                // download's deadline is its size's.)
                Size::AtMost(announced),
            )
            .await?;
        let limits = self.limits;
        let client = tokio::task::spawn_blocking(move || {
            PirClient::from_setup_bytes_limited(&bytes, &limits)
        })
        .await
        .map_err(|e| ReadError::Backend(format!("loading a setup failed: {e}")))?
        .map_err(|e| {
            self.link
                .distrust(format!("snapshot {}: {e}", entry.id.url_form()))
        })?;
        // The setup's public matrix seed is drawn from the manifest's
        // fields that decide decoding (protocol::manifest::BuildSeeds): a
        // manifest changed after the build names another one.
        let seeds = entry.manifest.build_seeds();
        if client.setup().matrix.seed() != &seeds.matrix.0 {
            return Err(self.link.distrust(format!(
                "snapshot {}: its setup was not built for this manifest (its format, contracts held, code table, table or records digest, chain, block, block hash or kind were changed)",
                entry.id.url_form()
            )));
        }
        let first_fill = self
            .largest_request
            .load(std::sync::atomic::Ordering::Relaxed);
        Ok(Arc::new(SnapshotClient::new(
            entry,
            client,
            self.pool_size,
            first_fill,
        )))
    }
}

/// Fetches the catalog every `every` until the reader is dropped; with
/// `first_of` (the server's redacted URL) the first fetch is at once and
/// its outcome said at info (a server not reachable yet is retried on the
/// same beat).
async fn keep_fresh(
    reader: Weak<PrivateReader>,
    every: std::time::Duration,
    first_of: Option<String>,
) {
    let mut tick = tokio::time::interval(every);
    // A fetch slower than the beat (a slow server) delays the next one
    // instead of a burst of them.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = first_of;
    if first.is_none() {
        tick.tick().await;
    }
    // Whether the last refresh after a wait fetched nothing new (then
    // the next round polls: a server whose waits end at once on a
    // catalog this reader does not adopt costs a poll's rate).
    let mut stalled = false;
    loop {
        // While reading, a server that holds catalog requests tells of a
        // new catalog the moment it has one (and every wait's end brings
        // a refresh too); polled otherwise (and idle).
        let waited = match stalled {
            false => wait_for_catalog(&reader).await,
            true => None,
        };
        if waited.is_none() {
            tick.tick().await;
        }
        let Some(reader) = reader.upgrade() else {
            return;
        };
        let seen = reader.catalog.seen_etag();
        // Idle: the catalog now and then, nothing loaded.
        let refreshed = match reader.is_idle() {
            true if !reader.idle_catalog_due() => continue,
            true => reader.refresh_catalog(false).await,
            false => reader.refresh().await,
        };
        match (refreshed, first.take()) {
            (Ok(n), Some(server)) => {
                tracing::info!(snapshots = n, %server, "connected to the PIR server")
            }
            (Err(e), Some(server)) => {
                tracing::warn!(error = %e, %server, "PIR server not reachable yet; retrying in the background")
            }
            (Ok(_), None) => {}
            (Err(e), None) => tracing::warn!(error = %e, "catalog refresh failed"),
        }
        stalled = waited == Some(true) && reader.catalog.seen_etag() == seen;
    }
}

/// How long a wait for a new catalog is held at most.
const CATALOG_HOLD: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits for the server to announce a new catalog
/// ([`Catalog::wait_for_change`]) while the reader is not idle: whether
/// one came; `None` to poll instead. Two waits are at least 50 ms apart
/// (a server that answers "changed" at once costs a bounded rate).
async fn wait_for_catalog(reader: &Weak<PrivateReader>) -> Option<bool> {
    let strong = reader.upgrade()?;
    if strong.is_idle() {
        return None;
    }
    let started = std::time::Instant::now();
    let changed = strong
        .catalog
        .wait_for_change(&strong.link, CATALOG_HOLD)
        .await;
    drop(strong);
    let spacing = std::time::Duration::from_millis(50);
    if let Some(rest) = spacing.checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    changed
}

/// Binds the reader to its header source's chain once the source says
/// which (asked again a little later each time it does not answer), and
/// adopts the catalog again with other chains set aside.
async fn bind_to_source_chain(reader: Weak<PrivateReader>) {
    for attempt in 0.. {
        let Some(strong) = reader.upgrade() else {
            return;
        };
        let Some(check) = strong.canonical.get().cloned() else {
            return;
        };
        match check.chain().await {
            Ok(chain) => {
                if strong.catalog.bind_chain(chain) {
                    tracing::info!(chain, "reading the upstream's chain");
                    if let Err(e) = strong.refresh_with(true).await {
                        tracing::debug!(error = %e, "catalog not fetched again yet");
                    }
                }
                return;
            }
            Err(e) => tracing::debug!(error = %e, "the upstream's chain id not known yet"),
        }
        drop(strong);
        let (base, cap) = (
            std::time::Duration::from_millis(200),
            std::time::Duration::from_secs(30),
        );
        tokio::time::sleep(protocol::retry::backoff(base, cap, attempt)).await;
    }
}

/// The query count a request of `wanted` queries is padded to: the least
/// of `from, 2 from, 4 from, ...` that holds them, but never past the
/// server's batch (`max_batch`) unless `wanted` is.
fn ladder_count(wanted: usize, from: usize, max_batch: usize) -> usize {
    let mut count = from.max(1);
    while count < wanted {
        count = count.saturating_mul(2);
    }
    count.min(max_batch.max(wanted))
}

/// Cover lookups at the times of a Poisson process of `per_hour`, until the
/// reader is dropped.
async fn cover_traffic(reader: Weak<PrivateReader>, per_hour: f64) {
    let mean_s = 3600.0 / per_hour;
    loop {
        // Exponential gaps: the times carry no pattern of their own.
        let u: f64 = rand::random::<f64>().max(f64::MIN_POSITIVE);
        let gap = (-u.ln() * mean_s).min(86_400.0);
        tokio::time::sleep(std::time::Duration::from_secs_f64(gap)).await;
        let Some(reader) = reader.upgrade() else {
            return;
        };
        reader.cover_lookup().await;
    }
}

#[cfg(test)]
mod tests {
    use super::ladder_count;

    #[test]
    fn query_counts_climb_a_ladder() {
        let counts: Vec<usize> = (1..=9).map(|n| ladder_count(n, 2, 64)).collect();
        assert_eq!(counts, [2, 2, 4, 4, 8, 8, 8, 8, 16]);
        assert_eq!(ladder_count(40, 2, 48), 48, "never past the server's batch");
        assert_eq!(ladder_count(50, 2, 48), 50, "unless the request is");
        assert_eq!(ladder_count(3, 4, 64), 4);
        assert_eq!(ladder_count(0, 0, 64), 1);
    }
}

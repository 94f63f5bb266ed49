//! `ethpir-snapshot run`: follow the chain head, unattended.
//!
//! First a base: the full state from a genesis file (then every block since
//! from the node) or from a reth datadir (at its head). An RPC node cannot
//! list its accounts, so without either the follower refuses, unless the
//! store already holds a base for the chain. Then, every `poll_ms`, a delta
//! for the blocks since the newest view (one block in steady state, all of
//! them after a pause), built and published atomically, after which the
//! levels are merged and retired as [`crate::levels`] says.
//!
//! Changes per block come from the node's tracers
//! ([`crate::sources::changes`]): the prestate tracer in diff mode (geth,
//! reth, erigon, nethermind, anvil), else parity traces. A node with
//! neither is refused at start, naming what it lacks, unless
//! `allow_incomplete` is set and no storage is held (internal transfers,
//! selfdestructs and contracts created by contracts are then missed).
//! Reorgs: before each delta the newest view's blocks are compared with the
//! node's hashes; levels no longer on the chain are removed and rebuilt.
//! Node outages and failed builds are logged and retried with backoff;
//! only a refusal (a configuration that cannot work) stops the follower.

use std::path::{Path, PathBuf};
use std::time::Duration;

use alloy_primitives::{Address, B256};
use protocol::storage::PrivateStorage;
use protocol::view::names_parent;
use serde::Deserialize;

use crate::levels::{LevelPolicy, Levels, LevelsError, UpdateReport};
use crate::manifest::KindTag;
use crate::pipeline::{BuildOptions, ExportedState};
use crate::settings::BuildSettings;
use crate::sources::changes::{ChangeTracer, Missing};
use crate::sources::rpc::{RpcOptions, RpcSource};
use crate::sources::Base;
use crate::store::{SnapshotStore, StoredSnapshot};

/// `configs/snapshotter.toml`; every field has a default, and the command
/// line's `--store`, `--url`, `--genesis`, `--datadir`, `--geth-dump`
/// override it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FollowConfig {
    pub store: Option<PathBuf>,
    pub source: SourceConfig,
    pub follow: Timing,
    pub levels: LevelPolicy,
    pub build: BuildSettings,
    /// The hot tier: off unless `max_mib` is set.
    pub hot: crate::hot::HotPolicy,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourceConfig {
    /// The node followed.
    pub url: Option<String>,
    /// Base: a genesis file (the node's chain from block 0).
    pub genesis: Option<PathBuf>,
    /// Base: a reth datadir (the full state at its head).
    pub datadir: Option<PathBuf>,
    /// Base: geth's offline export of its state (`geth snapshot dump`,
    /// geth stopped), streamed and checked against the state root of the
    /// node's block whose root it is (one of the newest
    /// [`GETH_DUMP_SEARCH_BLOCKS`]).
    pub geth_dump: Option<PathBuf>,
    /// Base: the node's own dump of its whole state at its head
    /// (anvil_dumpState, geth's debug_accountRange), checked against that
    /// block's state root: a chain without a genesis file or datadir.
    pub dump: bool,
    /// Follow a node without call traces (changes they would reveal are
    /// missed: see the log line at start).
    pub allow_incomplete: bool,
    /// Which of the node's tracers tells what each block changed:
    /// `"auto"` (the prestate tracer, else parity traces), `"prestate"`
    /// (`debug_traceBlockByNumber`), `"parity"` (`trace_*`) or `"blocks"`
    /// (blocks and receipts alone: accounts only, changes missed).
    pub changes: ChangeTracer,
    /// Accounts per JSON-RPC batch and batches in flight.
    pub batch_size: usize,
    pub concurrency: usize,
    /// A token list (`[[token]]`, see configs/tokens-mainnet.toml): every
    /// storage slot of the followed chain's tokens goes into the
    /// snapshots, so that the proxy answers their `balanceOf` privately.
    pub tokens: Option<PathBuf>,
    /// Other contracts whose every storage slot goes into the snapshots
    /// (answered to `eth_getStorageAt`).
    pub contracts: Vec<Address>,
    /// Which storage the snapshots hold: `"listed"` (the contracts above)
    /// or `"all"` (every slot of every contract: the whole state, which
    /// the manifest claims and a proxy then reads any contract from).
    pub storage: StorageScope,
}

/// Which contracts' storage a snapshot holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StorageScope {
    /// Only the listed contracts' (`tokens`, `contracts`).
    #[default]
    Listed,
    /// Every slot of every contract: the whole state.
    All,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            url: None,
            genesis: None,
            datadir: None,
            geth_dump: None,
            dump: false,
            allow_incomplete: false,
            changes: ChangeTracer::Auto,
            batch_size: 100,
            concurrency: 4,
            tokens: None,
            contracts: Vec::new(),
            storage: StorageScope::Listed,
        }
    }
}

/// When a delta of a whole state is checked against the block's state
/// root before it is published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RootCheck {
    /// While the view holds at most `state_root_check_max_records`
    /// records, on a node that keeps Ethereum's tries: not anvil, whose
    /// tries keep slots written to zero and empty accounts a call touched
    /// (EIP-161 deletes both), so that its roots are not the records'.
    #[default]
    Auto,
    /// Every delta, whatever the size or the node.
    Always,
    Never,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timing {
    /// How often to look at the node's head, milliseconds (with `ws_url`:
    /// the fallback while the subscription is down).
    pub poll_ms: u64,
    /// The node's WebSocket endpoint (`ws://`, `wss://`): the follower
    /// subscribes to new heads there (`eth_subscribe("newHeads")`) and
    /// steps the moment one is announced. None: it polls.
    pub ws_url: Option<String>,
    /// Stay this many blocks behind the head (0: follow the head; reorgs
    /// are repaired either way).
    pub confirmations: u64,
    /// Whether each delta of a whole state is checked against the
    /// block's state root before it is published ([`RootCheck`]).
    pub state_root_check: RootCheck,
    /// `auto` checks while the view holds at most this many records (the
    /// check recomputes the whole root).
    pub state_root_check_max_records: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            poll_ms: 1000,
            ws_url: None,
            confirmations: 0,
            state_root_check: RootCheck::Auto,
            state_root_check_max_records: 1 << 20,
        }
    }
}

impl FollowConfig {
    pub fn from_file(path: &Path) -> Result<Self, protocol::config::ConfigError> {
        protocol::config::load_toml(path)
    }
}

impl SourceConfig {
    /// The contracts whose storage a new base of `chain_id` holds: the
    /// list's tokens of that chain, `contracts` and the list's contracts
    /// of that chain.
    pub fn private_storage(
        &self,
        chain_id: u64,
    ) -> Result<PrivateStorage, protocol::tokens::TokenListError> {
        let list = match &self.tokens {
            Some(path) => protocol::tokens::TokenList::from_file(path)?,
            None => Default::default(),
        };
        // The contracts named here, then those the list names whole.
        let mut contracts = self.contracts.clone();
        for c in list.contracts_of(chain_id) {
            if !contracts.contains(&c) {
                contracts.push(c);
            }
        }
        let tokens = list
            .tokens
            .into_iter()
            .filter(|t| t.chain_id == chain_id)
            .collect();
        Ok(PrivateStorage {
            tokens,
            contracts,
            whole_state: self.storage == StorageScope::All,
        })
    }
}

/// Why the follower could not go on: a refusal stops it, any other
/// failure (the node, the disk, a build) is retried after a backoff. The
/// kind is decided where the error is made, not guessed afterwards.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// A base not published: a geth dump that does not add up stops the
/// follower (its bytes would not change); anything else is retried.
impl From<crate::sources::PublishError> for FollowError {
    fn from(e: crate::sources::PublishError) -> Self {
        use crate::sources::PublishError;
        match e {
            PublishError::GethDump(e) if !e.may_pass_again() => Refusal::GethDump(e).into(),
            PublishError::GethDump(e) => FollowError::Failed(Box::new(e)),
            PublishError::Build(e) => e.into(),
        }
    }
}

/// Every other error the follower meets is a failure to retry.
macro_rules! failures {
    ($($error:ty),* $(,)?) => {$(
        impl From<$error> for FollowError {
            fn from(e: $error) -> Self {
                FollowError::Failed(Box::new(e))
            }
        }
    )*};
}

failures!(
    RootMismatch,
    crate::sources::rpc::RpcSourceError,
    LevelsError,
    crate::store::StoreError,
    crate::pipeline::BuildError,
    crate::settings::SettingsError,
    crate::sources::genesis::GenesisError,
    protocol::tokens::TokenListError,
);
#[cfg(feature = "reth")]
failures!(crate::sources::reth::RethError);

/// A configuration or chain the follower cannot work with: it stops
/// rather than retry.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("no store: give --store DIR (or store = \"...\" in the config)")]
    NoStore,
    #[error("no node: give --url RPC_URL (or [source] url in the config)")]
    NoUrl,
    #[error("more than one of --genesis, --datadir, --geth-dump and --dump given; the base comes from one of them")]
    TwoBases,
    #[error("no base for chain {chain_id} in the store, and neither --genesis FILE nor --datadir RETH_DATADIR: a JSON-RPC node cannot list its accounts, so the full state must come from a genesis file (plus every block since) or a reth datadir (a development node's own dump with --dump)")]
    NoBase { chain_id: u64 },
    #[error("no base for chain {chain_id} in the store, and --dump, but the node offers no state dump (anvil_dumpState, debug_accountRange): give --genesis FILE or --datadir RETH_DATADIR")]
    NoDump { chain_id: u64 },
    #[error("the node at {url} answers {missing}. Enable the debug namespace (geth: --http.api eth,debug; reth, erigon, nethermind, anvil have it) or the trace namespace, or choose with [source] changes")]
    NoChangeTracer { url: String, missing: Missing },
    #[error("{0}")]
    Mismatch(String),
    /// A geth dump that cannot be opened, or that does not add up (a
    /// file, not a node: retrying would read the same bytes).
    #[error(transparent)]
    GethDump(#[from] crate::sources::geth_dump::GethDumpError),
    #[error(
        "this ethpir-snapshot was built without the reth feature (cargo build --features reth)"
    )]
    NoReth,
}

/// The blocks a step behind the head publishes a delta at: every block
/// within `keep_blocks` of the head (each is a view a wallet may read at
/// that number: a delta over several blocks leaves the ones inside it
/// unreadable), the older ones together in the first.
fn delta_stops(top: u64, head: u64, keep_blocks: u64) -> std::ops::RangeInclusive<u64> {
    let first = (top + 1).max(head.saturating_sub(keep_blocks));
    first..=head
}

/// A base, by block and hash.
type HotMark = (u64, Option<B256>);

/// How long after a failed hot tier the follower tries again.
const HOT_RETRY: Duration = Duration::from_secs(600);

/// How often an unchanged follower mark is written again.
const MARK_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// What a step did.
#[derive(Debug)]
pub enum StepOutcome {
    /// The newest view is at the node's head (less confirmations).
    UpToDate { block: u64 },
    /// A delta (and maybe merges) was published.
    Published { block: u64, report: UpdateReport },
}

/// The follower's state between steps.
pub struct Follower {
    config: FollowConfig,
    url: String,
    store: SnapshotStore,
    build: BuildOptions,
    node: Option<RpcSource>,
    levels: Option<std::sync::Arc<Levels>>,
    /// The contracts a new base holds: the config's tokens and contracts
    /// of the node's chain, read once per connection.
    configured: PrivateStorage,
    /// The last mark written for the server's page, and when.
    marked: Option<(snapshot_store::FollowerMark, std::time::Instant)>,
    /// The base a hot tier stands on (or was found unneeded for), and
    /// the last base whose tier failed and when.
    hot_done: Option<HotMark>,
    hot_failed: Option<(HotMark, std::time::Instant)>,
    /// The most records a view may hold for its deltas to be checked
    /// against the state root (set with the node).
    root_check_max: u64,
}

impl Follower {
    /// Checks the configuration (nothing is contacted yet).
    pub fn new(config: FollowConfig) -> Result<Self, FollowError> {
        let store = config.store.clone().ok_or(Refusal::NoStore)?;
        let url = config.source.url.clone().ok_or(Refusal::NoUrl)?;
        let source = &config.source;
        let bases = [
            source.genesis.is_some(),
            source.datadir.is_some(),
            source.geth_dump.is_some(),
            source.dump,
        ];
        if bases.iter().filter(|&&b| b).count() > 1 {
            return Err(Refusal::TwoBases.into());
        }
        let build = config.build.options(None)?;
        Ok(Follower {
            store: SnapshotStore::open(&store)?,
            url,
            build,
            node: None,
            levels: None,
            configured: PrivateStorage::default(),
            marked: None,
            hot_done: None,
            hot_failed: None,
            root_check_max: 0,
            config,
        })
    }

    pub fn store(&self) -> &SnapshotStore {
        &self.store
    }

    /// The node, connected (and its traces checked) on first use.
    async fn node(&mut self) -> Result<&RpcSource, FollowError> {
        if self.node.is_none() {
            let s = &self.config.source;
            let options = RpcOptions {
                batch_size: s.batch_size,
                concurrency: s.concurrency,
                ..Default::default()
            };
            let node = RpcSource::connect(&self.url, options)
                .await?
                .with_code_store(self.store.clone());
            let configured = s.private_storage(node.chain_id)?;
            let levels = std::sync::Arc::new(Levels::new(
                self.store.clone(),
                node.chain_id,
                self.config.levels.clone(),
                self.build.clone(),
            ));
            // Deltas follow the base's contracts, whatever the config says
            // now (a delta must hold every change of what its view answers
            // for); the config's list is for a new base.
            let based = levels.newest_view()?.map(|v| v[0].clone());
            if let Some(base) = based.as_ref().filter(|b| b.manifest.storage != configured) {
                tracing::warn!(base = %base.id, "the configured tokens and contracts differ from the base's; they take effect with the next base");
            }
            let oldest_read = protocol::manifest::OLDEST_READ_FORMAT;
            if let Some(base) = based.as_ref().filter(|b| b.manifest.format < oldest_read) {
                tracing::warn!(base = %base.id, format = base.manifest.format, "the base is of a manifest format proxies no longer read ({oldest_read} on): its views are set aside until a new base; start the follower on a new store");
            }
            let followed = based.as_ref().map_or(&configured, |b| &b.manifest.storage);
            let node = self.with_tracer(node, !followed.is_empty()).await?;
            self.root_check_max = self.root_check_max_of(&node).await?;
            self.configured = configured;
            self.levels = Some(levels);
            self.node = Some(node);
        }
        Ok(self.node.as_ref().expect("just connected"))
    }

    /// `node`, set to the tracer [`RpcSource::probe_changes`] chose (and
    /// logged), or the refusal that names what it lacks.
    async fn with_tracer(
        &self,
        node: RpcSource,
        needs_slots: bool,
    ) -> Result<RpcSource, FollowError> {
        let s = &self.config.source;
        let chosen = node
            .probe_changes(s.changes, needs_slots, s.allow_incomplete)
            .await?
            .map_err(|missing| Refusal::NoChangeTracer {
                url: protocol::url::redact(&self.url),
                missing,
            })?;
        match chosen {
            ChangeTracer::Blocks => tracing::warn!("following without traces (--allow-incomplete): internal transfers, selfdestruct beneficiaries and contracts created by contracts are missed, so those accounts can read stale values"),
            tracer => tracing::info!(?tracer, "changes per block read with the node's tracer"),
        }
        Ok(node.with_changes(chosen))
    }

    /// The most records a view may hold for its deltas to be checked
    /// against the block's state root ([`RootCheck`]).
    async fn root_check_max_of(&self, node: &RpcSource) -> Result<u64, FollowError> {
        let follow = &self.config.follow;
        Ok(match follow.state_root_check {
            RootCheck::Never => 0,
            RootCheck::Always => u64::MAX,
            RootCheck::Auto if node.client_version().await?.starts_with("anvil") => 0,
            RootCheck::Auto => follow.state_root_check_max_records,
        })
    }

    fn levels(&self) -> std::sync::Arc<Levels> {
        self.levels
            .clone()
            .expect("levels exist once the node is connected")
    }

    /// One step: a base if there is none, repairs after a reorg or damage,
    /// then a delta up to the head. A failed step drops the connection so
    /// the next one starts afresh.
    pub async fn step(&mut self) -> Result<StepOutcome, FollowError> {
        let outcome = self.try_step().await;
        if outcome.is_err() {
            self.node = None;
        }
        outcome
    }

    async fn try_step(&mut self) -> Result<StepOutcome, FollowError> {
        self.node().await?;
        let levels = self.levels();
        let checked = match blocking(move || levels.check_newest()).await {
            Ok(view) => view,
            Err(LevelsError::Damaged { id, reason }) => {
                tracing::error!(snapshot = %id, %reason, "damaged level removed; its blocks are rebuilt from the node");
                self.levels().newest_view()?
            }
            Err(e) => return Err(e.into()),
        };
        let view = match checked {
            Some(view) => view,
            None => {
                self.build_base().await?;
                self.levels()
                    .newest_view()?
                    .expect("the base was just published")
            }
        };
        let view = match self.undo_reorg(&view).await? {
            true => self.levels().newest_view()?.expect("the base is kept"),
            false => view,
        };
        let node = self.node.as_ref().expect("connected");
        let node_head = node.head().await?;
        let head = node_head.saturating_sub(self.config.follow.confirmations);
        let top = view.last().expect("a view has a level").id.block;
        if head <= top {
            self.mark(node_head, top);
            // Nothing published: the view checked above is the newest.
            self.keep_hot(Some(view)).await;
            return Ok(StepOutcome::UpToDate { block: top });
        }
        let mut report = UpdateReport::default();
        let mut from = top;
        for block in delta_stops(top, head, self.config.levels.keep_blocks) {
            report = self.publish_delta(from, block).await?;
            from = block;
        }
        self.mark(node_head, head);
        self.keep_hot(None).await;
        Ok(StepOutcome::Published {
            block: head,
            report,
        })
    }

    /// Keeps a hot tier ([`crate::hot`]) on the base of the newest view:
    /// built once for each base, from the activity of the window up to
    /// its block (a proxy asks a key the tier holds only of the PIR
    /// levels above it: merged deltas, small beside the base). A tier
    /// that cannot be built (a node without `debug_traceBlockByNumber`)
    /// is logged and tried again after [`HOT_RETRY`]: the proxies read by
    /// PIR meanwhile, as without one.
    /// `newest`: the newest view, when the caller has it (else it is
    /// read from the store).
    async fn keep_hot(&mut self, newest: Option<Vec<StoredSnapshot>>) {
        let policy = self.config.hot.clone();
        if !policy.enabled() {
            return;
        }
        let levels = self.levels();
        let Some(view) = newest.or_else(|| levels.newest_view().ok().flatten()) else {
            return;
        };
        let stand = &view[0];
        let mark = (stand.id.block, stand.manifest.block_hash);
        let waiting =
            |(m, at): (HotMark, std::time::Instant)| m == mark && at.elapsed() < HOT_RETRY;
        if self.hot_done == Some(mark) || self.hot_failed.is_some_and(waiting) {
            return;
        }
        // Built already (before a restart): nothing to trace.
        if levels.hot_on(stand, &policy).is_some() {
            self.hot_done = Some(mark);
            return;
        }
        let t = std::time::Instant::now();
        let upto = view[..1].to_vec();
        match self.build_hot(upto, policy).await {
            Ok(built) => {
                self.hot_done = Some(mark);
                match built {
                    Some(id) => {
                        tracing::info!(snapshot = %id, secs = t.elapsed().as_secs_f64(), "hot tier published")
                    }
                    None => tracing::info!(
                        block = stand.id.block,
                        "no hot tier to build (no key chosen is held)"
                    ),
                }
            }
            Err(e) => {
                self.hot_failed = Some((mark, std::time::Instant::now()));
                tracing::warn!(block = stand.id.block, error = %e, retry_in_s = HOT_RETRY.as_secs(), "hot tier not built: proxies read these keys by PIR meanwhile")
            }
        }
    }

    /// The hot tier on `view`'s top level, from the window's activity.
    async fn build_hot(
        &self,
        view: Vec<StoredSnapshot>,
        policy: crate::hot::HotPolicy,
    ) -> Result<Option<String>, FollowError> {
        let stand = view.last().expect("a view has a level");
        let node = self.node.as_ref().expect("connected");
        let value_bytes = view[0].manifest.pir.value_bytes;
        let concurrency = self.config.source.concurrency;
        let keys = crate::hot::chosen_keys(node, stand.id.block, &policy, value_bytes, concurrency)
            .await?;
        let levels = self.levels();
        Ok(blocking(move || levels.publish_hot(&view, &keys, &policy)).await?)
    }

    /// The delta of the blocks after `from` up to `to`, on the newest view.
    async fn publish_delta(&self, from: u64, to: u64) -> Result<UpdateReport, FollowError> {
        let levels = self.levels();
        let Some(view) = levels.newest_view()? else {
            return Err(Refusal::Mismatch("no view left below the delta".into()).into());
        };
        let node = self.node.as_ref().expect("connected");
        // The base's contracts (see `node`).
        let delta = node
            .export_delta(from, to, &view[0].manifest.storage)
            .await?;
        // A reorg after this step's check of the levels: the blocks read
        // stand on another block `from` than the level below. Not
        // published; the next step finds the orphaned level and repairs.
        let below = &view.last().expect("a view has a level").manifest;
        if names_parent(delta.state.parent_hash, below.block_hash) == Some(false) {
            tracing::warn!(block = from, "the level below is no longer on the node's chain (a reorg during the step): the delta is not published");
            return Err(crate::sources::rpc::RpcSourceError::Reorged { block: from }.into());
        }
        let records = delta.state.records.len() + delta.state.storage.len();
        let check_max = self.root_check_max;
        let report = blocking(move || -> Result<UpdateReport, FollowError> {
            let mut state = delta.state;
            levels.hide_destroyed(&view, &mut state, &delta.destroyed)?;
            check_delta_root(levels.store(), &view, &state, check_max)?;
            Ok(levels.publish(state)?)
        })
        .await?;
        tracing::info!(from, block = to, records, published = ?report.published, retired = report.removed.len(), "delta published");
        Ok(report)
    }

    /// Writes what it saw of the node for the server's page: when it
    /// changed, else every [`MARK_EVERY`] (so that the page can tell a
    /// quiet chain from a stopped follower).
    fn mark(&mut self, node_head: u64, newest_view: u64) {
        let Some(node) = self.node.as_ref() else {
            return;
        };
        let mark = snapshot_store::FollowerMark {
            chain_id: node.chain_id,
            node_head,
            newest_view,
            confirmations: self.config.follow.confirmations,
            at: protocol::unix_secs(),
        };
        let fresh = self.marked.as_ref().is_some_and(|(last, when)| {
            (last.node_head, last.newest_view) == (node_head, newest_view)
                && when.elapsed() < MARK_EVERY
        });
        if fresh {
            return;
        }
        if let Err(e) = self.store.write_follower_mark(&mark) {
            tracing::debug!(error = %e, "the follower's mark for the server's page not written");
        }
        self.marked = Some((mark, std::time::Instant::now()));
    }

    /// Builds and publishes the base from the genesis file or the datadir.
    async fn build_base(&mut self) -> Result<(), FollowError> {
        let node = self.node.as_ref().expect("connected");
        let chain_id = node.chain_id;
        let listed = &self.configured;
        let source = &self.config.source;
        let base = match (&source.genesis, &source.datadir) {
            (Some(file), _) => Base::Held(genesis_base(node, file, listed).await?),
            (None, Some(dir)) => datadir_base(node, dir, listed).await?,
            (None, None) if source.geth_dump.is_some() => {
                let file = source.geth_dump.as_deref().expect("just matched");
                geth_dump_base(node, file, listed).await?
            }
            (None, None) if self.config.source.dump => match node.export_dump(listed).await? {
                Some(state) => Base::Held(state),
                None => return Err(Refusal::NoDump { chain_id }.into()),
            },
            (None, None) => return Err(Refusal::NoBase { chain_id }.into()),
        };
        let meta = base.meta();
        tracing::info!(block = meta.block_number, accounts = meta.records.len(), slots = meta.storage.len(), streamed = !matches!(base, Base::Held(_)), contracts = listed.all_contracts().len(), source = %meta.source, "building the base");
        log_storage_sizes(&meta.storage);
        let store = self.store.clone();
        let opts = self.build.clone();
        blocking(move || base.publish(&store, &opts)).await?;
        Ok(())
    }

    /// After a reorg: finds the newest level of the newest view that is on
    /// the node's chain with every level below it (same hash at its
    /// block), and removes every delta and full snapshot above that
    /// block, whatever view they belong to, so that no view mixes the
    /// orphaned blocks in. The next delta rebuilds them from the node.
    /// Every level is checked, not only the newest: a delta of a new fork
    /// may stand on an orphaned one (a reorg during an earlier step).
    /// Within a run of levels each of which names the level below as its
    /// parent ([`protocol::Manifest::parent_hash`]), one on the chain
    /// vouches for those below it, so a chained view costs one request.
    /// Returns whether anything was removed.
    async fn undo_reorg(&self, view: &[StoredSnapshot]) -> Result<bool, FollowError> {
        let node = self.node.as_ref().expect("connected");
        let mut kept = 0;
        while kept < view.len() {
            let run_end = chained_run_end(view, kept);
            let mut on_chain_to = None;
            for i in (kept..=run_end).rev() {
                let level = &view[i];
                let on_chain = match level.manifest.block_hash {
                    Some(hash) => node.block_header(level.id.block).await?.0 == hash,
                    None => true,
                };
                if on_chain {
                    on_chain_to = Some(i);
                    break;
                }
            }
            match on_chain_to {
                Some(i) if i == run_end => kept = run_end + 1,
                Some(i) => {
                    kept = i + 1;
                    break;
                }
                None => break,
            }
        }
        let fork = kept.checked_sub(1).map(|i| view[i].id.block);
        let top = view.last().expect("a view has a level").id.block;
        let Some(fork) = fork else {
            return Err(Refusal::Mismatch(format!(
                "the base {} is not on the node's chain (block {} has another hash): remove it and start again",
                view[0].id, view[0].id.block
            ))
            .into());
        };
        if fork == top {
            return Ok(false);
        }
        tracing::warn!(
            fork,
            orphaned_to = top,
            "reorg: blocks after {fork} are no longer on the node's chain; removing their levels and rebuilding"
        );
        // Newest first: a crash part-way leaves no orphan above a kept
        // level.
        let mut orphans = self.store.list()?;
        orphans.reverse();
        for snap in orphans {
            let managed = matches!(snap.id.kind, KindTag::Delta | KindTag::Full);
            if snap.id.chain_id == node.chain_id && managed && snap.id.block > fork {
                self.store.remove(&snap.id)?;
                tracing::info!(snapshot = %snap.id, "removed (orphaned by the reorg)");
            }
        }
        Ok(true)
    }
}

/// The last level of the run of levels from `first` on in which each
/// names the one below it as its parent (its `parent_hash` is that
/// level's block hash).
fn chained_run_end(view: &[StoredSnapshot], first: usize) -> usize {
    let mut end = first;
    while end + 1 < view.len() {
        let (below, above) = (&view[end].manifest, &view[end + 1].manifest);
        match names_parent(above.parent_hash, below.block_hash) {
            Some(true) => end += 1,
            _ => break,
        }
    }
    end
}

/// A delta of a whole state (a view of at most `max_records` records)
/// checked before it is published: the state root of the view with it on
/// top must be the one the node's header gives at its block, so that a
/// change the node's tracer did not report is refused, not served.
fn check_delta_root(
    store: &SnapshotStore,
    view: &[StoredSnapshot],
    delta: &ExportedState,
    max_records: u64,
) -> Result<(), FollowError> {
    let base = &view[0].manifest;
    let size: u64 = view.iter().map(|l| l.manifest.record_count).sum();
    let header = match delta.state_root {
        Some(root) if base.storage.whole_state && size <= max_records => root,
        _ => return Ok(()),
    };
    let pending = crate::folded::Pending {
        accounts: &delta.records,
        storage: &delta.storage,
    };
    let checked =
        crate::verify::view_state_root_with(store, &view[0], &view[1..], &pending).map(|c| c.root);
    let reason = match checked {
        Ok(root) if root == header => return Ok(()),
        Ok(root) => format!("its view gives state root {root}, the node's header {header}"),
        // (A contract's slots that do not give its storage root: the
        // error names the level below, which is not at fault.)
        Err(e) => e.to_string(),
    };
    Err(RootMismatch {
        block: delta.block_number,
        reason,
    }
    .into())
}

/// A delta whose view does not give the block's state.
#[derive(Debug, thiserror::Error)]
#[error("the delta for block {block} does not add up to the node's state ({reason}): the node's tracer left a change out; not published (it is read again)")]
pub struct RootMismatch {
    block: u64,
    reason: String,
}

/// Runs a blocking closure (a build) off the async threads.
async fn blocking<T: Send + 'static, E: Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, E> {
    tokio::task::spawn_blocking(f)
        .await
        .expect("build task panicked")
}

/// The genesis file's state at block 0, checked against the node: the
/// chain id, and a sample of accounts read at block 0.
async fn genesis_base(
    node: &RpcSource,
    file: &Path,
    listed: &PrivateStorage,
) -> Result<ExportedState, FollowError> {
    let mut state =
        crate::sources::genesis::read_genesis_listed(file, Some(node.chain_id), listed)?;
    let sample: Vec<Address> = state
        .records
        .iter()
        .filter_map(|r| r.address)
        .step_by((state.records.len() / 32).max(1))
        .collect();
    // Not proved: a dev node's genesis header may name no real root.
    let on_node = node.read_accounts(&sample, 0, None).await?;
    if let Some(got) = differs_from_file(&state, &on_node) {
        tracing::debug!(
            address = ?got.address,
            "block 0 differs from the genesis file: read again in a second"
        );
        // Read again once: anvil answers for its head block from its live
        // state, which a block being mined has already changed; a block
        // later, block 0 is read as it was.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let again = node.read_accounts(&sample, 0, None).await?;
        if let Some(got) = differs_from_file(&state, &again) {
            return Err(Refusal::Mismatch(format!(
                "{} is not this node's genesis: account {:?} differs at block 0",
                file.display(),
                got.address
            ))
            .into());
        }
    }
    let (hash, root, time) = node.block_header(0).await?;
    state.block_hash = Some(hash);
    state.state_root = Some(root);
    state.block_time = Some(time);
    Ok(state)
}

/// The first account read from the node whose balance or nonce is not
/// the genesis file's.
fn differs_from_file<'a>(
    state: &ExportedState,
    on_node: &'a [protocol::account::AccountRecord],
) -> Option<&'a protocol::account::AccountRecord> {
    on_node.iter().find(|got| {
        let want = state.records.iter().find(|r| r.key == got.key);
        want.is_none_or(|w| (w.balance, w.nonce) != (got.balance, got.nonce))
    })
}

/// The reth datadir's full state at its head, checked against the node;
/// streamed when the datadir allows it (v2).
#[cfg(feature = "reth")]
async fn datadir_base(
    node: &RpcSource,
    dir: &Path,
    listed: &PrivateStorage,
) -> Result<Base, FollowError> {
    use crate::sources::reth::{export_base, RethMode};
    let base = export_base(dir, RethMode::Full, node.chain_id, listed.clone())?;
    let meta = base.meta();
    let (hash, _, _) = node.block_header(meta.block_number).await?;
    if meta.block_hash != Some(hash) {
        return Err(Refusal::Mismatch(format!(
            "the datadir's block {} is not on the node's chain",
            meta.block_number
        ))
        .into());
    }
    Ok(base)
}

#[cfg(not(feature = "reth"))]
async fn datadir_base(_: &RpcSource, _: &Path, _: &PrivateStorage) -> Result<Base, FollowError> {
    Err(Refusal::NoReth.into())
}

/// Blocks below the node's head searched for the one whose state root a
/// geth dump names.
pub const GETH_DUMP_SEARCH_BLOCKS: u64 = 1024;

/// geth's offline dump as a base, at the newest block (of the newest
/// [`GETH_DUMP_SEARCH_BLOCKS`]) whose header names the dump's root; its
/// accounts and slots are read and checked as it is published.
async fn geth_dump_base(
    node: &RpcSource,
    file: &Path,
    listed: &PrivateStorage,
) -> Result<Base, FollowError> {
    use crate::sources::geth_dump::{dump_base, GethDump};
    let path = file.to_path_buf();
    let open = move || GethDump::open(&path).map_err(|e| FollowError::from(Refusal::from(e)));
    let dump = blocking(open).await?;
    let head = node.head().await?;
    let oldest = head.saturating_sub(GETH_DUMP_SEARCH_BLOCKS - 1);
    for block in (oldest..=head).rev() {
        let (hash, root, time) = node.block_header(block).await?;
        if root == dump.root {
            tracing::info!(block, root = %dump.root, file = %file.display(), "the geth dump is of this block");
            return Ok(Base::GethDump(dump_base(
                dump,
                node.chain_id,
                block,
                (hash, time),
                listed.clone(),
            )));
        }
    }
    Err(Refusal::Mismatch(format!(
        "{}: its state root {} is no header's of blocks {oldest}..={head} of the node: dump the state of a recent block of this chain (geth snapshot dump, geth stopped)",
        file.display(),
        dump.root
    ))
    .into())
}

/// Wait after the `failures`-th failed step in a row: 1 s doubling, at most 5 min.
fn backoff(failures: u32) -> Duration {
    protocol::retry::backoff(
        Duration::from_secs(1),
        Duration::from_secs(300),
        failures.saturating_sub(1),
    )
}

/// Follows until `stop` resolves, or a refusal.
pub async fn run(
    config: FollowConfig,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), FollowError> {
    let poll = Duration::from_millis(config.follow.poll_ms.max(50));
    let (heads, _announcer) = new_heads(&config.follow);
    let mut follower = Follower::new(config)?;
    tracing::info!(url = %protocol::url::redact(&follower.url), store = %follower.store.root().display(), "following the chain");
    let mut failures = 0u32;
    tokio::pin!(stop);
    loop {
        // Stop is honoured while a step waits on the node too (an outage
        // can keep it retrying for minutes). A build already handed to a
        // blocking thread still finishes and publishes atomically.
        let outcome = tokio::select! {
            _ = &mut stop => break,
            outcome = follower.step() => outcome,
        };
        let wait = match outcome {
            Ok(outcome) => {
                failures = 0;
                match outcome {
                    StepOutcome::Published { .. } => Duration::ZERO,
                    StepOutcome::UpToDate { .. } => poll,
                }
            }
            Err(FollowError::Refused(refusal)) => {
                // The task ends here: say why where the operator looks.
                tracing::error!(error = %refusal, "the follower stops");
                return Err(refusal.into());
            }
            Err(e) => {
                failures += 1;
                let wait = backoff(failures);
                tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "follow step failed; will retry");
                wait
            }
        };
        // A new head announced wakes it before the poll (not a retry's
        // backoff: a failing node is not asked again at once).
        let announced = async {
            match failures {
                0 => heads.notified().await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep(wait) => {}
            _ = announced => {}
        }
    }
    tracing::info!("follower stopped");
    Ok(())
}

/// What wakes the follower when the node announces a new head, and the
/// task that listens (with `ws_url`; nothing wakes it otherwise).
fn new_heads(timing: &Timing) -> (std::sync::Arc<tokio::sync::Notify>, AbortOnDrop) {
    let heads = std::sync::Arc::new(tokio::sync::Notify::new());
    let announcer = timing
        .ws_url
        .clone()
        .map(|url| tokio::spawn(announce_heads(url, heads.clone())));
    (heads, AbortOnDrop(announcer))
}

/// Aborts a task when dropped (the follower's own helpers end with it).
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Wakes `heads` for every new head the node at `url` announces
/// (`eth_subscribe("newHeads")` over WebSocket), connecting again with
/// backoff when the subscription ends or fails; the follower polls
/// meanwhile.
async fn announce_heads(url: String, heads: std::sync::Arc<tokio::sync::Notify>) {
    let mut failures = 0u32;
    loop {
        let shown = protocol::url::redact(&url);
        match subscribed_heads(&url, &heads).await {
            Ok(()) => {
                failures = 0;
                tracing::info!(url = %shown, "the node's new-heads subscription ended; subscribing again")
            }
            Err(e) => {
                let e = protocol::url::redact_urls_in(&e.replace(&url, &shown));
                tracing::warn!(url = %shown, error = %e, "no new-heads subscription: polling meanwhile")
            }
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(backoff(failures)).await;
    }
}

/// One subscription: `heads` woken for each head until it ends.
async fn subscribed_heads(url: &str, heads: &tokio::sync::Notify) -> Result<(), String> {
    use alloy_provider::{Provider, ProviderBuilder, WsConnect};
    let provider = ProviderBuilder::new()
        .connect_ws(WsConnect::new(url))
        .await
        .map_err(|e| e.to_string())?;
    let mut subscription = provider
        .subscribe_blocks()
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(url = %protocol::url::redact(url), "following new heads as the node announces them");
    loop {
        match subscription.recv().await {
            Ok(head) => tracing::debug!(block = head.number, "new head announced"),
            // Heads missed while a step ran: one wake covers them.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
        }
        heads.notify_one();
    }
}

/// One step now (`run --once`): the base if missing, then the blocks up
/// to the head. Returns the newest view's block.
pub async fn run_once(config: FollowConfig) -> Result<u64, FollowError> {
    let mut follower = Follower::new(config)?;
    match follower.step().await? {
        StepOutcome::UpToDate { block } | StepOutcome::Published { block, .. } => Ok(block),
    }
}

/// Each contract's storage in the base, logged: what listing it costs
/// (a record per slot, and one more per word wider than 23 bytes in a
/// 24-byte base; docs/benchmarks.md, "Contracts listed whole").
fn log_storage_sizes(storage: &[protocol::storage::StorageRecord]) {
    let mut sizes: std::collections::BTreeMap<_, (Option<Address>, usize, usize)> =
        Default::default();
    for r in storage {
        let size = sizes.entry(r.hashed_contract).or_default();
        size.0 = size.0.or(r.contract);
        size.1 += 1;
        size.2 += usize::from(r.value.bit_len() > 8 * 23);
    }
    for (hashed, (contract, slots, wide)) in sizes {
        match contract {
            Some(address) => {
                tracing::info!(%address, slots, wide, "a contract's storage in the base")
            }
            None => {
                tracing::info!(hashed_address = %hashed, slots, wide, "a contract's storage in the base")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::HintBudget;
    use pir_core::Packing;

    #[test]
    fn a_lists_contracts_are_held_whole_beside_the_configured_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let listed = Address::repeat_byte(0xc1);
        let configured = Address::repeat_byte(0xc2);
        let text = format!(
            "[[contract]]\nchain_id = 7\naddress = \"{listed}\"\n\n[[contract]]\nchain_id = 8\naddress = \"{}\"\n",
            Address::repeat_byte(0xc3)
        );
        std::fs::write(&path, text).unwrap();
        let source = SourceConfig {
            tokens: Some(path),
            contracts: vec![configured, listed],
            ..Default::default()
        };
        let storage = source.private_storage(7).unwrap();
        assert_eq!(
            storage.contracts,
            vec![configured, listed],
            "each once, this chain's"
        );
        assert!(storage.tokens.is_empty());
    }

    #[test]
    fn every_block_within_keep_blocks_gets_its_own_delta() {
        assert_eq!(delta_stops(10, 11, 64), 11..=11);
        assert_eq!(delta_stops(10, 14, 64), 11..=14, "one per block");
        assert_eq!(
            delta_stops(10, 200, 64),
            136..=200,
            "older blocks in the first"
        );
        assert_eq!(delta_stops(0, 3, 0), 3..=3);
    }

    #[test]
    fn the_example_config_parses() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/snapshotter.toml");
        let config = FollowConfig::from_file(std::path::Path::new(path)).unwrap();
        assert_eq!(config.build.layout.hint_budget_mib, HintBudget::Auto);
        let options = config.build.options(None).unwrap();
        assert!(matches!(
            options.base_packing,
            Some(Packing::ForLookup { .. })
        ));
    }
}

//! Why an account could not be read privately.

/// Why an account could not be read privately.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReadError {
    #[error("no private snapshot for {requested}; available blocks: {available:?}")]
    NoSnapshot {
        requested: String,
        available: Vec<u64>,
    },
    #[error("account not in the private set of snapshot {snapshot} ({kind} snapshot)")]
    NotInPrivateSet {
        snapshot: String,
        kind: &'static str,
    },
    #[error("the storage of {contract} is not in the private set of snapshot {snapshot}")]
    NotListed {
        contract: alloy_primitives::Address,
        snapshot: String,
    },
    /// A slot's word is wider than the snapshot's values hold (24-byte
    /// values keep 23 bytes of a word): marked, not stored.
    #[error("a storage word of {contract} is too wide for snapshot {snapshot}")]
    TooWide {
        contract: alloy_primitives::Address,
        snapshot: String,
    },
    /// The snapshot at the block asked for lacks the attestations this
    /// reader requires: not read.
    #[error("snapshot {snapshot} has {signed} of the {quorum} attestations required (from {attesters:?})")]
    Unattested {
        snapshot: String,
        signed: usize,
        quorum: usize,
        attesters: Vec<alloy_primitives::Address>,
    },
    /// A snapshot at the block asked for that this reader does not read
    /// (an older manifest format, a PIR level without canaries, a view
    /// that needs more setup data than the limits allow): not read.
    #[error("snapshot {snapshot} is not read: {why}")]
    Unreadable { snapshot: String, why: String },
    /// The view names no block hash, so the upstream cannot confirm it:
    /// not read while an upstream is configured.
    #[error("the snapshot at block {block} names no block hash: the upstream cannot confirm it")]
    Unbound { block: u64 },
    /// The upstream could not confirm the view's block (it does not have
    /// the block yet, or did not answer): not read.
    #[error("the upstream has not confirmed block {block} yet: {why}")]
    Unconfirmed { block: u64, why: String },
    /// The PIR server's snapshots are of another chain than the one read.
    #[error(
        "the PIR server's snapshots are of chain(s) {catalog:?}, this reader reads chain {chain}"
    )]
    OtherChain { chain: u64, catalog: Vec<u64> },
    #[error("snapshot {snapshot} does not say which code its accounts have")]
    CodeUnknown { snapshot: String },
    #[error("PIR server unavailable: {0}")]
    Backend(String),
    /// No view can answer yet (the catalog is fetched but not yet
    /// adopted): the same read soon will.
    #[error("not ready: {0}")]
    NotReady(String),
    /// A snapshot of the view left the server between catalog and query
    /// (merged or retired); the lookup is retried on the new catalog.
    #[error("a snapshot of the view was retired: {0}")]
    Retired(String),
    #[error("private answer failed verification: {0}")]
    Unverifiable(String),
    #[error("setup data for {snapshot} unusable: {reason}")]
    Setup { snapshot: String, reason: String },
    #[error("the PIR server serves several chains ({0:?}); set chain_id")]
    AmbiguousChain(Vec<u64>),
    /// The view's block is not the header source's block at that number
    /// (a reorg, or a server serving another chain's state): not read.
    #[error("the snapshot at block {block} has hash {view}, the node's block there is {node}")]
    NotCanonical {
        block: u64,
        view: alloy_primitives::B256,
        node: alloy_primitives::B256,
    },
    /// A value the hot tier gave this request was found forged before its
    /// answer was released (an audit in its own padding or free queries):
    /// the answer is withheld. The key is corrected: a retry reads the
    /// levels' value, on the same wire.
    #[error("the PIR server's hot tier {tier} was caught forging a value this request read: its answer is withheld; ask again")]
    TierForged { tier: String },
    /// A verification failure was seen earlier: private reads are stopped.
    #[error("private reads stopped: the PIR server failed verification ({0})")]
    Distrusted(String),
}

impl ReadError {
    /// Whether the snapshots cannot answer this call at all (no view at
    /// that block, an incomplete view without the account, a contract the
    /// view does not hold, a word too wide for it), as opposed to a
    /// failure of the server: the only case an opted-in fallback to the
    /// upstream may take.
    pub fn is_unanswerable(&self) -> bool {
        matches!(
            self,
            ReadError::NoSnapshot { .. }
                | ReadError::NotInPrivateSet { .. }
                | ReadError::NotListed { .. }
                | ReadError::TooWide { .. }
                | ReadError::CodeUnknown { .. }
        )
    }
}

impl From<crate::fetch::FetchError> for ReadError {
    fn from(e: crate::fetch::FetchError) -> Self {
        ReadError::Backend(e.to_string())
    }
}

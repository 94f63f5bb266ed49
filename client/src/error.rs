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
    #[error("PIR server unavailable: {0}")]
    Backend(String),
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
    /// A verification failure was seen earlier: private reads are stopped.
    #[error("private reads stopped: the PIR server failed verification ({0})")]
    Distrusted(String),
}

impl ReadError {
    /// Whether the snapshots cannot answer this call at all (no view at
    /// that block, or an incomplete view without the account), as opposed
    /// to a failure of the server: the only case an opted-in fallback to
    /// the upstream may take.
    pub fn is_unanswerable(&self) -> bool {
        matches!(
            self,
            ReadError::NoSnapshot { .. } | ReadError::NotInPrivateSet { .. }
        )
    }
}

impl From<crate::fetch::FetchError> for ReadError {
    fn from(e: crate::fetch::FetchError) -> Self {
        ReadError::Backend(e.to_string())
    }
}

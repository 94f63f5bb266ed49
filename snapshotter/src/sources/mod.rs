//! Where account state comes from.

pub use snapshot_build::{dump, genesis};
pub mod changes;
pub mod geth_dump;
#[cfg(feature = "reth")]
pub mod reth;
pub mod rpc;

use crate::pipeline::{build_and_publish, BuildError, BuildOptions, ExportedState};
use crate::store::{SnapshotStore, StoredSnapshot};

/// A snapshot to build: its state held in memory, or (a v2 reth
/// datadir's head) its accounts streamed from the datadir as `records.bin`
/// is written, so that a mainnet base is never held. What `build` and the
/// follower both publish.
pub enum Base {
    Held(ExportedState),
    #[cfg(feature = "reth")]
    Streamed(crate::sources::reth::StreamedHead),
    /// geth's offline dump (`geth snapshot dump`), streamed.
    GethDump(crate::sources::geth_dump::StreamedDump),
}

impl Base {
    /// Which snapshot it is (and, when held, its records).
    pub fn meta(&self) -> &ExportedState {
        match self {
            Base::Held(state) => state,
            #[cfg(feature = "reth")]
            Base::Streamed(head) => &head.meta,
            Base::GethDump(dump) => &dump.meta,
        }
    }

    pub fn publish(
        self,
        store: &SnapshotStore,
        opts: &BuildOptions,
    ) -> Result<StoredSnapshot, PublishError> {
        match self {
            Base::Held(state) => Ok(build_and_publish(store, state, opts)?),
            #[cfg(feature = "reth")]
            Base::Streamed(head) => Ok(head.publish(store, opts)?),
            Base::GethDump(dump) => dump.publish(store, opts),
        }
    }
}

/// Why a base was not published: the build (a store, a disk, the
/// encoder), or a geth dump that does not add up (its bytes would not
/// change on a second try).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    GethDump(#[from] geth_dump::GethDumpError),
}

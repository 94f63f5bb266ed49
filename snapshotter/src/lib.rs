//! # snapshotter
//!
//! Turns Ethereum account state into PIR snapshots: a source exports
//! accounts ([`sources`]), the pipeline ([`snapshot_build`]) encodes them
//! with pir-core, builds the hint (GPU or CPU, [`gpu_kernels`]) and
//! publishes the result atomically into a [`store::SnapshotStore`].
#![forbid(unsafe_code)]

// The record encoding and manifests live in `protocol`, shared with the
// proxy; they keep their paths here for the operator's code.
pub use protocol::{account, manifest};
// The store is its own crate, which the server reads without the pipeline.
pub use snapshot_store as store;
pub use snapshot_store::failpoint;
// The build itself is its own crate, which the demo links without the
// node clients, reth and the GPU.
pub use snapshot_build::{pipeline, progress, records, slot_sort};

pub mod attest;
pub mod folded;
pub mod follow;
pub mod hot;
pub mod levels;
pub mod pull;
pub mod settings;
pub mod sources;
pub mod state_root;
pub mod tokens;
pub mod verify;

pub use account::{
    decode_value, encode_value, pir_key, AccountRecord, AccountValue, CodeRef, ValueLayout,
};
pub use manifest::{Manifest, SnapshotId, SnapshotKind};
pub use pipeline::{build_and_publish, BuildOptions, ExportedState};
pub use store::{SnapshotStore, StoredSnapshot};

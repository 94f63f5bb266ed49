//! # snapshotter
//!
//! Turns Ethereum account state into PIR snapshots: a source exports
//! accounts ([`sources`]), the pipeline encodes them with pir-core, builds
//! the hint (GPU or CPU, [`gpu_kernels`]) and publishes the result
//! atomically into a [`store::SnapshotStore`].
#![forbid(unsafe_code)]

// The record encoding and manifests live in `protocol`, shared with the
// proxy; they keep their paths here for the operator's code.
pub use protocol::{account, manifest};
// The store is its own crate, which the server reads without the pipeline.
pub use snapshot_store as store;
pub use snapshot_store::failpoint;

pub mod attest;
pub mod folded;
pub mod follow;
pub mod levels;
pub mod pipeline;
pub mod progress;
pub mod pull;
pub mod records;
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

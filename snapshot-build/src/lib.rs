//! # snapshot-build
//!
//! A snapshot from exported account state: the records are checked and
//! written ([`records`]), encoded with pir-core, given their hint (all CPU
//! cores, or the [`pir_core::product::HintBuilder`] the options name) and
//! published atomically into a [`snapshot_store::SnapshotStore`]
//! ([`pipeline`]); the bundled genesis files are a source ([`genesis`]),
//! and so is a development node's dump of its state ([`dump`]).
//!
//! The demo and the benchmarks build with this crate alone; the operator's
//! `snapshotter` adds the other sources (JSON-RPC, reth), the follower, the
//! GPU and attestations on top.
#![forbid(unsafe_code)]

pub mod account_spill;
pub mod dump;
pub mod genesis;
pub mod pipeline;
pub mod progress;
pub mod records;
pub mod slot_sort;

pub use pipeline::{build_and_publish, BuildOptions, ExportedState};

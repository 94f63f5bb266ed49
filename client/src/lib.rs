//! # ethpir-client
//!
//! Private reads of Ethereum account state from an `ethpir-server`: the
//! server answers ChalametPIR keyword-PIR queries and never learns which
//! address was read. This crate is what a wallet embeds; `ethpir-proxy` is
//! one user of it, a Rust wallet can be another (see [`provider`] with the
//! `alloy` feature: an alloy provider whose `get_balance` and
//! `get_transaction_count` are private).
//!
//! The parts, one concern each:
//! - [`fetch`]: the one bounded reader of every byte a peer sends (size
//!   limits counted as the body streams, connect, first-byte and
//!   whole-body timeouts);
//! - [`link`]: the connection to one server (client, timeouts, counters,
//!   trust);
//! - [`catalog`]: the server's snapshots and the views they form;
//! - [`cache`]: setup and table downloads checked against their digests,
//!   cached on disk;
//! - `answers`: what each PIR level answered before, kept (a key is
//!   queried once per level);
//! - `canary`: queries of keys whose answers are known, mixed into
//!   requests (a tampered answer fails closed);
//! - [`canonical`]: views checked against a header source's block hashes;
//! - `code`: private `eth_getCode` (a level's code-table entry proved
//!   against its manifest, the code checked by its hash, kept on disk);
//! - [`pool`]: a snapshot's PIR client and its pool of prepared queries;
//! - [`levels`]: how each level of a view is read and which level's
//!   answer wins;
//! - [`trust`]: fail closed after any verification failure;
//! - [`traffic`]: bytes moved, lookups apart from background;
//! - [`reader`]: [`PrivateReader`], which puts them together.
//!
//! It links `pir-core` (the math) and `protocol` (the wire) and none of
//! the operator's crates.

#![forbid(unsafe_code)]

pub mod address;
mod answers;
pub mod block;
mod cache;
mod canary;
pub mod canonical;
mod catalog;
mod code;
pub mod config;
pub mod error;
use api_client::fetch;
pub mod levels;
mod link;
mod pool;
#[cfg(feature = "alloy")]
pub mod provider;
pub mod reader;
mod traffic;
mod trust;

pub use address::parse_address;
pub use block::BlockSelector;
pub use config::{ClientConfig, Limits, Timeouts};
pub use error::ReadError;
pub use levels::{AccountState, KeyState, ReadKey, SlotState};
pub use reader::PrivateReader;

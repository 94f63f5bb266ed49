//! # pir-core
//!
//! A ChalametPIR-style keyword PIR engine (FrodoPIR over LWE with binary fuse
//! filters), with the changes that make it practical for a wallet:
//!
//! - the public matrix is expanded block by block from a seed
//!   ([`matrix`]), so neither the client nor the hint builder ever holds it;
//! - queries are prepared ahead of time ([`client::PreparedQuery`]);
//! - `k` filters are laid side by side (the square layout, [`db`]), so
//!   queries shrink by `k`;
//! - every record carries a tag, so absent keys decode as absent;
//! - answers and hints use 8-bit dot products ([`kernel`]).
//!
//! The flow: [`db::EncodedDb::encode`] -> [`product::hint_cpu`] (or the GPU
//! builder) -> [`server::PirServer`]; the client downloads
//! [`wire::SetupData`] and uses [`client::PirClient`].

// `unsafe` lives only in the SIMD kernels, each with a `# Safety` contract
// that `assert!`s uphold.
#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod aes_ni;
pub mod client;
pub mod db;
pub mod encode;
pub mod error;
pub mod fuse;
#[allow(unsafe_code)]
pub mod keccak_x4;
#[allow(unsafe_code)]
pub mod kernel;
pub mod keys;
pub mod matrix;
pub mod params;
pub mod product;
pub mod record;
pub mod server;
pub mod shard;
pub mod wire;

pub use client::{
    ClientError, ClientLimits, Lookup, PendingAnswer, PirClient, PreparedQuery, SetupError,
};
pub use db::{DbShape, EncodeOptions, EncodedDb, Packing};
pub use error::{AnswerError, DecodeError, EncodeError, ParamError, WireError};
pub use fuse::Arity;
pub use matrix::{Expansion, PublicMatrix};
pub use params::LweParams;
pub use server::{PirServer, PublishedSetup, ServeError};
pub use wire::{Query, Response, SetupData};

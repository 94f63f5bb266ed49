//! The end-to-end tests of the user's side, one binary with a module per
//! file. Twenty binaries each linked the same proxy, server, snapshotter
//! and alloy, and compiled the same async code again: one binary builds in
//! a fraction of the time (docs/benchmarks.md, "The test command").
//! One file's tests: `cargo test -p e2e --profile test-release --test e2e
//! -- hot::`.

mod common;

mod alloy_layer;
mod anvil_e2e;
mod attest;
mod canonical;
mod edges;
mod evm;
mod follow;
mod genesis_e2e;
mod hostile;
mod hostile_catalog;
mod hot;
mod idle;
mod merges;
mod pages;
mod push;
mod rpc_compat;
mod sends;
mod tamper;
mod tokens;
mod traffic;
mod transport;
mod trust;
mod wallet_calls;

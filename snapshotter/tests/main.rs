//! The snapshotter's integration tests, one binary with a module per file:
//! 9 binaries each linked the same crates and compiled the same async
//! code again (docs/benchmarks.md, "The test command"). One file's tests:
//! `cargo test -p snapshotter --profile test-release --all-features --test
//! snapshotter -- <file>::` (the reth reader's tests need `--all-features`).

mod crash;
mod determinism;
mod follow;
mod geth;
mod reth_contracts;
mod reth_datadir;
mod rpc_anvil;
mod state_root;
mod streamed;
mod tokens;

//! The server's integration tests, one binary with a module per file:
//! 5 binaries each linked the same crates and compiled the same async
//! code again (docs/benchmarks.md, "The test command"). One file's tests:
//! `cargo test -p server --profile test-release --all-features --test server
//! -- <file>::`.

mod deploy;
mod http;
mod pull;
mod replicas;
mod shards;

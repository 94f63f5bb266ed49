#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine (idempotent).
# Today: a Rust toolchain with rustfmt and clippy. The snapshotter and proxy
# issues add anvil (npm @foundry-rs/anvil) and libclang-dev here.
set -euo pipefail

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
echo "test dependencies ready: $(cargo --version)"

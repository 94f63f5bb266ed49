#!/usr/bin/env bash
# Keeps each binary's crate free of machinery it must not link: the user's
# proxy and the client crate a wallet embeds link none of the operator's
# crates, the server not the build pipeline (it links gpu-kernels, for
# answers from GPU memory), and the demo no GPU stack. Called by
# scripts/test.sh; exits non-zero and names the offender.
set -euo pipefail
cd "$(dirname "$0")/.."

# check CRATE REGEX: the crate's normal (non-dev) tree must not match.
check() {
    local crate=$1 forbidden=$2 found
    found=$(cargo tree -p "$crate" -e normal --prefix none --all-features | sort -u | grep -E "$forbidden" || true)
    if [ -n "$found" ]; then
        echo "$crate must not depend on these, but its tree has:" >&2
        echo "$found" >&2
        echo "(see 'cargo tree -p $crate -e normal -i <crate>' for the path)" >&2
        exit 1
    fi
}

check proxy '^(server|snapshotter|snapshot-store|gpu-kernels|demo|cudarc|prometheus|indicatif|libmdbx) '
# The client a wallet embeds: of our crates only pir-core and protocol.
check ethpir-client '^(proxy|server|snapshotter|snapshot-store|gpu-kernels|demo|test-support|cudarc|prometheus|indicatif|libmdbx|tracing-subscriber|toml|openssl|native-tls) '
check server '^(snapshotter|demo|indicatif|libmdbx) '
# The demo builds its snapshot with the pipeline alone: no node clients,
# reth, GPU or progress bars (its clean build time, issue 33).
check demo '^(snapshotter|gpu-kernels|cudarc|indicatif|libmdbx|alloy-provider|alloy-rpc-client|alloy-signer-local) '
# One crypto provider for rustls, ring: AWS-LC (rustls's default, which
# alloy's `ws` feature asks for) is a 48-s C build (docs/benchmarks.md,
# "The test command"); `ws-ring` is the feature to use.
if grep -qE '^name = "aws-lc-(rs|sys)"' Cargo.lock; then
    echo "Cargo.lock has AWS-LC: ask for rustls with ring (alloy's ws-ring, not ws)" >&2
    cargo tree -i aws-lc-sys --all-features -e features >&2 || true
    exit 1
fi
echo "dependency check: the proxy and the client link no operator crate; the server no pipeline crate; the demo no operator stack; rustls on ring alone"

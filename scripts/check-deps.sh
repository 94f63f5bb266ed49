#!/usr/bin/env bash
# Keeps the user's proxy free of the operator's machinery: its normal
# (non-dev) dependency tree must not contain any of the crates below.
# Called by scripts/test.sh; exits non-zero and names the offender.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='^(server|snapshotter|gpu-kernels|demo|cudarc|prometheus|indicatif|libmdbx|axum-server) '
found=$(cargo tree -p proxy -e normal --prefix none --all-features | sort -u | grep -E "$forbidden" || true)
if [ -n "$found" ]; then
    echo "proxy must not depend on the operator's crates, but its tree has:" >&2
    echo "$found" >&2
    echo "(see 'cargo tree -p proxy -e normal -i <crate>' for the path)" >&2
    exit 1
fi
echo "dependency check: proxy links none of the operator's crates"

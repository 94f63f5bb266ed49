#!/usr/bin/env bash
# The scaling points of docs/benchmarks.md ("From 2^16 to 2^26 accounts"):
# pir-bench with account-shaped records (32-byte keys, 24-byte values) packed
# as a base is (query + response <= 1.5 MiB, hint 32..512 MiB), from 2^16
# to 2^LOG2_MAX accounts, beside ChalametPIR 0.8.0 (--peer) up to
# 2^PEER_MAX (its setup takes ~8 min and its client ~9 GB at 2^20). Appends
# JSON lines to OUT, then draws the plot and prints the fitted table with
# scripts/plot-scaling.py.
#   LOG2_MAX=26 PEER_MAX=18 OUT=docs/data/scaling.jsonl bash scripts/bench-scaling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LOG2_MAX=${LOG2_MAX:-26}
PEER_MAX=${PEER_MAX:-18}
OUT=${OUT:-docs/data/scaling.jsonl}
mkdir -p "$(dirname "$OUT")"
cargo build --release --bin pir-bench
for log2 in $(seq 16 2 "$LOG2_MAX"); do
    peer=()
    if [ "$log2" -le "$PEER_MAX" ]; then peer=(--peer); fi
    reps=5
    if [ "$log2" -ge 22 ]; then reps=3; fi
    target/release/pir-bench --log2-keys "$log2" --key-bytes 32 --value-bytes 24 \
        --lookup-target-kib 1536 --no-memread --reps "$reps" "${peer[@]}" "$@" |
        grep -v '"ratios"' | tee -a "$OUT"
done
python3 scripts/plot-scaling.py "$OUT" docs/scaling.svg

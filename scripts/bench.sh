#!/usr/bin/env bash
# Runs the benchmark workloads of docs/benchmarks.md, side by side with
# ChalametPIR 0.8.0 where that finishes in reasonable time. JSON lines on
# stdout; pass extra pir-bench flags after the script name.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin pir-bench
bench=target/release/pir-bench
for n in 16 18; do
    "$bench" --log2-keys "$n" --peer "$@"
done
"$bench" --log2-keys 20 --peer "$@"
"$bench" --log2-keys 22 "$@"
"$bench" --log2-keys 16 --key-bytes 32 --value-bytes 1024 --peer "$@"

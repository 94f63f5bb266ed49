#!/usr/bin/env bash
# Runs the benchmark workloads of docs/benchmarks.md: pir-bench side by side
# with ChalametPIR 0.8.0 (--peer) where that finishes in minutes, our engine
# alone where it does not, and the proxy's latency. JSON lines on stdout.
# Extra flags go to every pir-bench run (e.g. --device cuda on a GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin pir-bench --bin proxy-bench --bin serve-bench --bin refresh-bench
bench=target/release/pir-bench
# Every kernel this CPU has, on the same workloads (pir-bench refuses the others).
for kernel in avx512-vnni avx2 portable; do
    if "$bench" --kernel "$kernel" --log2-keys 10 --reps 1 --no-memread >/dev/null 2>&1; then
        "$bench" --kernel "$kernel" --log2-keys 18 "$@"
        "$bench" --kernel "$kernel" --log2-keys 22 --reps 3 "$@"
    fi
done
"$bench" --log2-keys 16 --peer "$@"
"$bench" --log2-keys 18 --peer "$@"
"$bench" --log2-keys 20 --peer --reps 3 "$@"      # the reference needs ~7 min and 9 GB here
"$bench" --log2-keys 22 --reps 3 "$@"
"$bench" --log2-keys 16 --key-bytes 32 --value-bytes 1024 --peer --reps 3 "$@"
"$bench" --log2-keys 18 --arity 4 "$@"
target/release/proxy-bench --log2-accounts 20 --calls 200
target/release/serve-bench --setup-mib 256 --downloads 64
target/release/refresh-bench --log2-accounts 24 --blocks 40 --refresh-every 4

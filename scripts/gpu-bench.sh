#!/usr/bin/env bash
# The GPU check of issue 63, as one script for a machine with an NVIDIA GPU:
# gpu-selftest (expansion, hint and answers bit for bit the CPU's, then
# answers timed from GPU memory at 2^24 .. 2^30 keys), pir-bench with the
# hint and answers on the GPU (every answer decoded and checked), and
# server-bench with the server answering on the CPU, then on the GPU.
#
#   BIN=target/release OUT=gpu-bench-out scripts/gpu-bench.sh
#
# LOG2 (answer sizes, default 24,26,28,30; 2^30 needs about 90 GB of GPU
# memory), HINT_LOG2 (the selftest's database, default 16), PIR_LOG2
# (pir-bench sizes, default "24 26") and SERVER_BENCH=0 (skip it) trim a
# run to the device time at hand. KERNEL=<name> (e.g. ethpir_answer_s4x2)
# runs pir-bench and server-bench again with that answer kernel forced for
# every batch (ETHPIR_GPU_ANSWER_KERNEL), beside the server's own choice;
# gpu-selftest times every kernel regardless.
#
# BIN holds gpu-selftest, pir-bench and server-bench (cargo build --release
# -p gpu-kernels -p pir-bench -p system-bench); what it prints is kept in
# OUT as JSON lines. NVRTC is loaded by name at run time: the script puts
# the first libnvrtc it finds on the library path.
set -uo pipefail
BIN=${BIN:-target/release}
OUT=${OUT:-gpu-bench-out}
LOG2=${LOG2:-24,26,28,30}
HINT_LOG2=${HINT_LOG2:-16}
PIR_LOG2=${PIR_LOG2:-24 26}
SERVER_BENCH=${SERVER_BENCH:-1}
KERNEL=${KERNEL:-}
mkdir -p "$OUT"
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
    lscpu | grep -E '^(Model name|CPU\(s\))' | tr -s ' '
    uname -r
} | tee "$OUT/machine.txt"
nvrtc=$(find /usr/local /opt /usr/lib -name 'libnvrtc.so*' 2>/dev/null | grep -v builtins | head -1)
[ -n "$nvrtc" ] && export LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "nvrtc: ${nvrtc:-not found}" | tee -a "$OUT/machine.txt"

step() {
    local name=$1
    shift
    echo "== $name: $*"
    local t0=$SECONDS
    "$@" 2>"$OUT/$name.err" | tee "$OUT/$name.jsonl"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    tail -5 "$OUT/$name.err"
}

step selftest "$BIN/gpu-selftest" --log2-keys "$HINT_LOG2" --bench-answers "$LOG2" --reps 3
# The end-to-end benches, with the server's choice of kernel, then (when
# KERNEL is set) with KERNEL forced.
end_to_end() {
    local tag=$1
    for n in $PIR_LOG2; do
        step "pir-bench-$n$tag" "$BIN/pir-bench" --device cuda --log2-keys "$n" --batch 64 --reps 5 --no-memread
    done
    if [ "$SERVER_BENCH" = 1 ] && [ -x "$BIN/server-bench" ]; then
        step "server-bench$tag" "$BIN/server-bench" --log2-accounts 22 --answer-device cpu,cuda \
            --batching on --seconds 5 --dir /tmp/server-bench-data
    fi
}
end_to_end ""
if [ -n "$KERNEL" ]; then
    ETHPIR_GPU_ANSWER_KERNEL=$KERNEL end_to_end "-$KERNEL"
fi

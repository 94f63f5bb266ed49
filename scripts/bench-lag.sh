#!/usr/bin/env bash
# How far a proxy's `latest` lags the node, with every hop pushed: anvil
# mining a block every BLOCK_TIME seconds (a transfer in each), the
# follower on its new heads (ws), the server watching its store, the
# proxy holding a wait for the next catalog. Samples the proxy's view
# against anvil's head every 100 ms for SECONDS, and times each block from
# the moment anvil reports it to the moment the proxy's view has it.
# Prints one JSON line. Binaries: $BIN (default target/test-release).
#
#   BLOCK_TIME=1 SECONDS_RUN=60 bash scripts/bench-lag.sh
#   BLOCK_TIME=0.25 SECONDS_RUN=60 bash scripts/bench-lag.sh
#   PUSH=0 ...: the follower polls its node every second instead (an
#   HTTP-only node); the server and the proxy still push
# Build the binaries first: cargo build --profile test-release
#   -p proxy --bin ethpir-proxy -p server --bin ethpir-server
#   -p snapshotter --bin ethpir-snapshot
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/test-release}
BLOCK_TIME=${BLOCK_TIME:-1}
PUSH=${PUSH:-1}
SECONDS_RUN=${SECONDS_RUN:-60}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "${KEEP:-}" ] && echo "kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ANVIL=$(ls .tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil)
A=$(free_port); S=$(free_port); P=$(free_port)
"$ANVIL" --port "$A" --block-time "$BLOCK_TIME" --silent >"$WORK/anvil.log" 2>&1 & PIDS+=($!)
rpc() { curl -s -X POST -H 'content-type: application/json' "$1" -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}"; }
for _ in $(seq 100); do rpc "http://127.0.0.1:$A" eth_blockNumber '[]' >/dev/null 2>&1 && break; sleep 0.1; done
WS=(); [ "$PUSH" = 1 ] && WS=(--ws-url "ws://127.0.0.1:$A")
"$BIN/ethpir-snapshot" --store "$WORK/store" run --url "http://127.0.0.1:$A" "${WS[@]}" --dump --device cpu >"$WORK/follower.log" 2>&1 & PIDS+=($!)
"$BIN/ethpir-server" --store "$WORK/store" --listen "127.0.0.1:$S" --rescan-secs 60 >"$WORK/server.log" 2>&1 & PIDS+=($!)
cat >"$WORK/proxy.toml" <<EOF
listen = "127.0.0.1:$P"
pir_server = "http://127.0.0.1:$S"
cache_dir = "$WORK/cache"
refresh_secs = 60
EOF
"$BIN/ethpir-proxy" --config "$WORK/proxy.toml" >"$WORK/proxy.log" 2>&1 & PIDS+=($!)
# A transfer every half block, so that every block changes accounts.
( while true; do
    rpc "http://127.0.0.1:$A" eth_sendTransaction '[{"from":"0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266","to":"0x70997970c51812dc3a010c7d01b50e0d17dc79c8","value":"0x1"}]' >/dev/null 2>&1 || true
    sleep "$(python3 -c "print($BLOCK_TIME/2)")"
  done ) & PIDS+=($!)
for _ in $(seq 600); do
    v=$(rpc "http://127.0.0.1:$P" ethpir_status '[]' | python3 -c 'import sys,json; print(json.load(sys.stdin)["result"].get("viewBlock") or "")' 2>/dev/null || true)
    [ -n "$v" ] && break; sleep 0.2
done
python3 - "$A" "$P" "$SECONDS_RUN" "$BLOCK_TIME" "$PUSH" <<'PY'
import json, sys, time, urllib.request
anvil, proxy, run, block_time = f"http://127.0.0.1:{sys.argv[1]}", f"http://127.0.0.1:{sys.argv[2]}", float(sys.argv[3]), float(sys.argv[4])
def rpc(url, method):
    req = urllib.request.Request(url, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": []}).encode(), {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=5))["result"]
lags, seen_at, reached_at = [], {}, {}
end = time.time() + run
while time.time() < end:
    head = int(rpc(anvil, "eth_blockNumber"), 16)
    now = time.time()
    seen_at.setdefault(head, now)
    view = rpc(proxy, "ethpir_status").get("viewBlock") or 0
    for b in range(min(seen_at), view + 1):
        if b in seen_at:
            reached_at.setdefault(b, time.time())
    lags.append(head - view)
    time.sleep(0.1)
lags.sort()
times = sorted(reached_at[b] - seen_at[b] for b in reached_at if b in seen_at and b != min(seen_at))
q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else None
print(json.dumps({"bench": "push-lag", "push": sys.argv[5] == "1", "block_time_s": block_time, "samples": len(lags),
    "lag_blocks_p50": q(lags, 0.5), "lag_blocks_p95": q(lags, 0.95), "lag_blocks_max": lags[-1],
    "within_1_block": sum(l <= 1 for l in lags) / len(lags), "within_4_blocks": sum(l <= 4 for l in lags) / len(lags),
    "blocks_timed": len(times), "block_to_view_ms_p50": round(1000 * q(times, 0.5), 1) if times else None,
    "block_to_view_ms_p99": round(1000 * q(times, 0.99), 1) if times else None}))
PY

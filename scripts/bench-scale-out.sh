#!/usr/bin/env bash
# Past one box, measured on this one (docs/benchmarks.md, "Replicas and row
# shards"): the same W wallets of server-bench against
#   1. one ethpir-server,
#   2. three replicas behind nginx (configs/nginx-ethpir.conf),
#   3. a router (--route-to) in front of three row shards (--shard i/3),
# all on this machine, on a store of 2^LOG2 accounts. One JSON line per
# setup, then each process's resident memory (a shard maps and reads only
# its rows). Needs nginx (Debian: nginx-light).
#   LOG2=22 WALLETS=64 SECS=15 bash scripts/bench-scale-out.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LOG2=${LOG2:-22}
WALLETS=${WALLETS:-64}
SECS=${SECS:-15}
DIR=${DIR:-./server-bench-data}
BIN=target/release
cargo build --release --quiet --bin ethpir-server --bin server-bench
store=$($BIN/server-bench --log2-accounts "$LOG2" --dir "$DIR" --build-only)
# $work, $pids and their cleanup on exit.
source scripts/processes.sh

# serve PORT ARGS...: an ethpir-server on 127.0.0.1:PORT, once it serves.
serve() {
    local port=$1
    shift
    ETHPIR_LOG=warn $BIN/ethpir-server --store "$store" --listen "127.0.0.1:$port" --queue 4096 "$@" &
    pids+=($!)
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/healthz" | grep -q '"snapshots":[1-9]' && return 0
        sleep 0.2
    done
    echo "server on $port did not come up" >&2
    exit 1
}
bench() {
    $BIN/server-bench --log2-accounts "$LOG2" --dir "$DIR" --wallets "$WALLETS" \
        --seconds "$SECS" --url "$1" --setup "$2"
}
rss() {
    for p in "${pids[@]}"; do
        kb=$(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
        echo "{\"setup\":\"$1\",\"pid\":$p,\"rss_mib\":$((kb / 1024)),\"args\":\"$(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-160)\"}"
    done
}
stop_all() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
}

serve 18550
bench http://127.0.0.1:18550 one-server
rss one-server
stop_all

for port in 18551 18552 18553; do serve $port; done
sed -e 's/listen 127.0.0.1:8546;/listen 127.0.0.1:18560;/' \
    -e 's/127.0.0.1:8547 /127.0.0.1:18551 /' -e 's/127.0.0.1:8548 /127.0.0.1:18552 /' \
    -e 's/127.0.0.1:8549 /127.0.0.1:18553 /' configs/nginx-ethpir.conf >"$work/ethpir.conf"
user=""
[ "$(id -u)" = 0 ] && user="user root;"
cat >"$work/nginx.conf" <<CONF
$user
daemon off;
worker_processes 2;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    include $work/ethpir.conf;
}
CONF
/usr/sbin/nginx -p "$work" -c "$work/nginx.conf" &
pids+=($!)
for _ in $(seq 100); do curl -sf http://127.0.0.1:18560/healthz >/dev/null && break; sleep 0.1; done
bench http://127.0.0.1:18560 three-replicas-nginx
rss three-replicas-nginx
stop_all

for i in 0 1 2; do serve $((18570 + i)) --shard "$i/3"; done
serve 18580 --route-to http://127.0.0.1:18570,http://127.0.0.1:18571,http://127.0.0.1:18572
bench http://127.0.0.1:18580 router-three-shards
rss router-three-shards

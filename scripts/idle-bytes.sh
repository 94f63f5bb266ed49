#!/usr/bin/env bash
# What a proxy nobody uses downloads while a chain moves: anvil mining a
# block a second (a transfer in each), `ethpir-snapshot run` following it
# (a base, then a delta a block), `ethpir-server`, and two proxies that no
# wallet reads through: one that never goes idle (`--config` with
# idle_secs = 0) and one idle after 5 s. Prints one JSON line: the blocks
# followed and each proxy's bytes down over them (ethpir_status), and per
# block. Everything started here is stopped on exit.
#
#   scripts/idle-bytes.sh [SECONDS]   (default 60; binaries from
#   target/release: cargo build --release --bin ethpir-snapshot
#   --bin ethpir-server --bin ethpir-proxy)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
bin=${BIN:-target/release}
anvil=.tools/node_modules/.bin/anvil
# $work, $pids and their cleanup on exit.
source scripts/processes.sh

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rpc() { curl -s -X POST "$1" -H 'content-type: application/json' -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$2\",\"params\":$3}"; }

# The dev accounts funded, nothing else: the chain anvil starts from.
python3 - "$work/genesis.json" <<'EOF'
import json, sys
dev = ["0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266", "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"]
alloc = {a: {"balance": "0x21e19e0c9bab2400000"} for a in dev}
json.dump({"config": {"chainId": 4242}, "nonce": "0x0", "timestamp": "0x0",
           "gasLimit": "0x1c9c380", "difficulty": "0x0", "extraData": "0x",
           "alloc": alloc}, open(sys.argv[1], "w"))
EOF

a_port=$(free_port)
"$anvil" --host 127.0.0.1 --port "$a_port" --silent --init "$work/genesis.json" \
    --chain-id 4242 --disable-default-create2-deployer --block-time 1 &
pids+=($!)
node="http://127.0.0.1:$a_port"
until rpc "$node" eth_chainId '[]' | grep -q result; do sleep 0.2; done

"$bin/ethpir-snapshot" --log warn --store "$work/store" run --url "$node" \
    --genesis "$work/genesis.json" --device cpu &
pids+=($!)
s_port=$(free_port)
"$bin/ethpir-server" --log warn --store "$work/store" --listen "127.0.0.1:$s_port" &
pids+=($!)
server="http://127.0.0.1:$s_port"

start_proxy() { # name idle_secs; sets $url (no subshell: it keeps the pid)
    local port
    port=$(free_port)
    printf 'idle_secs = %s\nidle_refresh_secs = 60.0\n' "$2" > "$work/$1.toml"
    "$bin/ethpir-proxy" --log warn --config "$work/$1.toml" --listen "127.0.0.1:$port" \
        --pir-server "$server" --upstream "$node" --cache-dir "$work/cache-$1" &
    pids+=($!)
    url="http://127.0.0.1:$port"
}
start_proxy always-on 0.0
on=$url
start_proxy idle 5.0
idle=$url

# A transfer a block (fee recipient, sender and recipient change).
(
    while true; do
        rpc "$node" eth_sendTransaction '[{"from":"0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266","to":"0x70997970c51812dc3a010c7d01b50e0d17dc79c8","value":"0x1"}]' >/dev/null
        sleep 1
    done
) &
pids+=($!)

status() { rpc "$1" ethpir_status '[]'; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['result'].get('$1'))"; }
until [ "$(status "$on" | field viewBlock)" != "None" ] \
    && [ "$(status "$idle" | field viewBlock)" != "None" ]; do sleep 0.5; done
sleep 10 # both past start-up, the idle one idle
first=$(status "$on" | field viewBlock)
on0=$(status "$on" | field bytesDown)
idle0=$(status "$idle" | field bytesDown)
sleep "$secs"
last=$(status "$on" | field viewBlock)
on1=$(status "$on" | field bytesDown)
idle1=$(status "$idle" | field bytesDown)
blocks=$((last - first))
python3 - "$blocks" "$((on1 - on0))" "$((idle1 - idle0))" "$secs" <<'EOF'
import json, sys
blocks, on, idle, secs = map(int, sys.argv[1:])
print(json.dumps({
    "seconds": secs, "blocks": blocks,
    "always_on_bytes": on, "always_on_bytes_per_block": on // max(blocks, 1),
    "idle_bytes": idle, "idle_bytes_per_block": idle // max(blocks, 1),
    "idle_bytes_per_hour": idle * 3600 // max(secs, 1),
}))
EOF

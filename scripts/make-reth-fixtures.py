#!/usr/bin/env python3
"""Remakes the reth datadirs with contracts of snapshotter/tests/fixtures/reth
(reth-2.5.1-contracts-{v1,v2}.tar.zst and their oracles), from a real reth
dev node.

Not part of the test command: reth is not on crates.io and its build takes
about an hour on 2 cores. Build it once outside this repository (the tag
the fixtures name, v2.5.1), without its default features (their JIT needs
LLVM and a git dependency; nothing they add changes the state):

    git clone --branch v2.5.1 https://github.com/paradigmxyz/reth
    cd reth && cargo build -p reth --bin reth --no-default-features

(about 15 minutes here, 2 cores, with CARGO_PROFILE_DEV_DEBUG=0; the
node's speed does not matter for ~120 blocks). Building from a tree
without git metadata, set VERGEN_GIT_SHA (the tag's commit),
VERGEN_GIT_DESCRIBE=v2.5.1 and VERGEN_GIT_DIRTY=false; where GitHub
cannot be reached, point the workspace's `discv5` git dependency at a
local copy of that revision and drop the optional `revmc` one (it is
only the JIT's).

then, from this repository (anvil's cast and the OpenZeppelin artifacts of
`scripts/install-test-deps.sh` are used; zstd from Debian):

    python3 scripts/make-reth-fixtures.py --reth /path/to/reth/target/debug/reth

For each layout (v1: `--storage.v2=false`, v2: reth 2.x's default) it
starts `reth node --dev` (chain 1337, a block per transaction, every block
persisted at once) in a temporary datadir, drives the same ~120 blocks of
transactions through it with `cast` (see `Chain.run`: ERC-20s with their
balances at slot 0 and slot 2, Multicall3 at its canonical address by its
keyless deployment, transfers, approvals (one unlimited), balances and allowances cleared
to zero, burns, internal transfers through Multicall3, a contract that
self-destructs when called and one that self-destructs in its
constructor, an EIP-7702 delegation that writes storage into an EOA and is
then revoked), records the node's own answers at every block, stops the
node cleanly (SIGINT) and packs the datadir (node secrets removed, the
sparse MDBX file kept sparse).

The oracle (`oracle-<layout>.json.zst`) holds, for every block 0..head:
its hash and state root, the accounts its transactions touched (the
node's prestate tracer in diff mode), and for every account the chain
ever touched: balance (decimal), nonce, code hash and storage root
(`eth_getProof` at that block), and every storage slot the chain ever
wrote, by account, as the node reads it at that block (zero included).
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAST = ROOT / ".tools/node_modules/.bin/cast"
ARTIFACTS = ROOT / ".tools/node_modules/@openzeppelin/contracts/build/contracts"
OUT = ROOT / "snapshotter/tests/fixtures/reth"
MNEMONIC = "test test test test test test test test test test test junk"
ETHER = 10**18

# Multicall3's keyless deployment, as published with Multicall3 (and mined
# on mainnet and most chains): a pre-EIP-155 legacy transaction of its
# creation code from a one-use key, so that it lands at 0xcA11...CA11 on
# any chain. Sent as is; the node checks its signature.
MULTICALL3 = "0xcA11bde05977b3631167028862bE2a173976CA11"
MULTICALL3_DEPLOYER = "0x05f32B3cC3888453ff71B01135B34FF8e41263F2"
MULTICALL3_TX = (ROOT / "scripts/multicall3-deployment.txt").read_text().strip()


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_code(runtime: bytes, prefix: bytes = b"") -> bytes:
    """Creation code: `prefix` (constructor work), then return `runtime`
    (PUSH1 len, DUP1, PUSH1 offset, PUSH1 0, CODECOPY, PUSH1 0, RETURN)."""
    offset = len(prefix) + 11
    assert len(runtime) < 256 and offset < 256
    stub = bytes([0x60, len(runtime), 0x80, 0x60, offset, 0x60, 0, 0x39, 0x60, 0, 0xF3])
    return prefix + stub + runtime


# Runtime: slot 0 += 1 (the code an EOA delegates to: its own slot 0).
COUNTER = bytes.fromhex("600054600101600055" + "00")
# Creation: slot 0 = 1, slot 1 = the value sent; runtime: SELFDESTRUCT to
# the caller (after Cancun: the balance moves, code and storage stay).
VAULT = init_code(bytes.fromhex("33ff"), bytes.fromhex("6001600055" + "34600155"))


def ephemeral(beneficiary: str) -> bytes:
    """Creation code that writes slot 0 and self-destructs to
    `beneficiary` in its constructor: the account never exists after the
    transaction, the value sent goes to the beneficiary."""
    return bytes.fromhex("602a600055" + "73" + beneficiary[2:].lower() + "ff")


def fresh(i: int) -> str:
    return "0x" + f"{0xC0DE00 + i:040x}"


class Node:
    """`reth node --dev` on free loopback ports, stopped with SIGINT."""

    def __init__(self, reth: str, datadir: Path, layout: str):
        self.http = free_port()
        self.url = f"http://127.0.0.1:{self.http}"
        args = [
            reth, "node", "--dev", "--datadir", str(datadir),
            f"--storage.v2={'true' if layout == 'v2' else 'false'}",
            "--http", "--http.addr", "127.0.0.1", "--http.port", str(self.http),
            "--http.api", "eth,debug,net,web3",
            "--rpc.eth-proof-window", "100000",
            "--authrpc.addr", "127.0.0.1", "--authrpc.port", str(free_port()),
            "--port", str(free_port()), "--discovery.port", str(free_port()),
            "--disable-discovery", "--ipcdisable", "--metrics", f"127.0.0.1:{free_port()}",
            "--engine.persistence-threshold", "0",
            "--engine.memory-block-buffer-target", "0",
            "--log.stdout.filter", "info", "--color", "never",
        ]
        self.log = open(datadir.parent / f"reth-{layout}.log", "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                self.rpc("eth_chainId", [])
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise SystemExit(f"reth exited: see {self.log.name}")
                time.sleep(0.5)
        raise SystemExit("reth did not answer within 120 s")

    def rpc(self, method, params):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        req = urllib.request.Request(self.url, body.encode(),
                                     {"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.load(r)
        if "error" in answer:
            raise RuntimeError(f"{method} {params}: {answer['error']}")
        return answer["result"]

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise SystemExit("reth did not stop within 120 s of SIGINT")
        self.log.close()


def cast(*args):
    out = subprocess.run([str(CAST), *args], capture_output=True, text=True)
    # cast exits 0 on some failures (a reverted gas estimate): its error
    # text tells.
    if out.returncode != 0 or out.stderr.startswith("Error"):
        raise RuntimeError(f"cast {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


class Chain:
    """The transactions, each mined in its own block by the dev node."""

    def __init__(self, node: Node):
        self.node = node
        self.keys = [cast("wallet", "private-key", MNEMONIC, str(i)) for i in range(10)]
        self.dev = [cast("wallet", "address", "--private-key", k) for k in self.keys]
        self.contracts = {}

    def send(self, sender: int, *args, value: int = 0, auth: str = None) -> dict:
        cmd = ["send", "--rpc-url", self.node.url, "--private-key", self.keys[sender], "--json"]
        if value:
            cmd += ["--value", str(value)]
        if auth:
            cmd += ["--auth", auth]
        out = cast(*cmd, *args)
        try:
            receipt = json.loads(out)
        except json.JSONDecodeError:
            raise RuntimeError(f"cast send {args}: not a receipt: {out!r}")
        if receipt["status"] != "0x1":
            raise RuntimeError(f"reverted: {args}")
        return receipt

    def deploy(self, sender: int, code: bytes, *ctor, value: int = 0) -> str:
        receipt = self.send(sender, "--create", "0x" + code.hex(), *ctor, value=value)
        return receipt["contractAddress"]

    def run(self):
        d = self.dev
        # Multicall3 by its keyless deployment (its sender funded first).
        self.send(0, MULTICALL3_DEPLOYER, value=ETHER // 10)
        cast("publish", "--rpc-url", self.node.url, MULTICALL3_TX)
        self.wait_for_code(MULTICALL3)
        self.contracts["multicall3"] = MULTICALL3
        # Two ERC-20s: OpenZeppelin 4.9.6's presets. FixedSupply keeps its
        # balances at slot 0 (allowances 1, total supply 2); MinterPauser
        # after AccessControl's two mappings: balances at slot 2.
        plain = self.deploy(0, artifact("ERC20PresetFixedSupply"),
                            "constructor(string,string,uint256,address)",
                            "Plain", "PLN", str(1_000_000 * ETHER), d[0])
        slotted = self.deploy(1, artifact("ERC20PresetMinterPauser"),
                              "constructor(string,string)", "Slotted", "SLT")
        self.contracts.update(plain=plain, slotted=slotted)
        for to, amount in [(d[1], 1000), (d[2], 500), (d[3], 250), (fresh(1), 100)]:
            self.send(1, slotted, "mint(address,uint256)", to, str(amount * ETHER))
        for i, to in enumerate([d[1], d[2], d[3], d[4]] + [fresh(i) for i in range(1, 7)]):
            self.send(0, plain, "transfer(address,uint256)", to, str((i + 1) * 10 * ETHER))
        # Approvals and transfers by the spender.
        self.send(1, plain, "approve(address,uint256)", d[2], str(100 * ETHER))
        self.send(2, plain, "transferFrom(address,address,uint256)", d[1], fresh(7), str(4 * ETHER))
        self.send(3, slotted, "approve(address,uint256)", d[4], str(50 * ETHER))
        self.send(4, slotted, "transferFrom(address,address,uint256)", d[3], fresh(8), str(20 * ETHER))
        # An unlimited approval: a word of 32 bytes.
        self.send(2, slotted, "approve(address,uint256)", MULTICALL3, str(2**256 - 1))
        # Plain transfers of ether.
        self.send(2, fresh(9), value=ETHER)
        self.send(3, d[4], value=2 * ETHER)
        # Words cleared to zero: a whole balance moved away, an allowance
        # taken back, then a balance written again.
        self.send(4, plain, "transfer(address,uint256)", d[5], str(40 * ETHER))
        self.send(3, slotted, "transfer(address,uint256)", d[2], str(230 * ETHER))
        self.send(1, plain, "approve(address,uint256)", d[2], "0")
        self.send(0, plain, "burn(uint256)", str(1000 * ETHER))
        self.send(5, plain, "transfer(address,uint256)", d[4], str(5 * ETHER))
        # Internal transfers: ether through Multicall3 to two fresh accounts.
        self.send(2, MULTICALL3, "aggregate3Value((address,bool,uint256,bytes)[])",
                  f"[({fresh(10)},false,{ETHER},0x),({fresh(11)},false,{2 * ETHER},0x)]",
                  value=3 * ETHER)
        # A Multicall3 transaction that only reads (balances through it).
        self.send(6, MULTICALL3, "aggregate3((address,bool,bytes)[])",
                  f"[({plain},true,{balance_of(d[1])}),({slotted},true,{balance_of(d[2])})]")
        # Self-destructs: one when called (code and storage stay), one in
        # its constructor (the account never exists).
        vault = self.deploy(6, VAULT, value=5 * ETHER)
        self.contracts["vault"] = vault
        self.send(7, vault)
        self.deploy(6, ephemeral(fresh(12)), value=ETHER)
        # EIP-7702: dev account 5 delegates to a counter; calls to it write
        # its own slot 0; then the delegation is revoked (storage stays).
        counter = self.deploy(8, init_code(COUNTER))
        self.contracts["counter"] = counter
        self.send(5, d[5], auth=counter)
        self.send(8, d[5])
        self.send(9, d[5])
        self.send(5, d[5], auth="0x0000000000000000000000000000000000000000")
        self.contracts["delegated"] = d[5]
        # The rest: rounds of token and ether transfers among the dev and
        # fresh accounts, a balance emptied and refilled now and then.
        for i in range(64):
            sender = i % 5
            to = fresh(20 + i % 16)
            kind = i % 4
            if kind == 0:
                self.send(0, plain, "transfer(address,uint256)", to, str((i + 1) * ETHER))
            elif kind == 1:
                self.send(2, slotted, "transfer(address,uint256)", to, str(ETHER // (i + 1)))
            elif kind == 2:
                self.send(sender + 5, to, value=ETHER // 100 * (i + 1))
            else:
                self.send(1, slotted, "mint(address,uint256)", d[3], str(i * ETHER))
                self.send(3, slotted, "transfer(address,uint256)", d[9], str(i * ETHER))
        self.send(9, slotted, "transfer(address,uint256)", d[7], "1")

    def wait_for_code(self, address):
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.node.rpc("eth_getCode", [address, "latest"]) not in ("0x", None):
                return
            time.sleep(0.2)
        raise SystemExit(f"no code at {address} after 60 s")


def artifact(name: str) -> bytes:
    data = json.loads((ARTIFACTS / f"{name}.json").read_text())
    return bytes.fromhex(data["bytecode"][2:])


def balance_of(holder: str) -> str:
    return "0x70a08231" + holder[2:].lower().rjust(64, "0")


def oracle(node: Node, chain: Chain, layout: str) -> dict:
    """The node's own answers at every block (see the module's text)."""
    head = int(node.rpc("eth_blockNumber", []), 16)
    blocks, storage_slots = [], {}
    accounts = set(a.lower() for a in chain.dev) | {MULTICALL3.lower(), MULTICALL3_DEPLOYER.lower()}
    for n in range(head + 1):
        block = node.rpc("eth_getBlockByNumber", [hex(n), False])
        touched = set()
        if n > 0:
            traces = node.rpc("debug_traceBlockByNumber", [hex(n), {
                "tracer": "prestateTracer", "tracerConfig": {"diffMode": True}}])
            for trace in traces:
                for side in ("pre", "post"):
                    for address, account in trace["result"][side].items():
                        touched.add(address.lower())
                        for slot in account.get("storage", {}):
                            storage_slots.setdefault(address.lower(), set()).add(slot)
        accounts |= touched
        blocks.append({"number": n, "hash": block["hash"], "stateRoot": block["stateRoot"],
                       "miner": block["miner"], "touched": sorted(touched)})
    state, storage = {}, {}
    for n in range(head + 1):
        state[n], storage[n] = {}, {}
        for address in sorted(accounts):
            slots = sorted(storage_slots.get(address, ()))
            proof = node.rpc("eth_getProof", [address, slots, hex(n)])
            state[n][address] = {
                "balance": str(int(proof["balance"], 16)),
                "nonce": int(proof["nonce"], 16),
                "codeHash": proof["codeHash"],
                "storageRoot": proof["storageHash"],
            }
            if slots:
                storage[n][address] = {p["key"]: p["value"] for p in proof["storageProof"]}
        log(f"{layout}: oracle at block {n}/{head}")
    return {
        "chainId": int(node.rpc("eth_chainId", []), 16),
        "layout": layout,
        "head": head,
        "contracts": chain.contracts,
        "tokens": [{"address": chain.contracts["plain"], "balanceSlot": 0},
                   {"address": chain.contracts["slotted"], "balanceSlot": 2}],
        "blocks": blocks,
        "accounts": sorted(accounts),
        "state": state,
        "storage": storage,
    }


def pack(datadir: Path, layout: str, out: Path):
    """The datadir without the node's secrets, as a zstd tar whose sparse
    MDBX file stays sparse."""
    for secret in ("jwt.hex", "discovery-secret", "known-peers.json"):
        (datadir / secret).unlink(missing_ok=True)
    archive = out / f"reth-2.5.1-contracts-{layout}.tar.zst"
    name = f"reth-contracts-{layout}"
    tar = subprocess.Popen(["tar", "--sparse", "--sort=name", "--owner=0", "--group=0",
                            "--exclude=mdbx.lck",
                            "--numeric-owner", "-C", str(datadir.parent), "-cf", "-", name],
                           stdout=subprocess.PIPE)
    with open(archive, "wb") as f:
        subprocess.run(["zstd", "-19", "-q", "-c"], stdin=tar.stdout, stdout=f, check=True)
    if tar.wait() != 0:
        raise SystemExit("tar failed")
    log(f"{archive}: {archive.stat().st_size} bytes")


def write_zstd_json(value, path: Path):
    text = json.dumps(value, indent=1, sort_keys=True).encode()
    subprocess.run(["zstd", "-19", "-q", "-f", "-o", str(path)], input=text, check=True)
    log(f"{path}: {path.stat().st_size} bytes")


def make(reth: str, layout: str, work: Path, out: Path):
    datadir = work / f"reth-contracts-{layout}"
    datadir.mkdir()
    node = Node(reth, datadir, layout)
    try:
        chain = Chain(node)
        chain.run()
        answers = oracle(node, chain, layout)
    except BaseException:
        node.stop()
        raise
    node.stop()
    write_zstd_json(answers, out / f"oracle-contracts-{layout}.json.zst")
    pack(datadir, layout, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reth", required=True, help="the reth 2.5.1 binary")
    parser.add_argument("--out", default=str(OUT), help="where the fixtures go")
    parser.add_argument("--layouts", default="v1,v2", help="v1, v2 or both")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="reth-fixtures-"))
    try:
        for layout in args.layouts.split(","):
            make(args.reth, layout, work, Path(args.out))
    finally:
        if args.keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Installs what the test suite needs on a fresh machine (idempotent):
# - a Rust toolchain with rustfmt and clippy (rustup);
# - OpenSSL headers and pkg-config (HTTPS support of the HTTP clients), a
#   C++20 compiler (the host emulator of the CUDA kernels) and libclang (the
#   MDBX bindings of the reth reader run bindgen), microsocks (a SOCKS5
#   server for the proxy's transport test), nginx (the load balancer of
#   the replica test, started by the test itself) and Chromium (the
#   headless browser of the pages' test), from Debian;
# - cargo-machete (unused-dependency check);
# - Foundry's anvil and cast 1.7.1 (npm @foundry-rs/anvil, @foundry-rs/cast)
#   into ./.tools, where the tests look for them;
# - OpenZeppelin Contracts 4.9.6 (npm), whose compiled artifacts give the
#   token tests a real ERC-20 to deploy on anvil;
# - viem 2.57.20 (npm): the wallet library of the token test (readContract,
#   multicall through the proxy), and Multicall3's compiled bytecode;
# - kubernetes-validate 1.37 (PyPI) into ./.tools/kv, which checks the
#   Kubernetes manifests against the API's schemas;
# - geth 1.17.10, built from go-ethereum's Go module (Go's module and
#   build caches keep what a rebuild needs) into ./.tools/geth/bin: the
#   real node the follower's geth test follows;
# - NVRTC and ptxas 13.5 (NVIDIA's PyPI wheels nvidia-cuda-nvrtc and
#   nvidia-cuda-nvcc, no GPU needed) into ./.tools/cuda: the tests compile
#   the CUDA kernels for sm_80 and sm_90 with them on every machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust (https://rustup.rs) first" >&2
    exit 1
fi
if command -v rustup >/dev/null 2>&1; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi

need_apt=()
dpkg -s libssl-dev >/dev/null 2>&1 || need_apt+=(libssl-dev)
dpkg -s pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
command -v microsocks >/dev/null 2>&1 || need_apt+=(microsocks)
command -v ps >/dev/null 2>&1 || need_apt+=(procps)
[ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

# cargo-machete: the test command's check that no crate lists a dependency
# it does not use.
MACHETE_VERSION=0.9.2
if ! cargo machete --version 2>/dev/null | grep -q "$MACHETE_VERSION"; then
    # Unoptimised: it builds in 25 s instead of 60 s and checks the
    # workspace in 5 s instead of 0.7.
    cargo install --locked --quiet --debug cargo-machete --version "$MACHETE_VERSION"
fi

# geth's build (about 9 CPU minutes the first time) runs while the
# downloads below do; the script waits for it at the end.
GETH_VERSION=1.17.10
geth_build=""
if ! .tools/geth/bin/geth version 2>/dev/null | grep -q "^Version: $GETH_VERSION-"; then
    if ! command -v go >/dev/null 2>&1; then
        echo "go not found: install Go (1.24 or newer) to build geth" >&2
        exit 1
    fi
    mkdir -p .tools/geth
    GOBIN="$PWD/.tools/geth/bin" \
        go install "github.com/ethereum/go-ethereum/cmd/geth@v$GETH_VERSION" \
        >.tools/geth/build.log 2>&1 &
    geth_build=$!
fi

FOUNDRY_VERSION=1.7.1
if ! .tools/node_modules/.bin/anvil --version 2>/dev/null | grep -q "$FOUNDRY_VERSION" \
    || ! .tools/node_modules/.bin/cast --version 2>/dev/null | grep -q "$FOUNDRY_VERSION"; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "npm not found: install Node.js to get anvil and cast" >&2
        exit 1
    fi
    mkdir -p .tools
    npm install --silent --no-audit --no-fund --prefix .tools \
        "@foundry-rs/anvil@$FOUNDRY_VERSION" "@foundry-rs/cast@$FOUNDRY_VERSION"
fi
.tools/node_modules/.bin/anvil --version | head -1

OPENZEPPELIN_VERSION=4.9.6
if ! grep -q "\"version\": \"$OPENZEPPELIN_VERSION\"" \
    .tools/node_modules/@openzeppelin/contracts/package.json 2>/dev/null; then
    npm install --silent --no-audit --no-fund --prefix .tools \
        "@openzeppelin/contracts@$OPENZEPPELIN_VERSION"
fi

VIEM_VERSION=2.57.20
if ! grep -q "\"version\": \"$VIEM_VERSION\"" \
    .tools/node_modules/viem/package.json 2>/dev/null; then
    npm install --silent --no-audit --no-fund --prefix .tools "viem@$VIEM_VERSION"
fi

# kubernetes-validate (with the Kubernetes JSON schemas it ships): the
# test command's check of deploy/kubernetes (scripts/check-deploy.sh).
KV_VERSION=1.37.0
if ! ls .tools/kv/kubernetes_validate-$KV_VERSION.dist-info >/dev/null 2>&1; then
    rm -rf .tools/kv
    python3 -m pip install --quiet --root-user-action=ignore --no-warn-script-location --target .tools/kv \
        "kubernetes-validate==$KV_VERSION"
fi

CUDA_TOOLS_VERSION=13.5.37
if ! .tools/cuda/nvidia/cu13/bin/ptxas --version 2>/dev/null | grep -q "V$CUDA_TOOLS_VERSION"; then
    rm -rf .tools/cuda
    # --target keeps them out of every Python environment; the wheels are
    # plain files (a shared library, executables, headers).
    python3 -m pip install --quiet --no-deps --no-warn-script-location --target .tools/cuda \
        "nvidia-cuda-nvrtc==$CUDA_TOOLS_VERSION" "nvidia-cuda-nvcc==$CUDA_TOOLS_VERSION"
fi
.tools/cuda/nvidia/cu13/bin/ptxas --version | tail -1
# The crates the build needs, downloaded while geth still builds (on a
# fresh machine the first cargo command would otherwise download them
# with the cores idle). A failure here is not final: the build fetches
# what is missing.
if [ -n "$geth_build" ]; then
    cargo fetch --locked --quiet || echo "cargo fetch failed; the build will fetch the crates" >&2
fi
if [ -n "$geth_build" ] && ! wait "$geth_build"; then
    cat .tools/geth/build.log >&2
    echo "geth $GETH_VERSION did not build" >&2
    exit 1
fi
.tools/geth/bin/geth version | grep "^Version"
echo "test dependencies ready: $(cargo --version)"

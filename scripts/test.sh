#!/usr/bin/env bash
# The project's test command (README.md, .ci/run), for a fresh machine too:
# installs what the tests need (scripts/install-test-deps.sh, idempotent),
# then formatting, the dependency checks (forbidden and unused), and every
# test with clippy's lints, the PIR math compiled optimised (profile
# test-release).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's start, in seconds since the command began (where a fresh
# machine's time goes: docs/benchmarks.md, "The test command").
started=$SECONDS
phase() { echo "[test.sh +$((SECONDS - started)) s] $*" >&2; }
phase installs
bash scripts/install-test-deps.sh
phase "format and dependency checks"
cargo fmt --all -- --check
bash scripts/check-deps.sh
python3 scripts/check-modules.py
bash scripts/check-deploy.sh
cargo machete
phase "the test build with clippy's lints, then the tests"
# clippy lints the workspace's crates as the test build compiles them:
# clippy-driver as the workspace's compiler (what `cargo clippy` sets up
# for a check), so that no dependency is checked for clippy and then
# compiled again for the tests (2.5 minutes of a cold build on a 2-core
# Xeon: docs/benchmarks.md, "Lints in the test build"). The targets are clippy's --all-targets but for benches (there
# are none); a lint fails the build, and so the command.
driver="$(rustc --print sysroot)/bin/clippy-driver"
[ -x "$driver" ] || driver=$(command -v clippy-driver) || {
    echo "no clippy-driver beside rustc or on PATH: rustup component add clippy" >&2
    exit 1
}
export RUSTC_WORKSPACE_WRAPPER="$driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# The tests run in a session of their own, so that anything they started
# and left behind (anvil, nginx, a server, a proxy; orphans included) can
# be found afterwards: a test must stop every process it starts.
setsid cargo test --workspace --all-features --profile test-release &
session=$!
trap 'kill -TERM -- "-$session" 2>/dev/null' INT TERM
status=0
wait "$session" || status=$?
trap - INT TERM
# (Zombies are skipped: they are gone once init reaps them.)
left=$(ps -e -o pid=,sid=,stat=,args= | awk -v s="$session" '$2 == s && $3 !~ /^Z/')
if [ -n "$left" ]; then
    echo "processes started by the tests are still running (each test must stop what it starts):" >&2
    echo "$left" >&2
    kill -KILL -- "-$session" 2>/dev/null || true
    ps -e -o pid=,sid= | awk -v s="$session" '$2 == s {print $1}' | xargs -r kill -KILL 2>/dev/null || true
    exit 1
fi
phase "done (status $status)"
exit "$status"

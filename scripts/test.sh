#!/usr/bin/env bash
# The project's test command (README.md, .ci/run), for a fresh machine too:
# installs what the tests need (scripts/install-test-deps.sh, idempotent),
# then formatting, the dependency checks (forbidden and unused), lints, and
# every test, with the PIR math compiled optimised (profile test-release).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
cargo fmt --all -- --check
bash scripts/check-deps.sh
bash scripts/check-deploy.sh
cargo machete
cargo clippy --workspace --all-targets --all-features --profile test-release -- -D warnings
cargo test --workspace --all-features --profile test-release

#!/usr/bin/env bash
# Validates the Kubernetes manifests in deploy/kubernetes against the JSON
# schemas of the Kubernetes API version they are written for (strict: an
# unknown field is an error), with kubernetes-validate from PyPI, which
# ships the schemas (installed into .tools/kv by install-test-deps.sh).
# Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBERNETES_VERSION=1.33.0
PYTHONPATH=.tools/kv python3 -m kubernetes_validate \
    --kubernetes-version "$KUBERNETES_VERSION" --strict --quiet deploy/kubernetes/*.yaml
echo "deploy/kubernetes: valid against Kubernetes $KUBERNETES_VERSION (strict)"

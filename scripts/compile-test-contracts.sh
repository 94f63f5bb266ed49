#!/usr/bin/env bash
# Remakes the compiled test contracts of e2e/contracts (the .bin files the
# end-to-end tests deploy on anvil) from their sources, with solc-js 0.4.26
# from npm (optimiser on). Not part of the test command: the outputs are
# committed; run this after changing a .sol file.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm install --silent --no-save solc@0.4.26 >/dev/null)
for sol in e2e/contracts/*.sol; do
    name=$(basename "$sol" .sol)
    (cd "$work" && node node_modules/solc/solcjs --bin --optimize -o out "$OLDPWD/$sol" 2>/dev/null)
    out=$(ls "$work"/out/*"_${name}_sol_${name}.bin")
    # One line of hex creation code, no 0x.
    tr -d '\n' < "$out" > "e2e/contracts/$name.bin"
    echo "e2e/contracts/$name.bin: $(wc -c < "e2e/contracts/$name.bin") hex digits"
done

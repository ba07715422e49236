#!/usr/bin/env bash
# Builds a Python policy (APP_DIR/app.py on this SDK) into a component with componentize-py
# 0.25.1, pinned (installed under target/ by .ci/policy-toolchains), against the repository's
# contract (wit/).
#
#   sdk/python/build.sh APP_DIR OUT.wasm
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
APP="$(realpath "${1:?usage: build.sh APP_DIR OUT.wasm}")"
OUT="$(realpath -m "${2:?usage: build.sh APP_DIR OUT.wasm}")"
TOOL="$ROOT/target/componentize-py/bin/componentize-py"
VERSION=0.25.1

if ! "$TOOL" --version 2>/dev/null | grep -q " $VERSION\$"; then
  echo "componentize-py $VERSION is not installed under target/: run .ci/policy-toolchains" >&2
  exit 1
fi
mkdir -p "$(dirname "$OUT")"
cd "$ROOT"
"$TOOL" -d wit -w policy-module componentize -p "$APP" -p sdk/python app -o "$OUT"

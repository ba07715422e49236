#!/usr/bin/env bash
# Builds a JavaScript policy of this repository into a component, with the toolchain the
# repository pins (.ci/policy-toolchains installs it under target/): esbuild 0.28.2 bundles ENTRY
# and @cubepod/policy (sdk/js) into one ES module, since componentize-js reads one file and
# resolves no package names; then componentize-js 0.23.0 (StarlingMonkey) builds the
# `policy-module` world of wit/ from it, without the HTTP features (the host links no wasi:http).
# With --quickjs, componentize-qjs 0.4.5 (QuickJS) builds it instead, with its non-async runtime
# (the host runs components without the component-model async ABI): a component a tenth the
# size, whose s64 and u64 values are numbers (sdk/js/src/component.js converts them).
#
# OUT is kept when no source (ENTRY's directory, sdk/js/src, wit/) is newer than it, so that a CI
# run (.ci/policy-examples, then the tests) builds each component once.
#
#   sdk/js/build.sh [--quickjs] ENTRY.js OUT.wasm
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ESBUILD="${ESBUILD:-$ROOT/target/esbuild/node_modules/.bin/esbuild}"
COMPONENTIZE_JS="${COMPONENTIZE_JS:-$ROOT/target/componentize-js/node_modules/.bin/componentize-js}"
COMPONENTIZE_QJS="${COMPONENTIZE_QJS:-$ROOT/target/componentize-qjs/node_modules/.bin/componentize-qjs}"
quickjs=false
if [ "${1:-}" = --quickjs ]; then
  quickjs=true
  shift
fi
[ $# -eq 2 ] || { echo "usage: $0 [--quickjs] ENTRY.js OUT.wasm" >&2; exit 2; }
entry="$(realpath "$1")"
out="$(realpath -m "$2")"
if $quickjs; then componentize="$COMPONENTIZE_QJS"; else componentize="$COMPONENTIZE_JS"; fi
for tool in "$ESBUILD" "$componentize"; do
  [ -x "$tool" ] || { echo "$tool is missing: run .ci/policy-toolchains" >&2; exit 1; }
done
[ "$("$ESBUILD" --version)" = 0.28.2 ] || { echo "esbuild 0.28.2 is pinned: run .ci/policy-toolchains" >&2; exit 1; }

if [ -f "$out" ] && [ -z "$(find "$(dirname "$entry")" "$ROOT/sdk/js/src" "$ROOT/wit" \
  \( -name node_modules -o -name target \) -prune -o -type f -newer "$out" -print -quit)" ]; then
  echo "$out: up to date"
  exit 0
fi
mkdir -p "$(dirname "$out")"
bundle="${out%.wasm}.bundle.js"
# The contract's interfaces stay imports, which componentize-js binds to the world's.
"$ESBUILD" "$entry" --bundle --format=esm --platform=neutral --log-level=warning \
  --alias:@cubepod/policy="$ROOT/sdk/js/src" --external:'cubepod:*' --outfile="$bundle" \
  --define:CUBEPOD_INT64_AS_NUMBER="$quickjs"
# componentize-js resolves the module inside its working directory.
cd "$(dirname "$bundle")"
if $quickjs; then
  "$COMPONENTIZE_QJS" --sync -w "$ROOT/wit" -n policy-module -j "$(basename "$bundle")" \
    -o "$out" >/dev/null
else
  "$COMPONENTIZE_JS" -w "$ROOT/wit" -n policy-module -d http fetch-event \
    -o "$out" "$(basename "$bundle")" >/dev/null
fi
echo "$out: $(stat -c %s "$out") bytes"

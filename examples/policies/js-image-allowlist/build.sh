#!/usr/bin/env bash
# Builds the component (target/js-image-allowlist.wasm, or OUT) from component.js with the
# toolchain the repository pins: sdk/js/build.sh (esbuild 0.28.2, componentize-js 0.23.0, both
# installed by .ci/policy-toolchains); with --quickjs, by componentize-qjs 0.4.5 (QuickJS) instead.
#
#   ./build.sh [--quickjs] [OUT.wasm]
#   cubepod-controller policy test target/js-image-allowlist.wasm scenarios
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
engine=()
if [ "${1:-}" = --quickjs ]; then
  engine=(--quickjs)
  shift
fi
exec "$HERE/../../../sdk/js/build.sh" "${engine[@]}" "$HERE/component.js" \
  "${1:-$HERE/target/js-image-allowlist.wasm}"

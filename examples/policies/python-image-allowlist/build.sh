#!/usr/bin/env bash
# Builds this policy into a component with the SDK's build script (componentize-py 0.25.1,
# pinned, installed under target/ by .ci/policy-toolchains).
#
#   examples/policies/python-image-allowlist/build.sh OUT.wasm
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$HERE/../../../sdk/python/build.sh" "$HERE" "${1:?usage: build.sh OUT.wasm}"

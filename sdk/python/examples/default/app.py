"""cubepod-controller's default policy, on the Python SDK: every decision the SDK's default.
host/tests/differential.rs builds it and checks that it writes what the Rust default writes,
on every scenario of tests/scenarios.

Build (from the repository's root, after .ci/policy-toolchains):
  target/componentize-py/bin/componentize-py -d wit -w policy-module componentize \
    -p sdk/python/examples/default -p sdk/python app -o default-python.wasm
"""

import cubepod_policy


class DefaultPolicy(cubepod_policy.Policy):
    NAME = "cubepod-default-python"
    VERSION = "0.1.0"


# componentize-py exports the class this module names `Policy`.
Policy = cubepod_policy.export(DefaultPolicy)

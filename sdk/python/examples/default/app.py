"""cubepod-controller's default policy, on the Python SDK: every decision the SDK's default.
host/tests/differential.rs builds it and checks that it writes what the Rust default writes,
on every scenario of tests/scenarios.

Build: sdk/python/build.sh sdk/python/examples/default OUT.wasm (after .ci/policy-toolchains).
"""

import cubepod_policy


class DefaultPolicy(cubepod_policy.Policy):
    NAME = "cubepod-default-python"
    VERSION = "0.1.0"


# componentize-py exports the class this module names `Policy`.
Policy = cubepod_policy.export(DefaultPolicy)

"""A Python policy (componentize-py) for the host's tests: it describes itself, then raises from
`reconcile-sandbox` after printing what the WASI stubs gave it (the wall clock, random bytes, a
file open), and sleeps in `cleanup-sandbox`. The tests check that the host loads it (the
`exports` export componentize-py adds, the Python runtime's WASI imports), that its output and
traceback reach the call's error, the same at every call, and that a sleep traps.

Build (from the repository's root, after .ci/policy-toolchains):
  target/componentize-py/bin/componentize-py -d wit -w policy-module componentize \
    -p tests/policies/python-raises app -o python-raises.wasm
"""

import os
import sys
import time

from wit_world import exports


class Policy(exports.Policy):
    def describe(self) -> exports.policy.PolicyInfo:
        return exports.policy.PolicyInfo(
            name="python-raises", version="0.1.0", contract_version="0.2.0"
        )

    def reconcile_sandbox(self, input):
        try:
            open("/etc/hostname").close()
            opened = "opened /etc/hostname"
        except OSError as e:
            opened = f"open refused ({type(e).__name__})"
        print(f"clock {time.time()} random {os.urandom(8).hex()} {opened}")
        raise ValueError(f"no decision for sandbox {input.sandbox.name}")

    def cleanup_sandbox(self, now, sandbox, observed):
        print("sleeping", file=sys.stderr)
        time.sleep(1)
        raise ValueError("woke up")

    def reconcile_pool(self, input):
        raise ValueError("no pool")

    def reap(self, now, namespace, sandboxes):
        return []

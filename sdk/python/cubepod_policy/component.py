"""The component's side: the class componentize-py exports, which converts the host's values
(the bindings componentize-py generates from `wit/`) to the SDK's types, calls the policy,
and converts its answer back; and the host's `kube-client`, whose errors become
`cubepod_policy.errors.KubeError`s. Imported only inside a component (`wit_world` exists only
there): `cubepod_policy.export` does it."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Dict, Optional, Type

from componentize_py_types import Err  # type: ignore[import-not-found]
from wit_world import exports as wit_exports  # type: ignore[import-not-found]
from wit_world.exports import policy as wit_policy  # type: ignore[import-not-found]
from wit_world.imports import kube_client as wit_client  # type: ignore[import-not-found]
from wit_world.imports import types as wit_types  # type: ignore[import-not-found]

from . import errors, types
from .policy import Policy

_ERRORS = {
    "KubeError_NotFound": errors.NotFound,
    "KubeError_Conflict": errors.Conflict,
    "KubeError_Refused": errors.Refused,
    "KubeError_Invalid": errors.Invalid,
    "KubeError_Other": errors.Other,
}
_WIT_ERRORS = {
    errors.NotFound: wit_types.KubeError_NotFound,
    errors.Conflict: wit_types.KubeError_Conflict,
    errors.Refused: wit_types.KubeError_Refused,
    errors.Invalid: wit_types.KubeError_Invalid,
    errors.Other: wit_types.KubeError_Other,
}


def _wit_class(name: str) -> Any:
    return getattr(wit_types, name, None) or getattr(wit_policy, name)


def to_sdk(value: Any) -> Any:
    """A bindings value as the SDK's: same class names, fields and enum members."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, list):
        return [to_sdk(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_sdk(v) for v in value)
    if isinstance(value, enum.Enum):
        return getattr(types, type(value).__name__)[value.name]
    cls = getattr(types, type(value).__name__)
    return cls(**{f.name: to_sdk(getattr(value, f.name)) for f in dataclasses.fields(cls)})


def to_wit(value: Any) -> Any:
    """An SDK value as the bindings': the inverse of `to_sdk`."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, list):
        return [to_wit(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_wit(v) for v in value)
    if isinstance(value, enum.Enum):
        return _wit_class(type(value).__name__)[value.name]
    cls = _wit_class(type(value).__name__)
    return cls(**{f.name: to_wit(getattr(value, f.name)) for f in dataclasses.fields(value)})


def _sdk_error(err: Any) -> errors.KubeError:
    value = err.value
    if isinstance(value, wit_types.KubeError_Retryable):
        return errors.Retryable(value.value.message, value.value.delay_ms)
    return _ERRORS.get(type(value).__name__, errors.Other)(value.value)


def _wit_error(error: errors.KubeError) -> Err:
    if isinstance(error, errors.Retryable):
        return Err(wit_types.KubeError_Retryable(wit_types.RetryAfter(error.delay_ms, error.message)))
    return Err(_WIT_ERRORS.get(type(error), wit_types.KubeError_Other)(error.message))


class HostClient:
    """The host's `kube-client`: a failed call raises the SDK's KubeError."""

    @staticmethod
    def _call(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Err as err:
            raise _sdk_error(err) from None

    def ensure_pvc(self, namespace: str, name: str, manifest: str) -> None:
        self._call(wit_client.ensure_pvc, namespace, name, manifest)

    def delete_pvc(self, namespace: str, name: str) -> None:
        self._call(wit_client.delete_pvc, namespace, name)

    def ensure_pod(self, namespace: str, name: str, manifest: str) -> Optional[str]:
        return self._call(wit_client.ensure_pod, namespace, name, manifest)

    def delete_pod(self, namespace: str, name: str) -> None:
        self._call(wit_client.delete_pod, namespace, name)

    def ensure_secret(self, namespace: str, name: str, manifest: str) -> None:
        self._call(wit_client.ensure_secret, namespace, name, manifest)

    def delete_secret(self, namespace: str, name: str) -> None:
        self._call(wit_client.delete_secret, namespace, name)

    def apply_network_policy(self, namespace: str, name: str, manifest: str) -> None:
        self._call(wit_client.apply_network_policy, namespace, name, manifest)

    def delete_network_policy(self, namespace: str, name: str) -> None:
        self._call(wit_client.delete_network_policy, namespace, name)

    def apply_service(self, namespace: str, name: str, manifest: str) -> None:
        self._call(wit_client.apply_service, namespace, name, manifest)

    def delete_service(self, namespace: str, name: str) -> None:
        self._call(wit_client.delete_service, namespace, name)


def export(policy_class: Type[Policy]) -> type:
    """The class componentize-py exports (the app module must name it `Policy`), calling one
    instance of `policy_class` with the host's client."""
    policy = policy_class()
    client = HostClient()

    def guarded(call: Any) -> Any:
        try:
            return to_wit(call())
        except errors.KubeError as error:
            raise _wit_error(error) from None

    class Exported(wit_exports.Policy):
        def describe(self) -> Any:
            return to_wit(policy.describe())

        def reconcile_sandbox(self, input: Any) -> Any:
            return guarded(lambda: policy.reconcile_sandbox(client, to_sdk(input)))

        def cleanup_sandbox(self, now: int, sandbox: Any, observed: Any) -> Any:
            return guarded(lambda: policy.cleanup_sandbox(client, now, to_sdk(sandbox),
                                                          to_sdk(observed)))

        def reconcile_pool(self, input: Any) -> Any:
            return guarded(lambda: policy.reconcile_pool(to_sdk(input)))

        def reap(self, now: int, namespace: str, sandboxes: Any) -> Any:
            return to_wit(policy.reap(now, namespace, to_sdk(sandboxes)))

    Exported.__name__ = "Policy"
    return Exported


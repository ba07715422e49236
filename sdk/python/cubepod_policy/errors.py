"""Why a kube-client call failed (`kube-error` in the contract), as exceptions that carry the
host's message. A kube-client call raises one; a decision that lets it propagate (or raises
one of its own) returns it to the host as the call's error, which the host reports on the
object and retries as the error's kind says."""

from __future__ import annotations


class KubeError(Exception):
    """The base of the contract's errors: `message` says what went wrong."""

    #: The case of `kube-error` this class stands for.
    kind = "other"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self), self.message))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class NotFound(KubeError):
    """The object does not exist."""

    kind = "not-found"


class Conflict(KubeError):
    """A write conflicted with the object's current version."""

    kind = "conflict"


class Refused(KubeError):
    """The host refused the call at the boundary (namespace, kind, ownership, manifest)."""

    kind = "refused"


class Invalid(KubeError):
    """The API server rejected the object as invalid."""

    kind = "invalid"


class Retryable(KubeError):
    """Transient: the host tries again after `delay_ms`."""

    kind = "retryable"

    def __init__(self, message: str, delay_ms: int) -> None:
        super().__init__(message)
        self.delay_ms = delay_ms

    def __repr__(self) -> str:
        return f"Retryable({self.message!r}, delay_ms={self.delay_ms})"


class Other(KubeError):
    """Any other failure."""

    kind = "other"

"""Domain errors. Each carries a canonical code; every dialect (operator envelope, seed 002's
rpcStatus, Sylve's envelope) maps these codes to its own status in exactly one place."""

from typing import Any


class JoinplaneError(Exception):
    code = "INTERNAL"

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class InvalidArgument(JoinplaneError):
    code = "INVALID_ARGUMENT"


class Unauthenticated(JoinplaneError):
    code = "UNAUTHENTICATED"


class PermissionDenied(JoinplaneError):
    code = "PERMISSION_DENIED"


class NotFound(JoinplaneError):
    code = "NOT_FOUND"


class AlreadyExists(JoinplaneError):
    code = "ALREADY_EXISTS"


class InvalidState(JoinplaneError):
    code = "INVALID_STATE"


class FailedPrecondition(JoinplaneError):
    code = "FAILED_PRECONDITION"


class PayloadTooLarge(JoinplaneError):
    code = "PAYLOAD_TOO_LARGE"


class ResourceExhausted(JoinplaneError):
    code = "RESOURCE_EXHAUSTED"


class Unavailable(JoinplaneError):
    code = "UNAVAILABLE"


class Internal(JoinplaneError):
    code = "INTERNAL"


class Aborted(JoinplaneError):
    """A concurrent request changed what this one decided on; retrying is safe."""

    code = "ABORTED"


class OutOfTime(Unavailable):
    """The invocation is about to run out of time (see joinplane.deadline): nothing more was
    attempted. Every dialect answers 503 in its own envelope with `Retry-After`."""

    def __init__(
        self, message: str, retry_after_seconds: int = 1, details: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message, details)
        self.retry_after_seconds = retry_after_seconds

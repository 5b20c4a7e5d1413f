"""Domain errors. Each carries a canonical code and a stable reason; every dialect (operator
envelope, levers9 JoinMachine's rpcStatus, Sylve's envelope) maps these codes to its own status in exactly one
place, and shows the reason where its envelope can hold one.

The code says how to treat the answer in general (retry, fix the request, re-authenticate); the
reason says which refusal it was, so a client never has to read the English message. A reason is
part of the wire contract: it never changes once shipped, new ones are added to this catalogue and
to docs/join.md's "Refusal reasons". Raise sites that a client needs to tell apart pass `reason=`;
the rest carry their class's default. `metadata` holds string facts a client may act on (the join
request's id, the operator's rejection reason), as google.rpc.ErrorInfo's map<string, string>.
"""

from typing import Any

# --- the reason catalogue ----------------------------------------------------------------------
# Defaults of the generic classes.
VALIDATION_FAILED = "VALIDATION_FAILED"
UNAUTHENTICATED = "UNAUTHENTICATED"
PERMISSION_DENIED = "PERMISSION_DENIED"
NOT_FOUND = "NOT_FOUND"
ALREADY_EXISTS = "ALREADY_EXISTS"
INVALID_STATE = "INVALID_STATE"
FAILED_PRECONDITION = "FAILED_PRECONDITION"
PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
CONCURRENT_CHANGE = "CONCURRENT_CHANGE"
UNAVAILABLE = "UNAVAILABLE"
OUT_OF_TIME = "OUT_OF_TIME"
INTERNAL = "INTERNAL"
# Joining and renewing.
JOIN_TOKEN_INVALID = "JOIN_TOKEN_INVALID"
WRONG_POOL = "WRONG_POOL"
POOL_NOT_FOUND = "POOL_NOT_FOUND"
POOL_ARCHIVED = "POOL_ARCHIVED"
POOL_CA_EXPIRED = "POOL_CA_EXPIRED"
PREFLIGHT_FAILED = "PREFLIGHT_FAILED"
JOIN_DENIED = "JOIN_DENIED"
JOIN_REQUEST_REJECTED = "JOIN_REQUEST_REJECTED"
JOIN_REQUEST_EXPIRED = "JOIN_REQUEST_EXPIRED"
JOIN_REQUEST_NOT_PENDING = "JOIN_REQUEST_NOT_PENDING"
KEY_RETIRED = "KEY_RETIRED"
KEY_IN_USE = "KEY_IN_USE"
MACHINE_REVOKED = "MACHINE_REVOKED"
MACHINE_TOKEN_INVALID = "MACHINE_TOKEN_INVALID"
MACHINE_HAS_NO_KEY = "MACHINE_HAS_NO_KEY"
# Certificate authorities: importing an upstream-signed CA (joinplane.upstream).
NO_PENDING_CA = "NO_PENDING_CA"
CA_KEY_MISMATCH = "CA_KEY_MISMATCH"
CA_CERTIFICATE_NOT_VALID = "CA_CERTIFICATE_NOT_VALID"
CA_KEY_TOO_SMALL = "CA_KEY_TOO_SMALL"
CA_KEY_UNSUPPORTED = "CA_KEY_UNSUPPORTED"
CA_SIGNATURE_TOO_WEAK = "CA_SIGNATURE_TOO_WEAK"
CA_NAME_CONSTRAINTS_EXCLUDE_POOL = "CA_NAME_CONSTRAINTS_EXCLUDE_POOL"
# Rotating a CA in phases: a prepared CA waits for its activation (joinplane.ca).
CA_ROTATION_PREPARED = "CA_ROTATION_PREPARED"
NO_PREPARED_CA = "NO_PREPARED_CA"
# Proof of possession (joinplane.proof).
PROOF_REQUIRED = "PROOF_REQUIRED"
PROOF_MALFORMED = "PROOF_MALFORMED"
PROOF_STALE = "PROOF_STALE"
PROOF_INVALID = "PROOF_INVALID"
PROOF_REPLAYED = "PROOF_REPLAYED"
# TPM credential activation (docs/tpm.md): one reason for every way an activation answer fails.
TPM_ACTIVATION_FAILED = "TPM_ACTIVATION_FAILED"
TPM_ACTIVATION_REQUIRED = "TPM_ACTIVATION_REQUIRED"
# The AWS IAM join method (docs/aws.md): the signed GetCallerIdentity request a machine sends.
AWS_REQUEST_INVALID = "AWS_REQUEST_INVALID"
AWS_BINDING_INVALID = "AWS_BINDING_INVALID"
AWS_REQUEST_STALE = "AWS_REQUEST_STALE"
AWS_IDENTITY_REJECTED = "AWS_IDENTITY_REJECTED"

CATALOGUE = frozenset(
    {
        VALIDATION_FAILED,
        UNAUTHENTICATED,
        PERMISSION_DENIED,
        NOT_FOUND,
        ALREADY_EXISTS,
        INVALID_STATE,
        FAILED_PRECONDITION,
        PAYLOAD_TOO_LARGE,
        CONCURRENT_CHANGE,
        UNAVAILABLE,
        OUT_OF_TIME,
        INTERNAL,
        JOIN_TOKEN_INVALID,
        WRONG_POOL,
        POOL_NOT_FOUND,
        POOL_ARCHIVED,
        POOL_CA_EXPIRED,
        PREFLIGHT_FAILED,
        JOIN_DENIED,
        JOIN_REQUEST_REJECTED,
        JOIN_REQUEST_EXPIRED,
        JOIN_REQUEST_NOT_PENDING,
        KEY_RETIRED,
        KEY_IN_USE,
        MACHINE_REVOKED,
        MACHINE_TOKEN_INVALID,
        MACHINE_HAS_NO_KEY,
        NO_PENDING_CA,
        CA_KEY_MISMATCH,
        CA_CERTIFICATE_NOT_VALID,
        CA_KEY_TOO_SMALL,
        CA_KEY_UNSUPPORTED,
        CA_SIGNATURE_TOO_WEAK,
        CA_NAME_CONSTRAINTS_EXCLUDE_POOL,
        CA_ROTATION_PREPARED,
        NO_PREPARED_CA,
        PROOF_REQUIRED,
        PROOF_MALFORMED,
        PROOF_STALE,
        PROOF_INVALID,
        PROOF_REPLAYED,
        TPM_ACTIVATION_FAILED,
        TPM_ACTIVATION_REQUIRED,
        AWS_REQUEST_INVALID,
        AWS_BINDING_INVALID,
        AWS_REQUEST_STALE,
        AWS_IDENTITY_REJECTED,
    }
)
# ErrorInfo's `domain`: the service that names the reasons.
DOMAIN = "joinplane"


class JoinplaneError(Exception):
    code = "INTERNAL"
    reason = INTERNAL

    def __init__(
        self,
        message: str,
        details: list[dict[str, Any]] | None = None,
        *,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []
        if reason is not None:
            self.reason = reason
        self.metadata = metadata or {}


class InvalidArgument(JoinplaneError):
    code = "INVALID_ARGUMENT"
    reason = VALIDATION_FAILED


class Unauthenticated(JoinplaneError):
    code = "UNAUTHENTICATED"
    reason = UNAUTHENTICATED


class PermissionDenied(JoinplaneError):
    code = "PERMISSION_DENIED"
    reason = PERMISSION_DENIED


class NotFound(JoinplaneError):
    code = "NOT_FOUND"
    reason = NOT_FOUND


class AlreadyExists(JoinplaneError):
    code = "ALREADY_EXISTS"
    reason = ALREADY_EXISTS


class InvalidState(JoinplaneError):
    code = "INVALID_STATE"
    reason = INVALID_STATE


class FailedPrecondition(JoinplaneError):
    code = "FAILED_PRECONDITION"
    reason = FAILED_PRECONDITION


class PayloadTooLarge(JoinplaneError):
    code = "PAYLOAD_TOO_LARGE"
    reason = PAYLOAD_TOO_LARGE


class Unavailable(JoinplaneError):
    code = "UNAVAILABLE"
    reason = UNAVAILABLE


class Internal(JoinplaneError):
    code = "INTERNAL"
    reason = INTERNAL


class Aborted(JoinplaneError):
    """A concurrent request changed what this one decided on; retrying is safe."""

    code = "ABORTED"
    reason = CONCURRENT_CHANGE


class RetryLater(Unavailable):
    """Nothing was done, and asking again after `retry_after_seconds` is safe and likely to work (a
    dependency throttled us, or time ran out). Every dialect answers 503 in its own envelope with
    `Retry-After`."""

    def __init__(
        self, message: str, retry_after_seconds: int = 1, details: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message, details)
        self.retry_after_seconds = retry_after_seconds


class OutOfTime(RetryLater):
    """The invocation is about to run out of time (see joinplane.deadline): nothing more was
    attempted."""

    reason = OUT_OF_TIME

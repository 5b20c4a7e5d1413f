"""What the server's refusal of a machine's join or renewal means, and the exit code it ends in.

The server tells outcomes apart by gRPC code, and PERMISSION_DENIED (7) covers four of them
(rejected, expired, revoked, denied by an attestor); the google.rpc.ErrorInfo in `details` names
which one (`reason`, docs/join.md "Refusal reasons") and `classify_denial` switches on it, never on
the English message. An unrecognised 7 is treated as a denial."""

from __future__ import annotations

from dataclasses import dataclass

from joinplane_cli.api import ApiError
from joinplane_cli.exits import Exit

# The server's refusal reasons (joinplane.errors) for a PERMISSION_DENIED, and the exit code of each.
DENIAL_EXITS = {
    "JOIN_REQUEST_REJECTED": Exit.REJECTED,
    "JOIN_REQUEST_EXPIRED": Exit.EXPIRED,
    "JOIN_DENIED": Exit.DENIED,
    "MACHINE_REVOKED": Exit.DENIED,
    "KEY_RETIRED": Exit.DENIED,
}
# The proof of possession's refusals: the machine's key or clock, not its token, is the problem.
PROOF_REASONS = frozenset(
    {"PROOF_REQUIRED", "PROOF_MALFORMED", "PROOF_STALE", "PROOF_INVALID", "PROOF_REPLAYED"}
)
# The server's refusal of a TPM's credential activation (wrong TPM, stale or replayed challenge).
TPM_ACTIVATION_FAILED = "TPM_ACTIVATION_FAILED"
# A re-join through a token that wants the TPM a machine joined with activated again.
TPM_ACTIVATION_REQUIRED = "TPM_ACTIVATION_REQUIRED"


@dataclass(frozen=True)
class Denial:
    exit_code: Exit
    headline: str
    reason: str = ""
    request_id: str = ""


def classify_denial(failed: ApiError) -> Denial:
    reason, request_id = failed.reason, failed.metadata.get("requestId", "")
    exit_code = DENIAL_EXITS.get(reason, Exit.DENIED)
    if exit_code == Exit.REJECTED:
        return Denial(
            Exit.REJECTED,
            f"Join request {request_id or '(unknown)'} was rejected by an operator.",
            failed.metadata.get("rejectionReason", ""),
            request_id,
        )
    if exit_code == Exit.EXPIRED:
        if not request_id:
            return Denial(Exit.EXPIRED, "This machine's join request no longer exists (it expired long ago).")
        return Denial(
            Exit.EXPIRED,
            f"Join request {request_id} expired before it was approved and used.",
            request_id=request_id,
        )
    if reason == "MACHINE_REVOKED":
        return Denial(Exit.DENIED, "This machine has been revoked by an operator.", failed.server_message)
    return Denial(Exit.DENIED, "The join was denied.", failed.server_message.removeprefix("join denied: "))

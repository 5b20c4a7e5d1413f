"""The join's decisions (docs/join.md, "The decision, in order"), as pure functions of typed facts.

No I/O and no clock: `joinplane.join` reads the facts (token, pool, the identity's record, its
machine or request, the attestors' votes, the proof it verified, the time), asks here what they
mean, and commits the outcome through `joinplane.dal.joins`. A refusal is an outcome (`Refuse`)
carrying the error to answer with, so every rule is one row of tests/join/test_join_decisions.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from joinplane import attestors, errors
from joinplane.attestors import Vote
from joinplane.dal.machines import IdentityRecord, MachineRecord, TpmFactsRecord
from joinplane.dal.pools import PoolRecord
from joinplane.dal.requests import ApprovalRecord, JoinRequestRecord
from joinplane.dal.tokens import JoinTokenRecord
from joinplane.errors import (
    Aborted,
    FailedPrecondition,
    Internal,
    JoinplaneError,
    PermissionDenied,
    Unauthenticated,
)

# One message for every token refusal: unknown, revoked, expired and used up look alike.
REFUSED = "join token is not valid"
# Told to the holder of another pool's token: the same words whether the key has a machine or a
# request elsewhere, so the answer does not say where (or that) this key is known.
ELSEWHERE = "this join token cannot be used for this key; join with a token of the key's own pool"
# Identities without a key: `fp-` + SHA-256 of the machineFingerprint. Nothing to prove with.
FINGERPRINT_PREFIX = "fp-"

REVOKED = "this machine has been revoked"
RETIRED = "this key was replaced when the machine renewed with a new key"
CONCURRENT = "a concurrent join for this machine won; retry"
# The proof of possession's refusals (joinplane.proof verifies; whether one is needed, and whether
# it is newer than the identity's mark, is decided here).
PROOF_REQUIRED = (
    "this key has joined before: credentials for it are handed out again only with a fresh proof of "
    "possession of the key (a Joinplane-Proof header; see docs/join.md)"
)
PROOF_REPLAYED = "this Joinplane-Proof is not newer than one already accepted for this key; sign a new one"


# --- facts -------------------------------------------------------------------------------------


class PreflightCheckLike(Protocol):
    """One preflight check the machine ran on itself, as it reported it (join_wire reads them)."""

    @property
    def name(self) -> str: ...
    @property
    def ok(self) -> bool: ...
    @property
    def severity(self) -> str: ...
    @property
    def message(self) -> str: ...


class Presented(NamedTuple):
    """The key (join identity) the caller joins as and the proof of possession it verified."""

    identity: str
    proof_ms: int | None = None  # the verified proof's `t`; None: no proof sent

    @property
    def fingerprint_only(self) -> bool:
        return self.identity.startswith(FINGERPRINT_PREFIX)


# --- outcomes ----------------------------------------------------------------------------------


class Refuse(NamedTuple):
    error: JoinplaneError


class Admit(NamedTuple):
    """A fresh join is admitted: a new machine."""


class PolicyApproval(NamedTuple):
    """A policy rule's approval of a deferral, counted as one of the approvals its pool requires."""

    by: str  # `policy:<rule name>` (policy_approver)
    reason: str


class Defer(NamedTuple):
    """A fresh join waits for an operator: a new join request holding every vote's reason (and the
    rule of the pool's policy that deferred it, or approved it as one of several approvals the pool
    requires, if one did)."""

    votes: tuple[Vote, ...]
    policy_rule: str = ""
    policy_approval: PolicyApproval | None = None


class Rejoin(NamedTuple):
    """Same identity, same pool: the same machine gets new credentials."""

    machine: MachineRecord


class StillPending(NamedTuple):
    """A retry while the request is pending: the same 202. A proof sent moves the identity's mark
    (`accept_proof`), so the same signed request cannot consume the approval that comes later."""

    request: JoinRequestRecord
    accept_proof: bool


class ConsumeApproval(NamedTuple):
    """The approved request admits exactly this one join."""

    request: JoinRequestRecord


class Verdict(NamedTuple):
    """A dry run's answer: what a join would do now, and why."""

    verdict: str  # admit | defer | deny
    message: str


History = Rejoin | StillPending | ConsumeApproval | Refuse


# --- rules -------------------------------------------------------------------------------------

# When a pending machine should ask again: half the time its request has waited, from 30 s to
# 5 minutes. An operator who approves within the first minute (someone watching a rollout) sees
# the machine in within 30 s, one who approves later within half the time it waited; a request
# left waiting costs 15 retries an hour instead of 107 (each retry is an API request, an
# invocation, three reads and the proof's mark). Read from the request's age, so a retry stores
# nothing to know it.
RETRY_AFTER_MIN_SECONDS = 30
RETRY_AFTER_MAX_SECONDS = 300


def retry_after(request: JoinRequestRecord, now: datetime) -> int:
    waited = (now - datetime.fromisoformat(request.created_at)).total_seconds()
    return int(min(RETRY_AFTER_MAX_SECONDS, max(RETRY_AFTER_MIN_SECONDS, waited // 2)))


def preflight(checks: Iterable[PreflightCheckLike]) -> Refuse | None:
    """A failed `fatal` check refuses the join before anything is decided (an `error` check only
    makes the machine unschedulable), naming every fatal check that failed."""
    fatal = [c for c in checks if not c.ok and c.severity.lower() == "fatal"]
    if not fatal:
        return None
    names = ", ".join(f"{c.name}: {c.message}" if c.message else c.name for c in fatal)
    failed = FailedPrecondition(f"fatal preflight check failed: {names}", reason=errors.PREFLIGHT_FAILED)
    return Refuse(failed)


def schedulable(requested: bool, checks: Iterable[PreflightCheckLike]) -> bool:
    """An admitted machine takes work when it asks to and no `error` preflight check failed."""
    return requested and not any(not c.ok and c.severity.lower() == "error" for c in checks)


def worker_image(pool: PoolRecord, baseline: str | None, sent: str) -> tuple[str, str | None]:
    """levers9 JoinMachine: the first image a machine sends is its baseline; sending the baseline (or nothing)
    follows the pool's current image, anything else is pinned and handed back as sent."""
    if baseline is None and sent:
        baseline = sent
    if not sent or sent == baseline:
        return pool.worker_image, baseline
    return sent, baseline


def pool_usable(pool: PoolRecord | None) -> Refuse | None:
    """Joins, retries and re-joins need the token's pool to exist and be active."""
    if pool is None:
        return Refuse(
            FailedPrecondition("the pool of this join token no longer exists", reason=errors.POOL_NOT_FOUND)
        )
    if not pool.active:
        return Refuse(
            FailedPrecondition("the pool is archived and takes no new joins", reason=errors.POOL_ARCHIVED)
        )
    return None


def spent_token(token: JoinTokenRecord, record: IdentityRecord | None) -> Refuse | None:
    """An expired or used-up token still serves the retries and re-joins it started, and nothing
    else: every other refusal reads as an unknown token."""
    if record is None or record.token_id != token.token_id:
        return Refuse(Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID))
    return None


def fresh(votes: list[Vote]) -> Admit | Defer | Refuse:
    """A key seen for the first time: any deny denies, else any defer defers, else admit."""
    verdict = attestors.verdict(votes)
    if verdict == attestors.DENY:
        return Refuse(_denied(votes))
    if verdict == attestors.DEFER:
        return Defer(tuple(votes))
    return Admit()


class PolicyOutcomeLike(Protocol):
    """What a pool's join policy decided (`joinplane.policy.PolicyOutcome`)."""

    @property
    def rule(self) -> str: ...
    @property
    def decision(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def error(self) -> str: ...


class AdmitByPolicy(NamedTuple):
    """A deferred join a policy rule approved: admitted at once, its request stored already
    consumed by the new machine, decided by `policy` and the rule."""

    rule: str
    reason: str
    votes: tuple[Vote, ...]


# A fresh join's outcomes that commit; of them, those that store a join request.
Decided = Admit | Defer | AdmitByPolicy
Deferral = Defer | AdmitByPolicy

# The policy's votes, among the request's reasons: an attestor's in form, named `policy`.
POLICY = "policy"


def apply_policy(
    decided: Admit | Defer, outcome: PolicyOutcomeLike | None, approvals_required: int = 1
) -> Decided | Refuse:
    """The pool's join policy over the attestors' outcome of a fresh join (docs/policy.md): no
    rule matched, the outcome stands; `deny` refuses; `defer` makes a person decide even what the
    attestors admitted; `approve` turns a deferral into an admission (`approve_deferral`). An
    attestor's deny never reaches here: a policy never admits what an attestor denied."""
    if outcome is None:
        return decided
    if outcome.decision == "deny":
        why = f": {outcome.reason}" if outcome.reason else ""
        return Refuse(
            PermissionDenied(
                f"join denied by the pool's policy rule {outcome.rule}{why}",
                reason=errors.JOIN_DENIED,
                metadata={"policyRule": outcome.rule},
            )
        )
    if outcome.decision == "approve":
        if not isinstance(decided, Defer) or _held_by_another(decided):
            # A hardware id another machine holds cannot be admitted (the admission's claim on it
            # fails, the join would retry forever): a person decides on a clone, whatever the rule.
            return decided
        return approve_deferral(decided, outcome, approvals_required)
    earlier = decided.votes if isinstance(decided, Defer) else ()
    return Defer((*earlier, policy_vote(outcome)), policy_rule=outcome.rule)


def _held_by_another(deferred: Defer) -> bool:
    return any(vote.code == attestors.DUPLICATE_HARDWARE_ID for vote in deferred.votes)


def approve_deferral(
    deferred: Defer, outcome: PolicyOutcomeLike, approvals_required: int = 1
) -> AdmitByPolicy | Defer:
    """Where a policy's approval is applied: it is one approval, never all of them. A pool that
    requires one admits at once; one that requires more keeps the request pending with the rule's
    approval recorded (`policy:<rule>`), for distinct keys to complete (docs/queue.md, "Two
    approvals")."""
    if approvals_required <= 1:
        return AdmitByPolicy(outcome.rule, outcome.reason, deferred.votes)
    return deferred._replace(
        policy_rule=outcome.rule,
        policy_approval=PolicyApproval(policy_approver(outcome.rule), outcome.reason),
    )


def first_approval(why: Defer | AdmitByPolicy, at: str, pool: PoolRecord | None) -> dict[str, Any]:
    """A deferral's request's approvals to start with (fields of JoinRequestRecord): the policy
    rule's, when the pool requires more than one approval and the rule gave it; else none."""
    given = why.policy_approval if isinstance(why, Defer) else None
    if given is None or pool is None:
        return {}
    approval = ApprovalRecord(given.by, at, given.reason or None, seq=1)
    return {"approvals": (approval,), "approvals_required": pool.approvals_required}


def policy_approver(rule: str) -> str:
    """A rule's approval as a request's `approvals` name it, beside the API keys' ids."""
    return f"{POLICY}:{rule}"


def approved_by_policy(
    deferred: JoinRequestRecord, approved: AdmitByPolicy, machine_id: str, at: str
) -> JoinRequestRecord:
    """The request of a deferral a policy rule approved at once: stored already consumed by the
    machine, in the admitting transaction, so the queue and the audit trail show who decided
    (`decidedBy: policy`, the rule) and why the join had been deferred. `at`: now, as stored."""
    return deferred._replace(
        state="consumed",
        decided_at=at,
        decided_by=POLICY,
        reason=approved.reason or None,
        consumed_at=at,
        machine_id=machine_id,
    )


def policy_vote(outcome: PolicyOutcomeLike) -> Vote:
    """A policy's deferral as the request records it, beside the attestors' votes: the rule's
    reason, or the error that kept it from being evaluated."""
    if outcome.error:
        return Vote(POLICY, attestors.DEFER, "policy_error", outcome.reason)
    message = f"the pool's policy rule {outcome.rule} defers this join" + (
        f": {outcome.reason}" if outcome.reason else ""
    )
    return Vote(POLICY, attestors.DEFER, "policy_defer", message)


def _denied(votes: list[Vote]) -> PermissionDenied:
    messages = [v.message for v in votes if v.verdict == attestors.DENY]
    return PermissionDenied("join denied: " + "; ".join(messages), reason=errors.JOIN_DENIED)


def place(token: JoinTokenRecord, site_id: str, pool_id: str | None) -> Refuse | None:
    """A retry or re-join must come through a token of the same site, and of the same pool when both
    name one: another pool's token cannot consume, peek at or re-join this machine's history."""
    if token.site_id != site_id or (token.pool_id and pool_id and token.pool_id != pool_id):
        return Refuse(FailedPrecondition(ELSEWHERE, reason=errors.WRONG_POOL))
    return None


def screen(token: JoinTokenRecord, record: IdentityRecord) -> Refuse | None:
    """What is decided from the identity's record alone, before its machine or request is read.
    First the place: another pool's token learns nothing of this key, not even that it was revoked
    or replaced."""
    refused = place(token, record.site_id, record.pool_id)
    if refused is None and record.retired:
        refused = Refuse(PermissionDenied(RETIRED, reason=errors.KEY_RETIRED))
    return refused


def proof_required(presented: Presented) -> Refuse | None:
    """Credentials for an identity that already exists need fresh possession of its key. A
    fingerprint identity has no key to prove with: `attestation.identity: key` refuses those."""
    if presented.proof_ms is None and not presented.fingerprint_only:
        return Refuse(Unauthenticated(PROOF_REQUIRED, reason=errors.PROOF_REQUIRED))
    return None


def history(
    token: JoinTokenRecord,
    presented: Presented,
    record: IdentityRecord,
    *,
    machine: MachineRecord | None,
    request: JoinRequestRecord | None,
    now: datetime,
) -> History:
    """A key that has joined before: its machine (read when the record names one) or its request."""
    refused = screen(token, record)
    if refused:
        return refused
    if record.machine_id:
        if machine is None:
            return Refuse(Internal("join identity points at a missing machine"))
        if not machine.active:
            return Refuse(PermissionDenied(REVOKED, reason=errors.MACHINE_REVOKED))
        return place(token, machine.site_id, machine.pool_id) or proof_required(presented) or Rejoin(machine)
    if request is None:
        return Refuse(
            PermissionDenied(
                "the join request of this key no longer exists; join again with a new key",
                reason=errors.JOIN_REQUEST_EXPIRED,
            )
        )
    refused = place(token, request.site_id, request.pool_id)
    if refused:
        return refused
    state = request.state_at(now)
    if state == "pending":
        return StillPending(request, accept_proof=presented.proof_ms is not None)
    if state == "approved":
        return proof_required(presented) or ConsumeApproval(request)
    return Refuse(request_closed(request, state))


def request_closed(request: JoinRequestRecord, state: str) -> JoinplaneError:
    """A request that can admit nothing (any more): rejected, expired, or consumed by another join."""
    if state == "rejected":
        why = f": {request.reason}" if request.reason else ""
        return PermissionDenied(
            f"join request {request.request_id} was rejected{why}",
            reason=errors.JOIN_REQUEST_REJECTED,
            metadata=_request_metadata(request),
        )
    if state == "expired":
        return PermissionDenied(
            f"join request {request.request_id} has expired; join again with a new key",
            reason=errors.JOIN_REQUEST_EXPIRED,
            metadata={"requestId": request.request_id},
        )
    return Aborted("this join request was consumed by a concurrent join; retry")


def _request_metadata(request: JoinRequestRecord) -> dict[str, str]:
    """ErrorInfo metadata of a refused join request: its id, and the operator's reason if given."""
    metadata = {"requestId": request.request_id}
    if request.reason:
        metadata["rejectionReason"] = request.reason
    return metadata


def rejoin_votes(votes: list[Vote]) -> Refuse | None:
    """A re-join was admitted before: only attestors that deny can stop it."""
    if any(v.verdict == attestors.DENY for v in votes):
        return Refuse(_denied(votes))
    return None


TPM_AGAIN = (
    "this machine joined with a TPM and this join token requires it to prove the same TPM again on "
    "re-join: send tpm.ekPublic and tpm.akPublic and activate the credential (docs/tpm.md)"
)
TPM_OTHER = "this machine joined with another TPM; a re-join must activate the TPM it joined with"


def tpm_rejoin(token: JoinTokenRecord, joined_with: TpmFactsRecord, activated_ek: str) -> Refuse | None:
    """`tpmRejoin: activate`: a machine that joined with an activated TPM re-joins only with that
    TPM activated again (`activated_ek`: the EK activated in this join, "" for none)."""
    if not (token.attestation.rejoin_activates and joined_with.activated):
        return None
    if not activated_ek:
        return Refuse(Unauthenticated(TPM_AGAIN, reason=errors.TPM_ACTIVATION_REQUIRED))
    if activated_ek != joined_with.ek_public_key_sha256:
        return Refuse(PermissionDenied(TPM_OTHER, reason=errors.JOIN_DENIED))
    return None


def pending_proof(accepted: bool) -> Refuse | None:
    """A pending retry's proof must move the identity's mark (`StillPending.accept_proof`); one the
    mark refuses is not newer than a proof already accepted for the key: a replay."""
    if accepted:
        return None
    return Refuse(Unauthenticated(PROOF_REPLAYED, reason=errors.PROOF_REPLAYED))


# --- after a lost condition --------------------------------------------------------------------


def token_lost(token: JoinTokenRecord) -> JoinplaneError:
    """A fresh join's transaction found its token used up, expired or revoked since it was read.
    The key had no record (the transaction hands a record back before it looks at the token), so
    this is a spent token and a key it never saw: refused as `spent_token` refuses it."""
    refused = spent_token(token, None)
    assert refused is not None
    return refused.error


def identity_moved(presented: Presented, version_read: int, current: IdentityRecord | None) -> JoinplaneError:
    """Why the identity record's compare-and-set failed: another join moved it on (retry), or this
    proof is not newer than one already accepted for the key (a replay)."""
    if (
        current is not None
        and current.version == version_read
        and presented.proof_ms is not None
        and current.holds_proof_at_or_after(presented.proof_ms)
    ):
        return Unauthenticated(PROOF_REPLAYED, reason=errors.PROOF_REPLAYED)
    return Aborted(CONCURRENT)


def approval_lost(
    current: JoinRequestRecord | None, read: JoinRequestRecord, now: datetime
) -> JoinplaneError:
    """The consuming transaction found the request changed (`current`, None: gone): closed
    meanwhile, or consumed by a concurrent retry (whose winner a later retry re-joins as)."""
    state = current.state_at(now) if current else "expired"
    if state in ("rejected", "expired"):
        return PermissionDenied(
            f"join request {read.request_id} is {state}",
            reason=errors.JOIN_REQUEST_REJECTED if state == "rejected" else errors.JOIN_REQUEST_EXPIRED,
            metadata=_request_metadata(current or read),
        )
    return Aborted("this approval was consumed by a concurrent join; retry")


def machine_lost(current: MachineRecord | None) -> JoinplaneError:
    """The re-join's machine changed under it: revoked, or re-joined by a concurrent call."""
    if current is None or not current.active:
        return PermissionDenied(REVOKED, reason=errors.MACHINE_REVOKED)
    return Aborted(CONCURRENT)


# --- renewals ----------------------------------------------------------------------------------


def renewable(machine: MachineRecord) -> Refuse | None:
    """A machine that joined with a fingerprint only has no key and no certificate: nothing but its
    bearer token would tie a new key to it."""
    if machine.identity.startswith(FINGERPRINT_PREFIX):
        return Refuse(
            FailedPrecondition(
                "this machine joined with a fingerprint only and has no certificate to renew; "
                "join with a csr to get a key-bound identity",
                reason=errors.MACHINE_HAS_NO_KEY,
            )
        )
    return None


def renewal_identity_lost(machine: MachineRecord, current: IdentityRecord | None) -> JoinplaneError:
    """The current key's record refused the renewal: still this machine's (the proof is a replay),
    or no longer (the machine was revoked or its token replaced)."""
    if current is not None and current.machine_id == machine.machine_id:
        return Unauthenticated(PROOF_REPLAYED, reason=errors.PROOF_REPLAYED)
    return renewal_machine_lost()


def renewal_machine_lost() -> JoinplaneError:
    return PermissionDenied(
        "this machine has been revoked or its token replaced", reason=errors.MACHINE_REVOKED
    )


def key_in_use() -> JoinplaneError:
    return FailedPrecondition(
        "this key already belongs to another machine identity", reason=errors.KEY_IN_USE
    )


# --- dry runs ----------------------------------------------------------------------------------


def dry_run_fresh(votes: list[Vote]) -> Verdict:
    """A key not seen before (after the token and pool checks a join makes first): the attestors'
    verdict."""
    return Verdict(attestors.verdict(votes), "; ".join(v.message for v in votes))


def dry_run_known(votes: list[Vote], known: History, *, voted_first: bool) -> Verdict | Refuse:
    """A known key: the outcome its join would reach, from the same decisions (`known` is what
    `history` decided), said as a verdict. `voted_first`: the token could take a use, so the join
    voted on the key as a fresh one, and a deny stopped it, before it found the key's history.

    Never says more than the join would: what the join refuses the call for (another pool's token,
    a retry to make) is refused the same way; what it refuses this key for (PERMISSION_DENIED,
    UNAUTHENTICATED: denied, revoked, retired, rejected, expired, no proof) is a `deny`."""
    outcome: History = known
    if voted_first or isinstance(known, Rejoin):
        outcome = rejoin_votes(votes) or known
    match outcome:
        case Rejoin():
            return Verdict("admit", "re-join of this machine")
        case StillPending(request):
            return Verdict("defer", f"join request {request.request_id} is pending")
        case ConsumeApproval(request):
            return Verdict("admit", f"join request {request.request_id} is approved")
        case Refuse(error) if isinstance(error, PermissionDenied | Unauthenticated):
            return Verdict("deny", error.message)
    return outcome

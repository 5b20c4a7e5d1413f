"""The join's rules (docs/join.md, "The decision, in order"), one row each, over typed facts: no
table, no moto, no clock. Each row names the rule, the decision it asks and what it must decide."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from joinplane import attestors, aws_rules, errors, join_decide
from joinplane.attestors import DEFER, DENY, Facts, Vote
from joinplane.dal.machines import IdentityRecord, MachineFactsRecord, MachineRecord, TpmFactsRecord
from joinplane.dal.pools import BootstrapRecord, PoolRecord
from joinplane.dal.requests import JoinRequestRecord
from joinplane.dal.tokens import AttestationPolicyRecord, AwsRulesRecord, JoinTokenRecord
from joinplane.errors import Aborted, FailedPrecondition, Internal, PermissionDenied, Unauthenticated
from joinplane.join_decide import (
    Admit,
    ConsumeApproval,
    Defer,
    Presented,
    Refuse,
    Rejoin,
    StillPending,
    Verdict,
)
from joinplane.join_wire import PreflightCheck

NOW_EPOCH = 1_800_000_000
NOW = datetime.fromtimestamp(NOW_EPOCH, UTC)
KEY = "a" * 64
FINGERPRINT = "fp-" + "b" * 64
PROOF_MS = 1_800_000_000_000


def token(**changes: Any) -> JoinTokenRecord:
    base = JoinTokenRecord(
        token_id="jtok_1",
        tenant_id="acme",
        site_id="lab",
        pool_id="gpu",
        secret_sha256="",
        description="",
        state="active",
        expires_at="",
        expires_at_epoch=NOW_EPOCH + 3600,
        max_uses=5,
        uses_remaining=5,
        require_approval=False,
        attestation=AttestationPolicyRecord(),
        created_at="",
    )
    return base._replace(**changes)


SPENT = {"uses_remaining": 0}
EXPIRED = {"expires_at_epoch": NOW_EPOCH - 1}


def pool(**changes: Any) -> PoolRecord:
    base = PoolRecord(
        tenant_id="acme",
        pool_id="gpu",
        site_id="lab",
        name="GPU",
        workspace_id="ws",
        state="active",
        bootstrap=BootstrapRecord(),
        join_request_ttl_seconds=86_400,
        certificate_ttl_seconds=86_400,
        cluster=None,
        created_at="",
        updated_at="",
    )
    return base._replace(**changes)


def record(**changes: Any) -> IdentityRecord:
    base = IdentityRecord.new(
        tenant_id="acme",
        identity=KEY,
        token_id="jtok_1",
        site_id="lab",
        now=NOW,
        pool_id="gpu",
        machine_id="mach_1",
    )
    return base._replace(**changes)


def pending_record(**changes: Any) -> IdentityRecord:
    return record(machine_id=None, pool_id=None, request_id="jreq_1", **changes)


def machine(**changes: Any) -> MachineRecord:
    base = MachineRecord(
        machine_id="mach_1",
        tenant_id="acme",
        site_id="lab",
        pool_id="gpu",
        identity=KEY,
        token_id="jtok_1",
        state="active",
        machine_token_sha256="",
        token_generation=1,
        schedulable=True,
        facts=MachineFactsRecord(),
        joined_at="",
    )
    return base._replace(**changes)


def request(state: Any = "pending", **changes: Any) -> JoinRequestRecord:
    base = JoinRequestRecord(
        request_id="jreq_1",
        tenant_id="acme",
        site_id="lab",
        pool_id="gpu",
        token_id="jtok_1",
        identity=KEY,
        state=state,
        reasons=(),
        machine=MachineFactsRecord(),
        csr_public_key_sha256=KEY,
        created_at="",
        expires_at="",
        expires_at_epoch=NOW_EPOCH + 3600,
    )
    return base._replace(**changes)


def waited(seconds: int) -> JoinRequestRecord:
    """A pending request made `seconds` before NOW."""
    return request(created_at=datetime.fromtimestamp(NOW_EPOCH - seconds, UTC).isoformat())


PROVEN = Presented(KEY, PROOF_MS)
UNPROVEN = Presented(KEY)
FINGERPRINTED = Presented(FINGERPRINT)

ACTIVATED = TpmFactsRecord(KEY, activated=True, verified_by="allow-list")
REJOIN_ACTIVATES = AttestationPolicyRecord(tpm="defer-unlisted", tpm_rejoin="activate")


def tpm_votes(policy: str, facts: Facts, trust: str = "allow-list") -> list[Vote]:
    return attestors.tpm(policy, facts, trust=trust)


def codes(votes: list[Vote]) -> list[str]:
    return [f"{v.verdict}:{v.code}" for v in votes]


DENY_VOTE = Vote("tpm", DENY, "tpm_required", "this join token requires a TPM endorsement key")
DEFER_VOTE = Vote("token", DEFER, "approval_required", "this join token requires an operator's approval")


def history(
    presented: Presented = PROVEN,
    the_record: IdentityRecord | None = None,
    *,
    the_token: JoinTokenRecord | None = None,
    the_machine: MachineRecord | None = None,
    the_request: JoinRequestRecord | None = None,
) -> Callable[[], object]:
    return lambda: join_decide.history(
        the_token or token(),
        presented,
        the_record or record(),
        machine=the_machine,
        request=the_request,
        now=NOW,
    )


def dry(
    presented: Presented = PROVEN,
    the_record: IdentityRecord | None = None,
    *,
    the_token: JoinTokenRecord | None = None,
    the_machine: MachineRecord | None = None,
    the_request: JoinRequestRecord | None = None,
    votes: tuple[Vote, ...] = (),
    voted_first: bool = False,
) -> Callable[[], object]:
    """A dry run of a known key: the join's own `history` decision, said as a verdict."""

    def decide() -> object:
        known = join_decide.history(
            the_token or token(),
            presented,
            the_record or record(),
            machine=the_machine,
            request=the_request,
            now=NOW,
        )
        return join_decide.dry_run_known(list(votes), known, voted_first=voted_first)

    return decide


def check(severity: str, ok: bool = False, message: str = "") -> PreflightCheck:
    return PreflightCheck(name="disk", ok=ok, severity=severity, message=message)


@dataclass(frozen=True)
class Refused:
    """Expect a refusal with this error class and reason."""

    error: type[errors.JoinplaneError]
    reason: str


@dataclass(frozen=True)
class Row:
    rule: str
    decide: Callable[[], object]
    expected: object  # an outcome to compare, a Refused, or an outcome class


INSTANCE = "i-0123456789abcdef0"
GPU_NODE = aws_rules.Caller(
    "123456789012", f"arn:aws:sts::123456789012:assumed-role/gpu-node-a/{INSTANCE}", f"AROAEXAMPLE:{INSTANCE}"
)
WEB = aws_rules.Caller(
    "123456789012", "arn:aws:sts::123456789012:assumed-role/web/session-1", "AROAWEB:session-1"
)
BY_ACCOUNT = AwsRulesRecord(accounts=("123456789012",))
BY_ARN = AwsRulesRecord(arns=("arn:aws:sts::123456789012:assumed-role/gpu-node-*/*",))
BY_BOTH = BY_ACCOUNT._replace(arns=BY_ARN.arns)


def aws_votes(rules: AwsRulesRecord | None, caller: aws_rules.Caller | None) -> list[str]:
    return [vote.code for vote in attestors.aws(rules, Facts(aws_caller=caller))]


ROWS = [
    # --- 1. token ---
    Row("an unused token can take a use", lambda: token().usable_at(NOW), True),
    Row("a used-up token cannot", lambda: token(**SPENT).usable_at(NOW), False),
    Row("an expired token cannot", lambda: token(**EXPIRED).usable_at(NOW), False),
    Row(
        "a spent token serves the history it started",
        lambda: join_decide.spent_token(token(**SPENT), record()),
        None,
    ),
    Row(
        "a spent token refuses a key it never saw",
        lambda: join_decide.spent_token(token(**SPENT), None),
        Refused(Unauthenticated, errors.JOIN_TOKEN_INVALID),
    ),
    Row(
        "a spent token refuses a history another token started",
        lambda: join_decide.spent_token(token(**SPENT), record(token_id="jtok_2")),
        Refused(Unauthenticated, errors.JOIN_TOKEN_INVALID),
    ),
    Row(
        "a token spent while a fresh key joined refuses that key",
        lambda: join_decide.token_lost(token()),
        Refused(Unauthenticated, errors.JOIN_TOKEN_INVALID),
    ),
    # --- 4. preflight ---
    Row("no preflight checks: nothing to refuse", lambda: join_decide.preflight([]), None),
    Row("passed checks refuse nothing", lambda: join_decide.preflight([check("fatal", ok=True)]), None),
    Row(
        "a failed error check does not refuse (it makes the machine unschedulable)",
        lambda: join_decide.preflight([check("error")]),
        None,
    ),
    Row(
        "a failed fatal check refuses the join",
        lambda: join_decide.preflight([check("Fatal", message="disk full")]),
        Refused(FailedPrecondition, errors.PREFLIGHT_FAILED),
    ),
    Row(
        "a failed error check admits the machine unschedulable",
        lambda: join_decide.schedulable(True, [check("Error"), check("fatal", ok=True)]),
        False,
    ),
    Row(
        "passed checks keep it schedulable",
        lambda: join_decide.schedulable(True, [check("error", ok=True)]),
        True,
    ),
    Row("a machine that asks not to be scheduled is not", lambda: join_decide.schedulable(False, []), False),
    # --- pools ---
    Row("an active pool takes joins", lambda: join_decide.pool_usable(pool()), None),
    Row(
        "a deleted pool takes none",
        lambda: join_decide.pool_usable(None),
        Refused(FailedPrecondition, errors.POOL_NOT_FOUND),
    ),
    Row(
        "an archived pool takes none",
        lambda: join_decide.pool_usable(pool(state="archived")),
        Refused(FailedPrecondition, errors.POOL_ARCHIVED),
    ),
    # --- 6. attestors on a fresh key ---
    Row("no votes admit", lambda: join_decide.fresh([]), Admit()),
    Row("a defer defers", lambda: join_decide.fresh([DEFER_VOTE]), Defer((DEFER_VOTE,))),
    Row(
        "any deny denies, over defers",
        lambda: join_decide.fresh([DEFER_VOTE, DENY_VOTE]),
        Refused(PermissionDenied, errors.JOIN_DENIED),
    ),
    # --- 5. history: place ---
    Row(
        "another site's token learns nothing of the key",
        history(the_token=token(site_id="other")),
        Refused(FailedPrecondition, errors.WRONG_POOL),
    ),
    Row(
        "another pool's token learns nothing of the key",
        history(the_token=token(pool_id="cpu")),
        Refused(FailedPrecondition, errors.WRONG_POOL),
    ),
    Row(
        "another pool's token learns nothing, not even that the key was retired",
        history(the_record=record(retired=True), the_token=token(pool_id="cpu")),
        Refused(FailedPrecondition, errors.WRONG_POOL),
    ),
    Row(
        "a site token of the same site reaches a pool's history",
        history(the_token=token(pool_id=None), the_machine=machine()),
        Rejoin(machine()),
    ),
    Row(
        "another pool's token cannot reach a request its pool claimed",
        history(
            the_record=pending_record(),
            the_token=token(pool_id="cpu"),
            the_request=request(pool_id="gpu"),
        ),
        Refused(FailedPrecondition, errors.WRONG_POOL),
    ),
    # --- history: retired key, machines ---
    Row(
        "a key replaced by a renewal never joins again",
        history(the_record=record(retired=True), the_machine=machine()),
        Refused(PermissionDenied, errors.KEY_RETIRED),
    ),
    Row("an active machine re-joins with a proof", history(the_machine=machine()), Rejoin(machine())),
    Row(
        "a re-join without a proof is refused",
        history(UNPROVEN, the_machine=machine()),
        Refused(Unauthenticated, errors.PROOF_REQUIRED),
    ),
    Row(
        "a fingerprint identity re-joins without a proof (it has no key)",
        history(FINGERPRINTED, record(identity=FINGERPRINT), the_machine=machine(identity=FINGERPRINT)),
        Rejoin(machine(identity=FINGERPRINT)),
    ),
    Row(
        "a revoked machine's key is refused",
        history(the_machine=machine(state="revoked")),
        Refused(PermissionDenied, errors.MACHINE_REVOKED),
    ),
    Row(
        "an identity pointing at no machine is an internal error",
        history(the_machine=None),
        Refused(Internal, errors.INTERNAL),
    ),
    Row(
        "a machine moved to another pool refuses this pool's token",
        history(the_machine=machine(pool_id="cpu")),
        Refused(FailedPrecondition, errors.WRONG_POOL),
    ),
    # --- history: requests ---
    Row(
        "a pending request answers the same 202",
        history(UNPROVEN, pending_record(), the_request=request("pending")),
        StillPending(request("pending"), accept_proof=False),
    ),
    Row(
        "a pending retry with a proof moves the mark",
        history(PROVEN, pending_record(), the_request=request("pending")),
        StillPending(request("pending"), accept_proof=True),
    ),
    Row(
        "an approved request is consumed with a proof",
        history(PROVEN, pending_record(), the_request=request("approved")),
        ConsumeApproval(request("approved")),
    ),
    Row(
        "an approved request without a proof is refused",
        history(UNPROVEN, pending_record(), the_request=request("approved")),
        Refused(Unauthenticated, errors.PROOF_REQUIRED),
    ),
    Row(
        "a rejected request is refused",
        history(PROVEN, pending_record(), the_request=request("rejected", reason="not ours")),
        Refused(PermissionDenied, errors.JOIN_REQUEST_REJECTED),
    ),
    Row(
        "an expired request is refused",
        history(PROVEN, pending_record(), the_request=request("expired")),
        Refused(PermissionDenied, errors.JOIN_REQUEST_EXPIRED),
    ),
    Row(
        "an approved request past its expiry reads as expired",
        history(PROVEN, pending_record(), the_request=request("approved", expires_at_epoch=NOW_EPOCH)),
        Refused(PermissionDenied, errors.JOIN_REQUEST_EXPIRED),
    ),
    Row(
        "a request deleted by retention is refused",
        history(PROVEN, pending_record(), the_request=None),
        Refused(PermissionDenied, errors.JOIN_REQUEST_EXPIRED),
    ),
    Row(
        "a request consumed by a concurrent retry: retry (it re-joins)",
        history(PROVEN, pending_record(), the_request=request("consumed")),
        Refused(Aborted, errors.CONCURRENT_CHANGE),
    ),
    Row("a pending retry's proof that moved the mark", lambda: join_decide.pending_proof(True), None),
    Row(
        "a pending retry's proof the mark refuses is a replay",
        lambda: join_decide.pending_proof(False),
        Refused(Unauthenticated, errors.PROOF_REPLAYED),
    ),
    # --- re-join attestors ---
    Row("a re-join ignores defers", lambda: join_decide.rejoin_votes([DEFER_VOTE]), None),
    Row(
        "a re-join stops at a deny",
        lambda: join_decide.rejoin_votes([DENY_VOTE]),
        Refused(PermissionDenied, errors.JOIN_DENIED),
    ),
    # --- proofs after a lost compare-and-set ---
    Row(
        "a proof not newer than the mark is a replay",
        lambda: join_decide.identity_moved(PROVEN, 1, record(proof_at=PROOF_MS)),
        Refused(Unauthenticated, errors.PROOF_REPLAYED),
    ),
    Row(
        "a record moved on by another join: retry",
        lambda: join_decide.identity_moved(PROVEN, 1, record(version=2, proof_at=PROOF_MS)),
        Refused(Aborted, errors.CONCURRENT_CHANGE),
    ),
    Row(
        "an older mark with the version read: another join won",
        lambda: join_decide.identity_moved(PROVEN, 1, record(proof_at=PROOF_MS - 1)),
        Refused(Aborted, errors.CONCURRENT_CHANGE),
    ),
    Row(
        "a lost approval that was rejected meanwhile",
        lambda: join_decide.approval_lost(request("rejected"), request("approved"), NOW),
        Refused(PermissionDenied, errors.JOIN_REQUEST_REJECTED),
    ),
    Row(
        "a lost approval gone from the table reads as expired",
        lambda: join_decide.approval_lost(None, request("approved"), NOW),
        Refused(PermissionDenied, errors.JOIN_REQUEST_EXPIRED),
    ),
    Row(
        "a lost approval consumed by a concurrent retry",
        lambda: join_decide.approval_lost(request("consumed"), request("approved"), NOW),
        Refused(Aborted, errors.CONCURRENT_CHANGE),
    ),
    Row(
        "a re-join whose machine was revoked meanwhile",
        lambda: join_decide.machine_lost(machine(state="revoked")),
        Refused(PermissionDenied, errors.MACHINE_REVOKED),
    ),
    Row(
        "a re-join whose machine another re-join moved on",
        lambda: join_decide.machine_lost(machine(token_generation=2)),
        Refused(Aborted, errors.CONCURRENT_CHANGE),
    ),
    # --- renewals ---
    Row("a key-bound machine renews", lambda: join_decide.renewable(machine()), None),
    Row(
        "a fingerprint machine has nothing to renew",
        lambda: join_decide.renewable(machine(identity=FINGERPRINT)),
        Refused(FailedPrecondition, errors.MACHINE_HAS_NO_KEY),
    ),
    Row(
        "a renewal whose proof the current record already holds is a replay",
        lambda: join_decide.renewal_identity_lost(machine(), record()),
        Refused(Unauthenticated, errors.PROOF_REPLAYED),
    ),
    Row(
        "a renewal whose key record left the machine: revoked or replaced",
        lambda: join_decide.renewal_identity_lost(machine(), record(machine_id="mach_2")),
        Refused(PermissionDenied, errors.MACHINE_REVOKED),
    ),
    # --- dry runs ---
    Row(
        "dry run, fresh key: the attestors' verdict",
        lambda: join_decide.dry_run_fresh([DEFER_VOTE]),
        Verdict("defer", DEFER_VOTE.message),
    ),
    Row("dry run, fresh key, no votes: admit", lambda: join_decide.dry_run_fresh([]), Verdict("admit", "")),
    Row(
        "dry run, re-join",
        dry(the_machine=machine()),
        Verdict("admit", "re-join of this machine"),
    ),
    Row(
        "dry run, re-join without a proof: deny",
        dry(UNPROVEN, the_machine=machine()),
        Verdict("deny", join_decide.PROOF_REQUIRED),
    ),
    Row(
        "dry run, revoked machine: deny",
        dry(the_machine=machine(state="revoked")),
        Verdict("deny", join_decide.REVOKED),
    ),
    Row(
        "dry run, retired key: deny",
        dry(PROVEN, record(retired=True)),
        Verdict("deny", join_decide.RETIRED),
    ),
    Row(
        "dry run, another pool's token: refused, not a verdict",
        dry(the_token=token(pool_id="cpu"), the_machine=machine()),
        Refused(FailedPrecondition, errors.WRONG_POOL),
    ),
    Row(
        "dry run, pending request: defer",
        dry(UNPROVEN, pending_record(), the_request=request("pending")),
        Verdict("defer", "join request jreq_1 is pending"),
    ),
    Row(
        "dry run, approved request: admit",
        dry(PROVEN, pending_record(), the_request=request("approved")),
        Verdict("admit", "join request jreq_1 is approved"),
    ),
    Row(
        "dry run, approved request without a proof: deny",
        dry(UNPROVEN, pending_record(), the_request=request("approved")),
        Verdict("deny", join_decide.PROOF_REQUIRED),
    ),
    Row(
        "dry run, rejected request: deny, in the join's words",
        dry(PROVEN, pending_record(), the_request=request("rejected", reason="not ours")),
        Verdict("deny", "join request jreq_1 was rejected: not ours"),
    ),
    Row(
        "dry run, request gone: deny as expired",
        dry(PROVEN, pending_record(), the_request=None),
        Verdict("deny", "the join request of this key no longer exists; join again with a new key"),
    ),
    Row(
        "dry run, request consumed by a concurrent retry: retry, as the join says",
        dry(PROVEN, pending_record(), the_request=request("consumed")),
        Refused(Aborted, errors.CONCURRENT_CHANGE),
    ),
    Row(
        "dry run, identity pointing at no machine: the join's internal error, not a verdict",
        dry(the_machine=None),
        Refused(Internal, errors.INTERNAL),
    ),
    Row(
        "dry run, re-join an attestor denies: deny",
        dry(the_machine=machine(), votes=(DENY_VOTE,)),
        Verdict("deny", "join denied: " + DENY_VOTE.message),
    ),
    Row(
        "dry run, re-join ignores defers",
        dry(the_machine=machine(), votes=(DEFER_VOTE,)),
        Verdict("admit", "re-join of this machine"),
    ),
    Row(
        "dry run, a token with a use left: a deny stops the join before its history",
        dry(UNPROVEN, pending_record(), the_request=request("pending"), votes=(DENY_VOTE,), voted_first=True),
        Verdict("deny", "join denied: " + DENY_VOTE.message),
    ),
    Row(
        "dry run, a token with a use left: a deny comes before another pool's refusal",
        dry(the_token=token(pool_id="cpu"), the_machine=machine(), votes=(DENY_VOTE,), voted_first=True),
        Verdict("deny", "join denied: " + DENY_VOTE.message),
    ),
    # --- 6. the tpm attestor: it votes only on an EK the TPM proved it holds ---
    Row("tpm off: no vote", lambda: codes(tpm_votes("off", Facts(ek_claimed=True))), []),
    Row(
        "tpm required, none presented: deny",
        lambda: codes(tpm_votes("require", Facts())),
        ["deny:tpm_required"],
    ),
    Row(
        "tpm required, an EK claimed without activation: deny as none",
        lambda: codes(tpm_votes("require", Facts(ek_sha256="", ek_claimed=True, ek_listed=True))),
        ["deny:tpm_required"],
    ),
    Row(
        "tpm defer-unlisted, an EK claimed without activation: defer as not activated",
        lambda: codes(tpm_votes("defer-unlisted", Facts(ek_claimed=True))),
        ["defer:tpm_not_activated"],
    ),
    Row(
        "tpm defer-unlisted, none presented: defer",
        lambda: codes(tpm_votes("defer-unlisted", Facts())),
        ["defer:tpm_missing"],
    ),
    Row(
        "an activated, allow-listed EK: no vote",
        lambda: codes(tpm_votes("require", Facts(ek_sha256=KEY, ek_listed=True))),
        [],
    ),
    Row(
        "an activated EK on no allow-list: defer, under require too",
        lambda: codes(tpm_votes("require", Facts(ek_sha256=KEY, ek_listed=False))),
        ["defer:tpm_unlisted"],
    ),
    Row(
        "an activated EK of a listed manufacturer, the token trusting manufacturers: no vote",
        lambda: codes(
            tpm_votes(
                "require", Facts(ek_sha256=KEY, ek_listed=False, ek_manufacturer="CN=Acme"), "manufacturer"
            )
        ),
        [],
    ),
    Row(
        "an activated EK of a listed manufacturer, the token trusting only its allow-list: defer",
        lambda: codes(tpm_votes("require", Facts(ek_sha256=KEY, ek_listed=False, ek_manufacturer="CN=Acme"))),
        ["defer:tpm_unlisted"],
    ),
    Row(
        "the certificate's problem is in the deferral's words",
        lambda: (
            "expired"
            in tpm_votes(
                "require", Facts(ek_sha256=KEY, ek_certificate_problem="it expired"), "manufacturer"
            )[0].message
        ),
        True,
    ),
    # --- 5. re-join with `tpmRejoin: activate` ---
    Row(
        "tpmRejoin any: a TPM machine re-joins without activating",
        lambda: join_decide.tpm_rejoin(token(), ACTIVATED, ""),
        None,
    ),
    Row(
        "tpmRejoin activate: a machine that joined without a TPM re-joins without one",
        lambda: join_decide.tpm_rejoin(token(attestation=REJOIN_ACTIVATES), TpmFactsRecord(KEY), ""),
        None,
    ),
    Row(
        "tpmRejoin activate: a TPM machine must activate again",
        lambda: join_decide.tpm_rejoin(token(attestation=REJOIN_ACTIVATES), ACTIVATED, ""),
        Refused(Unauthenticated, errors.TPM_ACTIVATION_REQUIRED),
    ),
    Row(
        "tpmRejoin activate: another TPM is denied",
        lambda: join_decide.tpm_rejoin(token(attestation=REJOIN_ACTIVATES), ACTIVATED, "c" * 64),
        Refused(PermissionDenied, errors.JOIN_DENIED),
    ),
    Row(
        "tpmRejoin activate: the same TPM activated again re-joins",
        lambda: join_decide.tpm_rejoin(token(attestation=REJOIN_ACTIVATES), ACTIVATED, KEY),
        None,
    ),
    # --- 6. the aws attestor (docs/aws.md): every list given must match ---
    Row("aws: a token without rules takes no vote", lambda: aws_votes(None, GPU_NODE), []),
    Row(
        "aws: a token with rules denies a join with no signed request",
        lambda: aws_votes(BY_ACCOUNT, None),
        ["aws_iam_required"],
    ),
    Row("aws: the account admits", lambda: aws_votes(BY_ACCOUNT, GPU_NODE), []),
    Row(
        "aws: another account is denied",
        lambda: aws_votes(BY_ACCOUNT, GPU_NODE._replace(account="111122223333")),
        ["aws_caller_not_allowed"],
    ),
    Row("aws: a matching ARN pattern admits", lambda: aws_votes(BY_ARN, GPU_NODE), []),
    Row(
        "aws: the account alone does not pass an ARN rule",
        lambda: aws_votes(BY_BOTH, WEB),
        ["aws_caller_not_allowed"],
    ),
    Row(
        "aws: a pattern's * spans slashes, and nothing else is special",
        lambda: [
            aws_rules.arn_matches("arn:aws:iam::1?:*", "arn:aws:iam::12:user/a/b"),
            aws_rules.arn_matches("arn:aws:iam::12:*", "arn:aws:iam::12:user/a/b"),
        ],
        [False, True],
    ),
    Row("aws: an empty rule admits no one", lambda: aws_rules.admits(AwsRulesRecord(), GPU_NODE), False),
    Row(
        "aws: an EC2 role session names its instance, any other none",
        lambda: [GPU_NODE.instance_id, WEB.instance_id],
        [INSTANCE, ""],
    ),
    Row(
        "retry after: a request waiting under a minute is asked again in 30 s",
        lambda: [join_decide.retry_after(waited(s), NOW) for s in (0, 61)],
        [30, 30],
    ),
    Row(
        "retry after: then half the wait, never more than 5 minutes",
        lambda: [join_decide.retry_after(waited(s), NOW) for s in (300, 599, 600, 86_400)],
        [150, 299, 300, 300],
    ),
    Row(
        "dry run, a spent token: a pending request's retry takes no vote",
        dry(UNPROVEN, pending_record(), the_request=request("pending"), votes=(DENY_VOTE,)),
        Verdict("defer", "join request jreq_1 is pending"),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.rule for row in ROWS])
def test_rule(row: Row) -> None:
    decided = row.decide()
    if isinstance(row.expected, Refused):
        # A decision refuses (`Refuse`); what follows a lost condition is the error itself.
        error = decided.error if isinstance(decided, Refuse) else decided
        assert type(error) is row.expected.error, decided
        assert isinstance(error, errors.JoinplaneError)
        assert error.reason == row.expected.reason
    else:
        assert decided == row.expected


def test_every_row_names_a_different_rule() -> None:
    assert len({row.rule for row in ROWS}) == len(ROWS)

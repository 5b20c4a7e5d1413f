"""Attestors: checks that vote on a join. `admit`, `defer` (abstain: a person must decide) or
`deny`. Any deny denies; else any defer defers; else admit.

Each attestor here is a pure function of the request and of facts looked up beforehand (the
discovery inventory, the TPM allow-list, hardware ids held by other machines), so the decision is
reproducible and the lookups are counted in one place (`join.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from joinplane import views
    from joinplane.aws_rules import Caller
    from joinplane.dal.tokens import AwsRulesRecord, JoinTokenRecord

ADMIT, DEFER, DENY = "admit", "defer", "deny"


@dataclass(frozen=True)
class Vote:
    attestor: str
    verdict: str
    code: str
    message: str

    def reason(self) -> views.AttestorReason:
        return {"attestor": self.attestor, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class Facts:
    """What the lookups found for this join."""

    placeholders: tuple[tuple[str, str], ...] = ()
    held_by_others: tuple[tuple[str, str], ...] = ()  # (field, value) another active machine holds
    discovery_known: bool | None = None  # None: the policy is off, nothing was looked up
    # The entry that matched (entry id, its hostname, the identifiers that matched), for a join
    # policy's `site.discovery`; None: none matched, or nothing was looked up.
    discovery_entry: tuple[str, str | None, tuple[str, ...]] | None = None
    ek_sha256: str = ""  # the EK the TPM proved it holds (credential activation); "": none
    ek_claimed: bool = False  # an EK was presented without activation: it counts as no TPM
    ek_listed: bool | None = None
    ek_manufacturer: str = ""  # the listed root the activated EK's certificate chains to
    ek_certificate_problem: str = ""  # why it does not (when the token trusts manufacturers)
    key_bound: bool = True  # the join carries a CSR: its identity is a key
    aws_caller: Caller | None = None  # who signed an AWS IAM join (STS's answer); None: not one


DUPLICATE_HARDWARE_ID = "duplicate_hardware_id"


def hardware_ids(facts: Facts) -> list[Vote]:
    votes = [
        Vote("hardware-ids", DEFER, "placeholder_hardware_id", f"{field} is a placeholder: {why}")
        for field, why in facts.placeholders
    ]
    votes += [
        Vote(
            "hardware-ids",
            DEFER,
            DUPLICATE_HARDWARE_ID,
            f"{field} {value!r} is held by another active machine (a cloned image?)",
        )
        for field, value in facts.held_by_others
    ]
    return votes


def discovery(policy: str, facts: Facts) -> list[Vote]:
    if policy != "defer-unknown" or facts.discovery_known:
        return []
    return [
        Vote(
            "discovery", DEFER, "unknown_machine", "the site's discovery inventory does not list this machine"
        )
    ]


def tpm(policy: str, facts: Facts, *, trust: str = "allow-list") -> list[Vote]:
    """Votes only on an EK the TPM proved it holds: an EK hash or certificate presented without
    credential activation is public material anyone can copy, and counts as no TPM."""
    if policy == "off":
        return []
    if not facts.ek_sha256:
        unproved = " (an endorsement key presented without credential activation counts as none)"
        if policy == "require":
            message = "this join token requires a TPM that proves it holds its endorsement key"
            return [Vote("tpm", DENY, "tpm_required", message + (unproved if facts.ek_claimed else ""))]
        if facts.ek_claimed:
            return [Vote("tpm", DEFER, "tpm_not_activated", "no TPM was proved" + unproved)]
        return [Vote("tpm", DEFER, "tpm_missing", "no TPM endorsement key was presented")]
    if facts.ek_listed or (trust == "manufacturer" and facts.ek_manufacturer):
        return []
    message = "the TPM endorsement key is on no allow-list of this site"
    if trust == "manufacturer":
        message += f", and its certificate does not verify: {facts.ek_certificate_problem or 'none was sent'}"
    return [Vote("tpm", DEFER, "tpm_unlisted", message)]


def identity(policy: str, facts: Facts) -> list[Vote]:
    if policy == "key" and not facts.key_bound:
        return [
            Vote(
                "identity",
                DENY,
                "key_required",
                "this join token requires a key-bound identity: send a csr, not only a machineFingerprint",
            )
        ]
    return []


def aws(rules: AwsRulesRecord | None, facts: Facts) -> list[Vote]:
    """A token with AWS rules admits only the callers they match, and only by the IAM method: its
    secret, shown once at creation, is not a way around them."""
    if rules is None:
        return []
    from joinplane import aws_rules

    caller = facts.aws_caller
    if caller is None:
        message = "this join token admits only machines that prove an AWS IAM identity (join with --aws-iam)"
        return [Vote("aws", DENY, "aws_iam_required", message)]
    if not aws_rules.admits(rules, caller):
        message = f"the AWS caller {caller.arn} (account {caller.account}) matches none of the token's rules"
        return [Vote("aws", DENY, "aws_caller_not_allowed", message)]
    return []


def token_policy(token: JoinTokenRecord) -> list[Vote]:
    votes = []
    if token.pool_id is None:
        votes.append(
            Vote("token", DEFER, "site_token", "a site token defers every join until a pool claims it")
        )
    if token.require_approval:
        votes.append(
            Vote("token", DEFER, "approval_required", "this join token requires an operator's approval")
        )
    return votes


def evaluate(token: JoinTokenRecord, facts: Facts) -> list[Vote]:
    """Every vote that is not a plain admit, in a stable order. The facts carry all the attestors
    read of the request."""
    policy = token.attestation
    return [
        *token_policy(token),
        *hardware_ids(facts),
        *discovery(policy.discovery, facts),
        *tpm(policy.tpm, facts, trust=policy.tpm_trust or "allow-list"),
        *identity(policy.identity_policy, facts),
        *aws(policy.aws, facts),
    ]


# Every attestor, in `evaluate`'s order: one that cast no vote admitted.
ATTESTORS = ("token", "hardware-ids", "discovery", "tpm", "identity", "aws")


def verdicts(votes: list[Vote]) -> list[tuple[str, str]]:
    """Each attestor's own verdict on a join (its strongest vote, or admit), for the record an
    operator decides from."""
    return [(name, verdict([v for v in votes if v.attestor == name])) for name in ATTESTORS]


def verdict(votes: list[Vote]) -> str:
    if any(v.verdict == DENY for v in votes):
        return DENY
    if any(v.verdict == DEFER for v in votes):
        return DEFER
    return ADMIT

"""Typed event details: what every security event's `detail` holds, key for key.

The publisher builds details as plain dicts (`joinplane.event_derivation`: cheap at cold start) and
annotates each one with its type here, so mypy checks every key and value of every detail against
the same types `joinplane.event_schemas` turns into `shared/events/<detail-type>.schema.json`, the
JSON Schemas consumers read. The details of operators' actions are in
`joinplane.admin_event_details`. A key added to a detail and not here is a type error; a type changed
here and not regenerated fails tests/events.

Imported only by type checkers (`if TYPE_CHECKING:`) and the schema generator: never at the
publisher's cold start, so pydantic's annotations here cost it nothing.

Conventions, as in `joinplane.views`: a key without `NotRequired` is always present (`X | None`:
present, possibly null); `NotRequired[X]` is present only sometimes and never null. A detail type
is its detail-type in CamelCase with `Detail` appended, and forbids extra keys. Where the stream's
image of a join request or a machine is read tolerantly (`dal.stream`: any attribute may be
absent from a partial image), these types say what a stored item always holds, which is the
contract consumers rely on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

DETAIL = ConfigDict(extra="forbid")

TIMESTAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"
ULID = "[0-9a-hjkmnp-tv-z]{26}"  # an id's ULID, lowercase Crockford base32
SHA256 = r"^[0-9a-f]{64}$"
SERIAL = r"^[0-9a-f]{1,40}$"

EventId = Annotated[
    str,
    Field(
        pattern=r"^evt_[0-9a-f]{32}$",
        description="Deterministic: the same transition always yields the same id. Deduplicate on it.",
    ),
]
Timestamp = Annotated[str, Field(pattern=TIMESTAMP)]
MachineId = Annotated[str, Field(pattern=rf"^mach_{ULID}$")]
Sha256 = Annotated[str, Field(pattern=SHA256)]
# Who decided a join request's or a machine's transition.
Decider = Annotated[
    str | None,
    Field(
        description=(
            "API key id of the operator, or the automatic decider "
            "(attestors, policy, retention, cluster-key)."
        )
    ),
]


# --- where an event happened: the keys every detail starts with -----------------------------------


class Header(TypedDict):
    eventId: EventId
    occurredAt: Timestamp
    tenantId: str


class RequestScoped(Header):
    """A join request's or a machine's (a site token's join has no pool until one claims it)."""

    siteId: str | None
    poolId: str | None


class PoolScoped(Header):
    siteId: str
    poolId: str


# --- join requests -------------------------------------------------------------------------------

_POLICY_RULE_DEFERRED = Field(
    description=(
        "The rule of the pool's join policy (docs/policy.md) that deferred the join, or approved it as "
        "one of the several approvals its pool requires (then the first of `approvals`), if one did."
    )
)
_POLICY_RULE_APPROVED = Field(
    description=(
        "The rule of the pool's join policy (docs/policy.md) that approved the deferred join at once "
        "(`decidedBy: policy`); its request is stored consumed by the machine."
    )
)


@with_config(ConfigDict(extra="allow"))
class AttestorVote(TypedDict):
    """One attestor's reason to defer, handed on as the request stores it."""

    attestor: str
    code: str
    message: str


@with_config(DETAIL)
class Approver(TypedDict):
    """One approval of a join request: by an API key, or by a join policy's rule."""

    by: Annotated[str, Field(description="the approving API key's id, or `policy:<rule name>`")]
    at: Timestamp


ApprovalCount = Annotated[int, Field(ge=1, le=3)]


@with_config(DETAIL)
class JoinRequestCreatedDetail(RequestScoped):
    """a join was deferred: its request waits for an operator's decision."""

    requestId: Annotated[str, Field(pattern=r"^jreq_[0-9a-hjkmnp-tv-z]{26,52}$")]
    state: Literal["pending"]
    decidedBy: Decider
    expiresAt: str
    reasons: Sequence[AttestorVote]
    policyRule: NotRequired[Annotated[str, _POLICY_RULE_DEFERRED]]
    # A policy rule's approval in a pool that requires more than one: the request starts with it.
    approvals: NotRequired[Sequence[Approver]]
    approvalsRequired: NotRequired[ApprovalCount]


@with_config(DETAIL)
class JoinRequestApprovalRecordedDetail(RequestScoped):
    """one approval of a join request whose pool requires more than one: recorded, and the request
    still pending (`approvals` so far, of `approvalsRequired`). Not an approval of the join: the
    machine is admitted only after `security.join-request.approved`."""

    requestId: str
    state: Literal["pending"]
    approvedBy: Annotated[str, Field(description="the approval this event records (see `Approver.by`)")]
    approvals: Sequence[Approver]
    approvalsRequired: ApprovalCount


@with_config(DETAIL)
class JoinRequestApprovedDetail(RequestScoped):
    """an operator approved a join request: the machine's retry with the same CSR is admitted once,
    before `expiresAt`. `decidedBy` gave the last approval the pool required; `approvals` lists
    every approval, that one included."""

    requestId: str
    state: Literal["approved"]
    decidedBy: Decider
    expiresAt: str
    reason: NotRequired[str]
    approvals: Sequence[Approver]


@with_config(DETAIL)
class JoinRequestRejectedDetail(RequestScoped):
    """an operator rejected a join request."""

    requestId: str
    state: Literal["rejected"]
    decidedBy: Decider
    reason: NotRequired[str]


@with_config(DETAIL)
class JoinRequestConsumedDetail(RequestScoped):
    """the approved retry was admitted: the request became the machine `machineId`."""

    requestId: str
    state: Literal["consumed"]
    decidedBy: Decider
    machineId: MachineId
    policyRule: NotRequired[Annotated[str, _POLICY_RULE_APPROVED]]


@with_config(DETAIL)
class JoinRequestExpiredDetail(RequestScoped):
    """the retention job marked a pending or approved request past its `expiresAt`."""

    requestId: str
    state: Literal["expired"]
    decidedBy: Annotated[Literal["retention"], Field(description="The retention job.")]


# --- machines and cluster nodes ------------------------------------------------------------------


@with_config(DETAIL)
class MachineTpm(TypedDict):
    """Present when the machine presented a TPM (docs/tpm.md): its EK, whether the TPM proved it
    holds it (credential activation), and how the EK was trusted (`allow-list`, `manufacturer`, or
    null: an operator decided)."""

    ekPublicKeySha256: Sha256
    activated: bool
    verifiedBy: Literal["allow-list", "manufacturer"] | None


@with_config(DETAIL)
class MachineAws(TypedDict):
    """Present when the machine joined by the AWS IAM method (docs/aws.md): the caller STS named
    for its signed GetCallerIdentity, and the EC2 instance whose instance profile signed, when its
    role session is named after one."""

    account: Annotated[str, Field(pattern=r"^[0-9]{12}$")]
    arn: Annotated[str, Field(pattern=r"^arn:aws")]
    instanceId: NotRequired[Annotated[str, Field(pattern=r"^i-([0-9a-f]{8}|[0-9a-f]{17})$")]]


@with_config(DETAIL)
class MachineJoinedDetail(RequestScoped):
    """a machine was admitted (`rejoin: false`), or re-joined with a new machine token (`rejoin:
    true`): names its key and certificate and, on a re-join, those it replaced."""

    machineId: MachineId
    state: Literal["active"]
    requestId: str | None
    tokenId: str | None
    rejoin: bool
    publicKeySha256: Annotated[
        str | None,
        Field(
            pattern=SHA256,
            description=(
                "Hex SHA-256 of the machine's public key (SubjectPublicKeyInfo, DER) now; null for "
                "a machine that joined with a fingerprint only."
            ),
        ),
    ]
    previousPublicKeySha256: Annotated[
        str | None, Field(pattern=SHA256, description="The key before the change; null on a first join.")
    ]
    certificateSerial: Annotated[
        str | None,
        Field(
            pattern=SERIAL,
            description=(
                "The serial (lower-case hex) of the certificate issued by this change; null without "
                "a certificate."
            ),
        ),
    ]
    previousCertificateSerial: Annotated[
        str | None,
        Field(
            pattern=SERIAL,
            description="The certificate it replaced; null on a first join or without a certificate.",
        ),
    ]
    decidedBy: Annotated[
        Literal["attestors", "operator", "policy"],
        Field(
            description=(
                "`attestors` when they admitted the join, `operator` for an approved request's, `policy` "
                "when a rule of the pool's join policy approved it (`policyRule`)."
            )
        ),
    ]
    policyRule: NotRequired[Annotated[str, _POLICY_RULE_APPROVED]]
    tpm: NotRequired[MachineTpm]
    aws: NotRequired[MachineAws]


@with_config(DETAIL)
class MachineKeyRotatedDetail(RequestScoped):
    """a machine renewed onto a new key; its previous key can never join again and every
    certificate of it that still verified is on its CA's CRL."""

    machineId: MachineId
    state: Literal["active"]
    publicKeySha256: Annotated[
        str,
        Field(
            pattern=SHA256,
            description="Hex SHA-256 of the machine's new public key (SubjectPublicKeyInfo, DER).",
        ),
    ]
    previousPublicKeySha256: Annotated[
        str, Field(pattern=SHA256, description="The key it replaced, retired: it can never join again.")
    ]
    certificateSerial: Annotated[
        str,
        Field(
            pattern=SERIAL,
            description="The serial (lower-case hex) of the certificate issued for the new key.",
        ),
    ]
    previousCertificateSerial: Annotated[
        str | None,
        Field(
            pattern=SERIAL,
            description=(
                "The certificate it replaced (listed on its CA's CRL as superseded, with every other "
                "certificate of the previous key that still verified)."
            ),
        ),
    ]
    decidedBy: Annotated[
        Literal["machine"],
        Field(
            description=(
                "The machine's own renewal, made with its machine token and a proof of possession "
                "of both keys."
            )
        ),
    ]


@with_config(DETAIL)
class MachineRevokedDetail(RequestScoped):
    """an operator revoked a machine."""

    machineId: str
    state: Literal["revoked"]
    decidedBy: Decider
    reason: str | None


@with_config(DETAIL)
class ClusterNodeJoinedDetail(PoolScoped):
    """a node was added to a cluster pool with the pool's cluster key (Sylve's accept-join)."""

    nodeId: str
    state: Literal["member"]
    nodeIp: str
    nodeVersion: str
    digest: str
    guestCount: int
    decidedBy: Literal["cluster-key"]

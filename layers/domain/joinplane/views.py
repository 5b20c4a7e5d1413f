"""Typed views: what every operator route answers, field for field (the machine join's: `join_views`).

The domain builds its answers as plain dicts (`pools.view`, `tokens.view`, ...: cheap at cold
start) and annotates those functions to return these TypedDicts, so mypy checks every answer's
keys against the same types the OpenAPI generator (joinplane.contract) turns into the
response schemas, and the schemathesis contract test checks every answer the local runtime gives
against those schemas. A key added to an answer and not here is a type error.

Imported only by type checkers (`if TYPE_CHECKING:` in the domain) and the OpenAPI generator:
never at a function's cold start, so pydantic's annotations here cost a function nothing.

Conventions: a key without `NotRequired` is always present (`X | None`: present, possibly null);
`NotRequired[X]` is present only sometimes (`nextCursor`) and never null. Every view forbids
extra keys (`additionalProperties: false` in the schema).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from joinplane import credentials, ids
from joinplane.fact_views import AwsCaller, HardwareFacts, TpmFacts
from joinplane.policy_views import PolicySimulation as PolicySimulation
from joinplane.wire import DETAIL_TYPE, POOL_ID, TENANT_ID
from joinplane.wire import TIMESTAMP as TIMESTAMP  # the hand-written contracts name it here

VIEW = ConfigDict(extra="forbid")

Timestamp = Annotated[str, Field(pattern=TIMESTAMP, description="RFC 3339, UTC, with `Z`")]
TenantId = Annotated[str, Field(pattern=TENANT_ID)]
PoolId = Annotated[str, Field(pattern=POOL_ID)]
SiteId = PoolId
KeyId = Annotated[str, Field(pattern=ids.KEY_ID)]
SHA256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
TokenState = Literal["active", "expired", "exhausted", "revoked"]
JoinRequestState = Literal["pending", "approved", "rejected", "expired", "consumed"]


# --- API keys ----------------------------------------------------------------------------------


@with_config(VIEW)
class ApiKey(TypedDict):
    keyId: KeyId
    tenantId: TenantId
    grants: Annotated[list[str], Field(description="`PERMISSION@SCOPE`, e.g. `compute:*@tenant`")]
    description: str
    state: Literal["active", "revoked"]
    createdAt: Timestamp
    createdBy: str | None
    revokedAt: Timestamp | None
    revokedBy: str | None


@with_config(VIEW)
class ApiKeyCreated(ApiKey):
    key: Annotated[
        str,
        Field(
            pattern=credentials.pattern("jpk"),
            description="The secret, shown this once; only its SHA-256 is stored.",
        ),
    ]


@with_config(VIEW)
class ApiKeyList(TypedDict):
    apiKeys: list[ApiKey]
    nextCursor: NotRequired[str]


# --- pools -------------------------------------------------------------------------------------


@with_config(VIEW)
class StoredTelemetrySink(TypedDict):
    destination: NotRequired[str]
    credential: NotRequired[str]
    streamPrefix: NotRequired[str]


@with_config(VIEW)
class StoredTelemetry(TypedDict):
    enabled: NotRequired[bool]
    streamPrefix: NotRequired[str]
    logs: NotRequired[StoredTelemetrySink]
    events: NotRequired[StoredTelemetrySink]


@with_config(VIEW)
class StoredBilling(TypedDict):
    usageEndpoint: NotRequired[str]
    usageToken: NotRequired[str]
    costHookEndpoint: NotRequired[str]
    costHookToken: NotRequired[str]
    billableMarginPct: NotRequired[float]


@with_config(VIEW)
class StoredBootstrap(TypedDict):
    """The pool's bootstrap defaults as stored: only the fields that were set."""

    controlplaneHttpUrl: NotRequired[str]
    controlplaneGrpcHost: NotRequired[str]
    controlplaneGrpcPort: NotRequired[int]
    controlplaneGrpcTls: NotRequired[bool]
    transport: NotRequired[str]
    executor: NotRequired[str]
    fallback: NotRequired[str]
    disabledServices: NotRequired[list[str]]
    imageRegistryStore: NotRequired[str]
    imageClipVersion: NotRequired[int]
    imageLocalCacheEnabled: NotRequired[bool]
    telemetry: NotRequired[StoredTelemetry]
    billing: NotRequired[StoredBilling]
    workerImage: NotRequired[str]


@with_config(VIEW)
class StoredClusterSettings(TypedDict):
    requiredNodeVersion: NotRequired[str]


@with_config(VIEW)
class JoinPolicyRule(TypedDict):
    """One rule of a pool's join policy: when the CEL condition `when` holds, `decision` is taken."""

    name: str
    when: str
    decision: Literal["approve", "defer", "deny"]
    reason: str


@with_config(VIEW)
class Pool(TypedDict):
    tenantId: TenantId
    poolId: PoolId
    siteId: SiteId
    name: str
    workspaceId: str
    state: Literal["active", "archived"]
    bootstrap: StoredBootstrap
    joinRequestTtlSeconds: int
    certificateTtlSeconds: int
    caPropagationSeconds: int
    cluster: StoredClusterSettings | None
    joinPolicy: Annotated[
        list[JoinPolicyRule],
        Field(description="The join policy's rules in order (docs/policy.md); empty: no policy."),
    ]
    createdAt: Timestamp
    updatedAt: Timestamp
    archivedAt: Timestamp | None
    approvalsRequired: Annotated[int, Field(ge=1, le=3, description="distinct API keys a join request needs")]


@with_config(VIEW)
class PoolList(TypedDict):
    pools: list[Pool]
    nextCursor: NotRequired[str]


# --- join tokens -------------------------------------------------------------------------------


@with_config(VIEW)
class TokenAwsRules(TypedDict):
    accounts: Annotated[list[str], Field(description="AWS accounts admitted; empty: any account")]
    arns: Annotated[
        list[str],
        Field(description="ARN patterns (`*`: any run of characters) a caller's ARN must match; empty: any"),
    ]


@with_config(VIEW)
class TokenAttestation(TypedDict):
    discovery: Literal["off", "defer-unknown"]
    tpm: Literal["off", "defer-unlisted", "require"]
    identity: NotRequired[
        Annotated[
            Literal["any", "key"],
            Field(description="Absent on tokens made before the setting existed: `any`."),
        ]
    ]
    tpmTrust: NotRequired[
        Annotated[
            Literal["allow-list", "manufacturer"],
            Field(
                description="Activated EKs the `tpm` attestor admits: allow-listed ones, or also any "
                "whose certificate chains to a listed manufacturer. Absent on older tokens: `allow-list`."
            ),
        ]
    ]
    tpmRejoin: NotRequired[
        Annotated[
            Literal["any", "activate"],
            Field(
                description="`activate`: a machine that joined with an activated TPM activates it again "
                "to re-join. Absent on older tokens: `any`."
            ),
        ]
    ]
    aws: NotRequired[
        Annotated[
            TokenAwsRules,
            Field(
                description="The AWS IAM join method's rules (every list given must match); present, the "
                "token takes only IAM joins, named by its tokenId. Absent: no IAM joins."
            ),
        ]
    ]


@with_config(VIEW)
class JoinToken(TypedDict):
    tokenId: Annotated[str, Field(pattern=ids.TOKEN_ID)]
    tenantId: TenantId
    siteId: SiteId
    poolId: Annotated[PoolId | None, Field(description="null for a site token")]
    description: str
    state: TokenState
    expiresAt: Timestamp
    maxUses: int
    usesRemaining: int
    requireApproval: bool
    attestation: TokenAttestation
    createdAt: Timestamp
    createdBy: str | None
    revokedAt: Timestamp | None
    revokedBy: str | None


@with_config(VIEW)
class JoinTokenCreated(JoinToken):
    token: Annotated[
        str,
        Field(
            pattern=credentials.pattern("jpt"),
            description="The secret, shown this once; only its SHA-256 is stored.",
        ),
    ]


@with_config(VIEW)
class JoinTokenList(TypedDict):
    joinTokens: list[JoinToken]
    nextCursor: NotRequired[str]


# --- machines and join requests ----------------------------------------------------------------


@with_config(VIEW)
class PreflightResult(TypedDict):
    name: str
    ok: bool
    message: str
    severity: str


@with_config(VIEW)
class MachineCertificate(TypedDict):
    serial: Annotated[str, Field(pattern=r"^[0-9a-f]{1,40}$", description="lower-case hex")]
    caId: Annotated[str, Field(description="the CA that signed it, whose CRL would list it")]
    expiresAt: Timestamp


@with_config(VIEW)
class Machine(TypedDict):
    machineId: Annotated[str, Field(pattern=ids.MACHINE_ID)]
    tenantId: TenantId
    siteId: SiteId
    poolId: PoolId
    state: Literal["active", "revoked"]
    schedulable: bool
    hostname: str
    os: str
    arch: str
    cpuCount: int
    memoryMb: int
    gpuCount: int
    hardware: HardwareFacts
    tpm: TpmFacts
    aws: NotRequired[Annotated[AwsCaller, Field(description="the AWS caller an IAM join proved")]]
    preflight: list[PreflightResult]
    workerImageBaseline: str | None
    certificateSerial: str | None
    certificateExpiresAt: Timestamp | None
    publicKeySha256: Annotated[
        SHA256 | None,
        Field(description="its key (SubjectPublicKeyInfo, DER); null: joined with a fingerprint only"),
    ]
    certificates: Annotated[
        list[MachineCertificate],
        Field(
            description="every certificate issued to its key that has not expired, the current one last "
            "(a renewal that keeps the key leaves the earlier ones valid; one onto a new key revokes them)"
        ),
    ]
    requestId: str | None
    tokenId: str | None
    joinedAt: Timestamp
    rejoinedAt: Timestamp | None
    lastRenewedAt: Timestamp | None
    revokedAt: Timestamp | None
    revokedBy: str | None
    revokeReason: str | None


@with_config(VIEW)
class MachineList(TypedDict):
    machines: list[Machine]
    nextCursor: NotRequired[str]


@with_config(VIEW)
class AttestorReason(TypedDict):
    attestor: str
    code: str
    message: str


@with_config(VIEW)
class AttestorVerdict(TypedDict):
    attestor: str
    verdict: Literal["admit", "defer", "deny"]


@with_config(VIEW)
class RequestedMachine(TypedDict):
    fingerprint: str
    hostname: str
    os: str
    arch: str
    cpuCount: int
    memoryMb: int
    gpuCount: int
    hardware: HardwareFacts
    tpm: TpmFacts
    aws: NotRequired[Annotated[AwsCaller, Field(description="the AWS caller an IAM join proved")]]


@with_config(VIEW)
class Approval(TypedDict):
    by: Annotated[str, Field(description="the approving API key's id, or `policy:<rule name>`")]
    at: Timestamp
    reason: str | None


@with_config(VIEW)
class JoinRequest(TypedDict):
    requestId: Annotated[str, Field(pattern=ids.REQUEST_ID)]
    tenantId: TenantId
    siteId: SiteId
    poolId: Annotated[
        PoolId | None, Field(description="null while the request is its site's and no pool claimed it")
    ]
    state: JoinRequestState
    reasons: list[AttestorReason]
    machine: RequestedMachine
    csrPublicKeySha256: SHA256 | None
    createdAt: Timestamp
    expiresAt: Timestamp
    decidedAt: Timestamp | None
    decidedBy: str | None
    reason: str | None
    consumedAt: Timestamp | None
    machineId: str | None
    tokenId: Annotated[str, Field(description="the join token the machine presented")]
    tokenDescription: Annotated[
        str | None, Field(description="that token's description when the join was deferred")
    ]
    sourceIp: Annotated[str | None, Field(description="the address the join came from, as the API saw it")]
    verdicts: Annotated[
        list[AttestorVerdict],
        Field(description="every attestor's verdict on the join; empty on a request older than this field"),
    ]
    approvals: Annotated[list[Approval], Field(description="who approved so far, in order: one per key")]
    # While pending, what the pool requires now; once decided, what the last approval was judged by;
    # null for a site's unclaimed request read through no pool (docs/queue.md, "Two approvals").
    approvalsRequired: Annotated[int | None, Field(description="approvals needed (docs/queue.md)")]


@with_config(VIEW)
class JoinRequestList(TypedDict):
    requests: list[JoinRequest]
    nextCursor: NotRequired[str]


# --- discovery, TPM allow-lists, audit ---------------------------------------------------------


@with_config(VIEW)
class DiscoveryEntry(TypedDict):
    entryId: Annotated[str, Field(pattern=ids.ENTRY_ID)]
    tenantId: TenantId
    siteId: SiteId
    serialNumber: str | None
    systemUuid: str | None
    macAddresses: list[str]
    machineFingerprint: str | None
    hostname: str | None
    description: str
    createdAt: Timestamp
    createdBy: str | None


@with_config(VIEW)
class DiscoveryList(TypedDict):
    entries: list[DiscoveryEntry]
    nextCursor: NotRequired[str]


@with_config(VIEW)
class AllowedKey(TypedDict):
    tenantId: TenantId
    siteId: SiteId
    ekPublicKeySha256: SHA256
    addedFrom: Literal["hash", "certificate"]
    description: str
    createdAt: Timestamp
    createdBy: str | None


@with_config(VIEW)
class AllowedKeyList(TypedDict):
    keys: list[AllowedKey]
    nextCursor: NotRequired[str]


@with_config(VIEW)
class TpmManufacturer(TypedDict):
    tenantId: TenantId
    siteId: SiteId
    certificateSha256: SHA256
    subject: str
    issuer: str
    root: Annotated[bool, Field(description="Self-signed: a chain ends here. Else an intermediate.")]
    notAfter: Timestamp
    description: str
    createdAt: Timestamp
    createdBy: str | None


@with_config(VIEW)
class TpmManufacturerList(TypedDict):
    manufacturers: list[TpmManufacturer]
    nextCursor: NotRequired[str]


@with_config(VIEW)
class AuditEvent(TypedDict):
    eventId: str
    detailType: Annotated[str, Field(pattern=DETAIL_TYPE)]
    occurredAt: Timestamp
    tenantId: TenantId
    siteId: str | None
    poolId: str | None
    detail: Annotated[dict[str, Any], Field(description="The EventBridge event's `detail`, as published")]


@with_config(VIEW)
class AuditEventList(TypedDict):
    events: list[AuditEvent]
    nextCursor: NotRequired[str]


# --- clusters ----------------------------------------------------------------------------------


@with_config(VIEW)
class ClusterKeyRotated(TypedDict):
    tenantId: TenantId
    poolId: PoolId
    clusterKeyId: str
    clusterKey: Annotated[str, Field(description="The secret `X-Cluster-Key`, shown this once.")]
    rotatedAt: Timestamp


@with_config(VIEW)
class CertificateAuthority(TypedDict):
    caId: Annotated[str, Field(pattern=r"^ca_[0-9a-z]{26}$")]
    certificate: Annotated[str, Field(description="The CA certificate, PEM.")]
    notBefore: Timestamp
    notAfter: Timestamp
    state: Literal["active", "prepared", "retired"]
    createdAt: Timestamp
    upstream: Annotated[
        bool, Field(description="True when the CA is an intermediate signed by an upstream root.")
    ]
    activatesAt: NotRequired[
        Annotated[
            Timestamp,
            Field(description="A prepared CA: when it signs at the latest (its propagation period ends)."),
        ]
    ]
    bundleUntil: NotRequired[
        Annotated[
            Timestamp,
            Field(description="A retired CA: when it leaves the bundle (all it signed has expired)."),
        ]
    ]


@with_config(VIEW)
class CertificateAuthorityRequest(TypedDict):
    caId: Annotated[str, Field(pattern=r"^ca_[0-9a-z]{26}$")]
    csr: Annotated[
        str,
        Field(
            description="PKCS#10 request (PEM) for the pool's new KMS key: have the organisation's CA "
            "sign it as an intermediate (CA:TRUE, pathlen:0, keyCertSign and cRLSign, a "
            "subjectKeyIdentifier), then importCertificate the result with its chain."
        ),
    ]
    createdAt: Timestamp


@with_config(VIEW)
class CertificateAuthorities(TypedDict):
    active: Annotated[CertificateAuthority, Field(description="The CA that signs new certificates.")]
    bundle: Annotated[
        list[str],
        Field(
            description="PEM certificates to trust for the pool's machines: the active CA first, then "
            "the prepared one, then every retired CA whose certificates may still be valid, each "
            "followed by its chain."
        ),
    ]
    next: NotRequired[
        Annotated[
            CertificateAuthority,
            Field(
                description="The prepared CA (rotate, importCertificate): in the bundle already, signing "
                "nothing until its activatesAt or certificateAuthorities/activate."
            ),
        ]
    ]
    retired: Annotated[
        list[CertificateAuthority],
        Field(description="The retired CAs still in the bundle, each with when it leaves it."),
    ]
    bundleUrl: NotRequired[
        Annotated[
            str,
            Field(
                description="Where verifiers fetch the bundle without credentials (GET, PEM, cacheable "
                "5 minutes): the same URL for the pool's whole life."
            ),
        ]
    ]
    breaks: NotRequired[
        Annotated[
            str,
            Field(description="An emergency rotation: what it breaks, and how verifiers recover."),
        ]
    ]
    pending: NotRequired[
        Annotated[
            CertificateAuthorityRequest,
            Field(description="The certificate request awaiting its signed certificate (createCsr), if any."),
        ]
    ]


@with_config(VIEW)
class ClusterNode(TypedDict):
    nodeId: str
    nodeIp: str
    nodeVersion: str
    digest: str
    guestCount: int
    joinedAt: Timestamp


@with_config(VIEW)
class ClusterNodeList(TypedDict):
    nodes: list[ClusterNode]
    nextCursor: NotRequired[str]


@with_config(VIEW)
class ClusterGuest(TypedDict):
    guestId: int
    guestType: str
    nodeId: str


@with_config(VIEW)
class ClusterGuestList(TypedDict):
    guests: list[ClusterGuest]
    nextCursor: NotRequired[int]

"""Typed views of what every route answers: the response half of shared/openapi.json.

The handlers build their answers as dicts (`pools.view`, `tokens.view`, ...: cheap at cold start);
these models describe those dicts field for field, and the schemathesis contract test
(tests/contract/test_openapi_schemathesis.py) checks every answer the local runtime gives against
the schemas generated from them. A field added to a view and not here is a failing test, not a
silently undocumented field: every model forbids extra fields.

Conventions: a field without a default is always present (`X | None`: present, possibly null);
`Absent[X]` is a field that is present only sometimes (`nextCursor`) and never null.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from joinplane import apikeys, audit, discovery, machines, tokens
from joinplane.join_requests import REQUEST_ID
from joinplane.wire import POOL_ID, TENANT_ID

VIEW = ConfigDict(extra="forbid", defer_build=True)

TIMESTAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$"
Timestamp = Annotated[str, Field(pattern=TIMESTAMP, description="RFC 3339, UTC, with `Z`")]
TenantId = Annotated[str, Field(pattern=TENANT_ID)]
PoolId = Annotated[str, Field(pattern=POOL_ID)]
SiteId = PoolId
KeyId = Annotated[str, Field(pattern=apikeys.KEY_ID_PATTERN)]
SHA256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class View(BaseModel):
    model_config = VIEW


# --- API keys ----------------------------------------------------------------------------------


class ApiKey(View):
    keyId: KeyId
    tenantId: TenantId
    grants: list[str] = Field(description="`PERMISSION@SCOPE`, e.g. `compute:*@tenant`")
    description: str
    state: Literal["active", "revoked"]
    createdAt: Timestamp
    createdBy: str | None
    revokedAt: Timestamp | None
    revokedBy: str | None


class ApiKeyCreated(ApiKey):
    key: str = Field(
        pattern=r"^jpk_[0-9a-hjkmnp-tv-z]{26}_[0-9a-hjkmnp-tv-z]{32}$",
        description="The secret, shown this once; only its SHA-256 is stored.",
    )


class ApiKeyList(View):
    apiKeys: list[ApiKey]
    nextCursor: str | SkipJsonSchema[None] = None


# --- pools -------------------------------------------------------------------------------------


class StoredTelemetrySink(View):
    destination: str | SkipJsonSchema[None] = None
    credential: str | SkipJsonSchema[None] = None
    streamPrefix: str | SkipJsonSchema[None] = None


class StoredTelemetry(View):
    enabled: bool | SkipJsonSchema[None] = None
    streamPrefix: str | SkipJsonSchema[None] = None
    logs: StoredTelemetrySink | SkipJsonSchema[None] = None
    events: StoredTelemetrySink | SkipJsonSchema[None] = None


class StoredBilling(View):
    usageEndpoint: str | SkipJsonSchema[None] = None
    usageToken: str | SkipJsonSchema[None] = None
    costHookEndpoint: str | SkipJsonSchema[None] = None
    costHookToken: str | SkipJsonSchema[None] = None
    billableMarginPct: float | SkipJsonSchema[None] = None


class StoredBootstrap(View):
    """The pool's bootstrap defaults as stored: only the fields that were set."""

    controlplaneHttpUrl: str | SkipJsonSchema[None] = None
    controlplaneGrpcHost: str | SkipJsonSchema[None] = None
    controlplaneGrpcPort: int | SkipJsonSchema[None] = None
    controlplaneGrpcTls: bool | SkipJsonSchema[None] = None
    transport: str | SkipJsonSchema[None] = None
    executor: str | SkipJsonSchema[None] = None
    fallback: str | SkipJsonSchema[None] = None
    disabledServices: list[str] | SkipJsonSchema[None] = None
    imageRegistryStore: str | SkipJsonSchema[None] = None
    imageClipVersion: int | SkipJsonSchema[None] = None
    imageLocalCacheEnabled: bool | SkipJsonSchema[None] = None
    telemetry: StoredTelemetry | SkipJsonSchema[None] = None
    billing: StoredBilling | SkipJsonSchema[None] = None
    workerImage: str | SkipJsonSchema[None] = None


class StoredClusterSettings(View):
    requiredNodeVersion: str | SkipJsonSchema[None] = None


class Pool(View):
    tenantId: TenantId
    poolId: PoolId
    siteId: SiteId
    name: str
    workspaceId: str
    state: Literal["active", "archived"]
    bootstrap: StoredBootstrap
    joinRequestTtlSeconds: int
    certificateTtlSeconds: int
    cluster: StoredClusterSettings | None
    createdAt: Timestamp
    updatedAt: Timestamp
    archivedAt: Timestamp | None


class PoolList(View):
    pools: list[Pool]
    nextCursor: str | SkipJsonSchema[None] = None


# --- join tokens -------------------------------------------------------------------------------


class TokenAttestation(View):
    discovery: Literal["off", "defer-unknown"]
    tpm: Literal["off", "defer-unlisted", "require"]
    identity: Literal["any", "key"] | SkipJsonSchema[None] = Field(
        default=None, description="Absent on tokens made before the setting existed: `any`."
    )


class JoinToken(View):
    tokenId: Annotated[str, Field(pattern=tokens.TOKEN_ID)]
    tenantId: TenantId
    siteId: SiteId
    poolId: PoolId | None = Field(description="null for a site token")
    description: str
    state: Literal["active", "expired", "exhausted", "revoked"]
    expiresAt: Timestamp
    maxUses: int
    usesRemaining: int
    requireApproval: bool
    attestation: TokenAttestation
    createdAt: Timestamp
    createdBy: str | None
    revokedAt: Timestamp | None
    revokedBy: str | None


class JoinTokenCreated(JoinToken):
    token: str = Field(
        pattern=r"^jpt_[0-9a-hjkmnp-tv-z]{26}_[0-9a-hjkmnp-tv-z]{32}$",
        description="The secret, shown this once; only its SHA-256 is stored.",
    )


class JoinTokenList(View):
    joinTokens: list[JoinToken]
    nextCursor: str | SkipJsonSchema[None] = None


# --- machines and join requests ----------------------------------------------------------------


class HardwareFacts(View):
    serialNumber: str | SkipJsonSchema[None] = None
    systemUuid: str | SkipJsonSchema[None] = None
    macAddresses: list[str] | SkipJsonSchema[None] = None


class TpmFacts(View):
    ekPublicKeySha256: str | SkipJsonSchema[None] = None


class PreflightResult(View):
    name: str
    ok: bool
    message: str
    severity: str


class Machine(View):
    machineId: Annotated[str, Field(pattern=machines.MACHINE_ID)]
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
    preflight: list[PreflightResult]
    workerImageBaseline: str | None
    certificateSerial: str | None
    certificateExpiresAt: Timestamp | None
    requestId: str | None
    tokenId: str | None
    joinedAt: Timestamp
    rejoinedAt: Timestamp | None
    revokedAt: Timestamp | None
    revokedBy: str | None
    revokeReason: str | None


class MachineList(View):
    machines: list[Machine]
    nextCursor: str | SkipJsonSchema[None] = None


class AttestorReason(View):
    attestor: str
    code: str
    message: str


class RequestedMachine(View):
    fingerprint: str
    hostname: str
    os: str
    arch: str
    cpuCount: int
    memoryMb: int
    gpuCount: int
    hardware: HardwareFacts
    tpm: TpmFacts


class JoinRequest(View):
    requestId: Annotated[str, Field(pattern=REQUEST_ID)]
    tenantId: TenantId
    siteId: SiteId
    poolId: PoolId | None = Field(description="null while the request is its site's and no pool claimed it")
    state: Literal["pending", "approved", "rejected", "expired", "consumed"]
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


class JoinRequestList(View):
    requests: list[JoinRequest]
    nextCursor: str | SkipJsonSchema[None] = None


# --- discovery, TPM allow-lists, audit ---------------------------------------------------------


class DiscoveryEntry(View):
    entryId: Annotated[str, Field(pattern=discovery.ENTRY_ID)]
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


class DiscoveryList(View):
    entries: list[DiscoveryEntry]
    nextCursor: str | SkipJsonSchema[None] = None


class AllowedKey(View):
    tenantId: TenantId
    siteId: SiteId
    ekPublicKeySha256: SHA256
    addedFrom: Literal["hash", "certificate"]
    description: str
    createdAt: Timestamp
    createdBy: str | None


class AllowedKeyList(View):
    keys: list[AllowedKey]
    nextCursor: str | SkipJsonSchema[None] = None


class AuditEvent(View):
    eventId: str
    detailType: Annotated[str, Field(pattern=audit.DETAIL_TYPE)]
    occurredAt: Timestamp
    tenantId: TenantId
    siteId: str | None
    poolId: str | None
    detail: dict[str, Any] = Field(description="The EventBridge event's `detail`, as published")


class AuditEventList(View):
    events: list[AuditEvent]
    nextCursor: str | SkipJsonSchema[None] = None


# --- clusters ----------------------------------------------------------------------------------


class ClusterKeyRotated(View):
    tenantId: TenantId
    poolId: PoolId
    clusterKeyId: str
    clusterKey: str = Field(description="The secret `X-Cluster-Key`, shown this once.")
    rotatedAt: Timestamp


class ClusterNode(View):
    nodeId: str
    nodeIp: str
    nodeVersion: str
    digest: str
    guestCount: int
    joinedAt: Timestamp


class ClusterNodeList(View):
    nodes: list[ClusterNode]
    nextCursor: str | SkipJsonSchema[None] = None


class ClusterGuest(View):
    guestId: int
    guestType: str
    nodeId: str


class ClusterGuestList(View):
    guests: list[ClusterGuest]
    nextCursor: int | SkipJsonSchema[None] = None

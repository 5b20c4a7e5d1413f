"""Typed answers of the machine join dialect (levers9's JoinMachine and Joinplane's renewal), field
for field: what `join_wire` builds and `join`, `tpm_join` and the machine join function return.

grpc-gateway JSON, so these are not pydantic schemas as the operator API's answers in `views` are:
the OpenAPI generator (joinplane.contract.levers9) writes theirs by hand, exactly as the contract has
them, and tests/contract/test_openapi_document.py holds the two to the same field names.

Like `views`, imported only by type checkers: never at a function's cold start.
"""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict

from joinplane.views import AttestorReason


class TelemetrySinkConfig(TypedDict):
    destination: str
    credential: str
    streamPrefix: str


class TelemetryConfig(TypedDict):
    enabled: bool
    streamPrefix: str
    logs: TelemetrySinkConfig | None
    events: TelemetrySinkConfig | None


class BillingConfig(TypedDict):
    usageEndpoint: str
    usageToken: str
    costHookEndpoint: str
    costHookToken: str
    billableMarginPct: float


class MachineBootstrapConfig(TypedDict):
    """levers9 JoinMachine's `controlplaneMachineBootstrapConfig`: every field present (EmitUnpopulated)."""

    controlplaneHttpUrl: str
    controlplaneGrpcHost: str
    controlplaneGrpcPort: int
    controlplaneGrpcTls: bool
    workspaceId: str
    poolName: str
    transport: str
    executor: str
    fallback: str
    disabledServices: list[str]
    imageRegistryStore: str
    imageClipVersion: str  # int64: a decimal string in proto3 JSON
    imageLocalCacheEnabled: bool
    telemetry: TelemetryConfig | None
    billing: BillingConfig | None
    workerImage: str


class JoinRequestRef(TypedDict):
    requestId: str
    state: Literal["pending"]
    expiresAt: str
    poolId: str | None  # None: a site token's request, which a pool of the site claims on approval
    siteId: str


class TpmChallenge(TypedDict):
    """A TPM join's credential to activate: TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET, each
    base64 of the size-prefixed structure, as TPM2_MakeCredential outputs them."""

    credentialBlob: str
    encryptedSecret: str
    expiresAt: str


class JoinMachineResponse(TypedDict):
    """levers9 JoinMachine's `controlplaneJoinMachineResponse` with every field present, plus Joinplane's
    additive fields; a dry run's three are present only on a dry run."""

    ok: bool
    errMsg: str
    workspaceId: str
    poolName: str
    machineId: str
    machineToken: str
    bootstrap: MachineBootstrapConfig | None
    certificate: str
    caCertificates: str
    certificateExpiresAt: str
    schedulable: bool
    joinRequest: JoinRequestRef | None
    retryAfterSeconds: int
    dryRun: NotRequired[bool]
    verdict: NotRequired[str]  # admit | defer | deny
    reasons: NotRequired[list[AttestorReason]]
    tpmChallenge: NotRequired[TpmChallenge]  # only on a TPM join's first answer


class RenewMachineResponse(TypedDict):
    machineId: str
    certificate: str
    caCertificates: str
    certificateExpiresAt: str

"""Machines: admitted joins. Each has an id (`mach_<ulid>`), a machine token (`jpm_`, stored as a
digest and replaced on every re-join), a certificate from its pool's CA, and what it said about
itself when it joined.

The records (Machine, the join Identity, HardwareClaim) and their keys are in
`joinplane.dal.machines`; this module is what operators and machine tokens may do with them.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from joinplane import clock, credentials, errors, ids, observe
from joinplane.dal import machines as machines_db
from joinplane.dal import revocations
from joinplane.dal.machines import (
    HardwareFactsRecord,
    IssuedCertificateRecord,
    MachineFactsRecord,
    MachineRecord,
    PreflightCheckRecord,
    TpmFactsRecord,
)
from joinplane.errors import Aborted, FailedPrecondition, NotFound, PermissionDenied, Unauthenticated
from joinplane.grants import Principal, Resource
from joinplane.wire import POOL_ID, STRICT, TENANT_ID, TEXT

if TYPE_CHECKING:
    from joinplane import fact_views, views
    from joinplane.join_wire import JoinMachineRequest

ID_PREFIX = "mach"
TOKEN_PREFIX = "jpm"
MACHINE_ID = ids.MACHINE_ID
READ, WRITE = "compute:machines:read", "compute:machines:write"


class ListMachines(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    poolId: str = Field(pattern=POOL_ID)
    state: str = Field(default="all", pattern="^(active|revoked|all)$")
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=MACHINE_ID)


class MachineRef(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    machineId: str = Field(pattern=MACHINE_ID)


class RevokeMachine(MachineRef):
    reason: str | None = Field(default=None, max_length=256, pattern=TEXT)


def mint_token(machine_id: str) -> str:
    return credentials.mint(TOKEN_PREFIX, machine_id.removeprefix(f"{ID_PREFIX}_"))


def facts_of(request: JoinMachineRequest) -> MachineFactsRecord:
    """What the machine said about itself, as its request and machine records keep it."""
    return MachineFactsRecord(
        fingerprint=request.machineFingerprint,
        hostname=request.hostname,
        os=request.os,
        arch=request.arch,
        cpu_count=request.cpuCount,
        memory_mb=request.memoryMb,
        gpu=request.gpu,
        gpu_count=request.gpuCount,
        gpu_ids=request.gpuIds,
        executor=request.executor,
        cpu_millicores=request.cpuMillicores,
        network_slot_pool_size=request.networkSlotPoolSize,
        container_start_concurrency=request.containerStartConcurrency,
        capabilities=request.capabilities,
        schedulable=request.schedulable,
        worker_image=request.workerImage,
        hardware=HardwareFactsRecord(
            serial_number=request.hardware.serialNumber,
            system_uuid=request.hardware.systemUuid,
            mac_addresses=request.hardware.macAddresses,
        ),
        tpm=TpmFactsRecord(request.tpm.ekPublicKeySha256),
        preflight=tuple(PreflightCheckRecord(c.name, c.ok, c.message, c.severity) for c in request.preflight),
    )


def tpm_view(facts: TpmFactsRecord) -> fact_views.TpmFacts:
    """The TPM as every answer shows it: the EK, and whether (and how) the join proved it."""
    tpm: fact_views.TpmFacts = {}
    if facts.ek_public_key_sha256:
        tpm["ekPublicKeySha256"] = facts.ek_public_key_sha256
        tpm["activated"] = facts.activated
    if facts.verified_by == "allow-list":
        tpm["verifiedBy"] = "allow-list"
    elif facts.verified_by == "manufacturer":
        tpm["verifiedBy"] = "manufacturer"
    if facts.manufacturer:
        tpm["manufacturer"] = facts.manufacturer
    if facts.ek_certificate_issuer:
        tpm["ekCertificateIssuer"] = facts.ek_certificate_issuer
        tpm["ekCertificateSerial"] = facts.ek_certificate_serial
    if facts.ek_certificate_problem:
        tpm["ekCertificateProblem"] = facts.ek_certificate_problem
    if facts.ak_name:
        tpm["akName"] = facts.ak_name
    return tpm


def facts_view(facts: MachineFactsRecord) -> fact_views.ReportedFacts:
    """The facts every answer about a machine shows (a machine, a join request's `machine`)."""
    hardware: fact_views.HardwareFacts = {}
    if facts.hardware.serial_number is not None:
        hardware["serialNumber"] = facts.hardware.serial_number
    if facts.hardware.system_uuid is not None:
        hardware["systemUuid"] = facts.hardware.system_uuid
    if facts.hardware.mac_addresses is not None:
        hardware["macAddresses"] = list(facts.hardware.mac_addresses)
    tpm = tpm_view(facts.tpm)
    shown: fact_views.ReportedFacts = {
        "hostname": facts.hostname,
        "os": facts.os,
        "arch": facts.arch,
        "cpuCount": facts.cpu_count,
        "memoryMb": facts.memory_mb,
        "gpuCount": facts.gpu_count,
        "hardware": hardware,
        "tpm": tpm,
    }
    if facts.aws.account:
        shown["aws"] = {"account": facts.aws.account, "arn": facts.aws.arn, "userId": facts.aws.user_id}
        if facts.aws.instance_id:
            shown["aws"]["instanceId"] = facts.aws.instance_id
    return shown


def view(machine: MachineRecord) -> views.Machine:
    return {
        "machineId": machine.machine_id,
        "tenantId": machine.tenant_id,
        "siteId": machine.site_id,
        "poolId": machine.pool_id,
        "state": "active" if machine.active else "revoked",
        "schedulable": machine.schedulable,
        **facts_view(machine.facts),
        "preflight": [
            {"name": c.name, "ok": c.ok, "message": c.message, "severity": c.severity}
            for c in machine.facts.preflight
        ],
        "workerImageBaseline": machine.worker_image_baseline,
        "certificateSerial": machine.certificate_serial,
        "certificateExpiresAt": machine.certificate_expires_at,
        "publicKeySha256": machines_db.public_key_sha256(machine.identity),
        "certificates": [
            {"serial": c.serial, "caId": c.ca_id, "expiresAt": c.expires_at}
            for c in machine.still_valid_certificates(clock.now())
        ],
        "requestId": machine.request_id,
        "tokenId": machine.token_id,
        "joinedAt": machine.joined_at,
        "rejoinedAt": machine.rejoined_at,
        "lastRenewedAt": machine.last_renewed_at,
        "revokedAt": machine.revoked_at,
        "revokedBy": machine.revoked_by,
        "revokeReason": machine.revoke_reason,
    }


def _load(principal: Principal, tenant_id: str, machine_id: str, permission: str) -> MachineRecord:
    principal.check_tenant(tenant_id)
    machine = machines_db.get(machine_id)
    if machine is None or machine.tenant_id != tenant_id:
        raise NotFound("machine not found")
    principal.authorize(permission, Resource(tenant_id, machine.site_id, machine.pool_id, kind="machine"))
    return machine


def get(principal: Principal, request: MachineRef) -> views.Machine:
    return view(_load(principal, request.tenantId, request.machineId, READ))


def list_machines(principal: Principal, request: ListMachines) -> views.MachineList:
    from joinplane import pools

    pools.load(principal, request.tenantId, request.poolId, READ)
    page = machines_db.list_in_pool(
        request.tenantId, request.poolId, after=request.cursor, limit=request.limit
    )
    result: views.MachineList = {
        "machines": [view(m) for m in page.machines if request.state in ("all", m.state)]
    }
    if page.more and page.machines:
        result["nextCursor"] = page.machines[-1].machine_id
    return result


def revoke(principal: Principal, request: RevokeMachine) -> views.Machine:
    """Ban the machine: its token and re-joins stop working, its hardware ids are released. The
    identity record keeps pointing at the revoked machine, so the same key cannot join again."""
    from joinplane.deadline import attempts

    for _ in attempts(4, exhausted=Aborted("the machine kept changing while revoking; retry")):
        machine = _load(principal, request.tenantId, request.machineId, WRITE)
        if not machine.active:
            # Revoked concurrently (or before): answer with what is stored.
            return view(machine)
        now = clock.now()
        # Every certificate of the machine that still verifies: the current one and those a renewal
        # or re-join that kept the key replaced.
        certificates = _listed(machine, now, "unspecified")
        if machines_db.revoke(
            machine, by=principal.key_id, reason=request.reason or "", now=now, certificates=certificates
        ):
            observe.decision(
                "machine revoked",
                "Revocations",
                "revoked",
                tenantId=machine.tenant_id,
                poolId=machine.pool_id,
                machineId=machine.machine_id,
            )
            for ca_id in dict.fromkeys(certificate.ca_id for certificate in certificates):
                _refresh_crl(ca_id)
            return view(_load(principal, request.tenantId, request.machineId, WRITE))
        # Revoked, renewed or re-joined meanwhile: read it again (a new certificate must be listed).
    raise AssertionError("unreachable: attempts() raises when exhausted")


def superseded_certificates(machine: MachineRecord, now: datetime) -> list[revocations.RevocationRecord]:
    """The machine's certificates that still verify, as CRL entries with reason `superseded`: a
    renewal that changes the key replaces them all (the old key may be why it rotated)."""
    return _listed(machine, now, "superseded")


def replaced_certificates(machine: MachineRecord) -> tuple[IssuedCertificateRecord, ...]:
    """What a renewal or re-join that keeps the key stores as the machine's earlier certificates:
    every one that still verifies, the one being replaced included, so a revocation can list
    them. FAILED_PRECONDITION when the machine already holds MAX_VALID_CERTIFICATES of them."""
    valid = machine.still_valid_certificates(clock.now())
    if len(valid) >= machines_db.MAX_VALID_CERTIFICATES:
        soonest = min(c.expires_at for c in valid)
        raise FailedPrecondition(
            f"the machine holds {len(valid)} certificates that have not expired; "
            f"renew again after {soonest}, when the oldest expires"
        )
    return tuple(valid)


def _listed(machine: MachineRecord, now: datetime, reason: str) -> list[revocations.RevocationRecord]:
    return [
        revocations.RevocationRecord(c.ca_id, c.serial, clock.rfc3339(now), reason, c.expires_epoch())
        for c in machine.still_valid_certificates(now)
    ]


def _refresh_crl(ca_id: str) -> None:
    """The CA's CRL rebuilt now, so verifiers that fetch it see the revocation at once. Best effort:
    the revocation has committed, and a CRL that missed it is rebuilt when next fetched."""
    from joinplane import crl

    try:
        crl.refresh(ca_id)
    except Exception as failure:
        observe.log(
            "WARNING",
            "the CRL was not refreshed; it is rebuilt when next fetched",
            caId=ca_id,
            error=type(failure).__name__,
        )


def authenticate(machine_token: str) -> MachineRecord:
    """The machine a machine token belongs to: 16 for anything unknown, 7 for a revoked machine."""
    parsed = credentials.parse(machine_token, TOKEN_PREFIX)
    if parsed is None:
        raise Unauthenticated("machine token is not valid", reason=errors.MACHINE_TOKEN_INVALID)
    machine = machines_db.get(f"{ID_PREFIX}_{parsed.ulid}")
    if machine is None or not credentials.matches(parsed.secret, machine.machine_token_sha256):
        raise Unauthenticated("machine token is not valid", reason=errors.MACHINE_TOKEN_INVALID)
    if not machine.active:
        raise PermissionDenied("this machine has been revoked", reason=errors.MACHINE_REVOKED)
    return machine

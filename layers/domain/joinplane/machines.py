"""Machines: admitted joins. Each has an id (`mach_<ulid>`), a machine token (`jpm_`, stored as a
digest and replaced on every re-join), a certificate from its pool's CA, and what it said about
itself when it joined.

Stored items:
- `MACHINE#<machineId>` / `MACHINE`, listed per pool through gsi1 (`MACHINES#<tenant>#<pool>`).
- `JOINID#<tenant>#<identity>` / `JOINID`: the join identity (SHA-256 of the CSR's public key, or
  of the fingerprint without a CSR) → its latest request and its machine. A retry or re-join finds
  its history here; `version` makes every change to it a compare-and-set.
- `HWCLAIM#<tenant>#<kind>#<value>` / `HWCLAIM`: a serial number or system UUID held by an active
  machine, so a cloned image (same serial, new key) is noticed in the same transaction that admits.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from joinplane import clock, credentials, errors, store
from joinplane.errors import NotFound, PermissionDenied, Unauthenticated
from joinplane.grants import Principal, Resource
from joinplane.wire import POOL_ID, STRICT, TENANT_ID, TEXT, ULID

if TYPE_CHECKING:
    from joinplane import views

ID_PREFIX = "mach"
TOKEN_PREFIX = "jpm"
MACHINE_ID = rf"^mach_{ULID}$"
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


def machine_key(machine_id: str) -> tuple[str, str]:
    return f"MACHINE#{machine_id}", "MACHINE"


def identity_key(tenant_id: str, identity: str) -> tuple[str, str]:
    return f"JOINID#{tenant_id}#{identity}", "JOINID"


def claim_key(tenant_id: str, kind: str, value: str) -> tuple[str, str]:
    return f"HWCLAIM#{tenant_id}#{kind}#{value}", "HWCLAIM"


def pool_partition(tenant_id: str, pool_id: str) -> str:
    return f"MACHINES#{tenant_id}#{pool_id}"


def mint_token(machine_id: str) -> str:
    return credentials.mint(TOKEN_PREFIX, machine_id.removeprefix(f"{ID_PREFIX}_"))


def view(item: dict[str, Any]) -> views.Machine:
    facts = item.get("facts") or {}
    return {
        "machineId": item["machineId"],
        "tenantId": item["tenantId"],
        "siteId": item["siteId"],
        "poolId": item["poolId"],
        "state": item["state"],
        "schedulable": item.get("schedulable", True),
        "hostname": facts.get("hostname", ""),
        "os": facts.get("os", ""),
        "arch": facts.get("arch", ""),
        "cpuCount": facts.get("cpuCount", 0),
        "memoryMb": facts.get("memoryMb", 0),
        "gpuCount": facts.get("gpuCount", 0),
        "hardware": facts.get("hardware", {}),
        "tpm": facts.get("tpm", {}),
        "preflight": facts.get("preflight", []),
        "workerImageBaseline": item.get("workerImageBaseline"),
        "certificateSerial": item.get("certificateSerial"),
        "certificateExpiresAt": item.get("certificateExpiresAt"),
        "requestId": item.get("requestId"),
        "tokenId": item.get("tokenId"),
        "joinedAt": item["joinedAt"],
        "rejoinedAt": item.get("rejoinedAt"),
        "revokedAt": item.get("revokedAt"),
        "revokedBy": item.get("revokedBy"),
        "revokeReason": item.get("revokeReason"),
    }


def _load(principal: Principal, tenant_id: str, machine_id: str, permission: str) -> dict[str, Any]:
    principal.check_tenant(tenant_id)
    item = store.get(*machine_key(machine_id))
    if item is None or item["tenantId"] != tenant_id:
        raise NotFound("machine not found")
    principal.authorize(permission, Resource(tenant_id, item["siteId"], item["poolId"], kind="machine"))
    return item


def get(principal: Principal, request: MachineRef) -> views.Machine:
    return view(_load(principal, request.tenantId, request.machineId, READ))


def list_machines(principal: Principal, request: ListMachines) -> views.MachineList:
    from joinplane import pools

    pools.load(principal, request.tenantId, request.poolId, READ)
    page = store.query(
        pk=pool_partition(request.tenantId, request.poolId),
        index="gsi1",
        limit=request.limit,
        sk_after=request.cursor,
    )
    machines = [view(item) for item in page.items if request.state in ("all", item["state"])]
    result: views.MachineList = {"machines": machines}
    if page.last_key is not None and page.items:
        result["nextCursor"] = page.items[-1]["machineId"]
    return result


def revoke(principal: Principal, request: RevokeMachine) -> views.Machine:
    """Ban the machine: its token and re-joins stop working, its hardware ids are released. The
    identity record keeps pointing at the revoked machine, so the same key cannot join again."""
    item = _load(principal, request.tenantId, request.machineId, WRITE)
    if item["state"] == "revoked":
        return view(item)
    writes = [
        store.Write(
            "Update",
            *machine_key(request.machineId),
            update="SET #state = :revoked, revokedAt = :now, revokedBy = :by, revokeReason = :reason",
            condition="#state = :active",
            names={"#state": "state"},
            values={
                ":revoked": "revoked",
                ":active": "active",
                ":now": clock.rfc3339(clock.now()),
                ":by": principal.key_id,
                ":reason": request.reason or "",
            },
        )
    ]
    for kind, value in item.get("claims", []):
        pk, sk = claim_key(item["tenantId"], kind, value)
        writes.append(
            store.Write(
                "Delete", pk=pk, sk=sk, condition="machineId = :me", values={":me": request.machineId}
            )
        )
    # Revoked concurrently: the loser reads what won.
    with contextlib.suppress(store.TransactionCanceled):
        store.transact(writes)
    return view(_load(principal, request.tenantId, request.machineId, WRITE))


def authenticate(machine_token: str) -> dict[str, Any]:
    """The machine a machine token belongs to: 16 for anything unknown, 7 for a revoked machine."""
    parsed = credentials.parse(machine_token, TOKEN_PREFIX)
    if parsed is None:
        raise Unauthenticated("machine token is not valid", reason=errors.MACHINE_TOKEN_INVALID)
    item = store.get(*machine_key(f"{ID_PREFIX}_{parsed.ulid}"))
    if item is None or not credentials.matches(parsed.secret, item["machineTokenSha256"]):
        raise Unauthenticated("machine token is not valid", reason=errors.MACHINE_TOKEN_INVALID)
    if item["state"] != "active":
        raise PermissionDenied("this machine has been revoked", reason=errors.MACHINE_REVOKED)
    return item

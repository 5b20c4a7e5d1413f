"""Join requests: deferred joins waiting for an operator.

Stored item: `JREQ#<requestId>` / `JREQ`. States `pending → approved → consumed`,
`pending|approved → rejected`, `pending|approved → expired`. A pending or approved request past its
`expiresAt` *reads* as expired everywhere (`state_now`), whatever the stored state says: no job has
to run for expiry to hold.

Listing index (gsi1): `JREQS#<tenant>#POOL#<poolId>#<stored state>` for a pool's requests and
`JREQS#<tenant>#SITE#<siteId>#<stored state>` for a site's unclaimed ones, sorted by requestId; a
transition moves the item between partitions in the same write. Keeping the state in the partition
key makes a page of one state cost the same however many requests of other states or pools exist.
"""

from __future__ import annotations

from typing import Any

from joinplane import clock

ID_PREFIX = "jreq"
RETENTION_SECONDS = 30 * 86_400  # DynamoDB TTL deletes a request this long after its expiry


def request_key(request_id: str) -> tuple[str, str]:
    return f"JREQ#{request_id}", "JREQ"


def list_partition(tenant_id: str, site_id: str, pool_id: str | None, state: str) -> str:
    owner = f"POOL#{pool_id}" if pool_id else f"SITE#{site_id}"
    return f"JREQS#{tenant_id}#{owner}#{state}"


def state_now(item: dict[str, Any]) -> str:
    if item["state"] in ("pending", "approved") and item["expiresAtEpoch"] <= clock.epoch():
        return "expired"
    return str(item["state"])


def new_item(
    *,
    request_id: str,
    tenant_id: str,
    site_id: str,
    pool_id: str | None,
    token_id: str,
    identity: str,
    csr_public_key_sha256: str | None,
    reasons: list[dict[str, str]],
    machine: dict[str, Any],
    ttl_seconds: int,
) -> dict[str, Any]:
    now = clock.epoch()
    expires = int(now) + ttl_seconds
    pk, sk = request_key(request_id)
    return {
        "pk": pk,
        "sk": sk,
        "gsi1pk": list_partition(tenant_id, site_id, pool_id, "pending"),
        "gsi1sk": request_id,
        "requestId": request_id,
        "tenantId": tenant_id,
        "siteId": site_id,
        "poolId": pool_id,
        "tokenId": token_id,
        "identity": identity,
        "state": "pending",
        "reasons": reasons,
        "machine": machine,
        "csrPublicKeySha256": csr_public_key_sha256,
        "createdAt": clock.rfc3339(now),
        "expiresAt": clock.rfc3339(expires),
        "expiresAtEpoch": expires,
        "ttl": expires + RETENTION_SECONDS,
    }


def view(item: dict[str, Any]) -> dict[str, Any]:
    """A join request as every API returns it; `state` is the state as read now."""
    machine = item.get("machine") or {}
    return {
        "requestId": item["requestId"],
        "tenantId": item["tenantId"],
        "siteId": item["siteId"],
        "poolId": item.get("poolId"),
        "state": state_now(item),
        "reasons": item.get("reasons", []),
        "machine": {
            "fingerprint": machine.get("fingerprint", ""),
            "hostname": machine.get("hostname", ""),
            "os": machine.get("os", ""),
            "arch": machine.get("arch", ""),
            "cpuCount": machine.get("cpuCount", 0),
            "memoryMb": machine.get("memoryMb", 0),
            "gpuCount": machine.get("gpuCount", 0),
            "hardware": machine.get("hardware", {}),
            "tpm": machine.get("tpm", {}),
        },
        "csrPublicKeySha256": item.get("csrPublicKeySha256"),
        "createdAt": item["createdAt"],
        "expiresAt": item["expiresAt"],
        "decidedAt": item.get("decidedAt"),
        "decidedBy": item.get("decidedBy"),
        "reason": item.get("reason"),
        "consumedAt": item.get("consumedAt"),
        "machineId": item.get("machineId"),
    }

"""The table's stream, read as changes of the items security events are made from: join requests,
machines and cluster nodes (old and new image, NEW_AND_OLD_IMAGES).

The images are read tolerantly: the publisher's contract (shared/samples' stream records) holds
images with only the attributes it reads, so every attribute but an item's id may be absent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from joinplane.dal import dynamo
from joinplane.dal.clusters import ClusterNode
from joinplane.dal.dynamo import Item


@dataclass(frozen=True)
class RequestImage:
    request_id: str
    tenant_id: str | None = None
    site_id: str | None = None
    pool_id: str | None = None
    state: str | None = None
    reasons: list[Any] = field(default_factory=list)
    created_at: str | None = None
    expires_at: str | None = None
    decided_at: str | None = None
    decided_by: str | None = None
    reason: str | None = None
    consumed_at: str | None = None
    machine_id: str | None = None
    expired_at: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> RequestImage:
        return cls(
            request_id=item["requestId"],
            tenant_id=item.get("tenantId"),
            site_id=item.get("siteId"),
            pool_id=item.get("poolId"),
            state=item.get("state"),
            reasons=item.get("reasons", []),
            created_at=item.get("createdAt"),
            expires_at=item.get("expiresAt"),
            decided_at=item.get("decidedAt"),
            decided_by=item.get("decidedBy"),
            reason=item.get("reason"),
            consumed_at=item.get("consumedAt"),
            machine_id=item.get("machineId"),
            expired_at=item.get("expiredAt"),
        )


@dataclass(frozen=True)
class MachineImage:
    machine_id: str
    tenant_id: str | None = None
    site_id: str | None = None
    pool_id: str | None = None
    state: str | None = None
    token_generation: int | None = None
    token_id: str | None = None
    request_id: str | None = None
    joined_at: str | None = None
    rejoined_at: str | None = None
    revoked_at: str | None = None
    revoked_by: str | None = None
    revoke_reason: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> MachineImage:
        return cls(
            machine_id=item["machineId"],
            tenant_id=item.get("tenantId"),
            site_id=item.get("siteId"),
            pool_id=item.get("poolId"),
            state=item.get("state"),
            token_generation=item.get("tokenGeneration"),
            token_id=item.get("tokenId"),
            request_id=item.get("requestId"),
            joined_at=item.get("joinedAt"),
            rejoined_at=item.get("rejoinedAt"),
            revoked_at=item.get("revokedAt"),
            revoked_by=item.get("revokedBy"),
            revoke_reason=item.get("revokeReason"),
        )


Image = RequestImage | MachineImage | ClusterNode

_BY_PREFIX: dict[str, Callable[[Item], Image]] = {
    "JREQ#": RequestImage.from_item,
    "MACHINE#": MachineImage.from_item,
    "CLUSTERNODE#": ClusterNode.from_item,
}


@dataclass(frozen=True)
class Change:
    old: Image | None  # None: the item is new
    new: Image
    sequence: str  # the stream record's, for partial batch failures


def sequence_of(record: Mapping[str, Any]) -> str:
    """A stream record's sequence number, as a partial batch failure names it."""
    return str(record.get("dynamodb", {}).get("SequenceNumber", ""))


def change_of(record: Mapping[str, Any]) -> Change | None:
    """The change a stream record carries, if it is a write (not a deletion) of an item security
    events are made from."""
    data = record.get("dynamodb", {})
    new_raw = data.get("NewImage")
    if not new_raw:
        return None  # a deletion (TTL or cleanup) is not a security decision
    new = dynamo.deserialize(new_raw)
    pk = str(new.get("pk", ""))
    decode = next((decode for prefix, decode in _BY_PREFIX.items() if pk.startswith(prefix)), None)
    if decode is None:
        return None
    old = decode(dynamo.deserialize(data["OldImage"])) if data.get("OldImage") else None
    return Change(old, decode(new), sequence_of(record))

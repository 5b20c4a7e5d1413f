"""The table's stream, read as changes of the items security events are made from: join requests,
machines and cluster nodes (old and new image, NEW_AND_OLD_IMAGES).

The images are read tolerantly: the publisher's contract (shared/samples' stream records) holds
images with only the attributes it reads, so every attribute but an item's id may be absent. They
read through their records' attribute tables (dal.items), so a stored name is written only there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from joinplane.dal import dynamo, items, machines, requests
from joinplane.dal.clusters import ClusterNode
from joinplane.dal.dynamo import Item


def _image_fields(image: type[Any], stored: dict[str, Any]) -> dict[str, Any]:
    """The fields an image keeps of its record's, read through the record's attribute table."""
    return {name: stored[name] for name in image._fields}


class RequestImage(NamedTuple):
    request_id: str
    tenant_id: str | None = None
    site_id: str | None = None
    pool_id: str | None = None
    state: str | None = None
    reasons: Sequence[Any] = ()
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
        stored = items.read(item, requests.ATTRIBUTES, ("request_id",))
        # As stored: the votes are published as the table holds them.
        return cls(**_image_fields(cls, stored) | {"reasons": stored["reasons"] or []})


class MachineImage(NamedTuple):
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
        return cls(**_image_fields(cls, items.read(item, machines.ATTRIBUTES, ("machine_id",))))


Image = RequestImage | MachineImage | ClusterNode

_BY_PREFIX: dict[str, Callable[[Item], Image]] = {
    "JREQ#": RequestImage.from_item,
    "MACHINE#": MachineImage.from_item,
    "CLUSTERNODE#": ClusterNode.from_item,
}


class Change(NamedTuple):
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

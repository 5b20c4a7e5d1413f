"""The table's stream, read as changes of the items security events are made from: join requests,
machines and cluster nodes, and what operators administer: join tokens, API keys, pools, cluster
keys, certificate authorities, discovery entries, TPM allow-list keys and the records of their
removal (old and new image, NEW_AND_OLD_IMAGES). template.yaml's FilterCriteria passes exactly
these items to the publisher.

The images are read tolerantly: the publisher's contract (shared/samples' stream records) holds
images with only the attributes it reads, so every attribute but an item's id may be absent. They
read through their records' attribute tables (dal.items), so a stored name is written only there.
The administered items are read by their records' own `from_item`: no sample holds partial
images of them, and a record that cannot be read is set aside by the publisher, not guessed at.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from joinplane.dal import dynamo, items, machines, removals, requests
from joinplane.dal.apikeys import ApiKeyRecord
from joinplane.dal.authorities import CertificateAuthorityRecord
from joinplane.dal.clusters import ClusterKeyRecord, ClusterNodeRecord
from joinplane.dal.discovery import DiscoveryEntryRecord
from joinplane.dal.dynamo import Item
from joinplane.dal.pools import PoolRecord
from joinplane.dal.removals import RemovalRecord
from joinplane.dal.tokens import JoinTokenRecord
from joinplane.dal.tpm_allow import AllowedKeyRecord


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
    approvals: tuple[requests.ApprovalRecord, ...] = ()
    approvals_required: int | None = None
    policy_rule: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> RequestImage:
        stored = items.read(item, requests.ATTRIBUTES, ("request_id",))
        # As stored: the votes are published as the table holds them.
        return cls(
            **_image_fields(cls, stored)
            | {"reasons": stored["reasons"] or [], "approvals": requests.approvals_of(stored["approvals"])}
        )


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
    identity: str | None = None
    certificate_serial: str | None = None
    last_renewed_at: str | None = None
    facts: Item | None = None  # as stored: the join's facts (the TPM it proved, for the event)
    policy_rule: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> MachineImage:
        return cls(**_image_fields(cls, items.read(item, machines.ATTRIBUTES, ("machine_id",))))


Image = (
    RequestImage
    | MachineImage
    | ClusterNodeRecord
    | JoinTokenRecord
    | ApiKeyRecord
    | ClusterKeyRecord
    | CertificateAuthorityRecord
    | PoolRecord
    | DiscoveryEntryRecord
    | AllowedKeyRecord
    | RemovalRecord
)

_BY_PREFIX: dict[str, Callable[[Item], Image]] = {
    "JREQ#": RequestImage.from_item,
    "MACHINE#": MachineImage.from_item,
    "CLUSTERNODE#": ClusterNodeRecord.from_item,
    "JOINTOKEN#": JoinTokenRecord.from_item,
    "APIKEY#": ApiKeyRecord.from_item,
    "CLUSTERKEY#": ClusterKeyRecord.from_item,
    "CA#": CertificateAuthorityRecord.from_item,
    removals.PREFIX: RemovalRecord.from_item,
}


def _decoder(pk: str, sk: str) -> Callable[[Item], Image] | None:
    """How to read an item of these keys, or None when no event is made of it."""
    decode = next((decode for prefix, decode in _BY_PREFIX.items() if pk.startswith(prefix)), None)
    if decode is not None:
        return decode
    # Items kept in their owner's partition: told apart by the partition's shape and the sort key.
    if pk.startswith("TENANT#") and sk.startswith("POOL#"):
        return PoolRecord.from_item
    if pk.startswith("SITE#") and pk.endswith("#DISCOVERY") and sk.startswith("ENTRY#"):
        return DiscoveryEntryRecord.from_item
    if pk.startswith("SITE#") and pk.endswith("#TPMALLOW") and sk.startswith("EK#"):
        return AllowedKeyRecord.from_item
    return None


class Change(NamedTuple):
    old: Image | None  # None: the item is new
    new: Image
    sequence: str  # the stream record's, for partial batch failures


def sequence_of(record: Mapping[str, Any]) -> str:
    """A stream record's sequence number, as a partial batch failure names it."""
    return str(record.get("dynamodb", {}).get("SequenceNumber", ""))


def created_epoch_of(record: Mapping[str, Any]) -> float | None:
    """When DynamoDB wrote the change (epoch seconds), if the record says."""
    created = record.get("dynamodb", {}).get("ApproximateCreationDateTime")
    return float(created) if isinstance(created, int | float) else None


def keys_of(record: Mapping[str, Any]) -> dict[str, str]:
    """What names a record without showing its contents: the item's pk and sk (as strings), the
    record's eventID, eventName and sequence number. Never raises, whatever the record holds."""
    named: dict[str, str] = {}
    try:
        data = record.get("dynamodb") or {}
        for name, raw in (data.get("Keys") or {}).items():
            if name in ("pk", "sk") and isinstance(raw, Mapping):
                named[name] = str(raw.get("S", raw))[:256]
        for field in ("eventID", "eventName"):
            if record.get(field) is not None:
                named[field] = str(record[field])[:128]
        if data.get("SequenceNumber") is not None:
            named["sequenceNumber"] = str(data["SequenceNumber"])[:64]
    except (AttributeError, TypeError):
        pass  # not even a mapping: the caller logs what it could get
    return named


def change_of(record: Mapping[str, Any]) -> Change | None:
    """The change a stream record carries, if it is a write (not a deletion) of an item security
    events are made from."""
    data = record.get("dynamodb", {})
    new_raw = data.get("NewImage")
    if not new_raw:
        # A deletion names no actor: TTL clean-up, or a removal whose actor its removal record
        # (dal.removals) carries.
        return None
    new = dynamo.deserialize(new_raw)
    decode = _decoder(str(new.get("pk", "")), str(new.get("sk", "")))
    if decode is None:
        return None
    old = decode(dynamo.deserialize(data["OldImage"])) if data.get("OldImage") else None
    return Change(old, decode(new), sequence_of(record))

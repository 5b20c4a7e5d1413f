"""Discovery inventories in the table, one partition per site, `SITE#<tenantId>#<siteId>#DISCOVERY`:

- `ENTRY#<entryId>`: the entry as registered (identifiers in canonical form).
- `ID#<kind>#<value>` for each identifier (kind `serial`, `uuid`, `mac`, `fingerprint`): holds the
  entryId and hostname, so a join's lookup is one BatchGetItem over its identifiers' keys, and its
  conditional creation is what keeps an identifier on at most one entry of the site.

Entries sort before index items, so a listing that reaches an `ID#` item has reached the end. An
entry and its index items are written and deleted in one transaction: no reader ever sees an index
item without its entry, nor an entry whose identifiers another entry also claims. The removing
transaction also records who removed the entry (`joinplane.dal.removals`): a deletion's stream
record cannot say.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from joinplane import clock, deadline
from joinplane.dal import dynamo, removals
from joinplane.dal.dynamo import Item
from joinplane.dal.removals import RemovalRecord
from joinplane.errors import Unavailable

# A transaction that lost to a concurrent one on the same items is cancelled without a verdict on
# our conditions; trying again gets one.
_CONFLICT_ATTEMPTS = 3


class DiscoveryEntryRecord(NamedTuple):
    entry_id: str
    tenant_id: str
    site_id: str
    serial_number: str | None
    system_uuid: str | None
    mac_addresses: list[str]
    machine_fingerprint: str | None
    hostname: str | None
    description: str
    created_at: str
    created_by: str | None

    @property
    def identifiers(self) -> list[tuple[str, str]]:
        """(kind, canonical value) of every identifier the entry carries, in index-item order."""
        found: list[tuple[str, str]] = []
        if self.serial_number:
            found.append(("serial", self.serial_number))
        if self.system_uuid:
            found.append(("uuid", self.system_uuid))
        found += [("mac", mac) for mac in self.mac_addresses]
        if self.machine_fingerprint:
            found.append(("fingerprint", self.machine_fingerprint))
        return found

    @classmethod
    def from_item(cls, item: Item) -> DiscoveryEntryRecord:
        return cls(
            entry_id=item["entryId"],
            tenant_id=item["tenantId"],
            site_id=item["siteId"],
            serial_number=item.get("serialNumber"),
            system_uuid=item.get("systemUuid"),
            mac_addresses=item.get("macAddresses") or [],
            machine_fingerprint=item.get("machineFingerprint"),
            hostname=item.get("hostname"),
            description=item.get("description", ""),
            created_at=item["createdAt"],
            created_by=item.get("createdBy"),
        )

    def to_item(self) -> Item:
        pk, sk = entry_key(self.tenant_id, self.site_id, self.entry_id)
        return {
            "pk": pk,
            "sk": sk,
            "entryId": self.entry_id,
            "tenantId": self.tenant_id,
            "siteId": self.site_id,
            "serialNumber": self.serial_number,
            "systemUuid": self.system_uuid,
            "macAddresses": self.mac_addresses,
            "machineFingerprint": self.machine_fingerprint,
            "hostname": self.hostname,
            "description": self.description,
            "createdAt": self.created_at,
            "createdBy": self.created_by,
        }

    def index_item(self, kind: str, value: str) -> Item:
        pk, sk = index_key(self.tenant_id, self.site_id, kind, value)
        return {
            "pk": pk,
            "sk": sk,
            "entryId": self.entry_id,
            "tenantId": self.tenant_id,
            "siteId": self.site_id,
            "kind": kind,
            "value": value,
            "hostname": self.hostname,
        }


class Match(NamedTuple):
    """An index item a looked-up identifier found: the entry holding it."""

    entry_id: str
    hostname: str | None


def partition(tenant_id: str, site_id: str) -> str:
    return f"SITE#{tenant_id}#{site_id}#DISCOVERY"


def entry_key(tenant_id: str, site_id: str, entry_id: str) -> tuple[str, str]:
    return partition(tenant_id, site_id), f"ENTRY#{entry_id}"


def index_key(tenant_id: str, site_id: str, kind: str, value: str) -> tuple[str, str]:
    return partition(tenant_id, site_id), f"ID#{kind}#{value}"


class Taken(NamedTuple):
    kind: str
    value: str
    holder: str | None  # the entry that holds it now


class IdentifiersTaken(Exception):
    """Identifiers of a new entry are held by other entries of the site; nothing was written."""

    def __init__(self, taken: list[Taken]) -> None:
        super().__init__("identifiers taken")
        self.taken = taken


class EntryIdTaken(Exception):
    """The new entry's own id was taken: a ULID clash."""


class EntryGone(Exception):
    """The entry was removed meanwhile."""


def _transact(writes: list[dynamo.Write]) -> None:
    """`dynamo.transact`, once more per round its own conflict retries did not settle, each round
    only with time left for it."""
    busy = Unavailable("the site's inventory is busy, retry")
    for _ in deadline.attempts(_CONFLICT_ATTEMPTS, exhausted=busy):
        try:
            dynamo.transact(writes)
            return
        except dynamo.TransactionCanceled as cancelled:
            if cancelled.failures or not cancelled.contended:
                raise
    raise AssertionError("unreachable: attempts() raises when exhausted")


def register(entry: DiscoveryEntryRecord) -> None:
    """The entry and one index item per identifier. IdentifiersTaken (in the entry's identifier
    order) or EntryIdTaken when a condition failed."""
    writes = [dynamo.Write("Put", item=entry.to_item(), condition="attribute_not_exists(pk)", name="entry")]
    for kind, value in entry.identifiers:
        writes.append(
            dynamo.Write(
                "Put",
                item=entry.index_item(kind, value),
                condition="attribute_not_exists(pk)",
                name="identifier",
                subject=(kind, value),
            )
        )
    try:
        _transact(writes)
    except dynamo.TransactionCanceled as cancelled:
        taken = [
            Taken(f.subject[0], f.subject[1], (f.current or {}).get("entryId"))
            for f in cancelled.failed("identifier")
        ]
        if taken:
            raise IdentifiersTaken(taken) from None
        if cancelled.lost("entry"):
            raise EntryIdTaken(entry.entry_id) from None
        raise


def get(tenant_id: str, site_id: str, entry_id: str) -> DiscoveryEntryRecord | None:
    item = dynamo.get(*entry_key(tenant_id, site_id, entry_id))
    return DiscoveryEntryRecord.from_item(item) if item else None


def remove(entry: DiscoveryEntryRecord, *, by: str, now: datetime) -> None:
    """The entry and its index items, and the record of `by` removing it; EntryGone when a
    concurrent remove got there first."""
    pk, sk = entry_key(entry.tenant_id, entry.site_id, entry.entry_id)
    removal = RemovalRecord(
        kind="discovery-entry",
        tenant_id=entry.tenant_id,
        site_id=entry.site_id,
        subject_id=entry.entry_id,
        added_at=entry.created_at,
        added_by=entry.created_by,
        removed_at=clock.rfc3339(now),
        removed_by=by,
        ttl=clock.seconds(now) + removals.RETENTION_SECONDS,
    )
    writes = [
        dynamo.Write("Delete", pk=pk, sk=sk, condition="attribute_exists(pk)", name="entry"),
        removal.write(),
    ]
    for kind, value in entry.identifiers:
        index_pk, index_sk = index_key(entry.tenant_id, entry.site_id, kind, value)
        writes.append(
            dynamo.Write(
                "Delete",
                pk=index_pk,
                sk=index_sk,
                # An index item that is somehow gone must not make its entry unremovable.
                condition="attribute_not_exists(pk) OR entryId = :entry",
                values={":entry": entry.entry_id},
                name="identifier",
                subject=(kind, value),
            )
        )
    try:
        _transact(writes)
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.failures:
            raise EntryGone(entry.entry_id) from None
        raise


class EntryPage(NamedTuple):
    entries: list[DiscoveryEntryRecord]
    more: bool  # a page may follow


def list_entries(tenant_id: str, site_id: str, *, after: str | None, limit: int) -> EntryPage:
    """One page of entries oldest first (entry ids are ULIDs), after the entry `after`."""
    pk = partition(tenant_id, site_id)
    if after:
        page = dynamo.query(pk=pk, sk_after=f"ENTRY#{after}", limit=limit, consistent=True)
    else:
        page = dynamo.query(pk=pk, sk_prefix="ENTRY#", limit=limit, consistent=True)
    entries = [DiscoveryEntryRecord.from_item(item) for item in page.items if item["sk"].startswith("ENTRY#")]
    reached_end = len(entries) < len(page.items)
    return EntryPage(entries, page.last_key is not None and not reached_end)


def lookup(
    tenant_id: str, site_id: str, identifiers: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], Match]:
    """The entries holding any of these (kind, canonical value) identifiers at the site, by
    identifier: one BatchGetItem (none for no identifiers)."""
    keys = {index_key(tenant_id, site_id, kind, value): (kind, value) for kind, value in identifiers}
    return {
        keys[found_key]: Match(item["entryId"], item.get("hostname"))
        for found_key, item in dynamo.batch_get(keys).items()
    }

"""Removal records: who removed a discovery entry or a TPM allow-list key, and when.

Removing either deletes items, and a deletion reaches the stream as a REMOVE record with only the
old image: it cannot say who removed it. So the removing transaction also puts one of these, and
its INSERT is what `security.discovery-entry.removed` / `security.tpm-key.removed` are made of:
still one transaction per transition, and the actor is written by the write that removes.

- Key: `REMOVED#<tenantId>#<siteId>` / the removed item's sort key, plus `#<its createdAt>` for an
  allow-list key (one key can be added and removed again; an entry id is never reused). Its own
  partition, so the site's inventory and allow-list read exactly as before.
- `ttl`: kept `RETENTION_SECONDS`, well past the stream's 24 h: the audit trail keeps the event, and
  DynamoDB's TTL deletion of the record publishes nothing.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item

RETENTION_SECONDS = 7 * 86_400
PREFIX = "REMOVED#"

Kind = Literal["discovery-entry", "tpm-key"]
_SORT_PREFIX: dict[str, str] = {"discovery-entry": "ENTRY#", "tpm-key": "EK#"}


class RemovalRecord(NamedTuple):
    kind: Kind
    tenant_id: str
    site_id: str
    subject_id: str  # the entry's id, or the key's EK hash
    added_at: str  # the removed item's createdAt
    added_by: str | None
    removed_at: str
    removed_by: str
    ttl: int

    @classmethod
    def from_item(cls, item: Item) -> RemovalRecord:
        return cls(
            kind=item["kind"],
            tenant_id=item["tenantId"],
            site_id=item["siteId"],
            subject_id=item["subjectId"],
            added_at=item["addedAt"],
            added_by=item.get("addedBy"),
            removed_at=item["removedAt"],
            removed_by=item["removedBy"],
            ttl=int(item["ttl"]),
        )

    def to_item(self) -> Item:
        sk = f"{_SORT_PREFIX[self.kind]}{self.subject_id}"
        if self.kind == "tpm-key":
            sk += f"#{self.added_at}"
        return {
            "pk": f"{PREFIX}{self.tenant_id}#{self.site_id}",
            "sk": sk,
            "kind": self.kind,
            "tenantId": self.tenant_id,
            "siteId": self.site_id,
            "subjectId": self.subject_id,
            "addedAt": self.added_at,
            "addedBy": self.added_by,
            "removedAt": self.removed_at,
            "removedBy": self.removed_by,
            "ttl": self.ttl,
        }

    def write(self) -> dynamo.Write:
        """The transaction action that records the removal (unconditional: it is the removal's own
        condition that decides)."""
        return dynamo.Write("Put", item=self.to_item(), name="removal")

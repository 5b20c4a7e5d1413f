"""TPM allow-lists in the table: `SITE#<tenantId>#<siteId>#TPMALLOW` / `EK#<sha256>`, one item per
endorsement key; the partition holds nothing else, so a listing is one Query in hash order. A
removal deletes the key and, in the same transaction, records who removed it
(`joinplane.dal.removals`): a deletion's stream record cannot say."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, NamedTuple

from joinplane import clock
from joinplane.dal import dynamo, removals
from joinplane.dal.dynamo import Item
from joinplane.dal.removals import RemovalRecord
from joinplane.errors import Unavailable


class AllowedKeyRecord(NamedTuple):
    tenant_id: str
    site_id: str
    ek_sha256: str  # lowercase hex SHA-256 of the EK's SubjectPublicKeyInfo DER
    added_from: Literal["hash", "certificate"]
    description: str
    created_at: str
    created_by: str | None

    @classmethod
    def from_item(cls, item: Item) -> AllowedKeyRecord:
        return cls(
            tenant_id=item["tenantId"],
            site_id=item["siteId"],
            ek_sha256=item["ekPublicKeySha256"],
            added_from=item["addedFrom"],
            description=item.get("description", ""),
            created_at=item["createdAt"],
            created_by=item.get("createdBy"),
        )

    def to_item(self) -> Item:
        pk, sk = key_of(self.tenant_id, self.site_id, self.ek_sha256)
        return {
            "pk": pk,
            "sk": sk,
            "tenantId": self.tenant_id,
            "siteId": self.site_id,
            "ekPublicKeySha256": self.ek_sha256,
            "addedFrom": self.added_from,
            "description": self.description,
            "createdAt": self.created_at,
            "createdBy": self.created_by,
        }


def partition(tenant_id: str, site_id: str) -> str:
    return f"SITE#{tenant_id}#{site_id}#TPMALLOW"


def key_of(tenant_id: str, site_id: str, ek_sha256: str) -> tuple[str, str]:
    return partition(tenant_id, site_id), f"EK#{ek_sha256}"


class KeyExists(Exception):
    pass


class KeyGone(Exception):
    """The key was not (or no longer) on the allow-list."""


def add(key: AllowedKeyRecord) -> None:
    """KeyExists when the site lists this key already."""
    try:
        dynamo.put(key.to_item(), condition="attribute_not_exists(pk)")
    except dynamo.ConditionFailed:
        raise KeyExists(key.ek_sha256) from None


def get(tenant_id: str, site_id: str, ek_sha256: str) -> AllowedKeyRecord | None:
    item = dynamo.get(*key_of(tenant_id, site_id, ek_sha256))
    return AllowedKeyRecord.from_item(item) if item else None


def is_listed(tenant_id: str, site_id: str, ek_sha256: str) -> bool:
    return dynamo.get(*key_of(tenant_id, site_id, ek_sha256)) is not None


def remove(key: AllowedKeyRecord, *, by: str, now: datetime) -> None:
    """The key, and the record of `by` removing it; KeyGone when a concurrent remove got there
    first."""
    pk, sk = key_of(key.tenant_id, key.site_id, key.ek_sha256)
    removal = RemovalRecord(
        kind="tpm-key",
        tenant_id=key.tenant_id,
        site_id=key.site_id,
        subject_id=key.ek_sha256,
        added_at=key.created_at,
        added_by=key.created_by,
        removed_at=clock.rfc3339(now),
        removed_by=by,
        ttl=clock.seconds(now) + removals.RETENTION_SECONDS,
    )
    try:
        dynamo.transact(
            [
                # Conditioned on the very addition read (createdAt): a key removed and added again
                # meanwhile is another addition, which this removal did not look at.
                dynamo.Write(
                    "Delete",
                    pk=pk,
                    sk=sk,
                    condition="createdAt = :added",
                    values={":added": key.created_at},
                    name="key",
                ),
                removal.write(),
            ]
        )
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.lost("key"):
            raise KeyGone(key.ek_sha256) from None
        if cancelled.contended:
            raise Unavailable("the allow-list entry is being changed, retry") from None
        raise


class KeyPage(NamedTuple):
    keys: list[AllowedKeyRecord]
    more: bool  # a page may follow


def list_keys(tenant_id: str, site_id: str, *, after: str | None, limit: int) -> KeyPage:
    """One page of the site's keys in hash order, after the hash `after`."""
    pk = partition(tenant_id, site_id)
    if after:
        page = dynamo.query(pk=pk, sk_after=f"EK#{after}", limit=limit, consistent=True)
    else:
        page = dynamo.query(pk=pk, sk_prefix="EK#", limit=limit, consistent=True)
    return KeyPage([AllowedKeyRecord.from_item(item) for item in page.items], page.last_key is not None)

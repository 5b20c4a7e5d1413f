"""Operator API keys in the table.

- Key: `APIKEY#<keyId>` / `APIKEY`, found by the id embedded in its secret (one GetItem per
  authorizer call). Only the secret's SHA-256 is stored.
- Listing (gsi1): `TENANT#<tenantId>#APIKEYS`, sorted by keyId.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, NamedTuple

from joinplane import clock
from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item

SK = "APIKEY"

ApiKeyState = Literal["active", "revoked"]


class ApiKeyRecord(NamedTuple):
    key_id: str
    tenant_id: str
    grants: tuple[str, ...]  # `PERMISSION@SCOPE`, as `joinplane.grants.Grant` prints them
    description: str
    secret_sha256: str
    state: ApiKeyState
    created_at: str
    created_by: str | None = None
    revoked_at: str | None = None
    revoked_by: str | None = None

    @property
    def active(self) -> bool:
        return self.state == "active"

    @classmethod
    def from_item(cls, item: Item) -> ApiKeyRecord:
        return cls(
            key_id=item["keyId"],
            tenant_id=item["tenantId"],
            grants=tuple(item["grants"]),
            description=item.get("description", ""),
            secret_sha256=item["secretSha256"],
            state=item.get("state", ""),
            created_at=item["createdAt"],
            created_by=item.get("createdBy"),
            revoked_at=item.get("revokedAt"),
            revoked_by=item.get("revokedBy"),
        )

    def to_item(self) -> Item:
        pk, sk = key_key(self.key_id)
        return {
            "pk": pk,
            "sk": sk,
            "gsi1pk": tenant_index(self.tenant_id),
            "gsi1sk": self.key_id,
            "keyId": self.key_id,
            "tenantId": self.tenant_id,
            "grants": list(self.grants),
            "description": self.description,
            "secretSha256": self.secret_sha256,
            "state": self.state,
            "createdAt": self.created_at,
            "createdBy": self.created_by,
            "revokedAt": self.revoked_at,
            "revokedBy": self.revoked_by,
        }


def key_key(key_id: str) -> tuple[str, str]:
    return f"APIKEY#{key_id}", SK


def tenant_index(tenant_id: str) -> str:
    return f"TENANT#{tenant_id}#APIKEYS"


class ApiKeyExists(Exception):
    pass


class ApiKeyLost(Exception):
    """A conditional change found the key absent (`current` None), of another tenant or no longer
    active."""

    def __init__(self, current: ApiKeyRecord | None) -> None:
        super().__init__("API key changed")
        self.current = current


def get(key_id: str, *, consistent: bool = True) -> ApiKeyRecord | None:
    item = dynamo.get(*key_key(key_id), consistent=consistent)
    return ApiKeyRecord.from_item(item) if item else None


def create(key: ApiKeyRecord) -> None:
    """Store a new key; ApiKeyExists when the id is taken."""
    try:
        dynamo.put(key.to_item(), condition="attribute_not_exists(pk)")
    except dynamo.ConditionFailed:
        raise ApiKeyExists(key.key_id) from None


def put(key: ApiKeyRecord) -> None:
    """Store the key whatever is there: for a fixed bootstrap key written again on every start."""
    dynamo.put(key.to_item())


def revoke(key_id: str, *, tenant_id: str, now: datetime, by: str) -> ApiKeyRecord:
    """active → revoked, for a key of `tenant_id`; ApiKeyLost otherwise."""
    try:
        item = dynamo.update(
            *key_key(key_id),
            update="SET #state = :revoked, revokedAt = :now, revokedBy = :by",
            condition="tenantId = :tenant AND #state = :active",
            names={"#state": "state"},
            values={
                ":revoked": "revoked",
                ":now": clock.rfc3339(now),
                ":by": by,
                ":tenant": tenant_id,
                ":active": "active",
            },
        )
    except dynamo.ConditionFailed as lost:
        raise ApiKeyLost(ApiKeyRecord.from_item(lost.current) if lost.current else None) from None
    return ApiKeyRecord.from_item(item)


class ApiKeyPage(NamedTuple):
    keys: list[ApiKeyRecord]
    complete: bool  # no page follows


def list_keys(tenant_id: str, *, after: str | None, limit: int) -> ApiKeyPage:
    """One page of the tenant's keys in keyId order, after `after`."""
    page = dynamo.query(pk=tenant_index(tenant_id), index="gsi1", limit=limit, sk_after=after)
    return ApiKeyPage([ApiKeyRecord.from_item(item) for item in page.items], page.last_key is None)

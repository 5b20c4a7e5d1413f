"""Operator API keys: create, list, revoke, and the authorizer's verification.

Stored item: `APIKEY#<keyId>` / `APIKEY`, listed per tenant through gsi1. The secret
(`jpk_<ulid>_<random>`) is returned once by `create`; only its SHA-256 is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from joinplane import clock, credentials, ids, store
from joinplane.errors import NotFound, PermissionDenied
from joinplane.grants import Grant, Principal, Resource
from joinplane.keyauth import ID_PREFIX, SECRET_PREFIX, key_pk
from joinplane.wire import STRICT, TENANT_ID, TEXT, ULID

if TYPE_CHECKING:
    from joinplane import views

KEY_ID_PATTERN = rf"^key_{ULID}$"
READ, WRITE = "iam:api-keys:read", "iam:api-keys:write"


class CreateApiKey(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    grants: list[str] = Field(min_length=1, max_length=50)
    description: str = Field(default="", max_length=256, pattern=TEXT)


class ListApiKeys(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=KEY_ID_PATTERN)


class RevokeApiKey(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    keyId: str = Field(pattern=KEY_ID_PATTERN)


def _tenant_index(tenant_id: str) -> str:
    return f"TENANT#{tenant_id}#APIKEYS"


def _view(item: dict[str, Any]) -> views.ApiKey:
    return {
        "keyId": item["keyId"],
        "tenantId": item["tenantId"],
        "grants": item["grants"],
        "description": item.get("description", ""),
        "state": item["state"],
        "createdAt": item["createdAt"],
        "createdBy": item.get("createdBy"),
        "revokedAt": item.get("revokedAt"),
        "revokedBy": item.get("revokedBy"),
    }


def new_key_item(
    tenant_id: str, grants: list[Grant], description: str, created_by: str
) -> tuple[str, dict[str, Any]]:
    """A fresh key: (secret, item). The secret exists only in the return value."""
    ulid = ids.new_ulid()
    key_id = f"{ID_PREFIX}_{ulid}"
    secret = credentials.mint(SECRET_PREFIX, ulid)
    item = {
        "pk": key_pk(key_id),
        "sk": "APIKEY",
        "gsi1pk": _tenant_index(tenant_id),
        "gsi1sk": key_id,
        "keyId": key_id,
        "tenantId": tenant_id,
        "grants": [str(g) for g in grants],
        "description": description,
        "secretSha256": credentials.digest(secret),
        "state": "active",
        "createdAt": clock.rfc3339(clock.now()),
        "createdBy": created_by,
    }
    return secret, item


def create(principal: Principal, request: CreateApiKey) -> views.ApiKeyCreated:
    principal.authorize(WRITE, Resource(request.tenantId, kind="tenant"))
    grants = [Grant.parse(text) for text in request.grants]
    for grant in grants:
        if not principal.may_grant(grant, request.tenantId):
            raise PermissionDenied(
                f"this API key cannot grant {grant}: a key may only hand out what it holds"
            )
    secret, item = new_key_item(request.tenantId, grants, request.description, principal.key_id)
    store.put(item, condition="attribute_not_exists(pk)")
    return {**_view(item), "key": secret}


def list_keys(principal: Principal, request: ListApiKeys) -> views.ApiKeyList:
    principal.authorize(READ, Resource(request.tenantId, kind="tenant"))
    page = store.query(
        pk=_tenant_index(request.tenantId), index="gsi1", limit=request.limit, sk_after=request.cursor
    )
    keys = [_view(item) for item in page.items]
    result: views.ApiKeyList = {"apiKeys": keys}
    if page.last_key is not None and keys:
        result["nextCursor"] = keys[-1]["keyId"]
    return result


def revoke(principal: Principal, request: RevokeApiKey) -> views.ApiKey:
    """Revoke a key of the tenant. The mirror of `create`'s rule: a key may only revoke a key whose
    every grant it could have handed out, so a narrow key cannot revoke the administrators'."""
    principal.authorize(WRITE, Resource(request.tenantId, kind="tenant"))
    target = store.get(key_pk(request.keyId), "APIKEY")
    if target is None or target["tenantId"] != request.tenantId:
        raise NotFound("API key not found")
    if not all(principal.may_grant(Grant.parse(g), request.tenantId) for g in target["grants"]):
        raise PermissionDenied("this API key cannot revoke a key holding grants it does not hold itself")
    now = clock.rfc3339(clock.now())
    try:
        item = store.update(
            key_pk(request.keyId),
            "APIKEY",
            update="SET #state = :revoked, revokedAt = :now, revokedBy = :by",
            condition="tenantId = :tenant AND #state = :active",
            names={"#state": "state"},
            values={
                ":revoked": "revoked",
                ":now": now,
                ":by": principal.key_id,
                ":tenant": request.tenantId,
                ":active": "active",
            },
        )
    except store.ConditionFailed as lost:
        if lost.current is None:
            raise NotFound("API key not found") from None
        item = lost.current  # already revoked: revoking again changes nothing
    return _view(item)

"""Operator API keys: create, list, revoke, and the authorizer's verification.

Stored item: `APIKEY#<keyId>` / `APIKEY`, listed per tenant through gsi1. The secret
(`jpk_<ulid>_<random>`) is returned once by `create`; only its SHA-256 is kept.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from joinplane import clock, credentials, ids, store
from joinplane.errors import InvalidArgument, NotFound, PermissionDenied
from joinplane.grants import Grant, Principal, Resource

SECRET_PREFIX = "jpk"
ID_PREFIX = "key"
KEY_ID_PATTERN = r"^key_[0-9a-hjkmnp-tv-z]{26}$"
TENANT_ID = r"^[A-Za-z0-9._:-]{1,128}$"
DESCRIPTION = r"^[^\u0000-\u001f\u007f]*$"
READ, WRITE = "iam:api-keys:read", "iam:api-keys:write"

_Strict = ConfigDict(extra="forbid", strict=True)


class CreateApiKey(BaseModel):
    model_config = _Strict
    tenantId: str = Field(pattern=TENANT_ID)
    grants: list[str] = Field(min_length=1, max_length=50)
    description: str = Field(default="", max_length=256, pattern=DESCRIPTION)


class ListApiKeys(BaseModel):
    model_config = _Strict
    tenantId: str = Field(pattern=TENANT_ID)
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=KEY_ID_PATTERN)


class RevokeApiKey(BaseModel):
    model_config = _Strict
    tenantId: str = Field(pattern=TENANT_ID)
    keyId: str = Field(pattern=KEY_ID_PATTERN)


def _pk(key_id: str) -> str:
    return f"APIKEY#{key_id}"


def _tenant_index(tenant_id: str) -> str:
    return f"TENANT#{tenant_id}#APIKEYS"


def _view(item: dict[str, Any]) -> dict[str, Any]:
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
        "pk": _pk(key_id),
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


def create(principal: Principal, request: CreateApiKey) -> dict[str, Any]:
    principal.authorize(WRITE, Resource(request.tenantId, kind="tenant"))
    grants = [Grant.parse(text) for text in request.grants]
    for grant in grants:
        if not principal.may_grant(grant):
            raise PermissionDenied(
                f"this API key cannot grant {grant}: a key may only hand out what it holds"
            )
    secret, item = new_key_item(request.tenantId, grants, request.description, principal.key_id)
    store.put(item, condition="attribute_not_exists(pk)")
    return {**_view(item), "key": secret}


def list_keys(principal: Principal, request: ListApiKeys) -> dict[str, Any]:
    principal.authorize(READ, Resource(request.tenantId, kind="tenant"))
    page = store.query(
        pk=_tenant_index(request.tenantId), index="gsi1", limit=request.limit, sk_after=request.cursor
    )
    keys = [_view(item) for item in page.items]
    result: dict[str, Any] = {"apiKeys": keys}
    if page.last_key is not None and keys:
        result["nextCursor"] = keys[-1]["keyId"]
    return result


def revoke(principal: Principal, request: RevokeApiKey) -> dict[str, Any]:
    principal.authorize(WRITE, Resource(request.tenantId, kind="tenant"))
    now = clock.rfc3339(clock.now())
    try:
        item = store.update(
            _pk(request.keyId),
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
        current = lost.current
        if current is None or current.get("tenantId") != request.tenantId:
            raise NotFound("API key not found") from None
        item = current  # already revoked: revoking again changes nothing
    return _view(item)


def verify(bearer: str) -> Principal | None:
    """The authorizer's check: one GetItem, a constant-time digest comparison."""
    parsed = credentials.parse(bearer, SECRET_PREFIX)
    if parsed is None:
        return None
    item = store.get(_pk(f"{ID_PREFIX}_{parsed.ulid}"), "APIKEY", consistent=False)
    if item is None or not credentials.matches(parsed.secret, item["secretSha256"]):
        return None
    if item.get("state") != "active":
        return None
    return Principal(item["keyId"], item["tenantId"], tuple(Grant.parse(g) for g in item["grants"]))


def principal_from_context(context: dict[str, Any]) -> Principal | None:
    """Rebuild the principal the authorizer put in the request context."""
    import json

    if not context.get("keyId") or not context.get("tenantId"):
        return None
    try:
        grants = tuple(Grant.parse(g) for g in json.loads(context.get("grants", "[]")))
    except (ValueError, InvalidArgument):
        return None
    return Principal(str(context["keyId"]), str(context["tenantId"]), grants)


def authorizer_context(principal: Principal | None) -> dict[str, Any]:
    import json

    if principal is None:
        return {}
    return {
        "keyId": principal.key_id,
        "tenantId": principal.tenant_id,
        "grants": json.dumps([str(g) for g in principal.grants]),
    }


ApiKeyState = Literal["active", "revoked"]

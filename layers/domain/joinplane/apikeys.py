"""Operator API keys: create, list, revoke, whoami, and the authorizer's verification.

Stored as `joinplane.dal.apikeys.ApiKey`. The secret (`jpk_<ulid>_<random>`) is returned once by
`create`; only its SHA-256 is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from joinplane import clock, credentials, ids
from joinplane.dal import apikeys as apikeys_db
from joinplane.dal.apikeys import ApiKeyRecord
from joinplane.errors import NotFound, PermissionDenied, Unauthenticated
from joinplane.grants import Grant, Principal, Resource
from joinplane.keyauth import ID_PREFIX, SECRET_PREFIX
from joinplane.wire import STRICT, TENANT_ID, TEXT

if TYPE_CHECKING:
    from joinplane import views

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
    cursor: str | None = Field(default=None, pattern=ids.KEY_ID)


# The body is `{}` (the key in the Authorization header is the subject); a model all the same, so
# unknown fields are refused as on every route.
class WhoAmI(BaseModel):
    model_config = STRICT


class RevokeApiKey(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    keyId: str = Field(pattern=ids.KEY_ID)


def _view(key: ApiKeyRecord) -> views.ApiKey:
    return {
        "keyId": key.key_id,
        "tenantId": key.tenant_id,
        "grants": list(key.grants),
        "description": key.description,
        "state": key.state,
        "createdAt": key.created_at,
        "createdBy": key.created_by,
        "revokedAt": key.revoked_at,
        "revokedBy": key.revoked_by,
    }


def new_key(
    tenant_id: str, grants: list[Grant], description: str, created_by: str
) -> tuple[str, ApiKeyRecord]:
    """A fresh key: (secret, key). The secret exists only in the return value."""
    ulid = ids.new_ulid()
    secret = credentials.mint(SECRET_PREFIX, ulid)
    key = ApiKeyRecord(
        key_id=f"{ID_PREFIX}_{ulid}",
        tenant_id=tenant_id,
        grants=tuple(str(g) for g in grants),
        description=description,
        secret_sha256=credentials.digest(secret),
        state="active",
        created_at=clock.rfc3339(clock.now()),
        created_by=created_by,
    )
    return secret, key


def create(principal: Principal, request: CreateApiKey) -> views.ApiKeyCreated:
    principal.authorize(WRITE, Resource(request.tenantId, kind="tenant"))
    grants = [Grant.parse(text) for text in request.grants]
    for grant in grants:
        if not principal.may_grant(grant, request.tenantId):
            raise PermissionDenied(
                f"this API key cannot grant {grant}: a key may only hand out what it holds"
            )
    secret, key = new_key(request.tenantId, grants, request.description, principal.key_id)
    apikeys_db.create(key)
    return {**_view(key), "key": secret}


def list_keys(principal: Principal, request: ListApiKeys) -> views.ApiKeyList:
    principal.authorize(READ, Resource(request.tenantId, kind="tenant"))
    page = apikeys_db.list_keys(request.tenantId, after=request.cursor, limit=request.limit)
    result: views.ApiKeyList = {"apiKeys": [_view(key) for key in page.keys]}
    if not page.complete and page.keys:
        result["nextCursor"] = page.keys[-1].key_id
    return result


def revoke(principal: Principal, request: RevokeApiKey) -> views.ApiKey:
    """Revoke a key of the tenant. The mirror of `create`'s rule: a key may only revoke a key whose
    every grant it could have handed out, so a narrow key cannot revoke the administrators'."""
    principal.authorize(WRITE, Resource(request.tenantId, kind="tenant"))
    target = apikeys_db.get(request.keyId)
    if target is None or target.tenant_id != request.tenantId:
        raise NotFound("API key not found")
    if not all(principal.may_grant(Grant.parse(g), request.tenantId) for g in target.grants):
        raise PermissionDenied("this API key cannot revoke a key holding grants it does not hold itself")
    try:
        key = apikeys_db.revoke(
            request.keyId, tenant_id=request.tenantId, now=clock.now(), by=principal.key_id
        )
    except apikeys_db.ApiKeyLost as lost:
        if lost.current is None:
            raise NotFound("API key not found") from None
        key = lost.current  # already revoked: revoking again changes nothing
    return _view(key)


def whoami(principal: Principal, request: WhoAmI) -> views.ApiKey:
    """The calling key, never its secret. Any valid key may ask, with no grant: it learns only what
    its holder already has, and a console or CLI needs the tenant and grants to know what to show.

    Read from the table (one consistent GetItem), not from the authorizer's context: the answer
    carries the description and createdAt, and a key revoked while API Gateway still caches its
    authorization (up to 300 s) is told now that it is no longer valid."""
    del request
    key = apikeys_db.get(principal.key_id)
    if key is None or not key.active or key.tenant_id != principal.tenant_id:
        raise Unauthenticated("this API key is not valid (revoked or unknown)")
    return _view(key)

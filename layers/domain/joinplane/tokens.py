"""Join tokens: the secret a machine presents to ask to join one pool, or one site (then every
join is deferred until an operator's approval claims it for a pool).

Stored item: `JOINTOKEN#<tokenId>` / `JOINTOKEN`, listed per pool or per site through gsi1
(`TENANT#<t>#POOL#<p>#JOINTOKENS` or `TENANT#<t>#SITE#<s>#JOINTOKENS`, sorted by tokenId). Uses
are a counter, `usesRemaining`, that only a conditional write decrements. The item outlives
its expiry by a retention window (DynamoDB TTL deletes it later) so that deferred joins can
still be matched to the token they came with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, model_validator

from joinplane import clock, credentials, errors, ids, pools, store
from joinplane.errors import InvalidState, NotFound
from joinplane.grants import Principal, Resource
from joinplane.wire import POOL_ID, SITE_ID, STRICT, TENANT_ID, TEXT, ULID

if TYPE_CHECKING:
    from joinplane import views

SECRET_PREFIX = "jpt"
ID_PREFIX = "jtok"
TOKEN_ID = rf"^jtok_{ULID}$"
READ, CREATE = "compute:join-tokens:read", "compute:join-tokens:create"
RETENTION_SECONDS = 35 * 86_400  # longest deferral (30 days) plus a margin


class Attestation(BaseModel):
    model_config = STRICT
    discovery: Literal["off", "defer-unknown"] = "off"
    tpm: Literal["off", "defer-unlisted", "require"] = "off"
    # `key`: every join must carry a CSR, so the identity is a key the machine can later prove it
    # holds (fingerprint-only joins, seed 002's plain form, are refused: a fingerprint is no secret).
    identity: Literal["any", "key"] = "any"


class TokenTarget(BaseModel):
    """Exactly one of `poolId` (a pool token) or `siteId` (a site token)."""

    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    poolId: str | None = Field(default=None, pattern=POOL_ID)
    siteId: str | None = Field(default=None, pattern=SITE_ID)

    @model_validator(mode="after")
    def _one_target(self) -> TokenTarget:
        if (self.poolId is None) == (self.siteId is None):
            raise ValueError("give exactly one of poolId (a pool token) or siteId (a site token)")
        return self


class CreateJoinToken(TokenTarget):
    ttlSeconds: int = Field(default=86_400, ge=60, le=2_592_000)
    maxUses: int = Field(default=1, ge=1, le=10_000)
    requireApproval: bool = False
    attestation: Attestation = Field(default_factory=Attestation)
    description: str = Field(default="", max_length=256, pattern=TEXT)


class ListJoinTokens(TokenTarget):
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=TOKEN_ID)


class RevokeJoinToken(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    tokenId: str = Field(pattern=TOKEN_ID)


def token_key(token_id: str) -> tuple[str, str]:
    return f"JOINTOKEN#{token_id}", "JOINTOKEN"


def _list_key(tenant_id: str, pool_id: str | None, site_id: str | None) -> str:
    return (
        f"TENANT#{tenant_id}#POOL#{pool_id}#JOINTOKENS"
        if pool_id
        else f"TENANT#{tenant_id}#SITE#{site_id}#JOINTOKENS"
    )


def state_now(item: dict[str, Any]) -> views.TokenState:
    """The token's state as read now: expiry and exhaustion need no background job."""
    if item["state"] == "revoked":
        return "revoked"
    if item["expiresAtEpoch"] <= clock.epoch():
        return "expired"
    if item["usesRemaining"] <= 0:
        return "exhausted"
    return "active"


def view(item: dict[str, Any]) -> views.JoinToken:
    return {
        "tokenId": item["tokenId"],
        "tenantId": item["tenantId"],
        "siteId": item["siteId"],
        "poolId": item.get("poolId"),
        "description": item.get("description", ""),
        "state": state_now(item),
        "expiresAt": item["expiresAt"],
        "maxUses": item["maxUses"],
        "usesRemaining": item["usesRemaining"],
        "requireApproval": item["requireApproval"],
        "attestation": item["attestation"],
        "createdAt": item["createdAt"],
        "createdBy": item.get("createdBy"),
        "revokedAt": item.get("revokedAt"),
        "revokedBy": item.get("revokedBy"),
    }


def _target(principal: Principal, request: TokenTarget, permission: str) -> Resource:
    """The pool or site a token request is about, authorized; NOT_FOUND when out of sight."""
    if request.poolId is not None:
        return pools.resource_of(pools.load(principal, request.tenantId, request.poolId, permission))
    assert request.siteId is not None
    return pools.load_site(principal, request.tenantId, request.siteId, permission)


def create(principal: Principal, request: CreateJoinToken) -> views.JoinTokenCreated:
    target = _target(principal, request, CREATE)
    if target.pool_id is not None:
        pool = pools.get_active(target.tenant_id, target.pool_id)
        if pool is None or pool["state"] != "active":
            raise InvalidState(
                "pool is archived; archived pools take no new joins", reason=errors.POOL_ARCHIVED
            )
    ulid = ids.new_ulid()
    token_id = f"{ID_PREFIX}_{ulid}"
    secret = credentials.mint(SECRET_PREFIX, ulid)
    now = clock.epoch()
    expires = int(now) + request.ttlSeconds
    pk, sk = token_key(token_id)
    item = {
        "pk": pk,
        "sk": sk,
        "gsi1pk": _list_key(target.tenant_id, target.pool_id, target.site_id),
        "gsi1sk": token_id,
        "tokenId": token_id,
        "tenantId": target.tenant_id,
        "siteId": target.site_id,
        "poolId": target.pool_id,
        "secretSha256": credentials.digest(secret),
        "description": request.description,
        "state": "active",
        "expiresAt": clock.rfc3339(expires),
        "expiresAtEpoch": expires,
        "maxUses": request.maxUses,
        "usesRemaining": request.maxUses,
        "requireApproval": request.requireApproval,
        "attestation": request.attestation.model_dump(),
        "createdAt": clock.rfc3339(now),
        "createdBy": principal.key_id,
        "ttl": expires + RETENTION_SECONDS,
    }
    store.put(item, condition="attribute_not_exists(pk)")
    return {**view(item), "token": secret}


def list_tokens(principal: Principal, request: ListJoinTokens) -> views.JoinTokenList:
    target = _target(principal, request, READ)
    page = store.query(
        pk=_list_key(target.tenant_id, target.pool_id, target.site_id),
        index="gsi1",
        limit=request.limit,
        sk_after=request.cursor,
    )
    tokens = [view(item) for item in page.items]
    result: views.JoinTokenList = {"joinTokens": tokens}
    if page.last_key is not None and tokens:
        result["nextCursor"] = tokens[-1]["tokenId"]
    return result


def revoke(principal: Principal, request: RevokeJoinToken) -> views.JoinToken:
    principal.check_tenant(request.tenantId)
    item = store.get(*token_key(request.tokenId))
    if item is None or item["tenantId"] != request.tenantId:
        raise NotFound("join token not found")
    principal.authorize(
        CREATE, Resource(item["tenantId"], item["siteId"], item.get("poolId"), kind="join token")
    )
    try:
        item = store.update(
            *token_key(request.tokenId),
            update="SET #state = :revoked, revokedAt = :now, revokedBy = :by",
            condition="#state = :active",
            names={"#state": "state"},
            values={
                ":revoked": "revoked",
                ":active": "active",
                ":now": clock.rfc3339(clock.now()),
                ":by": principal.key_id,
            },
        )
    except store.ConditionFailed as lost:
        if lost.current is None:
            raise NotFound("join token not found") from None
        item = lost.current  # already revoked
    return view(item)

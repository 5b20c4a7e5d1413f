"""Compute pools: where machines land. A pool belongs to one site of one tenant, is `active` or
`archived`, and carries the bootstrap defaults handed to the machines it admits.

Stored item: `TENANT#<tenantId>` / `POOL#<poolId>`. Sites have no API of their own: a site exists
once a pool names it (a `SITE#<siteId>` marker written in the same transaction as the pool), which
is what site-scoped join tokens and grants refer to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, Field

from joinplane import clock, store
from joinplane.errors import AlreadyExists, InvalidArgument, InvalidState, NotFound, PermissionDenied
from joinplane.grants import Principal, Resource
from joinplane.wire import POOL_ID, SITE_ID, STRICT, TENANT_ID, TEXT, WORKSPACE_ID

if TYPE_CHECKING:
    from joinplane import views

READ, WRITE = "compute:pools:read", "compute:pools:write"
DEFAULT_JOIN_REQUEST_TTL = 86_400
DEFAULT_CERTIFICATE_TTL = 86_400
MAX_CERTIFICATE_TTL = 30 * 86_400

_Text = Field(default=None, max_length=1024, pattern=TEXT)


class TelemetrySink(BaseModel):
    model_config = STRICT
    destination: str | None = _Text
    credential: str | None = _Text
    streamPrefix: str | None = _Text


class Telemetry(BaseModel):
    model_config = STRICT
    enabled: bool | None = None
    streamPrefix: str | None = _Text
    logs: TelemetrySink | None = None
    events: TelemetrySink | None = None


class Billing(BaseModel):
    model_config = STRICT
    usageEndpoint: str | None = _Text
    usageToken: str | None = _Text
    costHookEndpoint: str | None = _Text
    costHookToken: str | None = _Text
    billableMarginPct: float | None = Field(default=None, ge=0, le=1000)


class BootstrapDefaults(BaseModel):
    """Seed 002's `controlplaneMachineBootstrapConfig`, less `workspaceId` and `poolName` (always
    the pool's own), plus `workerImage`: the image machines follow unless they pin their own."""

    model_config = STRICT
    controlplaneHttpUrl: str | None = _Text
    controlplaneGrpcHost: str | None = _Text
    controlplaneGrpcPort: int | None = Field(default=None, ge=0, le=65535)
    controlplaneGrpcTls: bool | None = None
    transport: str | None = _Text
    executor: str | None = _Text
    fallback: str | None = _Text
    disabledServices: list[str] | None = Field(default=None, max_length=64)
    imageRegistryStore: str | None = _Text
    imageClipVersion: int | None = Field(default=None, ge=0)
    imageLocalCacheEnabled: bool | None = None
    telemetry: Telemetry | None = None
    billing: Billing | None = None
    workerImage: str | None = _Text


class ClusterSettings(BaseModel):
    model_config = STRICT
    requiredNodeVersion: str | None = Field(default=None, min_length=1, max_length=128, pattern=TEXT)


class PoolRef(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    poolId: str = Field(pattern=POOL_ID)


class SiteRef(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    siteId: str = Field(pattern=SITE_ID)


class CreatePool(PoolRef):
    siteId: str = Field(pattern=SITE_ID)
    name: str = Field(min_length=1, max_length=128, pattern=TEXT)
    workspaceId: str = Field(pattern=WORKSPACE_ID)
    bootstrap: BootstrapDefaults = Field(default_factory=BootstrapDefaults)
    joinRequestTtlSeconds: int = Field(default=DEFAULT_JOIN_REQUEST_TTL, ge=60, le=30 * 86_400)
    certificateTtlSeconds: int = Field(default=DEFAULT_CERTIFICATE_TTL, ge=300, le=MAX_CERTIFICATE_TTL)
    cluster: ClusterSettings | None = None


class UpdatePool(PoolRef):
    """Fields present replace the stored value whole; absent fields are left alone."""

    name: str | None = Field(default=None, min_length=1, max_length=128, pattern=TEXT)
    workspaceId: str | None = Field(default=None, pattern=WORKSPACE_ID)
    bootstrap: BootstrapDefaults | None = None
    joinRequestTtlSeconds: int | None = Field(default=None, ge=60, le=30 * 86_400)
    certificateTtlSeconds: int | None = Field(default=None, ge=300, le=MAX_CERTIFICATE_TTL)
    cluster: ClusterSettings | None = None


class ListPools(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    siteId: str | None = Field(default=None, pattern=SITE_ID)
    state: str = Field(default="all", pattern="^(active|archived|all)$")
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=POOL_ID)


def pool_key(tenant_id: str, pool_id: str) -> tuple[str, str]:
    return f"TENANT#{tenant_id}", f"POOL#{pool_id}"


def site_key(tenant_id: str, site_id: str) -> tuple[str, str]:
    return f"TENANT#{tenant_id}", f"SITE#{site_id}"


def resource_of(item: dict[str, Any]) -> Resource:
    return Resource(item["tenantId"], item["siteId"], item["poolId"], kind="pool")


def view(item: dict[str, Any]) -> views.Pool:
    return {
        "tenantId": item["tenantId"],
        "poolId": item["poolId"],
        "siteId": item["siteId"],
        "name": item["name"],
        "workspaceId": item["workspaceId"],
        "state": item["state"],
        "bootstrap": cast("views.StoredBootstrap", item.get("bootstrap") or {}),
        "joinRequestTtlSeconds": item["joinRequestTtlSeconds"],
        "certificateTtlSeconds": item["certificateTtlSeconds"],
        "cluster": item.get("cluster"),
        "createdAt": item["createdAt"],
        "updatedAt": item["updatedAt"],
        "archivedAt": item.get("archivedAt"),
    }


def load(principal: Principal, tenant_id: str, pool_id: str, permission: str) -> dict[str, Any]:
    """A pool the principal may act on with `permission`; NOT_FOUND when it is absent or out of
    the caller's sight, so another tenant's or another pool's existence never shows."""
    principal.check_tenant(tenant_id)
    item = store.get(*pool_key(tenant_id, pool_id))
    if item is None:
        raise NotFound("pool not found")
    principal.authorize(permission, resource_of(item))
    return item


def load_site(principal: Principal, tenant_id: str, site_id: str, permission: str) -> Resource:
    """A site the principal may act on with `permission`; NOT_FOUND when it does not exist (no pool
    names it) or is out of the caller's sight, exactly as for a pool."""
    principal.check_tenant(tenant_id)
    if store.get(*site_key(tenant_id, site_id)) is None:
        raise NotFound("site not found")
    resource = Resource(tenant_id, site_id, kind="site")
    principal.authorize(permission, resource)
    return resource


def authorize_placement(principal: Principal, tenant_id: str, site_id: str) -> None:
    """May the principal put a pool in this site? A pool's site decides which site-scoped grants
    reach it and whose unclaimed site requests it can list and approve, so placing a pool is an act
    on the site: it needs `compute:pools:write` held at `site/<siteId>`, `tenant` or `platform`.
    A `compute-pool/<id>` or `compute-pool/*` grant reaches pools, never a site, so it cannot
    choose one. Refused with PERMISSION_DENIED whether or not the site exists (nothing is looked
    up), so the answer reveals nothing. A pool's site never changes today (`siteId` is not an
    `update` field); anything that ever moves a pool must pass this check for the new site."""
    principal.check_tenant(tenant_id)
    if not principal.can(WRITE, Resource(tenant_id, site_id, kind="site")):
        raise PermissionDenied(
            f"creating a pool in site {site_id!r} needs {WRITE} at site/{site_id}, tenant or platform "
            "scope; a compute-pool grant does not choose a site"
        )


def create(principal: Principal, request: CreatePool) -> views.Pool:
    authorize_placement(principal, request.tenantId, request.siteId)
    now = clock.rfc3339(clock.now())
    pk, sk = pool_key(request.tenantId, request.poolId)
    item = {
        "pk": pk,
        "sk": sk,
        "tenantId": request.tenantId,
        "poolId": request.poolId,
        "siteId": request.siteId,
        "name": request.name,
        "workspaceId": request.workspaceId,
        "state": "active",
        "bootstrap": request.bootstrap.model_dump(exclude_none=True),
        "joinRequestTtlSeconds": request.joinRequestTtlSeconds,
        "certificateTtlSeconds": request.certificateTtlSeconds,
        "cluster": request.cluster.model_dump(exclude_none=True) if request.cluster else None,
        "createdAt": now,
        "updatedAt": now,
        # Bumped by every change: joins cache pools and condition their transaction on this.
        "version": 1,
    }
    site_pk, site_sk = site_key(request.tenantId, request.siteId)
    try:
        store.transact(
            [
                store.Write("Put", item=item, condition="attribute_not_exists(pk)"),
                store.Write(
                    "Update",
                    pk=site_pk,
                    sk=site_sk,
                    update=(
                        "SET tenantId = :tenant, siteId = :site, createdAt = if_not_exists(createdAt, :now)"
                    ),
                    values={":tenant": request.tenantId, ":site": request.siteId, ":now": now},
                ),
            ]
        )
    except store.TransactionCanceled as canceled:
        if canceled.reasons and canceled.reasons[0] == "ConditionalCheckFailed":
            raise AlreadyExists(f"pool {request.poolId!r} already exists") from None
        raise
    return view(item)


def get(principal: Principal, request: PoolRef) -> views.Pool:
    return view(load(principal, request.tenantId, request.poolId, READ))


def update(principal: Principal, request: UpdatePool) -> views.Pool:
    load(principal, request.tenantId, request.poolId, WRITE)
    changes: dict[str, Any] = {}
    for name in request.model_fields_set - {"tenantId", "poolId"}:
        value = getattr(request, name)
        if value is None and name != "cluster":
            raise InvalidArgument(
                f"invalid request: {name}: cannot be null (only cluster can be removed)",
                [{"field": name, "reason": "cannot be null"}],
            )
        changes[name] = value.model_dump(exclude_none=True) if isinstance(value, BaseModel) else value
    if not changes:
        return get(principal, request)
    changes["updatedAt"] = clock.rfc3339(clock.now())
    names = {f"#f{i}": name for i, name in enumerate(changes)}
    values: dict[str, Any] = {f":v{i}": value for i, value in enumerate(changes.values())}
    sets = [f"#f{i} = :v{i}" for i, value in enumerate(changes.values()) if value is not None]
    removes = [f"#f{i}" for i, value in enumerate(changes.values()) if value is None]
    sets.append("version = version + :one")
    expression = ("SET " + ", ".join(sets)) + (" REMOVE " + ", ".join(removes) if removes else "")
    values = {k: v for k, v in values.items() if v is not None}
    values[":one"] = 1
    names["#state"] = "state"
    values[":active"] = "active"
    try:
        item = store.update(
            *pool_key(request.tenantId, request.poolId),
            update=expression,
            condition="#state = :active",
            names=names,
            values=values,
        )
    except store.ConditionFailed as lost:
        if lost.current is None:
            raise NotFound("pool not found") from None
        raise InvalidState("pool is archived; archived pools cannot be changed") from None
    return view(item)


def archive(principal: Principal, request: PoolRef) -> views.Pool:
    load(principal, request.tenantId, request.poolId, WRITE)
    now = clock.rfc3339(clock.now())
    try:
        item = store.update(
            *pool_key(request.tenantId, request.poolId),
            update="SET #state = :archived, archivedAt = :now, updatedAt = :now, version = version + :one",
            condition="#state = :active",
            names={"#state": "state"},
            values={":archived": "archived", ":now": now, ":active": "active", ":one": 1},
        )
    except store.ConditionFailed as lost:
        if lost.current is None:
            raise NotFound("pool not found") from None
        item = lost.current  # already archived: archiving again changes nothing
    return view(item)


def list_pools(principal: Principal, request: ListPools) -> views.PoolList:
    """Pools of the tenant the caller can read, in poolId order. Pools the key cannot see are
    skipped, so a page can hold fewer than `limit`; `nextCursor` continues after the last pool
    examined."""
    principal.check_tenant(request.tenantId)
    pk = f"TENANT#{request.tenantId}"
    page = (
        store.query(
            pk=pk,
            sk_after=f"POOL#{request.cursor}" if request.cursor else None,
            limit=request.limit,
            consistent=True,
        )
        if request.cursor
        else store.query(pk=pk, sk_prefix="POOL#", limit=request.limit, consistent=True)
    )
    pools = []
    examined = None
    for item in page.items:
        if not item["sk"].startswith("POOL#"):
            break  # past the pools (sites sort after): the listing is complete
        examined = item["poolId"]
        if request.state != "all" and item["state"] != request.state:
            continue
        if request.siteId and item["siteId"] != request.siteId:
            continue
        if principal.can(READ, resource_of(item)):
            pools.append(view(item))
    result: views.PoolList = {"pools": pools}
    reached_end = any(not item["sk"].startswith("POOL#") for item in page.items)
    if page.last_key is not None and examined is not None and not reached_end:
        result["nextCursor"] = examined
    return result


def get_active(tenant_id: str, pool_id: str) -> dict[str, Any] | None:
    """The stored pool, for other domain modules (join tokens, joins) that authorize on their own."""
    return store.get(*pool_key(tenant_id, pool_id))

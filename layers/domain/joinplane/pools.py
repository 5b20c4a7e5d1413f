"""Compute pools: where machines land. A pool belongs to one site of one tenant, is `active` or
`archived`, and carries the bootstrap defaults handed to the machines it admits.

Sites have no API of their own: a site exists once a pool names it (the site's marker is written
in the same transaction as the pool, see `joinplane.dal.pools`), which is what site-scoped join
tokens and grants refer to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from joinplane import clock, errors
from joinplane.dal import pools as pools_db
from joinplane.dal.pools import (
    DEFAULT_CA_PROPAGATION,
    BootstrapRecord,
    ClusterSettingsRecord,
    PolicyRuleRecord,
    PoolChanges,
    PoolRecord,
    TelemetrySinkRecord,
)
from joinplane.errors import AlreadyExists, InvalidArgument, InvalidState, NotFound, PermissionDenied
from joinplane.grants import Principal, Resource
from joinplane.policy_rules import JoinPolicy, PolicyRule
from joinplane.wire import POOL_ID, SITE_ID, STRICT, TENANT_ID, TEXT, WORKSPACE_ID

if TYPE_CHECKING:
    from joinplane import join_views, views

READ, WRITE = "compute:pools:read", "compute:pools:write"
DEFAULT_JOIN_REQUEST_TTL = 86_400
DEFAULT_CERTIFICATE_TTL = 86_400
MAX_CERTIFICATE_TTL = 30 * 86_400
# How long a rotated CA is published in the bundle before it signs (joinplane.ca.rotate). At least
# the public bundle's cache lifetime (5 minutes), so a verifier refreshing through an HTTP cache
# still sees the new CA before its first certificate; at most the longest certificate's life.
MIN_CA_PROPAGATION = 300
MAX_CA_PROPAGATION = 30 * 86_400
# Distinct approvals a join request of the pool needs (docs/queue.md, "Two approvals").
MAX_APPROVALS = 3

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
    """levers9 JoinMachine's `controlplaneMachineBootstrapConfig`, less `workspaceId` and `poolName` (always
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
    caPropagationSeconds: int = Field(
        default=DEFAULT_CA_PROPAGATION, ge=MIN_CA_PROPAGATION, le=MAX_CA_PROPAGATION
    )
    cluster: ClusterSettings | None = None
    approvalsRequired: int = Field(default=1, ge=1, le=MAX_APPROVALS)
    joinPolicy: JoinPolicy = Field(default_factory=list)


class UpdatePool(PoolRef):
    """Fields present replace the stored value whole; absent fields are left alone."""

    name: str | None = Field(default=None, min_length=1, max_length=128, pattern=TEXT)
    workspaceId: str | None = Field(default=None, pattern=WORKSPACE_ID)
    bootstrap: BootstrapDefaults | None = None
    joinRequestTtlSeconds: int | None = Field(default=None, ge=60, le=30 * 86_400)
    certificateTtlSeconds: int | None = Field(default=None, ge=300, le=MAX_CERTIFICATE_TTL)
    caPropagationSeconds: int | None = Field(default=None, ge=MIN_CA_PROPAGATION, le=MAX_CA_PROPAGATION)
    cluster: ClusterSettings | None = None
    approvalsRequired: int | None = Field(default=None, ge=1, le=MAX_APPROVALS)
    joinPolicy: JoinPolicy | None = None  # []: the policy is removed


class ListPools(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    siteId: str | None = Field(default=None, pattern=SITE_ID)
    state: str = Field(default="all", pattern="^(active|archived|all)$")
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=POOL_ID)


def resource_of(pool: PoolRecord) -> Resource:
    return Resource(pool.tenant_id, pool.site_id, pool.pool_id, kind="pool")


def _stored_view(stored: BootstrapRecord | ClusterSettingsRecord) -> Any:
    """A pool shows its bootstrap defaults and cluster settings exactly as stored: only the fields
    an operator set, under their stored names, which are the view's (views.StoredBootstrap,
    views.StoredClusterSettings; the contract test holds the keys against the schema)."""
    return stored.to_item()


def _stored_bootstrap(request: BootstrapDefaults) -> BootstrapRecord:
    return BootstrapRecord.from_item(request.model_dump(exclude_none=True))


def _stored_cluster(request: ClusterSettings) -> ClusterSettingsRecord:
    return ClusterSettingsRecord(request.requiredNodeVersion)


def _stored_policy(rules: list[PolicyRule]) -> tuple[PolicyRuleRecord, ...]:
    """The policy as stored, once every rule compiled: one that does not is refused (400, naming
    the rule and the position) before anything is written. The engine is loaded only here, and
    only for a policy with rules."""
    if rules:
        from joinplane import policy

        policy.compile_policy(rules)
    return tuple(PolicyRuleRecord(r.name, r.when, r.decision, r.reason) for r in rules)


def _rule_view(rule: PolicyRuleRecord) -> views.JoinPolicyRule:
    decision: Any = rule.decision  # one of the three: the policy was compiled when saved
    return {"name": rule.name, "when": rule.when, "decision": decision, "reason": rule.reason}


def view(pool: PoolRecord) -> views.Pool:
    return {
        "tenantId": pool.tenant_id,
        "poolId": pool.pool_id,
        "siteId": pool.site_id,
        "name": pool.name,
        "workspaceId": pool.workspace_id,
        "state": pool.state,
        "bootstrap": _stored_view(pool.bootstrap),
        "joinRequestTtlSeconds": pool.join_request_ttl_seconds,
        "certificateTtlSeconds": pool.certificate_ttl_seconds,
        "caPropagationSeconds": pool.ca_propagation_seconds,
        "cluster": _stored_view(pool.cluster) if pool.cluster else None,
        "joinPolicy": [_rule_view(rule) for rule in pool.join_policy],
        "createdAt": pool.created_at,
        "updatedAt": pool.updated_at,
        "archivedAt": pool.archived_at,
        "approvalsRequired": pool.approvals_required,
    }


def _sink_config(sink: TelemetrySinkRecord | None) -> join_views.TelemetrySinkConfig | None:
    if sink is None:
        return None
    return {
        "destination": sink.destination or "",
        "credential": sink.credential or "",
        "streamPrefix": sink.stream_prefix or "",
    }


def bootstrap_config(pool: PoolRecord, worker_image: str) -> join_views.MachineBootstrapConfig:
    """What a machine joining the pool is handed (levers9 JoinMachine's `controlplaneMachineBootstrapConfig`):
    the pool's defaults, JoinMachine's zero value for each one not set."""
    b, telemetry, billing = pool.bootstrap, pool.bootstrap.telemetry, pool.bootstrap.billing
    return {
        "controlplaneHttpUrl": b.controlplane_http_url or "",
        "controlplaneGrpcHost": b.controlplane_grpc_host or "",
        "controlplaneGrpcPort": b.controlplane_grpc_port or 0,
        "controlplaneGrpcTls": b.controlplane_grpc_tls or False,
        "workspaceId": pool.workspace_id,
        "poolName": pool.name,
        "transport": b.transport or "",
        "executor": b.executor or "",
        "fallback": b.fallback or "",
        "disabledServices": list(b.disabled_services or ()),
        "imageRegistryStore": b.image_registry_store or "",
        "imageClipVersion": str(b.image_clip_version or 0),  # int64: a string in proto3 JSON
        "imageLocalCacheEnabled": b.image_local_cache_enabled or False,
        "telemetry": None
        if telemetry is None
        else {
            "enabled": telemetry.enabled or False,
            "streamPrefix": telemetry.stream_prefix or "",
            "logs": _sink_config(telemetry.logs),
            "events": _sink_config(telemetry.events),
        },
        "billing": None
        if billing is None
        else {
            "usageEndpoint": billing.usage_endpoint or "",
            "usageToken": billing.usage_token or "",
            "costHookEndpoint": billing.cost_hook_endpoint or "",
            "costHookToken": billing.cost_hook_token or "",
            # As stored (a whole margin reads back as an int); absent: JoinMachine's zero.
            "billableMarginPct": billing.billable_margin_pct
            if billing.billable_margin_pct is not None
            else 0,
        },
        "workerImage": worker_image,
    }


def load(principal: Principal, tenant_id: str, pool_id: str, permission: str) -> PoolRecord:
    """A pool the principal may act on with `permission`; NOT_FOUND when it is absent or out of
    the caller's sight, so another tenant's or another pool's existence never shows."""
    principal.check_tenant(tenant_id)
    pool = pools_db.get(tenant_id, pool_id)
    if pool is None:
        raise NotFound("pool not found")
    principal.authorize(permission, resource_of(pool))
    return pool


def load_site(principal: Principal, tenant_id: str, site_id: str, permission: str) -> Resource:
    """A site the principal may act on with `permission`; NOT_FOUND when it does not exist (no pool
    names it) or is out of the caller's sight, exactly as for a pool."""
    principal.check_tenant(tenant_id)
    if not pools_db.site_exists(tenant_id, site_id):
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
    join_policy = _stored_policy(request.joinPolicy)
    now = clock.rfc3339(clock.now())
    pool = PoolRecord(
        tenant_id=request.tenantId,
        pool_id=request.poolId,
        site_id=request.siteId,
        name=request.name,
        workspace_id=request.workspaceId,
        state="active",
        bootstrap=_stored_bootstrap(request.bootstrap),
        join_request_ttl_seconds=request.joinRequestTtlSeconds,
        certificate_ttl_seconds=request.certificateTtlSeconds,
        cluster=_stored_cluster(request.cluster) if request.cluster else None,
        ca_propagation_seconds=request.caPropagationSeconds,
        approvals_required=request.approvalsRequired,
        join_policy=join_policy,
        created_at=now,
        updated_at=now,
        created_by=principal.key_id,
    )
    try:
        pools_db.create(pool)
    except pools_db.PoolExists:
        raise AlreadyExists(f"pool {request.poolId!r} already exists") from None
    return view(pool)


def get(principal: Principal, request: PoolRef) -> views.Pool:
    return view(load(principal, request.tenantId, request.poolId, READ))


def update(principal: Principal, request: UpdatePool) -> views.Pool:
    load(principal, request.tenantId, request.poolId, WRITE)
    given = request.model_fields_set - {"tenantId", "poolId"}
    for name in sorted(given):
        if getattr(request, name) is None and name != "cluster":
            raise InvalidArgument(
                f"invalid request: {name}: cannot be null (only cluster can be removed)",
                [{"field": name, "reason": "cannot be null"}],
            )
    if not given:
        return get(principal, request)
    changes = PoolChanges(
        name=request.name,
        workspace_id=request.workspaceId,
        bootstrap=_stored_bootstrap(request.bootstrap) if request.bootstrap else None,
        join_request_ttl_seconds=request.joinRequestTtlSeconds,
        certificate_ttl_seconds=request.certificateTtlSeconds,
        ca_propagation_seconds=request.caPropagationSeconds,
        cluster=_stored_cluster(request.cluster) if request.cluster else None,
        remove_cluster="cluster" in given and request.cluster is None,
        approvals_required=request.approvalsRequired,
        join_policy=_stored_policy(request.joinPolicy) if request.joinPolicy is not None else None,
    )
    try:
        pool = pools_db.update_active(
            request.tenantId, request.poolId, changes, clock.now(), by=principal.key_id
        )
    except pools_db.PoolLost as lost:
        if lost.current is None:
            raise NotFound("pool not found") from None
        raise InvalidState(
            "pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED
        ) from None
    return view(pool)


def archive(principal: Principal, request: PoolRef) -> views.Pool:
    load(principal, request.tenantId, request.poolId, WRITE)
    try:
        pool = pools_db.archive(request.tenantId, request.poolId, clock.now(), by=principal.key_id)
    except pools_db.PoolLost as lost:
        if lost.current is None:
            raise NotFound("pool not found") from None
        pool = lost.current  # already archived: archiving again changes nothing
    return view(pool)


def list_pools(principal: Principal, request: ListPools) -> views.PoolList:
    """Pools of the tenant the caller can read, in poolId order. Pools the key cannot see are
    skipped, so a page can hold fewer than `limit`; `nextCursor` continues after the last pool
    examined."""
    principal.check_tenant(request.tenantId)
    page = pools_db.list_pools(request.tenantId, after=request.cursor, limit=request.limit)
    shown = [
        view(pool)
        for pool in page.pools
        if (request.state == "all" or pool.state == request.state)
        and (not request.siteId or pool.site_id == request.siteId)
        and principal.can(READ, resource_of(pool))
    ]
    result: views.PoolList = {"pools": shown}
    if not page.complete and page.pools:
        result["nextCursor"] = page.pools[-1].pool_id
    return result


def get_active(tenant_id: str, pool_id: str) -> PoolRecord | None:
    """The stored pool, for other domain modules (join tokens, joins) that authorize on their own."""
    return pools_db.get(tenant_id, pool_id)

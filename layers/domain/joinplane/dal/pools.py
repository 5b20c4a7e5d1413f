"""Pools and sites in the table.

- Pool: `TENANT#<tenantId>` / `POOL#<poolId>`. `version` is bumped by every change: joins cache
  pools per container and condition their transaction on it (`is_current`). Each change also
  stores the acting API key (`createdBy`, `updatedBy`, `archivedBy`) in the same write, which is
  how the stream's `security.pool.*` events name who acted.
- Site marker: `TENANT#<tenantId>` / `SITE#<siteId>`, written in the pool's creating transaction, so
  a site exists once a pool names it. Sites sort after pools in the tenant's partition.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NamedTuple

from joinplane import clock, container
from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item

# How long a rotated CA is in the bundle before it signs, unless the pool says otherwise
# (joinplane.pools.CreatePool's caPropagationSeconds).
DEFAULT_CA_PROPAGATION = 86_400

PoolState = Literal["active", "archived"]


def _present(**attributes: Any) -> Item:
    """A stored sub-document holds only the fields that were set (None: never set)."""
    return {name: value for name, value in attributes.items() if value is not None}


class TelemetrySinkRecord(NamedTuple):
    destination: str | None = None
    credential: str | None = None
    stream_prefix: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> TelemetrySinkRecord:
        return cls(item.get("destination"), item.get("credential"), item.get("streamPrefix"))

    def to_item(self) -> Item:
        return _present(
            destination=self.destination, credential=self.credential, streamPrefix=self.stream_prefix
        )


class TelemetryRecord(NamedTuple):
    enabled: bool | None = None
    stream_prefix: str | None = None
    logs: TelemetrySinkRecord | None = None
    events: TelemetrySinkRecord | None = None

    @classmethod
    def from_item(cls, item: Item) -> TelemetryRecord:
        logs, events = item.get("logs"), item.get("events")
        return cls(
            enabled=item.get("enabled"),
            stream_prefix=item.get("streamPrefix"),
            logs=TelemetrySinkRecord.from_item(logs) if logs is not None else None,
            events=TelemetrySinkRecord.from_item(events) if events is not None else None,
        )

    def to_item(self) -> Item:
        return _present(
            enabled=self.enabled,
            streamPrefix=self.stream_prefix,
            logs=self.logs.to_item() if self.logs else None,
            events=self.events.to_item() if self.events else None,
        )


class BillingRecord(NamedTuple):
    usage_endpoint: str | None = None
    usage_token: str | None = None
    cost_hook_endpoint: str | None = None
    cost_hook_token: str | None = None
    # As stored: a whole margin reads back as an int, and is answered as such.
    billable_margin_pct: float | None = None

    @classmethod
    def from_item(cls, item: Item) -> BillingRecord:
        return cls(
            usage_endpoint=item.get("usageEndpoint"),
            usage_token=item.get("usageToken"),
            cost_hook_endpoint=item.get("costHookEndpoint"),
            cost_hook_token=item.get("costHookToken"),
            billable_margin_pct=item.get("billableMarginPct"),
        )

    def to_item(self) -> Item:
        return _present(
            usageEndpoint=self.usage_endpoint,
            usageToken=self.usage_token,
            costHookEndpoint=self.cost_hook_endpoint,
            costHookToken=self.cost_hook_token,
            billableMarginPct=self.billable_margin_pct,
        )


class BootstrapRecord(NamedTuple):
    """The pool's bootstrap defaults: only the fields an operator set (None: not set), handed to
    the machines it admits with levers9 JoinMachine's zero values for the rest (joinplane.join_wire)."""

    controlplane_http_url: str | None = None
    controlplane_grpc_host: str | None = None
    controlplane_grpc_port: int | None = None
    controlplane_grpc_tls: bool | None = None
    transport: str | None = None
    executor: str | None = None
    fallback: str | None = None
    disabled_services: tuple[str, ...] | None = None
    image_registry_store: str | None = None
    image_clip_version: int | None = None
    image_local_cache_enabled: bool | None = None
    telemetry: TelemetryRecord | None = None
    billing: BillingRecord | None = None
    worker_image: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> BootstrapRecord:
        disabled, telemetry, billing = (
            item.get("disabledServices"),
            item.get("telemetry"),
            item.get("billing"),
        )
        return cls(
            controlplane_http_url=item.get("controlplaneHttpUrl"),
            controlplane_grpc_host=item.get("controlplaneGrpcHost"),
            controlplane_grpc_port=item.get("controlplaneGrpcPort"),
            controlplane_grpc_tls=item.get("controlplaneGrpcTls"),
            transport=item.get("transport"),
            executor=item.get("executor"),
            fallback=item.get("fallback"),
            disabled_services=tuple(disabled) if disabled is not None else None,
            image_registry_store=item.get("imageRegistryStore"),
            image_clip_version=item.get("imageClipVersion"),
            image_local_cache_enabled=item.get("imageLocalCacheEnabled"),
            telemetry=TelemetryRecord.from_item(telemetry) if telemetry is not None else None,
            billing=BillingRecord.from_item(billing) if billing is not None else None,
            worker_image=item.get("workerImage"),
        )

    def to_item(self) -> Item:
        return _present(
            controlplaneHttpUrl=self.controlplane_http_url,
            controlplaneGrpcHost=self.controlplane_grpc_host,
            controlplaneGrpcPort=self.controlplane_grpc_port,
            controlplaneGrpcTls=self.controlplane_grpc_tls,
            transport=self.transport,
            executor=self.executor,
            fallback=self.fallback,
            disabledServices=list(self.disabled_services) if self.disabled_services is not None else None,
            imageRegistryStore=self.image_registry_store,
            imageClipVersion=self.image_clip_version,
            imageLocalCacheEnabled=self.image_local_cache_enabled,
            telemetry=self.telemetry.to_item() if self.telemetry else None,
            billing=self.billing.to_item() if self.billing else None,
            workerImage=self.worker_image,
        )


class ClusterSettingsRecord(NamedTuple):
    """What the pool asks of the Sylve nodes that join it (joinplane.clusters)."""

    required_node_version: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> ClusterSettingsRecord:
        return cls(item.get("requiredNodeVersion"))

    def to_item(self) -> Item:
        return _present(requiredNodeVersion=self.required_node_version)


class PolicyRuleRecord(NamedTuple):
    """One rule of a pool's join policy (joinplane.policy), as written and as compiled when saved."""

    name: str
    when: str
    decision: str  # approve | defer | deny
    reason: str = ""

    @classmethod
    def from_item(cls, item: Item) -> PolicyRuleRecord:
        return cls(item["name"], item["when"], item["decision"], item.get("reason", ""))

    def to_item(self) -> Item:
        return {"name": self.name, "when": self.when, "decision": self.decision, "reason": self.reason}


class PoolRecord(NamedTuple):
    tenant_id: str
    pool_id: str
    site_id: str
    name: str
    workspace_id: str
    state: PoolState
    bootstrap: BootstrapRecord
    join_request_ttl_seconds: int
    certificate_ttl_seconds: int
    cluster: ClusterSettingsRecord | None
    created_at: str
    updated_at: str
    version: int = 1
    archived_at: str | None = None
    # The cluster key that opens this pool to Sylve nodes (joinplane.dal.clusters), once issued.
    cluster_key_id: str | None = None
    cluster_key_rotated_at: str | None = None
    created_by: str | None = None
    updated_by: str | None = None  # the key of the last change (update or archive)
    archived_by: str | None = None
    # How long a rotated CA is in the bundle before it signs; pools stored before it was a setting
    # read as the default.
    ca_propagation_seconds: int = DEFAULT_CA_PROPAGATION
    # How many distinct approvals a join request of this pool needs; pools stored before it was a
    # setting read as one.
    approvals_required: int = 1
    # The join policy, on the pool's item so that a join reads it with the pool (no call of its
    # own); empty: no policy. Pools stored before policies read as empty.
    join_policy: tuple[PolicyRuleRecord, ...] = ()

    @property
    def active(self) -> bool:
        return self.state == "active"

    @property
    def worker_image(self) -> str:
        return self.bootstrap.worker_image or ""

    @classmethod
    def from_item(cls, item: Item) -> PoolRecord:
        cluster = item.get("cluster")
        return cls(
            tenant_id=item["tenantId"],
            pool_id=item["poolId"],
            site_id=item["siteId"],
            name=item["name"],
            workspace_id=item["workspaceId"],
            state=item["state"],
            bootstrap=BootstrapRecord.from_item(item.get("bootstrap") or {}),
            join_request_ttl_seconds=int(item["joinRequestTtlSeconds"]),
            certificate_ttl_seconds=int(item["certificateTtlSeconds"]),
            cluster=ClusterSettingsRecord.from_item(cluster) if cluster is not None else None,
            created_at=item["createdAt"],
            updated_at=item["updatedAt"],
            version=int(item.get("version", 1)),
            archived_at=item.get("archivedAt"),
            cluster_key_id=item.get("clusterKeyId"),
            cluster_key_rotated_at=item.get("clusterKeyRotatedAt"),
            created_by=item.get("createdBy"),
            updated_by=item.get("updatedBy"),
            archived_by=item.get("archivedBy"),
            ca_propagation_seconds=int(item.get("caPropagationSeconds", DEFAULT_CA_PROPAGATION)),
            approvals_required=int(item.get("approvalsRequired", 1)),
            join_policy=tuple(PolicyRuleRecord.from_item(rule) for rule in item.get("joinPolicy") or ()),
        )

    def to_item(self) -> Item:
        pk, sk = pool_key(self.tenant_id, self.pool_id)
        return {
            "pk": pk,
            "sk": sk,
            "tenantId": self.tenant_id,
            "poolId": self.pool_id,
            "siteId": self.site_id,
            "name": self.name,
            "workspaceId": self.workspace_id,
            "state": self.state,
            "bootstrap": self.bootstrap.to_item(),
            "joinRequestTtlSeconds": self.join_request_ttl_seconds,
            "certificateTtlSeconds": self.certificate_ttl_seconds,
            "cluster": self.cluster.to_item() if self.cluster else None,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "version": self.version,
            "archivedAt": self.archived_at,
            "clusterKeyId": self.cluster_key_id,
            "clusterKeyRotatedAt": self.cluster_key_rotated_at,
            "createdBy": self.created_by,
            "updatedBy": self.updated_by,
            "archivedBy": self.archived_by,
            "caPropagationSeconds": self.ca_propagation_seconds,
            "approvalsRequired": self.approvals_required,
            "joinPolicy": [rule.to_item() for rule in self.join_policy] or None,
        }


def pool_key(tenant_id: str, pool_id: str) -> tuple[str, str]:
    return f"TENANT#{tenant_id}", f"POOL#{pool_id}"


def site_key(tenant_id: str, site_id: str) -> tuple[str, str]:
    return f"TENANT#{tenant_id}", f"SITE#{site_id}"


class PoolExists(Exception):
    pass


class PoolLost(Exception):
    """A conditional change found the pool absent (`current` None) or no longer active."""

    def __init__(self, current: PoolRecord | None) -> None:
        super().__init__("pool changed")
        self.current = current


def get(tenant_id: str, pool_id: str) -> PoolRecord | None:
    item = dynamo.get(*pool_key(tenant_id, pool_id))
    return PoolRecord.from_item(item) if item else None


def site_exists(tenant_id: str, site_id: str) -> bool:
    return dynamo.get(*site_key(tenant_id, site_id)) is not None


def create(pool: PoolRecord) -> None:
    """The pool and its site's marker, in one transaction; PoolExists when the id is taken."""
    site_pk, site_sk = site_key(pool.tenant_id, pool.site_id)
    try:
        dynamo.transact(
            [
                dynamo.Write("Put", item=pool.to_item(), condition="attribute_not_exists(pk)", name="pool"),
                dynamo.Write(
                    "Update",
                    pk=site_pk,
                    sk=site_sk,
                    update=(
                        "SET tenantId = :tenant, siteId = :site, createdAt = if_not_exists(createdAt, :now)"
                    ),
                    values={":tenant": pool.tenant_id, ":site": pool.site_id, ":now": pool.created_at},
                    name="site",
                ),
            ]
        )
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.lost("pool"):
            raise PoolExists(pool.pool_id) from None
        raise


class PoolChanges(NamedTuple):
    """What an update replaces, whole: a field left None is left alone. Only the cluster settings
    (`remove_cluster`) and the join policy (an empty one) can be removed."""

    name: str | None = None
    workspace_id: str | None = None
    bootstrap: BootstrapRecord | None = None
    join_request_ttl_seconds: int | None = None
    certificate_ttl_seconds: int | None = None
    ca_propagation_seconds: int | None = None
    cluster: ClusterSettingsRecord | None = None
    remove_cluster: bool = False
    approvals_required: int | None = None
    join_policy: tuple[PolicyRuleRecord, ...] | None = None  # (): the policy is removed

    def attributes(self) -> Item:
        """The stored attributes replaced (None: removed)."""
        replaced = _present(
            name=self.name,
            workspaceId=self.workspace_id,
            bootstrap=self.bootstrap.to_item() if self.bootstrap else None,
            joinRequestTtlSeconds=self.join_request_ttl_seconds,
            certificateTtlSeconds=self.certificate_ttl_seconds,
            caPropagationSeconds=self.ca_propagation_seconds,
            cluster=self.cluster.to_item() if self.cluster else None,
            approvalsRequired=self.approvals_required,
        )
        if self.remove_cluster:
            replaced["cluster"] = None
        if self.join_policy is not None:
            replaced["joinPolicy"] = [rule.to_item() for rule in self.join_policy] or None
        return replaced


def update_active(
    tenant_id: str, pool_id: str, changes: PoolChanges, now: datetime, *, by: str
) -> PoolRecord:
    """Apply the changes to an active pool and bump its version, naming `by` as who changed it.
    PoolLost when the pool is absent or archived."""
    attributes = {**changes.attributes(), "updatedAt": clock.rfc3339(now), "updatedBy": by}
    names = {f"#f{i}": name for i, name in enumerate(attributes)}
    values: dict[str, Any] = {
        f":v{i}": value for i, value in enumerate(attributes.values()) if value is not None
    }
    sets = [f"#f{i} = :v{i}" for i, value in enumerate(attributes.values()) if value is not None]
    removes = [f"#f{i}" for i, value in enumerate(attributes.values()) if value is None]
    sets.append("version = version + :one")
    expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
    try:
        item = dynamo.update(
            *pool_key(tenant_id, pool_id),
            update=expression,
            condition="#state = :active",
            names={**names, "#state": "state"},
            values={**values, ":one": 1, ":active": "active"},
        )
    except dynamo.ConditionFailed as lost:
        raise PoolLost(PoolRecord.from_item(lost.current) if lost.current else None) from None
    return PoolRecord.from_item(item)


def archive(tenant_id: str, pool_id: str, now: datetime, *, by: str) -> PoolRecord:
    """Archive an active pool, naming `by` as who archived it; PoolLost when it is absent or
    already archived."""
    try:
        item = dynamo.update(
            *pool_key(tenant_id, pool_id),
            update=(
                "SET #state = :archived, archivedAt = :now, archivedBy = :by, updatedAt = :now,"
                " updatedBy = :by, version = version + :one"
            ),
            condition="#state = :active",
            names={"#state": "state"},
            values={
                ":archived": "archived",
                ":now": clock.rfc3339(now),
                ":by": by,
                ":active": "active",
                ":one": 1,
            },
        )
    except dynamo.ConditionFailed as lost:
        raise PoolLost(PoolRecord.from_item(lost.current) if lost.current else None) from None
    return PoolRecord.from_item(item)


class PoolPage(NamedTuple):
    pools: list[PoolRecord]
    complete: bool  # the tenant's pools are exhausted: no page follows


def list_pools(tenant_id: str, *, after: str | None, limit: int) -> PoolPage:
    """One page of the tenant's pools in poolId order, after the pool `after`."""
    pk = f"TENANT#{tenant_id}"
    if after:
        page = dynamo.query(pk=pk, sk_after=f"POOL#{after}", limit=limit, consistent=True)
    else:
        page = dynamo.query(pk=pk, sk_prefix="POOL#", limit=limit, consistent=True)
    pools = []
    complete = page.last_key is None
    for item in page.items:
        if not item["sk"].startswith("POOL#"):
            complete = True  # past the pools (sites sort after): the listing is complete
            break
        pools.append(PoolRecord.from_item(item))
    return PoolPage(pools, complete)


# --- the per-container pool cache that joins read ----------------------------------------------

_cache: dict[tuple[str, str], PoolRecord] = {}
container.on_reset(_cache.clear)


def cached(tenant_id: str, pool_id: str, *, fresh: bool = False) -> PoolRecord | None:
    """The pool, cached per container. Safe because every join transaction carries `is_current`:
    a stale copy can only cost a retry (with `fresh=True`), never a join under old settings."""
    key = (tenant_id, pool_id)
    if fresh or key not in _cache:
        pool = get(tenant_id, pool_id)
        if pool is None:
            _cache.pop(key, None)
            return None
        _cache[key] = pool
    return _cache[key]


def is_current(pool: PoolRecord, *, name: str = "pool") -> dynamo.Write:
    """A transaction action that holds only while the pool is active and unchanged since read."""
    pk, sk = pool_key(pool.tenant_id, pool.pool_id)
    return dynamo.Write(
        "ConditionCheck",
        pk=pk,
        sk=sk,
        condition="#state = :active AND version = :version",
        names={"#state": "state"},
        values={":active": "active", ":version": pool.version},
        name=name,
    )

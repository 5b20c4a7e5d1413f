"""Pools and sites in the table.

- Pool: `TENANT#<tenantId>` / `POOL#<poolId>`. `version` is bumped by every change: joins cache
  pools per container and condition their transaction on it (`is_current`).
- Site marker: `TENANT#<tenantId>` / `SITE#<siteId>`, written in the pool's creating transaction, so
  a site exists once a pool names it. Sites sort after pools in the tenant's partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from joinplane import container
from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item


@dataclass(frozen=True)
class Pool:
    tenant_id: str
    pool_id: str
    site_id: str
    name: str
    workspace_id: str
    state: str  # "active" | "archived"
    bootstrap: dict[str, Any]
    join_request_ttl_seconds: int
    certificate_ttl_seconds: int
    cluster: dict[str, Any] | None
    created_at: str
    updated_at: str
    version: int = 1
    archived_at: str | None = None
    # The cluster key that opens this pool to Sylve nodes (joinplane.dal.clusters), once issued.
    cluster_key_id: str | None = None
    cluster_key_rotated_at: str | None = None

    @property
    def active(self) -> bool:
        return self.state == "active"

    @property
    def worker_image(self) -> str:
        return str(self.bootstrap.get("workerImage", ""))

    @classmethod
    def from_item(cls, item: Item) -> Pool:
        return cls(
            tenant_id=item["tenantId"],
            pool_id=item["poolId"],
            site_id=item["siteId"],
            name=item["name"],
            workspace_id=item["workspaceId"],
            state=item["state"],
            bootstrap=item.get("bootstrap") or {},
            join_request_ttl_seconds=int(item["joinRequestTtlSeconds"]),
            certificate_ttl_seconds=int(item["certificateTtlSeconds"]),
            cluster=item.get("cluster"),
            created_at=item["createdAt"],
            updated_at=item["updatedAt"],
            version=int(item.get("version", 1)),
            archived_at=item.get("archivedAt"),
            cluster_key_id=item.get("clusterKeyId"),
            cluster_key_rotated_at=item.get("clusterKeyRotatedAt"),
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
            "bootstrap": self.bootstrap,
            "joinRequestTtlSeconds": self.join_request_ttl_seconds,
            "certificateTtlSeconds": self.certificate_ttl_seconds,
            "cluster": self.cluster,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "version": self.version,
            "archivedAt": self.archived_at,
            "clusterKeyId": self.cluster_key_id,
            "clusterKeyRotatedAt": self.cluster_key_rotated_at,
        }


def pool_key(tenant_id: str, pool_id: str) -> tuple[str, str]:
    return f"TENANT#{tenant_id}", f"POOL#{pool_id}"


def site_key(tenant_id: str, site_id: str) -> tuple[str, str]:
    return f"TENANT#{tenant_id}", f"SITE#{site_id}"


class PoolExists(Exception):
    pass


class PoolLost(Exception):
    """A conditional change found the pool absent (`current` None) or no longer active."""

    def __init__(self, current: Pool | None) -> None:
        super().__init__("pool changed")
        self.current = current


def get(tenant_id: str, pool_id: str) -> Pool | None:
    item = dynamo.get(*pool_key(tenant_id, pool_id))
    return Pool.from_item(item) if item else None


def site_exists(tenant_id: str, site_id: str) -> bool:
    return dynamo.get(*site_key(tenant_id, site_id)) is not None


def create(pool: Pool) -> None:
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


def update_active(tenant_id: str, pool_id: str, changes: dict[str, Any], now: str) -> Pool:
    """Replace the given stored fields (camelCase item names; None removes) of an active pool and
    bump its version. PoolLost when the pool is absent or archived."""
    changes = {**changes, "updatedAt": now}
    names = {f"#f{i}": name for i, name in enumerate(changes)}
    values: dict[str, Any] = {
        f":v{i}": value for i, value in enumerate(changes.values()) if value is not None
    }
    sets = [f"#f{i} = :v{i}" for i, value in enumerate(changes.values()) if value is not None]
    removes = [f"#f{i}" for i, value in enumerate(changes.values()) if value is None]
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
        raise PoolLost(Pool.from_item(lost.current) if lost.current else None) from None
    return Pool.from_item(item)


def archive(tenant_id: str, pool_id: str, now: str) -> Pool:
    """Archive an active pool; PoolLost when it is absent or already archived."""
    try:
        item = dynamo.update(
            *pool_key(tenant_id, pool_id),
            update="SET #state = :archived, archivedAt = :now, updatedAt = :now, version = version + :one",
            condition="#state = :active",
            names={"#state": "state"},
            values={":archived": "archived", ":now": now, ":active": "active", ":one": 1},
        )
    except dynamo.ConditionFailed as lost:
        raise PoolLost(Pool.from_item(lost.current) if lost.current else None) from None
    return Pool.from_item(item)


@dataclass(frozen=True)
class PoolPage:
    pools: list[Pool]
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
        pools.append(Pool.from_item(item))
    return PoolPage(pools, complete)


# --- the per-container pool cache that joins read ------------------------------------------------

_cache: dict[tuple[str, str], Pool] = {}
container.on_reset(_cache.clear)


def cached(tenant_id: str, pool_id: str, *, fresh: bool = False) -> Pool | None:
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


def is_current(pool: Pool, *, name: str = "pool") -> dynamo.Write:
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

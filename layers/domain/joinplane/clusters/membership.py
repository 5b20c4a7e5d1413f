"""Clusters: a compute pool with a cluster key, its member nodes and its guest-identity registry,
and Sylve's `POST /cluster/accept-join` decided against them as a Sylve leader would.

Stored as `joinplane.dal.clusters` describes: cluster keys, member nodes, one address item per
member, and the guest-ID registry packed 200 IDs to an item (why: see there).

A join decides on what it read and commits only if nothing it decided on changed: the node and
address items must not exist, each guest item must still be at the version read, and the pool must
still be at its version with this key. If any of that moved, the join reads again and decides
again, so of two joins claiming one guest ID exactly one commits and the other is answered with
the conflict. Nothing is written before that transaction, so every refusal leaves no trace. The
reads themselves are made to agree with each other (see `_snapshot`), so a refusal is never based
on half of another join.
"""

from __future__ import annotations

import ipaddress
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from joinplane import clock, credentials, deadline, errors, ids, observe, pools
from joinplane.clusters import inventory, sylve_wire
from joinplane.clusters.inventory import InventoryEntry, InventoryReport, go_trim_space
from joinplane.clusters.sylve_wire import AcceptJoin
from joinplane.dal import clusters as clusters_db
from joinplane.dal import pools as pools_db
from joinplane.dal.clusters import ClusterKeyRecord, ClusterNodeRecord, GuestBucketRecord
from joinplane.dal.pools import PoolRecord
from joinplane.errors import InvalidState, Unavailable
from joinplane.grants import Principal

if TYPE_CHECKING:
    from joinplane import views


KEY_PREFIX = "jck"
KEY_ID_PREFIX = "ckey"
READ, WRITE = "compute:clusters:read", "compute:clusters:write"
BUCKETS = clusters_db.bucket_of(inventory.GUEST_ID_MAX) + 1
# Without a deadline (no Lambda context) a loop stops after this many attempts; with one, only
# the time left stops it.
MAX_ATTEMPTS = 12
_MIN_BACKOFF = 0.005
_MAX_BACKOFF = 2.0  # seconds: `deadline.backoff`'s default cap, what these loops always paused at most
ROTATED_KEY_TTL = 35 * 86_400


# --- accept-join ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """The pool a cluster key opened, as read when the key was checked."""

    pool: PoolRecord
    key_id: str


def authenticate(secret: str) -> Cluster:
    """The pool whose current cluster key this is: one GetItem by the id the key carries, a
    constant-time digest comparison, then the pool (which must still name this key)."""
    parsed = credentials.parse(secret, KEY_PREFIX)
    if parsed is None:
        raise sylve_wire.unauthorized()
    key_id = f"{KEY_ID_PREFIX}_{parsed.ulid}"
    key = clusters_db.get_key(key_id)
    if key is None or not credentials.matches(secret, key.secret_sha256) or key.state != "active":
        # The id the caller claimed, never verified: logged under its own name, not as keyId.
        observe.note(presentedKeyId=key_id)
        raise sylve_wire.unauthorized()
    observe.note(keyId=key_id, tenantId=key.tenant_id, poolId=key.pool_id)
    return Cluster(_keyed_pool(key.tenant_id, key.pool_id, key_id), key_id)


def _keyed_pool(tenant_id: str, pool_id: str, key_id: str) -> PoolRecord:
    pool = pools_db.get(tenant_id, pool_id)
    # An archived pool takes no joins; its key stops working like a disabled Sylve cluster's.
    if pool is None or pool.cluster_key_id != key_id or not pool.active:
        raise sylve_wire.unauthorized()
    return pool


@dataclass(frozen=True)
class _Decision:
    node_id: str
    joiner: InventoryReport
    buckets: dict[int, GuestBucketRecord]
    # What a join commits: the new member and the guest items it changes (None: nothing to write).
    node: ClusterNodeRecord | None = None
    changed: tuple[GuestBucketRecord, ...] = ()

    def report(self) -> InventoryReport:
        """The merged report (preflight's answer), built only when asked for: with a full
        registry it is the costliest step of a decision, and an accept does not answer with it."""
        return inventory.merge(self.joiner, _registry(self.buckets), exclude_node_id=self.node_id)


def accept_join(cluster: Cluster, request: AcceptJoin) -> tuple[str, Any]:
    """Sylve's AcceptJoin: (message, data) of the 200 answer, or a SylveError.

    Concurrent joins into one guest item serialise: each commit moves the item's version, so of
    the joins that read it together one commits and the others decide again. Every attempt
    starts only with time left for two more like the slowest so far (`deadline.check`: under
    contention an attempt can take longer than any before it, so one is not enough), and the
    pause between attempts is jittered over a window scaled by how long an attempt takes, so
    the losers of one round do not all meet again in the next. Out of time is OutOfTime (503
    with Retry-After) before anything is written, never a gateway timeout after a commit."""
    pool = cluster.pool
    slowest = 0.0
    attempt = 0
    while True:
        reserve = max(deadline.DEFAULT_RESERVE, 2 * slowest)
        deadline.check(reserve)
        started = time.monotonic()
        if attempt:
            pool = _keyed_pool(pool.tenant_id, pool.pool_id, cluster.key_id)
        decision = _decide(pool, request)
        if request.preflight:
            observe.note(dryRun=True)
            return "cluster_join_preflight_passed", decision.report()
        if decision.node is None:
            # Already a member: the repeat changes nothing, so it is logged, not counted as a join.
            observe.log(
                "INFO",
                "cluster node already a member",
                outcome="member",
                nodeId=go_trim_space(request.node_id),
            )
            return "node_added_to_cluster", request.echo()
        try:
            clusters_db.commit_join(pool, cluster.key_id, decision.node, decision.changed)
        except clusters_db.Contended:
            # Something this join decided on changed: read again, decide again.
            slowest = max(slowest, time.monotonic() - started)
            attempt += 1
            if attempt >= MAX_ATTEMPTS and deadline.remaining() == math.inf:
                raise Unavailable("the cluster changed during every attempt of this join; retry") from None
            reserve = max(reserve, 2 * slowest)
            deadline.sleep(deadline.backoff(attempt, max(_MIN_BACKOFF, slowest)), reserve)
            continue
        observe.decision(
            "cluster node joined",
            "ClusterJoins",
            "joined",
            nodeId=go_trim_space(request.node_id),
            attempts=attempt + 1,
        )
        return "node_added_to_cluster", request.echo()


def _decide(pool: PoolRecord, request: AcceptJoin) -> _Decision:
    """The leader's checks in Sylve's order: version, address, the joiner's own inventory,
    membership, then its claims against the registry."""
    required = go_trim_space(pool.cluster.required_node_version or "" if pool.cluster else "")
    offered = go_trim_space(request.node_version)
    if offered == "" or (required and offered != required):
        raise sylve_wire.version_mismatch(required, offered)
    address = _address(request.node_ip)
    node_id = go_trim_space(request.node_id)
    joiner = _joiner_report(node_id, request)
    nodes, buckets = _snapshot(pool.tenant_id, pool.pool_id)
    member = _member(nodes, node_id, address)
    _check_claims(node_id, joiner, buckets, member is not None)
    if member is not None or request.preflight:
        return _Decision(node_id, joiner, buckets)
    node, changed = _join(pool, node_id, address, offered, joiner, buckets)
    return _Decision(node_id, joiner, buckets, node, changed)


def _address(node_ip: str) -> str:
    """Sylve's normalizeClusterIPv4: Sylve clusters speak IPv4 (an IPv4-mapped IPv6 counts)."""
    ip = sylve_wire.go_parse_ip(go_trim_space(node_ip))
    if ip is None:
        raise sylve_wire.preflight_failed("invalid_joining_node_ip")
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is None:
            raise sylve_wire.join_failed("cluster_ipv6_unsupported")
        return str(ip.ipv4_mapped)
    return str(ip)


def _joiner_report(node_id: str, request: AcceptJoin) -> InventoryReport:
    """The joiner's report rebuilt from its entries; its own digest and conflicts are not trusted."""
    if node_id == "":
        raise sylve_wire.preflight_failed("joining_node_id_required")
    entries = request.entries
    for entry in entries:
        owner = go_trim_space(entry.nodeId)
        if owner != node_id:
            raise sylve_wire.preflight_failed(
                f"joining_inventory_node_mismatch: expected={node_id} actual={owner}"
            )
    report = inventory.build_report(entries)
    if go_trim_space(request.digest) == "" or request.digest != report.digest:
        raise sylve_wire.preflight_failed("joining_inventory_digest_mismatch")
    if report.conflicts:
        raise sylve_wire.inventory_conflict(report)
    return report


def _snapshot(tenant_id: str, pool_id: str) -> tuple[list[ClusterNodeRecord], dict[int, GuestBucketRecord]]:
    """Members and guest items as of one moment. They are read in separate calls, and a join that
    commits in between would show its claims without its node (a retry of that very join would then
    look like a conflict with itself). Every commit inserts a node item, so members read the same
    before and after the guest items means nothing committed in between."""
    busy = Unavailable("the cluster changed during every read of this join; retry")
    for _ in deadline.attempts(MAX_ATTEMPTS, exhausted=busy, backoff=(_MIN_BACKOFF, _MAX_BACKOFF)):
        nodes = clusters_db.nodes(tenant_id, pool_id)
        buckets = clusters_db.buckets(tenant_id, pool_id)
        if [n.node_id for n in clusters_db.nodes(tenant_id, pool_id)] == [n.node_id for n in nodes]:
            return nodes, buckets
    raise AssertionError("unreachable: attempts() raises when exhausted")


def _member(nodes: list[ClusterNodeRecord], node_id: str, address: str) -> ClusterNodeRecord | None:
    """Sylve's resolveJoinMembership over the members in join order (a Raft configuration's)."""
    for node in sorted(nodes, key=lambda n: (n.joined_at, n.node_id)):
        if node.node_id == node_id:
            if node.node_ip == address:
                return node
            raise sylve_wire.preflight_failed("joining_node_id_already_in_use")
        if node.node_ip == address:
            raise sylve_wire.preflight_failed("joining_node_address_already_in_use")
    return None


def _registry(buckets: dict[int, GuestBucketRecord]) -> list[InventoryEntry]:
    """Every claim as a registry entry (recordId 0, no name), as a Sylve leader reports them."""
    return [
        InventoryEntry.model_construct(nodeId=node, guestType=kind, guestId=guest_id, recordId=0, name="")
        for bucket in buckets.values()
        for guest_id, (kind, node) in bucket.claims.items()
    ]


def _check_claims(
    node_id: str, joiner: InventoryReport, buckets: dict[int, GuestBucketRecord], member: bool
) -> None:
    """Sylve's validateJoinInventoryAgainstClaims. A member's claims were committed with it, so a
    member is Sylve's voter: it may repeat its join, but not with a different inventory. Looks up
    only the joiner's own IDs; the full registry is built only to report a conflict."""
    for entry in joiner.entries:
        bucket = buckets.get(clusters_db.bucket_of(entry.guestId))
        claim = bucket.claims.get(entry.guestId) if bucket else None
        if claim is None:
            if member:
                raise sylve_wire.preflight_failed("joining_inventory_changed_for_existing_voter")
            continue
        kind, owner = claim
        if not (member and owner == node_id and kind == entry.guestType):
            raise sylve_wire.inventory_conflict(inventory.merge(joiner, _registry(buckets)))
    owned = sum(1 for bucket in buckets.values() for _, owner in bucket.claims.values() if owner == node_id)
    if owned != len(joiner.entries) and (member or owned):
        raise sylve_wire.preflight_failed("joining_inventory_changed_for_existing_member")


def _join(
    pool: PoolRecord,
    node_id: str,
    address: str,
    version: str,
    joiner: InventoryReport,
    buckets: dict[int, GuestBucketRecord],
) -> tuple[ClusterNodeRecord, tuple[GuestBucketRecord, ...]]:
    """The new member and every guest item its claims change, each one version on from as read."""
    now = clock.rfc3339(clock.now())
    node = ClusterNodeRecord(
        tenant_id=pool.tenant_id,
        site_id=pool.site_id,
        pool_id=pool.pool_id,
        node_id=node_id,
        node_ip=address,
        node_version=version,
        digest=joiner.digest,
        guest_count=len(joiner.entries),
        joined_at=now,
    )
    touched: dict[int, list[InventoryEntry]] = {}
    for entry in joiner.entries:
        touched.setdefault(clusters_db.bucket_of(entry.guestId), []).append(entry)
    changed = []
    for number, entries in sorted(touched.items()):
        current = buckets.get(number)
        claims = dict(current.claims) if current else {}
        claims.update({e.guestId: (e.guestType, node_id) for e in entries})
        version_read = current.version if current else 0
        changed.append(GuestBucketRecord(pool.tenant_id, pool.pool_id, number, version_read + 1, claims, now))
    return node, tuple(changed)


# --- operator routes ----------------------------------------------------------------------------


class RotateClusterKey(pools.PoolRef):
    """Issue the pool a new cluster key (`jck_...`, shown once); the previous one stops working."""


class ListClusterNodes(pools.PoolRef):
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, min_length=1, max_length=128)


class ListClusterGuests(pools.PoolRef):
    nodeId: str | None = Field(default=None, min_length=1, max_length=128)
    limit: int = Field(default=100, ge=1, le=200)
    cursor: int | None = Field(default=None, ge=0, le=inventory.GUEST_ID_MAX)


def rotate_key(principal: Principal, request: RotateClusterKey) -> views.ClusterKeyRotated:
    """Issue a new key and retire the one the pool named, in one transaction (see
    `clusters_db.rotate_key`); a concurrent rotation or archive makes this one look again."""
    busy = Unavailable("the pool's cluster key kept changing; retry")
    for _ in deadline.attempts(3, exhausted=busy, backoff=(0.02, _MAX_BACKOFF)):
        pool = pools.load(principal, request.tenantId, request.poolId, WRITE)
        if not pool.active:
            raise InvalidState(
                "pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED
            )
        ulid = ids.new_ulid()
        key_id, secret = f"{KEY_ID_PREFIX}_{ulid}", credentials.mint(KEY_PREFIX, ulid)
        now = clock.now()
        key = ClusterKeyRecord(
            key_id=key_id,
            tenant_id=pool.tenant_id,
            pool_id=pool.pool_id,
            site_id=pool.site_id,
            secret_sha256=credentials.digest(secret),
            state="active",
            created_at=clock.rfc3339(now),
            created_by=principal.key_id,
        )
        try:
            clusters_db.rotate_key(pool, key, rotated_ttl=clock.seconds(now) + ROTATED_KEY_TTL)
        except clusters_db.Contended:
            continue  # rotated or archived meanwhile, or a transaction in flight: look again
        return {
            "tenantId": pool.tenant_id,
            "poolId": pool.pool_id,
            "clusterKeyId": key_id,
            "clusterKey": secret,
            "rotatedAt": key.created_at,
        }
    raise AssertionError("unreachable: attempts() raises when exhausted")


def node_view(node: ClusterNodeRecord) -> views.ClusterNode:
    return {
        "nodeId": node.node_id,
        "nodeIp": node.node_ip,
        "nodeVersion": node.node_version,
        "digest": node.digest,
        "guestCount": node.guest_count,
        "joinedAt": node.joined_at,
    }


def list_nodes(principal: Principal, request: ListClusterNodes) -> views.ClusterNodeList:
    """Members in nodeId order; `nextCursor` (the last nodeId) while more may follow."""
    pools.load(principal, request.tenantId, request.poolId, READ)
    page = clusters_db.list_nodes(request.tenantId, request.poolId, after=request.cursor, limit=request.limit)
    result: views.ClusterNodeList = {"nodes": [node_view(node) for node in page.nodes]}
    if page.more and page.nodes:
        result["nextCursor"] = page.nodes[-1].node_id
    return result


def list_guests(principal: Principal, request: ListClusterGuests) -> views.ClusterGuestList:
    """The registry's claims in guestId order, optionally of one node; `nextCursor` is the last
    guestId of the page. Queries guest items a few at a time until the page is full."""
    pools.load(principal, request.tenantId, request.poolId, READ)
    start = 0 if request.cursor is None else request.cursor + 1
    first = clusters_db.bucket_of(start)
    guests: list[views.ClusterGuest] = []
    after: dict[str, Any] | None = None
    while len(guests) <= request.limit:
        page = clusters_db.list_buckets(
            request.tenantId, request.poolId, first=first, limit=4, start_after=after
        )
        for bucket in page.buckets:
            for guest_id in sorted(bucket.claims):
                kind, node = bucket.claims[guest_id]
                if guest_id >= start and request.nodeId in (None, node):
                    guests.append({"guestId": guest_id, "guestType": kind, "nodeId": node})
        if page.last_key is None:
            break
        after = page.last_key
    result: views.ClusterGuestList = {"guests": guests[: request.limit]}
    if len(guests) > request.limit:
        result["nextCursor"] = guests[request.limit - 1]["guestId"]
    return result

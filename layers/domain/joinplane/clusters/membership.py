"""Clusters: a compute pool with a cluster key, its member nodes and its guest-identity registry,
and Sylve's `POST /cluster/accept-join` decided against them as a Sylve leader would.

Items (the one table; store.py is the only module that talks to it):
- key      `CLUSTERKEY#<keyId>` / `CLUSTERKEY`: keyId, tenantId, poolId, siteId, secretSha256,
           state (`active`|`rotated`), createdAt, and once rotated rotatedAt and a `ttl`. The pool
           item names its current key in `clusterKeyId`; a rotation writes the new key item,
           repoints the pool and marks the old key item rotated in one transaction.
- node     `CLUSTERNODE#<tenantId>#<poolId>` / `NODE#<nodeId>`: tenantId, siteId, poolId, nodeId,
           nodeIp, nodeVersion, digest, guestCount, joinedAt. Put once, when the node joins: its
           stream INSERT is the `security.cluster.node-joined` event.
- address  `CLUSTER#<tenantId>#<poolId>` / `ADDR#<nodeIp>`: nodeId. One member per address.
- guests   `CLUSTER#<tenantId>#<poolId>` / `GUESTS#<nn>`: the claims on guest IDs nn*200 to
           nn*200+199: `nodes` (the node IDs they name, a list) and `claims`, a string of
           `<guestId>:<v|j>:<index into nodes>` joined by "," in guestId order, e.g.
           `"7:v:0,8:j:0,9:v:1"`; and a `version`, bumped by every write.

Why guest IDs are packed 200 to an item: a join must commit the node and every guest ID it brings
all-or-nothing, and a cluster can hold 9,999 guests (Sylve's ID space, shared by VMs and jails),
far more than the 100 actions of one transaction if each ID were its own item. With 200 IDs per
item the whole ID space is 50 items, so one TransactWriteItems holds the node, its address, every
guest item the join touches (each put whole, conditioned on the version it was read at) and a check
of the pool: at most 53 actions. Each node ID is stored once per guest item, so a full guest item is
at most 200 node IDs of 128 bytes plus 200 claims of at most 12 bytes, ~28 KB (limit 400 KB), and the
largest possible transaction, all 50 items full, ~1.4 MB (limit 4 MB), whatever the node IDs
contain. tests/clusters/test_cluster_scale.py holds the real writes to those bounds.

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
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from joinplane import clock, credentials, deadline, ids, pools, store
from joinplane.clusters import inventory, sylve_wire
from joinplane.clusters.inventory import InventoryEntry, InventoryReport
from joinplane.clusters.sylve_wire import AcceptJoin, go_trim_space
from joinplane.errors import InvalidState, Unavailable
from joinplane.grants import Principal

if TYPE_CHECKING:
    from joinplane import views

logger = logging.getLogger("joinplane")

KEY_PREFIX = "jck"
KEY_ID_PREFIX = "ckey"
READ, WRITE = "compute:clusters:read", "compute:clusters:write"
BUCKET_WIDTH = 200
BUCKETS = inventory.GUEST_ID_MAX // BUCKET_WIDTH + 1
# Without a deadline (no Lambda context) a loop stops after this many attempts; with one, only
# the time left stops it.
MAX_ATTEMPTS = 12
_MIN_BACKOFF = 0.005
ROTATED_KEY_TTL = 35 * 86_400
_RETRYABLE = frozenset({"None", "ConditionalCheckFailed", "TransactionConflict"})


def key_key(key_id: str) -> tuple[str, str]:
    return f"CLUSTERKEY#{key_id}", "CLUSTERKEY"


def node_pk(tenant_id: str, pool_id: str) -> str:
    return f"CLUSTERNODE#{tenant_id}#{pool_id}"


def registry_pk(tenant_id: str, pool_id: str) -> str:
    return f"CLUSTER#{tenant_id}#{pool_id}"


def bucket_key(tenant_id: str, pool_id: str, number: int) -> tuple[str, str]:
    return registry_pk(tenant_id, pool_id), f"GUESTS#{number:02d}"


# --- accept-join ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """The pool a cluster key opened, as read when the key was checked."""

    pool: dict[str, Any]
    key_id: str


def authenticate(secret: str) -> Cluster:
    """The pool whose current cluster key this is: one GetItem by the id the key carries, a
    constant-time digest comparison, then the pool (which must still name this key)."""
    parsed = credentials.parse(secret, KEY_PREFIX)
    if parsed is None:
        raise sylve_wire.unauthorized()
    key_id = f"{KEY_ID_PREFIX}_{parsed.ulid}"
    item = store.get(*key_key(key_id))
    if item is None or not credentials.matches(secret, item["secretSha256"]) or item.get("state") != "active":
        raise sylve_wire.unauthorized()
    return Cluster(_keyed_pool(item["tenantId"], item["poolId"], key_id), key_id)


def _keyed_pool(tenant_id: str, pool_id: str, key_id: str) -> dict[str, Any]:
    pool = store.get(*pools.pool_key(tenant_id, pool_id))
    # An archived pool takes no joins; its key stops working like a disabled Sylve cluster's.
    if pool is None or pool.get("clusterKeyId") != key_id or pool["state"] != "active":
        raise sylve_wire.unauthorized()
    return pool


@dataclass(frozen=True)
class _Decision:
    node_id: str
    joiner: InventoryReport
    buckets: dict[int, _Bucket]
    writes: list[store.Write]

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
            pool = _keyed_pool(pool["tenantId"], pool["poolId"], cluster.key_id)
        decision = _decide(pool, cluster.key_id, request)
        if request.preflight:
            return "cluster_join_preflight_passed", decision.report()
        if not decision.writes:
            return "node_added_to_cluster", request.echo()
        try:
            # A TransactionConflict is retried here, under the deadline, not inside store.
            store.transact(decision.writes, conflict_retries=0)
        except store.TransactionCanceled as canceled:
            if not set(canceled.reasons) <= _RETRYABLE:
                reasons = ", ".join(canceled.reasons)
                raise Unavailable(f"the registry could not be written ({reasons})") from None
            # Something this join decided on changed: read again, decide again.
            slowest = max(slowest, time.monotonic() - started)
            attempt += 1
            if attempt >= MAX_ATTEMPTS and deadline.remaining() == math.inf:
                raise Unavailable("the cluster changed during every attempt of this join; retry") from None
            reserve = max(reserve, 2 * slowest)
            deadline.sleep(deadline.backoff(attempt, max(_MIN_BACKOFF, slowest)), reserve)
            continue
        logger.info(
            "cluster node joined: %s/%s node %r after %d attempt(s)",
            pool["tenantId"],
            pool["poolId"],
            go_trim_space(request.node_id),
            attempt + 1,
        )
        return "node_added_to_cluster", request.echo()


def _decide(pool: dict[str, Any], key_id: str, request: AcceptJoin) -> _Decision:
    """The leader's checks in Sylve's order: version, address, the joiner's own inventory,
    membership, then its claims against the registry."""
    required = go_trim_space(str((pool.get("cluster") or {}).get("requiredNodeVersion") or ""))
    offered = go_trim_space(request.node_version)
    if offered == "" or (required and offered != required):
        raise sylve_wire.version_mismatch(required, offered)
    address = _address(request.node_ip)
    node_id = go_trim_space(request.node_id)
    joiner = _joiner_report(node_id, request)
    nodes, buckets = _snapshot(pool["tenantId"], pool["poolId"])
    member = _member(nodes, node_id, address)
    _check_claims(node_id, joiner, buckets, member is not None)
    if member is not None or request.preflight:
        return _Decision(node_id, joiner, buckets, [])
    writes = _join_writes(pool, key_id, node_id, address, offered, joiner, buckets)
    return _Decision(node_id, joiner, buckets, writes)


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


def _snapshot(tenant_id: str, pool_id: str) -> tuple[list[dict[str, Any]], dict[int, _Bucket]]:
    """Members and guest items as of one moment. They are read in separate calls, and a join that
    commits in between would show its claims without its node (a retry of that very join would then
    look like a conflict with itself). Every commit inserts a node item, so members read the same
    before and after the guest items means nothing committed in between."""
    for attempt in range(MAX_ATTEMPTS):
        if attempt:
            deadline.sleep(deadline.backoff(attempt, _MIN_BACKOFF))
        else:
            deadline.check()
        nodes = _nodes(tenant_id, pool_id)
        buckets = _buckets(tenant_id, pool_id)
        if [n["sk"] for n in _nodes(tenant_id, pool_id)] == [n["sk"] for n in nodes]:
            return nodes, buckets
    raise Unavailable("the cluster changed during every read of this join; retry")


def _nodes(tenant_id: str, pool_id: str) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    after: dict[str, Any] | None = None
    while True:
        page = store.query(pk=node_pk(tenant_id, pool_id), start_after=after, consistent=True)
        nodes += page.items
        if page.last_key is None:
            return nodes
        after = page.last_key


def _member(nodes: list[dict[str, Any]], node_id: str, address: str) -> dict[str, Any] | None:
    """Sylve's resolveJoinMembership over the members in join order (a Raft configuration's)."""
    for node in sorted(nodes, key=lambda n: (n["joinedAt"], n["nodeId"])):
        if node["nodeId"] == node_id:
            if node["nodeIp"] == address:
                return node
            raise sylve_wire.preflight_failed("joining_node_id_already_in_use")
        if node["nodeIp"] == address:
            raise sylve_wire.preflight_failed("joining_node_address_already_in_use")
    return None


@dataclass(frozen=True)
class _Bucket:
    version: int
    claims: dict[int, tuple[str, str]]  # guestId -> (guestType, nodeId)


_KIND_CODES = {"vm": "v", "jail": "j"}
_KINDS = {code: kind for kind, code in _KIND_CODES.items()}


def _decode_bucket(item: dict[str, Any]) -> _Bucket:
    nodes = item["nodes"]
    claims = {}
    for claim in item["claims"].split(",") if item["claims"] else []:
        guest_id, code, index = claim.split(":")
        claims[int(guest_id)] = (_KINDS[code], nodes[int(index)])
    return _Bucket(int(item["version"]), claims)


def _encode_claims(claims: dict[int, tuple[str, str]]) -> dict[str, Any]:
    nodes: dict[str, int] = {}
    encoded = []
    for guest_id in sorted(claims):
        kind, node = claims[guest_id]
        encoded.append(f"{guest_id}:{_KIND_CODES[kind]}:{nodes.setdefault(node, len(nodes))}")
    return {"nodes": list(nodes), "claims": ",".join(encoded)}


def _buckets(tenant_id: str, pool_id: str) -> dict[int, _Bucket]:
    keys = [bucket_key(tenant_id, pool_id, number) for number in range(BUCKETS)]
    found = store.batch_get(keys)
    return {number: _decode_bucket(found[k]) for number, k in enumerate(keys) if k in found}


def _registry(buckets: dict[int, _Bucket]) -> list[InventoryEntry]:
    """Every claim as a registry entry (recordId 0, no name), as a Sylve leader reports them."""
    return [
        InventoryEntry.model_construct(nodeId=node, guestType=kind, guestId=guest_id, recordId=0, name="")
        for bucket in buckets.values()
        for guest_id, (kind, node) in bucket.claims.items()
    ]


def _check_claims(node_id: str, joiner: InventoryReport, buckets: dict[int, _Bucket], member: bool) -> None:
    """Sylve's validateJoinInventoryAgainstClaims. A member's claims were committed with it, so a
    member is Sylve's voter: it may repeat its join, but not with a different inventory. Looks up
    only the joiner's own IDs; the full registry is built only to report a conflict."""
    for entry in joiner.entries:
        bucket = buckets.get(entry.guestId // BUCKET_WIDTH)
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


def _join_writes(
    pool: dict[str, Any],
    key_id: str,
    node_id: str,
    address: str,
    version: str,
    joiner: InventoryReport,
    buckets: dict[int, _Bucket],
) -> list[store.Write]:
    tenant_id, pool_id = pool["tenantId"], pool["poolId"]
    now = clock.rfc3339(clock.now())
    node = {
        "pk": node_pk(tenant_id, pool_id),
        "sk": f"NODE#{node_id}",
        "tenantId": tenant_id,
        "siteId": pool["siteId"],
        "poolId": pool_id,
        "nodeId": node_id,
        "nodeIp": address,
        "nodeVersion": version,
        "digest": joiner.digest,
        "guestCount": len(joiner.entries),
        "joinedAt": now,
    }
    writes = [
        store.Write("Put", item=node, condition="attribute_not_exists(pk)"),
        store.Write(
            "Put",
            item={
                "pk": registry_pk(tenant_id, pool_id),
                "sk": f"ADDR#{address}",
                "tenantId": tenant_id,
                "poolId": pool_id,
                "nodeIp": address,
                "nodeId": node_id,
            },
            condition="attribute_not_exists(pk)",
        ),
    ]
    touched: dict[int, list[InventoryEntry]] = {}
    for entry in joiner.entries:
        touched.setdefault(entry.guestId // BUCKET_WIDTH, []).append(entry)
    for number, entries in sorted(touched.items()):
        current = buckets.get(number)
        claims = dict(current.claims) if current else {}
        claims.update({e.guestId: (e.guestType, node_id) for e in entries})
        pk, sk = bucket_key(tenant_id, pool_id, number)
        item = {
            "pk": pk,
            "sk": sk,
            "tenantId": tenant_id,
            "poolId": pool_id,
            **_encode_claims(claims),
            "version": current.version + 1 if current else 1,
            "updatedAt": now,
        }
        if current:
            writes.append(
                store.Write("Put", item=item, condition="version = :v", values={":v": current.version})
            )
        else:
            writes.append(store.Write("Put", item=item, condition="attribute_not_exists(pk)"))
    writes.append(
        store.Write(
            "ConditionCheck",
            *pools.pool_key(tenant_id, pool_id),
            condition="#state = :active AND version = :version AND clusterKeyId = :key",
            names={"#state": "state"},
            values={":active": "active", ":version": pool["version"], ":key": key_id},
        )
    )
    return writes


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
    """One transaction: the new key item, the pool repointed (conditioned on the key it named, so
    concurrent rotations serialise), the old key item deleted."""
    for attempt in range(3):
        if attempt:
            deadline.sleep(deadline.backoff(attempt, 0.02))
        else:
            deadline.check()
        pool = pools.load(principal, request.tenantId, request.poolId, WRITE)
        if pool["state"] != "active":
            raise InvalidState("pool is archived; archived pools cannot be changed")
        ulid = ids.new_ulid()
        key_id, secret = f"{KEY_ID_PREFIX}_{ulid}", credentials.mint(KEY_PREFIX, ulid)
        now = clock.rfc3339(clock.now())
        previous = pool.get("clusterKeyId")
        pk, sk = key_key(key_id)
        values: dict[str, Any] = {":key": key_id, ":now": now, ":active": "active"}
        if previous:
            values[":previous"] = previous
        writes = [
            store.Write(
                "Put",
                item={
                    "pk": pk,
                    "sk": sk,
                    "keyId": key_id,
                    "tenantId": pool["tenantId"],
                    "poolId": pool["poolId"],
                    "siteId": pool["siteId"],
                    "secretSha256": credentials.digest(secret),
                    "state": "active",
                    "createdAt": now,
                },
                condition="attribute_not_exists(pk)",
            ),
            store.Write(
                "Update",
                *pools.pool_key(pool["tenantId"], pool["poolId"]),
                update="SET clusterKeyId = :key, clusterKeyRotatedAt = :now",
                condition="#state = :active AND "
                + ("clusterKeyId = :previous" if previous else "attribute_not_exists(clusterKeyId)"),
                names={"#state": "state"},
                values=values,
            ),
        ]
        if previous:
            # Kept (not deleted) until its TTL so the audit can tell a rotated key from a forged
            # one; it opens nothing either way, since the pool names only the new key.
            writes.append(
                store.Write(
                    "Update",
                    *key_key(previous),
                    update="SET #state = :rotated, rotatedAt = :now, #ttl = :ttl",
                    condition="attribute_exists(pk)",
                    names={"#state": "state", "#ttl": "ttl"},
                    values={":rotated": "rotated", ":now": now, ":ttl": int(clock.epoch()) + ROTATED_KEY_TTL},
                )
            )
        try:
            store.transact(writes, conflict_retries=0)
        except store.TransactionCanceled:
            continue  # rotated or archived meanwhile, or a transaction in flight: look again
        return {
            "tenantId": pool["tenantId"],
            "poolId": pool["poolId"],
            "clusterKeyId": key_id,
            "clusterKey": secret,
            "rotatedAt": now,
        }
    raise Unavailable("the pool's cluster key kept changing; retry")


def node_view(item: dict[str, Any]) -> views.ClusterNode:
    return {
        "nodeId": item["nodeId"],
        "nodeIp": item["nodeIp"],
        "nodeVersion": item["nodeVersion"],
        "digest": item["digest"],
        "guestCount": item["guestCount"],
        "joinedAt": item["joinedAt"],
    }


def list_nodes(principal: Principal, request: ListClusterNodes) -> views.ClusterNodeList:
    """Members in nodeId order; `nextCursor` (the last nodeId) while more may follow."""
    pools.load(principal, request.tenantId, request.poolId, READ)
    pk = node_pk(request.tenantId, request.poolId)
    if request.cursor is not None:
        page = store.query(pk=pk, sk_after=f"NODE#{request.cursor}", limit=request.limit, consistent=True)
    else:
        page = store.query(pk=pk, sk_prefix="NODE#", limit=request.limit, consistent=True)
    result: views.ClusterNodeList = {"nodes": [node_view(item) for item in page.items]}
    if page.last_key is not None and page.items:
        result["nextCursor"] = page.items[-1]["nodeId"]
    return result


def list_guests(principal: Principal, request: ListClusterGuests) -> views.ClusterGuestList:
    """The registry's claims in guestId order, optionally of one node; `nextCursor` is the last
    guestId of the page. Queries guest items a few at a time until the page is full."""
    pools.load(principal, request.tenantId, request.poolId, READ)
    start = 0 if request.cursor is None else request.cursor + 1
    pk = registry_pk(request.tenantId, request.poolId)
    first = start // BUCKET_WIDTH
    guests: list[views.ClusterGuest] = []
    after: dict[str, Any] | None = None
    while len(guests) <= request.limit:
        if first:
            page = store.query(
                pk=pk, sk_after=f"GUESTS#{first - 1:02d}", limit=4, start_after=after, consistent=True
            )
        else:
            page = store.query(pk=pk, sk_prefix="GUESTS#", limit=4, start_after=after, consistent=True)
        for item in page.items:
            bucket = _decode_bucket(item)
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

"""Clusters in the table: cluster keys, member nodes and the guest-identity registry.

- key      `CLUSTERKEY#<keyId>` / `CLUSTERKEY`: keyId, tenantId, poolId, siteId, secretSha256,
           state (`active`|`rotated`), createdAt, createdBy (the API key that issued it),
           previousKeyId (the key it replaced), and once rotated rotatedAt and a `ttl`. Its stream
           INSERT is the `security.cluster-key.rotated` event. The pool
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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item
from joinplane.errors import Unavailable

if TYPE_CHECKING:
    from joinplane.dal.pools import PoolRecord

BUCKET_WIDTH = 200


class ClusterKeyRecord(NamedTuple):
    key_id: str
    tenant_id: str
    pool_id: str
    site_id: str
    secret_sha256: str
    state: str  # "active" | "rotated"
    created_at: str
    rotated_at: str | None = None
    ttl: int | None = None
    created_by: str | None = None  # the operator API key that issued it
    previous_key_id: str | None = None  # the key this one replaced (None: the pool's first)

    @classmethod
    def from_item(cls, item: Item) -> ClusterKeyRecord:
        return cls(
            key_id=item["keyId"],
            tenant_id=item["tenantId"],
            pool_id=item["poolId"],
            site_id=item["siteId"],
            secret_sha256=item["secretSha256"],
            state=item.get("state", ""),
            created_at=item["createdAt"],
            rotated_at=item.get("rotatedAt"),
            ttl=item.get("ttl"),
            created_by=item.get("createdBy"),
            previous_key_id=item.get("previousKeyId"),
        )

    def to_item(self) -> Item:
        pk, sk = key_key(self.key_id)
        return {
            "pk": pk,
            "sk": sk,
            "keyId": self.key_id,
            "tenantId": self.tenant_id,
            "poolId": self.pool_id,
            "siteId": self.site_id,
            "secretSha256": self.secret_sha256,
            "state": self.state,
            "createdAt": self.created_at,
            "rotatedAt": self.rotated_at,
            "ttl": self.ttl,
            "createdBy": self.created_by,
            "previousKeyId": self.previous_key_id,
        }


class ClusterNodeRecord(NamedTuple):
    tenant_id: str
    site_id: str
    pool_id: str
    node_id: str
    node_ip: str
    node_version: str
    digest: str
    guest_count: int
    joined_at: str

    @classmethod
    def from_item(cls, item: Item) -> ClusterNodeRecord:
        return cls(
            tenant_id=item["tenantId"],
            site_id=item["siteId"],
            pool_id=item["poolId"],
            node_id=item["nodeId"],
            node_ip=item["nodeIp"],
            node_version=item["nodeVersion"],
            digest=item["digest"],
            guest_count=int(item["guestCount"]),
            joined_at=item["joinedAt"],
        )

    def to_item(self) -> Item:
        return {
            "pk": node_pk(self.tenant_id, self.pool_id),
            "sk": f"NODE#{self.node_id}",
            "tenantId": self.tenant_id,
            "siteId": self.site_id,
            "poolId": self.pool_id,
            "nodeId": self.node_id,
            "nodeIp": self.node_ip,
            "nodeVersion": self.node_version,
            "digest": self.digest,
            "guestCount": self.guest_count,
            "joinedAt": self.joined_at,
        }

    def address_item(self) -> Item:
        """The item that keeps one member per address."""
        return {
            "pk": registry_pk(self.tenant_id, self.pool_id),
            "sk": f"ADDR#{self.node_ip}",
            "tenantId": self.tenant_id,
            "poolId": self.pool_id,
            "nodeIp": self.node_ip,
            "nodeId": self.node_id,
        }


_KIND_CODES = {"vm": "v", "jail": "j"}
_KINDS = {code: kind for kind, code in _KIND_CODES.items()}


class GuestBucketRecord(NamedTuple):
    """The claims on guest IDs number*200 to number*200+199. Version n is written only over
    version n-1 (version 1 only where there was none): that is how concurrent joins serialise."""

    tenant_id: str
    pool_id: str
    number: int
    version: int
    claims: dict[int, tuple[str, str]]  # guestId -> (guestType, nodeId)
    updated_at: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> GuestBucketRecord:
        nodes = item["nodes"]
        claims = {}
        for claim in item["claims"].split(",") if item["claims"] else []:
            guest_id, code, index = claim.split(":")
            claims[int(guest_id)] = (_KINDS[code], nodes[int(index)])
        return cls(
            tenant_id=item.get("tenantId", ""),
            pool_id=item.get("poolId", ""),
            number=int(item["sk"].removeprefix("GUESTS#")),
            version=int(item["version"]),
            claims=claims,
            updated_at=item.get("updatedAt"),
        )

    def to_item(self) -> Item:
        pk, sk = bucket_key(self.tenant_id, self.pool_id, self.number)
        nodes: dict[str, int] = {}
        encoded = []
        for guest_id in sorted(self.claims):
            kind, node = self.claims[guest_id]
            encoded.append(f"{guest_id}:{_KIND_CODES[kind]}:{nodes.setdefault(node, len(nodes))}")
        return {
            "pk": pk,
            "sk": sk,
            "tenantId": self.tenant_id,
            "poolId": self.pool_id,
            "nodes": list(nodes),
            "claims": ",".join(encoded),
            "version": self.version,
            "updatedAt": self.updated_at,
        }


def key_key(key_id: str) -> tuple[str, str]:
    return f"CLUSTERKEY#{key_id}", "CLUSTERKEY"


def node_pk(tenant_id: str, pool_id: str) -> str:
    return f"CLUSTERNODE#{tenant_id}#{pool_id}"


def registry_pk(tenant_id: str, pool_id: str) -> str:
    return f"CLUSTER#{tenant_id}#{pool_id}"


def bucket_key(tenant_id: str, pool_id: str, number: int) -> tuple[str, str]:
    return registry_pk(tenant_id, pool_id), f"GUESTS#{number:02d}"


def bucket_of(guest_id: int) -> int:
    return guest_id // BUCKET_WIDTH


# --- reads ---------------------------------------------------------------------------------------


def get_key(key_id: str) -> ClusterKeyRecord | None:
    item = dynamo.get(*key_key(key_id))
    return ClusterKeyRecord.from_item(item) if item else None


def nodes(tenant_id: str, pool_id: str) -> list[ClusterNodeRecord]:
    """Every member, in nodeId order (every page)."""
    found: list[ClusterNodeRecord] = []
    after: Item | None = None
    while True:
        page = dynamo.query(pk=node_pk(tenant_id, pool_id), start_after=after, consistent=True)
        found += [ClusterNodeRecord.from_item(item) for item in page.items]
        if page.last_key is None:
            return found
        after = page.last_key


def buckets(tenant_id: str, pool_id: str) -> dict[int, GuestBucketRecord]:
    """Every guest item of the cluster, by number: one strongly consistent Query over its guest
    items (every page). A BatchGetItem of all 50 possible numbers was billed for each, absent
    ones too (50 RRU for a new cluster); the Query is billed for what exists (1 RRU per 4 KB)."""
    found: dict[int, GuestBucketRecord] = {}
    after: Item | None = None
    while True:
        page = dynamo.query(
            pk=registry_pk(tenant_id, pool_id), sk_prefix="GUESTS#", start_after=after, consistent=True
        )
        for item in page.items:
            bucket = GuestBucketRecord.from_item(item)
            found[bucket.number] = bucket
        if page.last_key is None:
            return found
        after = page.last_key


class NodePage(NamedTuple):
    nodes: list[ClusterNodeRecord]
    more: bool  # a page may follow


def list_nodes(tenant_id: str, pool_id: str, *, after: str | None, limit: int) -> NodePage:
    """One page of members in nodeId order, after the node `after`."""
    pk = node_pk(tenant_id, pool_id)
    if after is not None:
        page = dynamo.query(pk=pk, sk_after=f"NODE#{after}", limit=limit, consistent=True)
    else:
        page = dynamo.query(pk=pk, sk_prefix="NODE#", limit=limit, consistent=True)
    return NodePage([ClusterNodeRecord.from_item(item) for item in page.items], page.last_key is not None)


class BucketPage(NamedTuple):
    buckets: list[GuestBucketRecord]
    last_key: Item | None  # where the next page starts (None: no more guest items)


def list_buckets(
    tenant_id: str, pool_id: str, *, first: int, limit: int, start_after: Item | None
) -> BucketPage:
    """Up to `limit` guest items in number order, from the item `first`, continuing after
    `start_after` (a previous page's `last_key`)."""
    pk = registry_pk(tenant_id, pool_id)
    if first:
        page = dynamo.query(
            pk=pk, sk_after=f"GUESTS#{first - 1:02d}", limit=limit, start_after=start_after, consistent=True
        )
    else:
        page = dynamo.query(pk=pk, sk_prefix="GUESTS#", limit=limit, start_after=start_after, consistent=True)
    return BucketPage([GuestBucketRecord.from_item(item) for item in page.items], page.last_key)


# --- writes --------------------------------------------------------------------------------------


class Contended(Exception):
    """A transaction lost: something it was conditioned on changed, or another transaction was in
    flight on its items. Nothing was written; reading again and deciding again may succeed."""


def join_writes(
    pool: PoolRecord, key_id: str, node: ClusterNodeRecord, changed: Sequence[GuestBucketRecord]
) -> list[dynamo.Write]:
    """A join's commit: the node and its address (both new), each guest item it changes (put whole
    over the version it was read at), and the pool still active, unchanged and opened by this key."""
    writes = [
        dynamo.Write("Put", item=node.to_item(), condition="attribute_not_exists(pk)", name="node"),
        dynamo.Write("Put", item=node.address_item(), condition="attribute_not_exists(pk)", name="address"),
    ]
    for bucket in changed:
        if bucket.version > 1:
            writes.append(
                dynamo.Write(
                    "Put",
                    item=bucket.to_item(),
                    condition="version = :v",
                    values={":v": bucket.version - 1},
                    name="guests",
                    subject=bucket.number,
                )
            )
        else:
            writes.append(
                dynamo.Write(
                    "Put",
                    item=bucket.to_item(),
                    condition="attribute_not_exists(pk)",
                    name="guests",
                    subject=bucket.number,
                )
            )
    pk, sk = _pool_key(pool)
    writes.append(
        dynamo.Write(
            "ConditionCheck",
            pk=pk,
            sk=sk,
            condition="#state = :active AND version = :version AND clusterKeyId = :key",
            names={"#state": "state"},
            values={":active": "active", ":version": pool.version, ":key": key_id},
            name="pool",
        )
    )
    return writes


def commit_join(
    pool: PoolRecord, key_id: str, node: ClusterNodeRecord, changed: Sequence[GuestBucketRecord]
) -> None:
    """Commit a join all-or-nothing. Contended when what it decided on moved; Unavailable when the
    transaction was refused for another reason (throughput)."""
    try:
        # A TransactionConflict is the caller's to retry, under its deadline, not retried here.
        dynamo.transact(join_writes(pool, key_id, node, changed), conflict_retries=0)
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.contended:
            raise Contended() from None
        raise Unavailable(f"the registry could not be written ({cancelled.causes})") from None


def rotate_key(pool: PoolRecord, new: ClusterKeyRecord, *, rotated_ttl: int) -> None:
    """One transaction: the new key item, the pool repointed (conditioned on the key it named, so
    concurrent rotations serialise), the previous key item marked rotated. Contended when the pool
    was rotated or archived meanwhile, or a transaction was in flight."""
    previous = pool.cluster_key_id
    # The new key's item names the key it replaces: its INSERT is the whole rotation's event.
    new = new._replace(previous_key_id=previous)
    values: dict[str, Any] = {":key": new.key_id, ":now": new.created_at, ":active": "active"}
    if previous:
        values[":previous"] = previous
    writes = [
        dynamo.Write("Put", item=new.to_item(), condition="attribute_not_exists(pk)", name="key"),
        dynamo.Write(
            "Update",
            *_pool_key(pool),
            update="SET clusterKeyId = :key, clusterKeyRotatedAt = :now",
            condition="#state = :active AND "
            + ("clusterKeyId = :previous" if previous else "attribute_not_exists(clusterKeyId)"),
            names={"#state": "state"},
            values=values,
            name="pool",
        ),
    ]
    if previous:
        # Kept (not deleted) until its TTL so the audit can tell a rotated key from a forged
        # one; it opens nothing either way, since the pool names only the new key.
        writes.append(
            dynamo.Write(
                "Update",
                *key_key(previous),
                update="SET #state = :rotated, rotatedAt = :now, #ttl = :ttl",
                condition="attribute_exists(pk)",
                names={"#state": "state", "#ttl": "ttl"},
                values={":rotated": "rotated", ":now": new.created_at, ":ttl": rotated_ttl},
                name="previous",
            )
        )
    try:
        dynamo.transact(writes, conflict_retries=0)
    except dynamo.TransactionCanceled:
        raise Contended() from None


def _pool_key(pool: PoolRecord) -> tuple[str, str]:
    # Imported here: the stream publisher reads cluster nodes and never writes a pool.
    from joinplane.dal.pools import pool_key

    return pool_key(pool.tenant_id, pool.pool_id)

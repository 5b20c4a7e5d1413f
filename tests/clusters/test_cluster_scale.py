"""A cluster of 9,999 guests (Sylve's whole guest-ID space): joins commit all-or-nothing in one
transaction that fits DynamoDB's limits (100 actions, 400 KB per item, 4 MB per transaction), and
the registry is still checked and reported in full at that size."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from joinplane.clusters import inventory, membership
from joinplane.clusters.inventory import InventoryEntry
from joinplane.dal import clusters as clusters_db
from joinplane.dal import dynamo
from joinplane.dal.clusters import GuestBucketRecord
from joinplane.dal.pools import BootstrapRecord, PoolRecord
from tests.support import call
from tests.support.clusters import entries, join_body, make_cluster, post, registry

MAX_ACTIONS = 100
MAX_ITEM_BYTES = 400 * 1024
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024


def attribute_bytes(value: Any) -> int:
    """DynamoDB's item-size rules, rounded up: strings by UTF-8 length, numbers 1 byte per two
    significant digits plus 1, maps and lists 3 bytes plus 1 per element plus the elements."""
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int | float | Decimal):
        return (len(str(abs(value)).strip("0").replace(".", "")) + 1) // 2 + 1
    if isinstance(value, dict):
        return 3 + sum(len(k.encode()) + attribute_bytes(v) + 1 for k, v in value.items())
    if isinstance(value, list):
        return 3 + sum(attribute_bytes(v) + 1 for v in value)
    raise TypeError(type(value))


def item_bytes(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + attribute_bytes(value) for name, value in item.items())


@pytest.fixture
def transactions(monkeypatch: pytest.MonkeyPatch) -> list[list[dynamo.Write]]:
    seen: list[list[dynamo.Write]] = []
    transact = dynamo.transact

    def recording(writes: Any, **options: Any) -> None:
        writes = list(writes)
        seen.append(writes)
        transact(writes, **options)

    monkeypatch.setattr(dynamo, "transact", recording)
    return seen


def test_the_largest_possible_join_commits_in_one_transaction_within_limits(
    admin_key: str, transactions: list[list[dynamo.Write]]
) -> None:
    """The largest transaction a join can need: the registry full but for one ID in each of the 50
    guest items, every claim carrying a 128-byte node ID, and a last node taking those 50 IDs, so
    that its commit rewrites all 50 guest items, each full."""
    key = make_cluster(admin_key)
    last = [
        number * clusters_db.BUCKET_WIDTH + clusters_db.BUCKET_WIDTH - 1
        for number in range(membership.BUCKETS)
    ]
    rest = sorted(set(range(1, inventory.GUEST_ID_MAX + 1)) - set(last))
    for index, letter in enumerate("abc"):
        share = rest[index::3]
        reply = post(join_body(letter * 128, f"10.0.0.{index + 1}", share), key)
        assert reply.status == 200, reply.body["error"]
    transactions.clear()
    reply = post(join_body("d" * 128, "10.0.0.4", last), key)
    assert reply.status == 200, reply.body["error"]
    (writes,) = transactions
    # node + address + 50 guest items + the pool check
    assert len(writes) == 3 + membership.BUCKETS <= MAX_ACTIONS
    guest_items = [w.item for w in writes if w.item and w.item["sk"].startswith("GUESTS#")]
    assert len(guest_items) == membership.BUCKETS
    assert sum(len(item["claims"].split(",")) for item in guest_items) == inventory.GUEST_ID_MAX
    sizes = [item_bytes(w.item) for w in writes if w.item]
    assert max(sizes) < MAX_ITEM_BYTES and sum(sizes) < MAX_TRANSACTION_BYTES
    claims = registry()
    assert len(claims) == inventory.GUEST_ID_MAX
    assert claims[-1] == (9999, "d" * 128, "vm")


def test_9999_guests_across_nodes_are_admitted_then_guarded(admin_key: str) -> None:
    key = make_cluster(admin_key)
    ranges = {"node-a": range(1, 3334), "node-b": range(3334, 6667), "node-c": range(6667, 10_000)}
    for index, (node_id, ids) in enumerate(ranges.items()):
        kinds = entries(node_id, [i for i in ids if i % 2], "vm") + entries(
            node_id, [i for i in ids if not i % 2], "jail"
        )
        assert post(join_body(node_id, f"10.0.0.{index + 1}", items=kinds), key).status == 200
    assert len(registry()) == 9999
    # Any new claim now clashes: the answer carries the whole merged registry
    reply = post(join_body("node-d", "10.0.0.4", [5000], preflight=True), key)
    assert (reply.status, reply.body["message"]) == (409, "guest_identity_inventory_conflict")
    assert len(reply.body["data"]["entries"]) == 10_000
    assert [(c["guestId"], c["reason"]) for c in reply.body["data"]["conflicts"]] == [
        (5000, "shared_guest_id")
    ]
    # A node bringing no guests still joins, and its preflight reports the full registry
    preflight = post(join_body("node-d", "10.0.0.4", [], preflight=True), key)
    assert preflight.status == 200 and len(preflight.body["data"]["entries"]) == 9999
    assert post(join_body("node-d", "10.0.0.4", []), key).status == 200
    listed = call(
        "/api/compute/clusters/guests/list",
        {"tenantId": "acme", "poolId": "sylve", "cursor": 4990, "limit": 20},
        admin_key,
    )
    assert [g["guestId"] for g in listed.body["guests"]] == list(range(4991, 5011))
    assert listed.body["guests"][0] == {"guestId": 4991, "guestType": "vm", "nodeId": "node-b"}


def test_the_worst_case_transaction_is_proven_to_fit() -> None:
    """Bytes do not depend on who joined before: every guest item full, every claim in it naming a
    different node whose ID is 128 bytes of characters JSON would have to escape, and a joiner
    touching all 50 items. The commit built for that is still far inside every limit."""
    nasty = '"\u00e9\u0001'  # a quote, a 2-byte character, a control character
    buckets = {}
    for number in range(membership.BUCKETS):
        ids = range(max(1, number * clusters_db.BUCKET_WIDTH), (number + 1) * clusters_db.BUCKET_WIDTH - 1)
        claims = {i: ("jail", (f"{i:04d}" + nasty * 31)[:128]) for i in ids if i <= inventory.GUEST_ID_MAX}
        assert all(len(node.encode()) <= 128 for _, node in claims.values())
        buckets[number] = GuestBucketRecord("t" * 128, "p" * 128, number, version=7, claims=claims)
    last = [n * clusters_db.BUCKET_WIDTH + clusters_db.BUCKET_WIDTH - 1 for n in range(membership.BUCKETS)]
    joiner_id = "\u00e9" * 64
    joiner = inventory.build_report(
        [
            InventoryEntry(nodeId=joiner_id, guestType="jail", guestId=i, recordId=i, name="x" * 500)
            for i in last
        ]
    )
    pool = PoolRecord(
        tenant_id="t" * 128,
        pool_id="p" * 128,
        site_id="s" * 128,
        name="",
        workspace_id="",
        state="active",
        bootstrap=BootstrapRecord(),
        join_request_ttl_seconds=3600,
        certificate_ttl_seconds=3600,
        cluster=None,
        created_at="",
        updated_at="",
        version=10**12,
    )
    node, changed = membership._join(pool, joiner_id, "255.255.255.255", "v" * 128, joiner, buckets)
    writes = clusters_db.join_writes(pool, "ckey_x", node, changed)
    assert len(writes) == 3 + membership.BUCKETS <= MAX_ACTIONS
    sizes = [item_bytes(w.item) for w in writes if w.item]
    guest_items = [w.item for w in writes if w.item and w.item["sk"].startswith("GUESTS#")]
    assert sum(len(item["claims"].split(",")) for item in guest_items) == inventory.GUEST_ID_MAX
    assert max(sizes) < 30 * 1024 < MAX_ITEM_BYTES
    assert sum(sizes) < 1.5 * 1024 * 1024 < MAX_TRANSACTION_BYTES

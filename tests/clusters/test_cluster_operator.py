"""The operator side of clusters: rotateKey, nodes/list, guests/list."""

from __future__ import annotations

from typing import Any

import pytest

from joinplane import credentials
from tests.support import call
from tests.support.clusters import POOL, TENANT, join_body, post
from tests.support.table import all_items

REF = {"tenantId": TENANT, "poolId": POOL}


def api_key(admin_key: str, *grants: str, tenant: str = TENANT) -> str:
    created = call("/api/compute/apiKeys/create", {"tenantId": tenant, "grants": list(grants)}, admin_key)
    assert created.status == 200, created.body
    return str(created.body["key"])


def test_rotate_key_returns_a_key_once_and_stores_only_its_digest(admin_key: str, key: str) -> None:
    assert credentials.parse(key, "jck") is not None
    dump = repr(all_items())
    assert key not in dump
    assert credentials.digest(key) in dump
    # The pool does not show it either
    pool = call("/api/compute/pools/get", REF, admin_key)
    assert key not in repr(pool.body) and "clusterKey" not in pool.body


def test_rotating_replaces_the_key_in_one_step(admin_key: str, key: str) -> None:
    rotated = call("/api/compute/clusters/rotateKey", REF, admin_key)
    assert rotated.status == 200
    assert set(rotated.body) == {"tenantId", "poolId", "clusterKeyId", "clusterKey", "rotatedAt"}
    new = rotated.body["clusterKey"]
    assert new != key
    assert post(join_body("node-a", "10.0.0.1", [1]), key).status == 401
    assert post(join_body("node-a", "10.0.0.1", [1]), new).status == 200
    # the old key item is marked rotated (and expires), the new one is the pool's
    keys = {i["keyId"]: i for i in all_items() if i["pk"].startswith("CLUSTERKEY#")}
    assert len(keys) == 2
    current = keys.pop(rotated.body["clusterKeyId"])
    (old,) = keys.values()
    assert (current["state"], old["state"]) == ("active", "rotated")
    assert old["ttl"] > 0 and old["rotatedAt"] == rotated.body["rotatedAt"]


def test_rotate_key_needs_clusters_write(admin_key: str, key: str) -> None:
    reader = api_key(admin_key, "compute:clusters:read@tenant")
    writer = api_key(admin_key, "compute:clusters:write@compute-pool/sylve")
    other_pool = api_key(admin_key, "compute:clusters:write@compute-pool/elsewhere")
    before = all_items()
    denied = call("/api/compute/clusters/rotateKey", REF, reader)
    hidden = call("/api/compute/clusters/rotateKey", REF, other_pool)
    assert (denied.status, denied.code) == (403, "PERMISSION_DENIED")
    assert (hidden.status, hidden.code) == (404, "NOT_FOUND")
    assert all_items() == before
    assert call("/api/compute/clusters/rotateKey", REF, writer).status == 200


def test_rotate_key_refuses_other_tenants_unknown_and_archived_pools(admin_key: str, key: str) -> None:
    foreign = api_key(admin_key, "compute:*@tenant", tenant="globex")
    assert call("/api/compute/clusters/rotateKey", REF, foreign).code == "PERMISSION_DENIED"
    missing = call("/api/compute/clusters/rotateKey", {**REF, "poolId": "nope"}, admin_key)
    assert missing.code == "NOT_FOUND"
    assert call("/api/compute/pools/archive", REF, admin_key).status == 200
    before = all_items()
    archived = call("/api/compute/clusters/rotateKey", REF, admin_key)
    assert (archived.status, archived.code) == (409, "INVALID_STATE")
    assert all_items() == before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/compute/clusters/rotateKey", {**REF, "clusterKey": "mine"}, "clusterKey"),
        ("/api/compute/clusters/rotateKey", {"tenantId": TENANT}, "poolId"),
        ("/api/compute/clusters/nodes/list", {**REF, "limit": 0}, "limit"),
        ("/api/compute/clusters/nodes/list", {**REF, "limit": "5"}, "limit"),
        ("/api/compute/clusters/guests/list", {**REF, "cursor": 10_000}, "cursor"),
        ("/api/compute/clusters/guests/list", {**REF, "cursor": "7"}, "cursor"),
        ("/api/compute/clusters/guests/list", {**REF, "nodeId": ""}, "nodeId"),
    ],
)
def test_bad_operator_bodies_are_invalid_argument(
    admin_key: str, key: str, path: str, body: dict[str, Any], field: str
) -> None:
    before = all_items()
    reply = call(path, body, admin_key)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT")
    assert reply.body["error"]["details"][0]["field"] == field
    assert all_items() == before


def test_nodes_list_shows_members_in_pages(admin_key: str, key: str) -> None:
    for index, name in enumerate(["node-c", "node-a", "node-b"]):
        assert post(join_body(name, f"10.0.0.{index + 1}", [index + 1], version="0.9"), key).status == 200
    first = call("/api/compute/clusters/nodes/list", {**REF, "limit": 2}, admin_key)
    assert first.status == 200
    assert [n["nodeId"] for n in first.body["nodes"]] == ["node-a", "node-b"]
    assert first.body["nodes"][0] == {
        "nodeId": "node-a",
        "nodeIp": "10.0.0.2",
        "nodeVersion": "0.9",
        "digest": first.body["nodes"][0]["digest"],
        "guestCount": 1,
        "joinedAt": first.body["nodes"][0]["joinedAt"],
    }
    second = call(
        "/api/compute/clusters/nodes/list", {**REF, "limit": 2, "cursor": first.body["nextCursor"]}, admin_key
    )
    assert [n["nodeId"] for n in second.body["nodes"]] == ["node-c"]
    assert "nextCursor" not in second.body


def test_guests_list_pages_through_the_registry(admin_key: str, key: str) -> None:
    assert post(join_body("node-a", "10.0.0.1", [1, 2, 199, 200, 5000]), key).status == 200
    assert post(join_body("node-b", "10.0.0.2", [3, 201, 9999]), key).status == 200
    seen, cursor = [], None
    while True:
        body = {**REF, "limit": 3, **({"cursor": cursor} if cursor is not None else {})}
        page = call("/api/compute/clusters/guests/list", body, admin_key)
        assert page.status == 200
        seen += [(g["guestId"], g["nodeId"], g["guestType"]) for g in page.body["guests"]]
        cursor = page.body.get("nextCursor")
        if cursor is None:
            break
    assert [g for g, _, _ in seen] == [1, 2, 3, 199, 200, 201, 5000, 9999]
    only_b = call("/api/compute/clusters/guests/list", {**REF, "nodeId": "node-b"}, admin_key)
    assert [g["guestId"] for g in only_b.body["guests"]] == [3, 201, 9999]


def test_listings_need_clusters_read(admin_key: str, key: str) -> None:
    blind = api_key(admin_key, "compute:pools:read@tenant")
    reader = api_key(admin_key, "compute:clusters:read@site/dc-1")
    for path in ("/api/compute/clusters/nodes/list", "/api/compute/clusters/guests/list"):
        assert call(path, REF, blind).code == "PERMISSION_DENIED"
        assert call(path, REF, reader).status == 200


def test_a_pool_without_a_cluster_key_lists_nothing_and_opens_nothing(admin_key: str) -> None:
    created = call(
        "/api/compute/pools/create",
        {"tenantId": TENANT, "poolId": "plain", "siteId": "dc-1", "name": "Plain", "workspaceId": "ws"},
        admin_key,
    )
    assert created.status == 200
    plain = {"tenantId": TENANT, "poolId": "plain"}
    assert call("/api/compute/clusters/nodes/list", plain, admin_key).body == {"nodes": []}
    assert call("/api/compute/clusters/guests/list", plain, admin_key).body == {"guests": []}

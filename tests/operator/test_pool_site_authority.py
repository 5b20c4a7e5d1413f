"""A pool-scoped key must not choose a site.

A pool sees its site's unclaimed join requests (those made with a site token) and can approve them.
So putting a pool in a site is an act on the site: `pools/create` needs `compute:pools:write` at
`site/<siteId>`, `tenant` or `platform`. A `compute-pool/<id>` or `compute-pool/*` grant reaches
pools, never a site. Driven end to end through the authorizer and the route handlers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from joinplane import pools
from tests.support import call, join, openssl_csr
from tests.support.table import all_items


def make_key(admin: str, *grants: str) -> str:
    reply = call("/api/compute/apiKeys/create", {"tenantId": "acme", "grants": list(grants)}, admin)
    assert reply.status == 200, reply.body
    return str(reply.body["key"])


def pool_body(pool_id: str, site_id: str) -> dict[str, Any]:
    return {"tenantId": "acme", "poolId": pool_id, "siteId": site_id, "name": pool_id, "workspaceId": "ws"}


def table_state() -> list[dict[str, Any]]:
    return sorted(all_items(), key=lambda item: (item["pk"], item["sk"]))


@pytest.fixture
def site_requests(admin_key: str, tmp_path: Path) -> list[str]:
    """Site s1 with pool gpu, and two machines deferred by a site token: unclaimed requests of s1."""
    assert call("/api/compute/pools/create", pool_body("gpu", "s1"), admin_key).status == 200
    token = call(
        "/api/compute/joinTokens/create", {"tenantId": "acme", "siteId": "s1", "maxUses": 5}, admin_key
    )
    assert token.status == 200, token.body
    requests = []
    for index in range(2):
        reply = join({"joinToken": token.body["token"], "csr": openssl_csr(tmp_path / f"m{index}")})
        assert reply.status == 202, reply.body  # deferred
        requests.append(reply.body["joinRequest"]["requestId"])
    stored = {item["requestId"]: item for item in all_items() if item["sk"] == "JREQ"}
    assert [(stored[r]["siteId"], stored[r].get("poolId"), stored[r]["state"]) for r in requests] == [
        ("s1", None, "pending")
    ] * 2
    return requests


def test_a_pool_scoped_key_cannot_create_its_pool_in_a_site_and_reach_the_sites_requests(
    admin_key: str, site_requests: list[str]
) -> None:
    # Given site s1 holding unclaimed requests, and a key with every compute permission on a pool
    # `future` that does not exist yet
    attacker = make_key(admin_key, "compute:*@compute-pool/future")
    before = table_state()

    # When it creates pool `future` in site s1
    created = call("/api/compute/pools/create", pool_body("future", "s1"), attacker)

    # Then it is refused, saying what it would need, and nothing is written
    assert (created.status, created.code) == (403, "PERMISSION_DENIED"), created.body
    assert "compute:pools:write at site/s1" in created.body["error"]["message"]
    assert table_state() == before

    # And with no pool there is no way to the site's requests: not listed, not approved
    listed = call("/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "future"}, attacker)
    assert (listed.status, listed.code) == (404, "NOT_FOUND")
    for request_id in site_requests:
        body = {"tenantId": "acme", "poolId": "future", "requestId": request_id}
        approved = call("/api/compute/joinRequests/approve", body, attacker)
        assert (approved.status, approved.code) == (404, "NOT_FOUND")
        assert request_id not in str(approved.body)
    # (nor through a pool it cannot see)
    via_gpu = {"tenantId": "acme", "poolId": "gpu", "requestId": site_requests[0]}
    assert call("/api/compute/joinRequests/approve", via_gpu, attacker).code == "NOT_FOUND"
    assert table_state() == before


@pytest.mark.parametrize(
    "grants",
    [
        ["compute:*@compute-pool/future"],
        ["compute:pools:write@compute-pool/*"],
        ["*@compute-pool/*"],
        ["compute:pools:write@site/s2"],  # another site
        ["compute:pools:read@site/s1", "compute:*@compute-pool/future"],  # sees s1, cannot write it
        ["compute:join-tokens:*@site/s1", "compute:pools:write@compute-pool/future"],  # split grants
    ],
)
@pytest.mark.parametrize("site", ["s1", "brand-new-site"])
def test_only_pools_write_at_the_site_or_wider_places_a_pool(
    admin_key: str, site_requests: list[str], grants: list[str], site: str
) -> None:
    # Given a key whose grants never hold compute:pools:write at the site (in one grant)
    key = make_key(admin_key, *grants)
    before = table_state()
    # When it creates a pool in an existing site, or in a site no pool names yet
    reply = call("/api/compute/pools/create", pool_body("future", site), key)
    # Then it is PERMISSION_DENIED either way (the answer does not tell whether the site exists),
    # and neither the pool nor a site marker is written
    assert (reply.status, reply.code) == (403, "PERMISSION_DENIED"), (grants, site, reply.body)
    assert table_state() == before


@pytest.mark.parametrize("grant", ["compute:pools:write@site/s1", "compute:pools:*@tenant", "*@platform"])
def test_pools_write_at_the_site_tenant_or_platform_creates_the_pool(
    admin_key: str, site_requests: list[str], grant: str
) -> None:
    # Given a key with compute:pools:write at the site, or wider
    placer = make_key(admin_key, grant)
    # When it creates pool `future` in s1
    reply = call("/api/compute/pools/create", pool_body("future", "s1"), placer)
    # Then the pool is there, in s1
    assert reply.status == 200, reply.body
    assert (reply.body["poolId"], reply.body["siteId"]) == ("future", "s1")
    # And a key for that pool now works the site's queue, because the site's operator put it there
    pool_key = make_key(admin_key, "compute:*@compute-pool/future")
    listed = call("/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "future"}, pool_key)
    assert listed.status == 200
    assert sorted(r["requestId"] for r in listed.body["requests"]) == sorted(site_requests)


def test_a_site_scoped_writer_places_pools_only_in_its_own_site(admin_key: str) -> None:
    writer = make_key(admin_key, "compute:pools:write@site/s1")
    assert call("/api/compute/pools/create", pool_body("a", "s1"), writer).status == 200
    # The first pool of a new site the grant names creates the site
    other = make_key(admin_key, "compute:pools:write@site/s9")
    assert call("/api/compute/pools/create", pool_body("b", "s9"), other).status == 200
    denied = call("/api/compute/pools/create", pool_body("c", "s9"), writer)
    assert (denied.status, denied.code) == (403, "PERMISSION_DENIED")


def test_a_pool_cannot_be_moved_to_another_site(admin_key: str, site_requests: list[str]) -> None:
    # Given pool other in site s2, and a key with every compute permission on it
    assert call("/api/compute/pools/create", pool_body("other", "s2"), admin_key).status == 200
    owner = make_key(admin_key, "compute:*@compute-pool/other")
    before = table_state()
    # When it (or even the admin) tries to move the pool to s1
    for key in (owner, admin_key):
        body = {"tenantId": "acme", "poolId": "other", "siteId": "s1"}
        reply = call("/api/compute/pools/update", body, key)
        # Then siteId is not a field of update: INVALID_ARGUMENT, and nothing changes
        assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
        assert reply.body["error"]["details"][0]["field"] == "siteId"
    assert table_state() == before
    listed = call("/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "other"}, owner)
    assert listed.body == {"requests": []}
    # Anything that ever adds a move must authorize the new site (pools.authorize_placement) first
    assert "siteId" not in pools.UpdatePool.model_fields


def test_an_archived_pool_is_no_longer_a_window_onto_its_sites_queue(
    admin_key: str, site_requests: list[str], tmp_path: Path
) -> None:
    # Given pool old in s1 with one deferred request of its own, and a key with every compute
    # permission on old, which sees s1's unclaimed requests while old is active
    assert call("/api/compute/pools/create", pool_body("old", "s1"), admin_key).status == 200
    token = call(
        "/api/compute/joinTokens/create",
        {"tenantId": "acme", "poolId": "old", "requireApproval": True},
        admin_key,
    ).body["token"]
    own = join({"joinToken": token, "csr": openssl_csr(tmp_path / "own")}).body["joinRequest"]["requestId"]
    holder = make_key(admin_key, "compute:*@compute-pool/old")
    listing = {"tenantId": "acme", "poolId": "old", "state": "all"}
    listed = call("/api/compute/joinRequests/list", listing, holder).body["requests"]
    assert sorted(r["requestId"] for r in listed) == sorted([own, *site_requests])

    # When the pool is archived
    assert call("/api/compute/pools/archive", {"tenantId": "acme", "poolId": "old"}, admin_key).status == 200
    before = table_state()

    # Then its key sees only the pool's own request, in every state listing
    for state in ("all", "pending", "expired"):
        listed = call("/api/compute/joinRequests/list", {**listing, "state": state}, holder)
        assert listed.status == 200
        assert [r["requestId"] for r in listed.body["requests"]] == ([own] if state != "expired" else [])
    # And the site's unclaimed requests cannot be decided through it: NOT_FOUND, nothing written
    for verb in ("approve", "reject"):
        for request_id in site_requests:
            body = {"tenantId": "acme", "poolId": "old", "requestId": request_id}
            reply = call(f"/api/compute/joinRequests/{verb}", body, holder)
            assert (reply.status, reply.code) == (404, "NOT_FOUND"), (verb, reply.body)
    assert table_state() == before
    # While its own request can still be rejected (cleaning up), and an active pool still sees the site's
    own_reply = call(
        "/api/compute/joinRequests/reject", {"tenantId": "acme", "poolId": "old", "requestId": own}, holder
    )
    assert (own_reply.status, own_reply.body["state"]) == (200, "rejected")
    active = call("/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "gpu"}, admin_key)
    assert sorted(r["requestId"] for r in active.body["requests"]) == sorted(site_requests)

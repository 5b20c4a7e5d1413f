"""The approval queue across pools: joinRequests/list without a poolId shows every request the key
may read, in every pool of the tenant and in those pools' sites, each once, oldest first; get,
approve and reject find a request by its id and check the key against the request's own pool. A
client that sends poolId is answered exactly as before (tests/join/test_queue.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from typing import Any

import pytest

from joinplane import aws, join_requests
from tests.support import call, join, release_together
from tests.support.table import all_items

LIST, GET = "/api/compute/joinRequests/list", "/api/compute/joinRequests/get"
APPROVE, REJECT = "/api/compute/joinRequests/approve", "/api/compute/joinRequests/reject"


def defer(make_token, machine_factory, count: int, **token_options: Any) -> list[str]:
    token = make_token(requireApproval=True, maxUses=count, **token_options)
    return [
        join({"joinToken": token["token"], "csr": machine_factory().csr}).body["joinRequest"]["requestId"]
        for _ in range(count)
    ]


def make_key(admin: str, *grants: str, tenant: str = "acme") -> str:
    reply = call("/api/compute/apiKeys/create", {"tenantId": tenant, "grants": list(grants)}, admin)
    assert reply.status == 200, reply.body
    return str(reply.body["key"])


def listed(key: str, **body: Any) -> list[dict[str, Any]]:
    """Every page of a listing, followed by its cursor."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        reply = call(LIST, {"tenantId": "acme", **body, **({"cursor": cursor} if cursor else {})}, key)
        assert reply.status == 200, reply.body
        items += reply.body["requests"]
        cursor = reply.body.get("nextCursor")
        if not cursor:
            return items


def stored(request_id: str) -> dict[str, Any]:
    return next(i for i in all_items() if i["pk"] == f"JREQ#{request_id}")


@pytest.fixture
def queue(admin_key, make_token, machine_factory) -> dict[str, list[str]]:
    """Pool gpu in site rack-1 (the fixture's) and pool cpu in rack-2, each with two requests of its
    own, and one unclaimed request in each site (made with a site token)."""
    created = call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "cpu", "siteId": "rack-2", "name": "CPU", "workspaceId": "w"},
        admin_key,
    )
    assert created.status == 200, created.body
    return {
        "gpu": defer(make_token, machine_factory, 2),
        "rack-1": defer(make_token, machine_factory, 1, siteId="rack-1"),
        "cpu": defer(make_token, machine_factory, 2, poolId="cpu"),
        "rack-2": defer(make_token, machine_factory, 1, siteId="rack-2"),
    }


# --- the queue across pools --------------------------------------------------------------------


def test_without_a_pool_every_request_of_every_pool_and_site_shows_once_oldest_first(
    queue, admin_key
) -> None:
    # Given requests in two pools and in both their sites
    everything = sorted(chain(*queue.values()))
    # When the tenant's queue is listed without a pool, two at a time
    items = listed(admin_key, limit=2)
    # Then each request shows once, oldest first, naming its pool (null while unclaimed) and site
    assert [r["requestId"] for r in items] == everything
    where = {r["requestId"]: (r["poolId"], r["siteId"]) for r in items}
    assert {where[r] for r in queue["gpu"]} == {("gpu", "rack-1")}
    assert {where[r] for r in queue["cpu"]} == {("cpu", "rack-2")}
    assert where[queue["rack-1"][0]] == (None, "rack-1") and where[queue["rack-2"][0]] == (None, "rack-2")
    # And a client that sends poolId: null is answered the same
    null = call(LIST, {"tenantId": "acme", "poolId": None, "limit": 200}, admin_key)
    assert null.status == 200 and null.body["requests"] == items


def test_the_state_filter_works_across_pools(queue, admin_key) -> None:
    # Given one request of each pool decided
    call(REJECT, {"tenantId": "acme", "requestId": queue["gpu"][0]}, admin_key)
    call(APPROVE, {"tenantId": "acme", "requestId": queue["cpu"][0]}, admin_key)
    # When each state is listed without a pool, Then each shows exactly its requests
    assert [r["requestId"] for r in listed(admin_key, state="rejected")] == [queue["gpu"][0]]
    assert [r["requestId"] for r in listed(admin_key, state="approved")] == [queue["cpu"][0]]
    pending = sorted(queue["gpu"][1:] + queue["cpu"][1:] + queue["rack-1"] + queue["rack-2"])
    assert [r["requestId"] for r in listed(admin_key)] == pending
    assert len(listed(admin_key, state="all")) == 6


def test_a_key_sees_only_the_queues_its_grants_reach(queue, admin_key) -> None:
    for grant, sees in [
        ("compute:join-tokens:read@compute-pool/cpu", ["cpu", "rack-2"]),
        ("compute:join-tokens:read@site/rack-1", ["gpu", "rack-1"]),
        ("compute:join-tokens:*@compute-pool/*", ["gpu", "rack-1", "cpu", "rack-2"]),
        ("compute:pools:read@tenant", []),  # sees the pools, may not read their queues
    ]:
        # Given a key with one grant
        key = make_key(admin_key, grant)
        # When it lists the queue without a pool: every state, and the pending queue (the tenant's
        # queue index when it reads more than two partitions)
        for state in ("all", "pending"):
            items = listed(key, state=state)
            # Then it sees exactly the requests of the pools it may read and of those pools' sites
            expected = sorted(chain(*(queue[name] for name in sees)))
            assert [r["requestId"] for r in items] == expected, (grant, state)


def test_an_archived_pool_shows_its_own_requests_but_is_no_window_onto_its_site(
    queue, admin_key, make_token, machine_factory
) -> None:
    # Given a key for pool cpu only, and cpu archived
    key = make_key(admin_key, "compute:join-tokens:read@compute-pool/cpu")
    assert call("/api/compute/pools/archive", {"tenantId": "acme", "poolId": "cpu"}, admin_key).status == 200
    # When the key lists the queue, Then it sees cpu's own requests, not rack-2's unclaimed one
    assert [r["requestId"] for r in listed(key, state="all")] == sorted(queue["cpu"])


def test_another_tenant_is_refused_and_its_own_queue_is_empty(queue, admin_key) -> None:
    # Given a key of tenant globex with every join-request permission in its tenant
    key = make_key(admin_key, "compute:join-tokens:*@tenant", tenant="globex")
    # When it asks for acme's queue, Then PERMISSION_DENIED, naming nothing of acme's
    other = call(LIST, {"tenantId": "acme"}, key)
    assert (other.status, other.code) == (403, "PERMISSION_DENIED")
    assert "rack" not in str(other.body) and "jreq_" not in str(other.body)
    # And its own tenant's queue is empty
    assert call(LIST, {"tenantId": "globex"}, key).body == {"requests": []}


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """The DynamoDB calls made inside the block, by operation."""
    counted: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        counted[event_name.rsplit(".", 1)[-1]] += 1

    client = aws.client("dynamodb")
    client.meta.events.register("before-call.dynamodb.*", count, unique_id="queue-cost")
    try:
        yield counted
    finally:
        client.meta.events.unregister("before-call.dynamodb.*", unique_id="queue-cost")


def test_a_page_across_pools_costs_a_bounded_number_of_queries(queue, admin_key) -> None:
    # Given 2 pools and 2 sites (4 owners), When each other state is listed without a pool
    for state, sources in [("expired", 3), ("all", 5)]:
        with counting() as counted:
            reply = call(LIST, {"tenantId": "acme", "state": state}, admin_key)
        assert reply.status == 200
        # Then the Queries are the pool listing (1) and at most rounds x owners x sources
        assert counted["Query"] <= 1 + join_requests.MAX_ROUNDS * 4 * sources
        assert "Scan" not in counted


def test_a_page_of_the_pending_queue_costs_at_most_three_queries(queue, admin_key) -> None:
    # Given 2 pools and 2 sites with 6 pending requests
    # When the pending queue is listed without a pool by a key of the tenant
    with counting() as counted:
        reply = call(LIST, {"tenantId": "acme"}, admin_key)
    # Then it is the pool listing and one Query of the tenant's queue, not one per pool and site,
    # and one BatchGetItem of the requests shown (GetItem: the calling key)
    assert len(reply.body["requests"]) == 6
    assert counted == Counter({"GetItem": 1, "Query": 2, "BatchGetItem": 1})

    # When a key that reads pool cpu only lists it (its partition and its site's: one Query each)
    key = make_key(admin_key, "compute:join-tokens:read@compute-pool/cpu")
    with counting() as counted:
        reply = call(LIST, {"tenantId": "acme"}, key)
    # Then the pool listing and the two partitions, and exactly its requests
    assert counted == Counter({"GetItem": 1, "Query": 3})
    assert [r["requestId"] for r in reply.body["requests"]] == sorted(queue["cpu"] + queue["rack-2"])


def test_a_narrow_key_pages_through_the_tenants_queue_within_three_queries_a_page(
    queue, admin_key, make_token, machine_factory
) -> None:
    # Given a third pool, arm, whose 7 requests come last in the tenant's queue, and a key that reads
    # gpu and cpu (four partitions: over the budget, so the tenant's queue is read, 3 entries a
    # Query for a page of 1: the key reads 2 of the 3 pools)
    created = call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "arm", "siteId": "rack-2", "name": "ARM", "workspaceId": "w"},
        admin_key,
    )
    assert created.status == 200, created.body
    defer(make_token, machine_factory, 7, poolId="arm")
    key = make_key(
        admin_key, "compute:join-tokens:read@compute-pool/gpu", "compute:join-tokens:read@compute-pool/cpu"
    )
    # When it follows the cursor one request a page
    seen: list[str] = []
    short_pages = 0
    cursor = None
    while True:
        with counting() as counted:
            reply = call(
                LIST, {"tenantId": "acme", "limit": 1, **({"cursor": cursor} if cursor else {})}, key
            )
        # Then no page costs more than 3 Queries
        assert reply.status == 200 and counted["Query"] <= 3, counted
        seen += [r["requestId"] for r in reply.body["requests"]]
        cursor = reply.body.get("nextCursor")
        # A page that stopped at its Query budget goes on after the last request it examined
        shown = [r["requestId"] for r in reply.body["requests"]]
        short_pages += bool(cursor) and cursor not in shown
        if not cursor:
            break
    # And the pages hold exactly its requests, each once, oldest first: arm's never; the page whose
    # two Queries met only arm's after its first request stopped there, with a cursor past them
    assert short_pages == 1
    assert seen == sorted(chain(*(queue[name] for name in ("gpu", "rack-1", "cpu", "rack-2"))))


def test_a_cursor_never_names_a_request_of_a_pool_the_key_may_not_read(
    queue, admin_key, make_token, machine_factory
) -> None:
    # Given a third pool, arm, whose 7 pending requests come last in the tenant's queue, and a key
    # that reads gpu and cpu only (the tenant's queue is read, 3 entries a Query for a page of 1)
    created = call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "arm", "siteId": "rack-3", "name": "ARM", "workspaceId": "w"},
        admin_key,
    )
    assert created.status == 200, created.body
    hidden = set(defer(make_token, machine_factory, 7, poolId="arm"))
    key = make_key(
        admin_key, "compute:join-tokens:read@compute-pool/gpu", "compute:join-tokens:read@compute-pool/cpu"
    )
    # When it follows the cursor one request a page
    cursors: list[str] = []
    seen: list[str] = []
    cursor = None
    while True:
        reply = call(LIST, {"tenantId": "acme", "limit": 1, **({"cursor": cursor} if cursor else {})}, key)
        assert reply.status == 200, reply.body
        seen += [r["requestId"] for r in reply.body["requests"]]
        cursor = reply.body.get("nextCursor")
        if not cursor:
            break
        cursors.append(cursor)
    # Then no cursor is the id of one of arm's requests, and the pages still hold exactly the key's
    # requests, each once, oldest first
    assert cursors and not set(cursors) & hidden, (cursors, hidden)
    assert seen == sorted(chain(*(queue[name] for name in ("gpu", "rack-1", "cpu", "rack-2"))))


# --- get, approve, reject by id alone ----------------------------------------------------------


def test_get_finds_a_request_by_id_through_its_pool_or_its_site(queue, admin_key) -> None:
    # Given a key for pool gpu (site rack-1)
    key = make_key(admin_key, "compute:join-tokens:read@compute-pool/gpu")
    # When it gets gpu's request and rack-1's unclaimed one by id alone, Then both are answered
    for request_id, pool_id in [(queue["gpu"][0], "gpu"), (queue["rack-1"][0], None)]:
        reply = call(GET, {"tenantId": "acme", "requestId": request_id}, key)
        assert reply.status == 200, reply.body
        assert (reply.body["requestId"], reply.body["poolId"], reply.body["siteId"]) == (
            request_id,
            pool_id,
            "rack-1",
        )
    # And through the pool named, as before
    named = call(GET, {"tenantId": "acme", "poolId": "gpu", "requestId": queue["rack-1"][0]}, key)
    assert named.status == 200 and named.body["poolId"] is None


def test_get_approve_reject_refuse_what_the_key_may_not_reach(queue, admin_key) -> None:
    # Given a key that reads and decides pool gpu only, a read-only key, and a key of another tenant
    gpu_key = make_key(admin_key, "compute:join-tokens:*@compute-pool/gpu")
    reader = make_key(admin_key, "compute:join-tokens:read@tenant")
    globex = make_key(admin_key, "compute:join-tokens:*@tenant", tenant="globex")
    before = sorted(all_items(), key=lambda i: (i["pk"], i["sk"]))
    for path in (GET, APPROVE, REJECT):
        # When the gpu key names cpu's request or rack-2's unclaimed one, Then NOT_FOUND, naming nothing
        for request_id in (queue["cpu"][0], queue["rack-2"][0]):
            reply = call(path, {"tenantId": "acme", "requestId": request_id}, gpu_key)
            assert (reply.status, reply.code) == (404, "NOT_FOUND"), (path, reply.body)
            assert request_id not in str(reply.body) and "rack-2" not in str(reply.body)
        # A forged id is NOT_FOUND too
        forged = call(path, {"tenantId": "acme", "requestId": "jreq_" + "0" * 26}, admin_key)
        assert forged.code == "NOT_FOUND"
        # Another tenant's key: PERMISSION_DENIED naming acme, NOT_FOUND naming its own tenant
        other = call(path, {"tenantId": "acme", "requestId": queue["gpu"][0]}, globex)
        assert other.code == "PERMISSION_DENIED"
        own = call(path, {"tenantId": "globex", "requestId": queue["gpu"][0]}, globex)
        assert own.code == "NOT_FOUND"
    # A key that may read but not decide: PERMISSION_DENIED for either decision, claimed or not
    for path in (APPROVE, REJECT):
        for request_id in (queue["gpu"][0], queue["rack-1"][0]):
            denied = call(path, {"tenantId": "acme", "requestId": request_id}, reader)
            assert (denied.status, denied.code) == (403, "PERMISSION_DENIED"), denied.body
    # And nothing changed
    assert sorted(all_items(), key=lambda i: (i["pk"], i["sk"])) == before


def test_approving_by_id_decides_against_the_requests_own_pool(queue, admin_key) -> None:
    # Given a key that decides pool cpu
    key = make_key(admin_key, "compute:join-tokens:*@compute-pool/cpu")
    # When it approves cpu's request without naming the pool
    reply = call(APPROVE, {"tenantId": "acme", "requestId": queue["cpu"][0], "ttlSeconds": 600}, key)
    # Then it is approved for cpu, in one write the table shows
    assert reply.status == 200, reply.body
    assert (reply.body["state"], reply.body["poolId"]) == ("approved", "cpu")
    assert stored(queue["cpu"][0])["state"] == "approved"
    # And approving again, with the pool named as the joinRequests API has it, returns the approval unchanged
    again = call(APPROVE, {"tenantId": "acme", "poolId": "cpu", "requestId": queue["cpu"][0]}, key)
    assert again.status == 200 and again.body == reply.body


def test_an_unclaimed_request_needs_the_pool_to_approve_it_for(queue, admin_key) -> None:
    # Given rack-1's unclaimed request, and a second active pool in rack-1
    call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "gpu-b", "siteId": "rack-1", "name": "B", "workspaceId": "w"},
        admin_key,
    )
    request_id = queue["rack-1"][0]
    before = stored(request_id)
    # When it is approved without a pool
    reply = call(APPROVE, {"tenantId": "acme", "requestId": request_id}, admin_key)
    # Then that is INVALID_ARGUMENT on poolId, listing the pools it could be claimed for; nothing changed
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
    [detail] = reply.body["error"]["details"]
    assert detail["field"] == "poolId" and detail["pools"] == ["gpu", "gpu-b"]
    assert stored(request_id) == before
    # When the pool is named, Then it is claimed for that pool
    named = call(APPROVE, {"tenantId": "acme", "poolId": "gpu-b", "requestId": request_id}, admin_key)
    assert named.status == 200 and (named.body["state"], named.body["poolId"]) == ("approved", "gpu-b")
    # And from then on it is that pool's: approving by id alone returns the approval
    by_id = call(APPROVE, {"tenantId": "acme", "requestId": request_id}, admin_key)
    assert by_id.status == 200 and by_id.body == named.body


def test_rejecting_an_unclaimed_request_by_id_leaves_it_unclaimed(queue, admin_key) -> None:
    # Given a key that decides pool cpu (site rack-2)
    key = make_key(admin_key, "compute:join-tokens:*@compute-pool/cpu")
    # When it rejects rack-2's unclaimed request and one of cpu's, by id alone
    site = call(REJECT, {"tenantId": "acme", "requestId": queue["rack-2"][0], "reason": "unknown"}, key)
    own = call(REJECT, {"tenantId": "acme", "requestId": queue["cpu"][0]}, key)
    # Then both are rejected; the site's stays its site's, in the site's rejected listing
    assert site.status == own.status == 200, (site.body, own.body)
    assert (site.body["state"], site.body["poolId"], site.body["reason"]) == ("rejected", None, "unknown")
    assert own.body["state"] == "rejected" and own.body["poolId"] == "cpu"
    assert stored(queue["rack-2"][0])["gsi1pk"] == "JREQS#acme#SITE#rack-2#rejected"
    assert [r["requestId"] for r in listed(key, state="rejected")] == sorted(
        [queue["rack-2"][0], queue["cpu"][0]]
    )


def test_concurrent_rejections_by_id_write_once(queue, admin_key) -> None:
    # Given rack-1's unclaimed request and 8 operators deciding it at once by id alone
    request_id = queue["rack-1"][0]
    keys = [make_key(admin_key, "compute:join-tokens:*@compute-pool/gpu") for _ in range(8)]
    # When they all reject it together
    results = release_together(
        lambda i: call(REJECT, {"tenantId": "acme", "requestId": request_id}, keys[i]), 8
    )
    # Then every one is answered with the one rejection that was written
    written = stored(request_id)
    assert written["state"] == "rejected"
    assert all(r.status == 200 for r in results), [r.body for r in results]
    assert {r.body["decidedBy"] for r in results} == {written["decidedBy"]}


@pytest.mark.parametrize("rejecter_sees_the_claiming_pool", [True, False])
def test_a_rejection_by_id_racing_an_approval_ends_in_one_consistent_outcome(
    queue, admin_key, make_token, machine_factory, rejecter_sees_the_claiming_pool
) -> None:
    # Given unclaimed requests of rack-1, a second pool there, and a rejecter deciding rack-1's pools
    # (all of them, or only gpu while the approvals claim for gpu-b)
    call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "gpu-b", "siteId": "rack-1", "name": "B", "workspaceId": "w"},
        admin_key,
    )
    scope = "site/rack-1" if rejecter_sees_the_claiming_pool else "compute-pool/gpu"
    rejecter = make_key(admin_key, f"compute:join-tokens:*@{scope}")
    for request_id in queue["rack-1"] + defer(make_token, machine_factory, 3, siteId="rack-1"):
        # When an approval for gpu-b and a rejection by id alone are sent at once
        approval, rejection = release_together(
            lambda i, request_id=request_id: call(
                *(
                    (APPROVE, {"tenantId": "acme", "poolId": "gpu-b", "requestId": request_id}, admin_key)
                    if i == 0
                    else (REJECT, {"tenantId": "acme", "requestId": request_id}, rejecter)
                )
            ),
            2,
        )
        # Then what is stored is what the answers say: the rejection landed (before the approval,
        # which is refused, or after it, withdrawing it), or the approval did and a rejecter who
        # cannot see gpu-b was told the request is not found
        written = stored(request_id)
        if rejection.status == 200:
            assert written["state"] == "rejected" and rejection.body["state"] == "rejected"
            assert rejection.body.get("poolId") == written.get("poolId")
            assert approval.status == 200 or approval.reason == "JOIN_REQUEST_NOT_PENDING"
        else:
            assert not rejecter_sees_the_claiming_pool and rejection.code == "NOT_FOUND"
            assert approval.status == 200 and written["state"] == "approved"
            assert written["poolId"] == "gpu-b"


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (LIST, {"tenantId": "acme", "poolId": ""}, "poolId"),
        (LIST, {"tenantId": "acme", "poolId": 7}, "poolId"),
        (LIST, {"tenantId": "acme", "pools": ["gpu"]}, "pools"),
        (LIST, {"poolId": "gpu"}, "tenantId"),
        (GET, {"tenantId": "acme"}, "requestId"),
        (GET, {"tenantId": "acme", "requestId": "jreq_UPPER"}, "requestId"),
        (GET, {"tenantId": "acme", "requestId": "jreq_" + "0" * 26, "reason": "x"}, "reason"),
        (APPROVE, {"tenantId": "acme", "requestId": "jreq_" + "0" * 26, "poolId": "-x"}, "poolId"),
        (REJECT, {"tenantId": "acme", "requestId": "jreq_" + "0" * 26, "ttlSeconds": 60}, "ttlSeconds"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    pool, admin_key, path, body, field
) -> None:
    before = sorted(all_items(), key=lambda i: (i["pk"], i["sk"]))
    reply = call(path, body, admin_key)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
    assert reply.body["error"]["details"][0]["field"] == field
    assert sorted(all_items(), key=lambda i: (i["pk"], i["sk"])) == before

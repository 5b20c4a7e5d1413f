"""The approval queue (the joinRequests API): decisions race-free, isolation exactly as its contract says, and
listing that pages correctly within its stated query bound."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from joinplane import aws, clock, join_requests, keyauth
from joinplane.settings import settings
from tests.support import call, join, release_together
from tests.support.table import all_items


def defer_machines(make_token, machine_factory, count: int, **token_options: Any) -> list[str]:
    token = make_token(requireApproval=True, maxUses=count, **token_options)
    return [
        join({"joinToken": token["token"], "csr": machine_factory().csr}).body["joinRequest"]["requestId"]
        for _ in range(count)
    ]


@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_exactly_one_of_concurrent_decisions_writes(verb, make_token, machine_factory, admin_key) -> None:
    # Given one pending request and 12 operators, each with their own key, deciding it at once
    [request_id] = defer_machines(make_token, machine_factory, 1)
    keys = [
        call(
            "/api/compute/apiKeys/create",
            {"tenantId": "acme", "grants": ["compute:join-tokens:*@tenant"]},
            admin_key,
        ).body["key"]
        for _ in range(12)
    ]
    # When they all decide at once (a read-then-write decision would tell several they decided:
    # tests/harness/test_race_harness.py, create-once)
    results = release_together(
        lambda i: call(
            f"/api/compute/joinRequests/{verb}",
            {"tenantId": "acme", "poolId": "gpu", "requestId": request_id},
            keys[i],
        ),
        12,
    )
    # Then every caller is answered with the one decision that was written: the same decider for all
    stored = next(i for i in all_items() if i["pk"] == f"JREQ#{request_id}")
    assert stored["state"] == {"approve": "approved", "reject": "rejected"}[verb]
    assert all(r.status == 200 for r in results), [r.body for r in results]
    assert {r.body["decidedBy"] for r in results} == {stored["decidedBy"]}
    assert {r.body["decidedAt"] for r in results} == {stored["decidedAt"]}


def test_a_request_names_its_token_its_source_and_every_attestors_verdict(
    make_token, machine_factory, admin_key
) -> None:
    # Given a join token an operator described, which requires approval
    token = make_token(requireApproval=True, description="rack 12 batch, ticket OPS-4711")
    # When a machine joins with it from an address of its own and is told to wait
    deferred = join({"joinToken": token["token"], "csr": machine_factory().csr}, source_ip="203.0.113.7")
    request_id = deferred.body["joinRequest"]["requestId"]
    # Then the request, as the joinRequests API gets and lists it, names the token, its description,
    # that address and every attestor's verdict, the admits included
    got = call("/api/compute/joinRequests/get", {"tenantId": "acme", "requestId": request_id}, admin_key)
    listed = call("/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "gpu"}, admin_key)
    assert got.status == 200
    assert [r for r in listed.body["requests"] if r["requestId"] == request_id] == [got.body]
    assert got.body["tokenId"] == token["tokenId"]
    assert got.body["tokenDescription"] == "rack 12 batch, ticket OPS-4711"
    assert got.body["sourceIp"] == "203.0.113.7"
    assert got.body["verdicts"] == [
        {"attestor": "token", "verdict": "defer"},
        {"attestor": "hardware-ids", "verdict": "admit"},
        {"attestor": "discovery", "verdict": "admit"},
        {"attestor": "tpm", "verdict": "admit"},
        {"attestor": "identity", "verdict": "admit"},
        {"attestor": "aws", "verdict": "admit"},
    ]


def test_a_request_stored_before_its_token_and_source_were_kept_reads_without_them(
    make_token, machine_factory, admin_key
) -> None:
    # Given a pending request as an earlier version stored it: no token description, source or verdicts
    [request_id] = defer_machines(make_token, machine_factory, 1)
    aws.client("dynamodb").update_item(
        TableName=settings().table_name,
        Key={"pk": {"S": f"JREQ#{request_id}"}, "sk": {"S": "JREQ"}},
        UpdateExpression="REMOVE tokenDescription, sourceIp, verdicts",
    )
    # When it is read, Then it reads, with those fields empty, and can still be approved
    got = call("/api/compute/joinRequests/get", {"tenantId": "acme", "requestId": request_id}, admin_key)
    assert got.status == 200, got.body
    assert (got.body["tokenDescription"], got.body["sourceIp"], got.body["verdicts"]) == (None, None, [])
    body = {"tenantId": "acme", "requestId": request_id}
    assert call("/api/compute/joinRequests/approve", body, admin_key).body["state"] == "approved"


def test_approving_twice_returns_the_approval_unchanged(make_token, machine_factory, admin_key) -> None:
    # Given a pending request, approved once
    [request_id] = defer_machines(make_token, machine_factory, 1)
    body = {"tenantId": "acme", "poolId": "gpu", "requestId": request_id, "reason": "known rack"}
    first = call("/api/compute/joinRequests/approve", body, admin_key)
    # When it is approved again later, with another TTL
    clock.advance(5)
    second = call("/api/compute/joinRequests/approve", {**body, "ttlSeconds": 600}, admin_key)
    # Then the answer is the first approval, unchanged
    assert first.status == second.status == 200 and first.body == second.body
    assert first.body["reason"] == "known rack"


def test_decided_states_are_invalid_state_exactly_as_the_seed_says(
    make_token, machine_factory, admin_key
) -> None:
    # Given a rejected request
    [rejected] = defer_machines(make_token, machine_factory, 1)
    call(
        "/api/compute/joinRequests/reject",
        {"tenantId": "acme", "poolId": "gpu", "requestId": rejected},
        admin_key,
    )
    # When it is rejected again, Then that is the rejection, answered again
    again = call(
        "/api/compute/joinRequests/reject",
        {"tenantId": "acme", "poolId": "gpu", "requestId": rejected},
        admin_key,
    )
    assert again.status == 200 and again.body["state"] == "rejected"
    # When it is approved, Then that is INVALID_STATE: the decision is made
    approve = call(
        "/api/compute/joinRequests/approve",
        {"tenantId": "acme", "poolId": "gpu", "requestId": rejected},
        admin_key,
    )
    assert (approve.status, approve.code, approve.reason) == (
        409,
        "INVALID_STATE",
        "JOIN_REQUEST_NOT_PENDING",
    )


def test_isolation_between_pools_and_tenants(make_token, machine_factory, admin_key) -> None:
    # Given a request in pool gpu, a pool cpu in another site, and a key for pool cpu only
    [request_id] = defer_machines(make_token, machine_factory, 1)
    call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "cpu", "siteId": "rack-2", "name": "c", "workspaceId": "w"},
        admin_key,
    )
    cpu_key = call(
        "/api/compute/apiKeys/create",
        {"tenantId": "acme", "grants": ["compute:join-tokens:*@compute-pool/cpu"]},
        admin_key,
    ).body["key"]
    # Then listing gpu, or approving gpu's request through either pool, is NOT_FOUND, and no field shows
    for path, body in [
        ("list", {"tenantId": "acme", "poolId": "gpu"}),
        ("approve", {"tenantId": "acme", "poolId": "gpu", "requestId": request_id}),
        ("approve", {"tenantId": "acme", "poolId": "cpu", "requestId": request_id}),
        ("reject", {"tenantId": "acme", "poolId": "cpu", "requestId": request_id}),
    ]:
        reply = call(f"/api/compute/joinRequests/{path}", body, cpu_key)
        assert (reply.status, reply.code) == (404, "NOT_FOUND"), (path, body, reply.body)
        assert request_id not in str(reply.body) and "rack-1" not in str(reply.body)
    # Another tenant named in the body is PERMISSION_DENIED
    other = call("/api/compute/joinRequests/list", {"tenantId": "globex", "poolId": "cpu"}, cpu_key)
    assert (other.status, other.code) == (403, "PERMISSION_DENIED")
    # A forged or malformed request id
    forged = call(
        "/api/compute/joinRequests/approve",
        {"tenantId": "acme", "poolId": "gpu", "requestId": "jreq_" + "0" * 26},
        admin_key,
    )
    assert forged.code == "NOT_FOUND"
    malformed = call(
        "/api/compute/joinRequests/approve",
        {"tenantId": "acme", "poolId": "gpu", "requestId": "jreq_UPPER"},
        admin_key,
    )
    assert malformed.code == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    "field",
    [
        ("ttlSeconds", 59),
        ("ttlSeconds", 86_401),
        ("reason", "tab\there"),
        ("limit", 0),
        ("limit", 201),
        ("state", "done"),
        ("extra", 1),
    ],
)
def test_seed_constraints(make_token, admin_key, field) -> None:
    # Given a list or approve body with one field outside the contract's constraints
    name, value = field
    path = "list" if name in ("limit", "state") else "approve"
    body = {"tenantId": "acme", "poolId": "gpu", name: value}
    if path == "approve":
        body["requestId"] = "jreq_" + "0" * 26
    make_token()
    # When it is sent, Then it is INVALID_ARGUMENT
    reply = call(f"/api/compute/joinRequests/{path}", body, admin_key)
    assert reply.code == "INVALID_ARGUMENT"


def test_list_pages_through_pool_and_site_requests_oldest_first(
    make_token, machine_factory, admin_key
) -> None:
    # Given 5 requests through the pool's token and 3 through its site's, one of the pool's decided
    pool_requests = defer_machines(make_token, machine_factory, 5)
    site_requests = defer_machines(make_token, machine_factory, 3, siteId="rack-1")
    call(
        "/api/compute/joinRequests/reject",
        {"tenantId": "acme", "poolId": "gpu", "requestId": pool_requests[0]},
        admin_key,
    )
    expected = sorted(pool_requests[1:] + site_requests)
    # When the pending ones are listed 3 at a time
    seen: list[str] = []
    cursor = None
    while True:
        body = {"tenantId": "acme", "poolId": "gpu", "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = call("/api/compute/joinRequests/list", body, admin_key).body
        seen += [r["requestId"] for r in page["requests"]]
        assert all(r["state"] == "pending" for r in page["requests"])
        cursor = page.get("nextCursor")
        if not cursor:
            break
    # Then every pending request shows once, oldest first; the decided one is listed with state=all
    assert seen == expected
    everything = call(
        "/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "gpu", "state": "all"}, admin_key
    ).body["requests"]
    assert [r["requestId"] for r in everything] == sorted(pool_requests + site_requests)


def test_a_page_costs_a_bounded_number_of_queries(make_token, machine_factory, admin_key) -> None:
    # Given 4 pending requests, When each listing state is asked for, Then each page costs a bounded
    # number of Queries and never a Scan
    defer_machines(make_token, machine_factory, 4)
    counted: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        counted[event_name.rsplit(".", 1)[-1]] += 1

    client = aws.client("dynamodb")
    client.meta.events.register("before-call.dynamodb.*", count)
    try:
        for state, sources in [("pending", 1), ("expired", 3), ("all", 5)]:
            counted.clear()
            call(
                "/api/compute/joinRequests/list",
                {"tenantId": "acme", "poolId": "gpu", "state": state},
                admin_key,
            )
            # authorizer + pool reads are GetItems; Queries: at most rounds x owners x sources
            assert counted["Query"] <= join_requests.MAX_ROUNDS * 2 * sources
            assert "Scan" not in counted
    finally:
        client.meta.events.unregister("before-call.dynamodb.*", count)


def test_keys_see_site_requests_only_through_a_pool_of_that_site(
    make_token, machine_factory, admin_key
) -> None:
    # Given a request made through a site token of rack-1, and a pool in another site
    [site_request] = defer_machines(make_token, machine_factory, 1, siteId="rack-1")
    admin = keyauth.verify(admin_key)
    assert admin is not None
    call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "elsewhere", "siteId": "rack-9", "name": "e", "workspaceId": "w"},
        admin_key,
    )
    # When each pool's requests are listed
    elsewhere = call(
        "/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "elsewhere"}, admin_key
    ).body
    # Then the other site's pool sees none; rack-1's pool sees it, with no pool of its own yet
    assert elsewhere["requests"] == []
    here = call("/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "gpu"}, admin_key).body
    assert [r["requestId"] for r in here["requests"]] == [site_request] and here["requests"][0][
        "poolId"
    ] is None

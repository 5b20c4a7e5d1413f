"""Two people for the pools that matter: a pool's `approvalsRequired` distinct API keys approve a join
request before it is approved. Each approval is one conditional write (docs/queue.md, "Two
approvals"); a read-then-write approval loses these races (tests/harness/test_race_harness.py,
complete-once and keep-every-approval)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.support import call, join, key_id_of, release_together
from tests.support.events import publish_table_stream
from tests.support.table import all_items

APPROVE = "/api/compute/joinRequests/approve"


def operators(admin_key: str, count: int) -> list[str]:
    """`count` API keys that may decide join requests, each its own approver."""
    return [
        call(
            "/api/compute/apiKeys/create",
            {"tenantId": "acme", "grants": ["compute:join-tokens:*@tenant"]},
            admin_key,
        ).body["key"]
        for _ in range(count)
    ]


def require(admin_key: str, approvals: int) -> None:
    reply = call(
        "/api/compute/pools/update",
        {"tenantId": "acme", "poolId": "gpu", "approvalsRequired": approvals},
        admin_key,
    )
    assert reply.status == 200 and reply.body["approvalsRequired"] == approvals, reply.body


def deferred(make_token, machine_factory) -> tuple[Any, Any, str]:
    """A machine told to wait: its token, itself, and its request's id."""
    token = make_token(requireApproval=True)
    machine = machine_factory()
    reply = join({"joinToken": token["token"], "csr": machine.csr})
    assert reply.status == 202, reply.body
    return token, machine, reply.body["joinRequest"]["requestId"]


def approve(request_id: str, key: str, **extra: Any) -> Any:
    return call(APPROVE, {"tenantId": "acme", "poolId": "gpu", "requestId": request_id, **extra}, key)


def stored(request_id: str) -> dict[str, Any]:
    return next(i for i in all_items() if i["pk"] == f"JREQ#{request_id}")


def request_events(request_id: str) -> Counter[str]:
    return Counter(e.detail_type for e in publish_table_stream() if e.detail.get("requestId") == request_id)


def test_a_two_approval_pool_admits_only_after_two_different_keys_approved(
    make_token, machine_factory, admin_key
) -> None:
    # Given a pool that requires two approvals and a machine waiting for them
    require(admin_key, 2)
    alice, bob = operators(admin_key, 2)
    token, machine, request_id = deferred(make_token, machine_factory)
    # When one key approves
    first = approve(request_id, alice, reason="serials match the rack sheet")
    # Then the request is still pending, showing who approved, and the machine still waits
    assert first.status == 200, first.body
    assert (first.body["state"], first.body["approvalsRequired"], first.body["decidedBy"]) == (
        "pending",
        2,
        None,
    )
    assert [(a["by"], a["reason"]) for a in first.body["approvals"]] == [
        (key_id_of(alice), "serials match the rack sheet")
    ]
    waiting = join({"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key)
    assert waiting.status == 202 and waiting.body["joinRequest"]["requestId"] == request_id
    # When the same key approves again
    again = approve(request_id, alice)
    # Then it is still one approval: the request unchanged
    assert again.status == 200 and again.body == first.body
    # When a second key approves
    second = approve(request_id, bob)
    # Then the request is approved, by both, decided by the approval that completed it
    assert second.status == 200 and second.body["state"] == "approved", second.body
    assert [a["by"] for a in second.body["approvals"]] == [key_id_of(alice), key_id_of(bob)]
    assert second.body["decidedBy"] == key_id_of(bob)
    # And the machine's retry is admitted
    admitted = join({"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key)
    assert admitted.status == 200, admitted.body
    # And the events say each step: one approval recorded, then the approval listing both approvers
    published = [
        e
        for e in publish_table_stream()
        if e.detail.get("requestId") == request_id and e.detail_type.startswith("security.join-request.")
    ]
    steps = [e.detail_type for e in published]
    assert steps == [
        "security.join-request.created",
        "security.join-request.approval-recorded",
        "security.join-request.approved",
        "security.join-request.consumed",
    ]
    recorded, approved = published[1].detail, published[2].detail
    assert (recorded["approvedBy"], recorded["approvalsRequired"], recorded["state"]) == (
        key_id_of(alice),
        2,
        "pending",
    )
    assert [a["by"] for a in approved["approvals"]] == [key_id_of(alice), key_id_of(bob)]
    # And the audit trail holds each step
    audit = call(
        "/api/compute/auditEvents/list", {"tenantId": "acme", "poolId": "gpu", "limit": 50}, admin_key
    ).body["events"]
    assert {"security.join-request.approval-recorded", "security.join-request.approved"} <= {
        e["detailType"] for e in audit
    }


@pytest.mark.parametrize(("keys", "required"), [(2, 2), (3, 2)])
def test_different_keys_approving_at_once_approve_exactly_once_and_lose_no_approval(
    make_token, machine_factory, admin_key, keys, required
) -> None:
    # Given a pool requiring `required` approvals and `keys` operators
    require(admin_key, required)
    approvers = operators(admin_key, keys)
    _, _, request_id = deferred(make_token, machine_factory)
    # When they all approve at once
    replies = release_together(lambda i: approve(request_id, approvers[i]), keys)
    # Then every one is answered, the request is approved with exactly `required` approvals, all
    # by keys that approved, and one approval event says so
    assert all(r.status == 200 for r in replies), [r.body for r in replies]
    item = stored(request_id)
    assert item["state"] == "approved" and len(item["approvals"]) == required
    assert set(item["approvals"]) <= {key_id_of(k) for k in approvers}
    events = request_events(request_id)
    assert events["security.join-request.approved"] == 1
    assert events["security.join-request.approval-recorded"] == required - 1


def test_the_same_key_approving_twice_at_once_is_one_approval(make_token, machine_factory, admin_key) -> None:
    # Given a two-approval pool and one operator
    require(admin_key, 2)
    [alice] = operators(admin_key, 1)
    _, _, request_id = deferred(make_token, machine_factory)
    # When that key approves four times at once
    replies = release_together(lambda i: approve(request_id, alice), 4)
    # Then each is answered with one approval, and the request is still pending
    assert all(r.status == 200 and r.body["state"] == "pending" for r in replies), [r.body for r in replies]
    item = stored(request_id)
    assert item["state"] == "pending" and list(item["approvals"]) == [key_id_of(alice)]
    assert request_events(request_id)["security.join-request.approval-recorded"] == 1


def test_an_approval_racing_a_rejection_never_approves_a_rejected_request(
    make_token, machine_factory, admin_key
) -> None:
    # Given a two-approval pool and a request one key approved
    require(admin_key, 2)
    alice, bob, carol = operators(admin_key, 3)
    _, _, request_id = deferred(make_token, machine_factory)
    approve(request_id, alice)
    # When a second key approves while a third rejects, at once
    approval, rejection = release_together(
        lambda i: (
            approve(request_id, bob)
            if i == 0
            else call(
                APPROVE.replace("approve", "reject"), {"tenantId": "acme", "requestId": request_id}, carol
            )
        ),
        2,
    )
    # Then the request ends rejected whichever landed first
    assert rejection.status == 200 and rejection.body["state"] == "rejected"
    assert stored(request_id)["state"] == "rejected"
    if approval.status == 200:  # the approval landed first: approved, then rejected
        assert approval.body["state"] == "approved"
        assert list(request_events(request_id)) == [
            "security.join-request.created",
            "security.join-request.approval-recorded",
            "security.join-request.approved",
            "security.join-request.rejected",
        ]
    else:  # the rejection landed first: the approval is refused and records nothing
        assert (approval.status, approval.reason) == (409, "JOIN_REQUEST_NOT_PENDING")
        assert list(stored(request_id)["approvals"]) == [key_id_of(alice)]


def test_a_rejection_by_anyone_rejects_after_some_approvals(make_token, machine_factory, admin_key) -> None:
    # Given a three-approval pool and a request two keys approved
    require(admin_key, 3)
    alice, bob, carol = operators(admin_key, 3)
    token, machine, request_id = deferred(make_token, machine_factory)
    approve(request_id, alice)
    approve(request_id, bob)
    # When a third key rejects it
    rejected = call(
        "/api/compute/joinRequests/reject",
        {"tenantId": "acme", "requestId": request_id, "reason": "no"},
        carol,
    )
    # Then it is rejected, its approvals kept as what happened, and no approval can revive it
    assert rejected.status == 200 and rejected.body["state"] == "rejected"
    assert [a["by"] for a in rejected.body["approvals"]] == [key_id_of(alice), key_id_of(bob)]
    late = approve(request_id, carol)
    assert (late.status, late.reason) == (409, "JOIN_REQUEST_NOT_PENDING")
    refused = join({"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key)
    assert refused.status != 200


def test_a_request_is_judged_by_what_the_pool_requires_at_the_moment_of_an_approval(
    make_token, machine_factory, admin_key
) -> None:
    # Given a two-approval pool and two requests one key approved
    require(admin_key, 2)
    alice, bob, carol = operators(admin_key, 3)
    _, _, lowered = deferred(make_token, machine_factory)
    _, _, raised = deferred(make_token, machine_factory)
    approve(lowered, alice)
    approve(raised, alice)
    # When the pool is lowered to one approval
    require(admin_key, 1)
    # Then a half-approved request is not approved by the change itself; it shows the new count
    shown = call("/api/compute/joinRequests/get", {"tenantId": "acme", "requestId": lowered}, admin_key).body
    assert (shown["state"], len(shown["approvals"]), shown["approvalsRequired"]) == ("pending", 1, 1)
    # When the key that approved it approves again, Then that approval completes it, judged now
    completed = approve(lowered, alice)
    assert completed.body["state"] == "approved" and [a["by"] for a in completed.body["approvals"]] == [
        key_id_of(alice)
    ]
    # When the pool is raised to three, Then the other request needs three distinct keys
    require(admin_key, 3)
    assert approve(raised, bob).body["state"] == "pending"
    final = approve(raised, carol)
    assert (final.body["state"], len(final.body["approvals"]), final.body["approvalsRequired"]) == (
        "approved",
        3,
        3,
    )


def test_a_site_request_is_claimed_by_its_first_approval_and_needs_that_pools_count(
    make_token, machine_factory, admin_key
) -> None:
    # Given a two-approval pool and a machine that joined with its site's token
    require(admin_key, 2)
    alice, bob = operators(admin_key, 2)
    token = make_token(siteId="rack-1", requireApproval=True)
    request_id = join({"joinToken": token["token"], "csr": machine_factory().csr}).body["joinRequest"][
        "requestId"
    ]
    unclaimed = call(
        "/api/compute/joinRequests/get", {"tenantId": "acme", "requestId": request_id}, admin_key
    )
    assert (unclaimed.body["poolId"], unclaimed.body["approvalsRequired"]) == (None, None)
    # When one key approves it for the pool
    first = approve(request_id, alice)
    # Then the pool claimed it and it waits, in the pool's queue, for a second key
    assert (first.body["poolId"], first.body["state"], first.body["approvalsRequired"]) == (
        "gpu",
        "pending",
        2,
    )
    queue = call("/api/compute/joinRequests/list", {"tenantId": "acme", "poolId": "gpu"}, admin_key).body
    assert [r["requestId"] for r in queue["requests"]] == [request_id]
    # When a second key approves it, naming no pool, Then it is approved
    second = call(APPROVE, {"tenantId": "acme", "requestId": request_id}, bob)
    assert second.body["state"] == "approved", second.body


def test_a_bad_approval_count_is_refused_and_changes_nothing(admin_key, pool) -> None:
    # Given a pool requiring one approval
    before = call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "gpu"}, admin_key).body
    assert before["approvalsRequired"] == 1
    for value in (0, 4, "2", None, True, 1.5):
        # When an update or a create sets approvalsRequired to something that is not 1, 2 or 3
        updated = call(
            "/api/compute/pools/update",
            {"tenantId": "acme", "poolId": "gpu", "approvalsRequired": value},
            admin_key,
        )
        created = call(
            "/api/compute/pools/create",
            {
                "tenantId": "acme",
                "poolId": "vault",
                "siteId": "rack-1",
                "name": "v",
                "workspaceId": "w",
                "approvalsRequired": value,
            },
            admin_key,
        )
        # Then both are refused, naming the field, and nothing changed
        for reply in (updated, created):
            assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), (value, reply.body)
            assert "approvalsRequired" in reply.body["error"]["message"]
        assert call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "gpu"}, admin_key).body == before
        vault = call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "vault"}, admin_key)
        assert vault.code == "NOT_FOUND"

"""A join policy's approval in a pool that needs several approvals: it is one approval, by
`policy:<rule>`, never all of them (docs/queue.md, "Two approvals"; docs/policy.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from joinplane import join_decide
from joinplane.join_decide import Admit, AdmitByPolicy, Defer, PolicyApproval
from joinplane.policy import PolicyOutcome
from tests.policy.conftest import rule
from tests.support import call, join, key_id_of
from tests.support.events import publish_table_stream

GPU_HOSTS = rule("gpu-hosts", 'request.hostname.startsWith("gpu-")', "approve", "the GPU racks")


def machine(token: str, hostname: str) -> Any:
    return join({"joinToken": token, "machineFingerprint": f"fp-{hostname}", "hostname": hostname})


@pytest.mark.parametrize(
    ("required", "decided"),
    [
        (1, AdmitByPolicy("gpu-hosts", "the GPU racks", ())),
        (2, Defer((), "gpu-hosts", PolicyApproval("policy:gpu-hosts", "the GPU racks"))),
        (3, Defer((), "gpu-hosts", PolicyApproval("policy:gpu-hosts", "the GPU racks"))),
    ],
)
def test_a_rules_approval_admits_only_a_pool_that_needs_one(required: int, decided: Any) -> None:
    # Given a deferral a policy rule approves
    outcome = PolicyOutcome(rule="gpu-hosts", position=0, decision="approve", reason="the GPU racks")
    # When the pool requires `required` approvals, Then the rule admits, or is the first approval
    assert join_decide.apply_policy(Defer(()), outcome, required) == decided
    # And what the attestors admitted stays admitted, whatever the pool requires
    assert join_decide.apply_policy(Admit(), outcome, required) == Admit()


def test_in_a_three_approval_pool_a_rules_approval_is_one_and_two_keys_complete_it(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any], admin_key: str
) -> None:
    # Given a pool needing three approvals, whose policy approves gpu-* hosts, and two operators
    token = make_token(requireApproval=True)
    assert set_policy([GPU_HOSTS]).status == 200
    updated = call(
        "/api/compute/pools/update", {"tenantId": "acme", "poolId": "gpu", "approvalsRequired": 3}, admin_key
    )
    assert updated.status == 200, updated.body
    alice, bob = (
        call(
            "/api/compute/apiKeys/create",
            {"tenantId": "acme", "grants": ["compute:join-tokens:*@tenant"]},
            admin_key,
        ).body["key"]
        for _ in range(2)
    )

    # When gpu-7 joins
    first = machine(token, "gpu-7")
    # Then it is not admitted: its request waits, with the rule's approval as the first of three
    assert first.status == 202, first.body
    request_id = first.body["joinRequest"]["requestId"]
    body = {"tenantId": "acme", "requestId": request_id}
    shown = call("/api/compute/joinRequests/get", body, admin_key).body
    assert shown["state"] == "pending" and shown["approvalsRequired"] == 3
    assert [(a["by"], a["reason"]) for a in shown["approvals"]] == [("policy:gpu-hosts", "the GPU racks")]

    # When one key approves, Then it is two of three: the machine still waits
    assert call("/api/compute/joinRequests/approve", body, alice).body["state"] == "pending"
    assert machine(token, "gpu-7").status == 202
    # When a second key approves, Then it is approved, by the rule and both keys, and the machine admitted
    approved = call("/api/compute/joinRequests/approve", body, bob).body
    assert approved["state"] == "approved"
    assert [a["by"] for a in approved["approvals"]] == ["policy:gpu-hosts", key_id_of(alice), key_id_of(bob)]
    admitted = machine(token, "gpu-7")
    assert admitted.status == 200 and admitted.body["ok"] is True, admitted.body

    # And the events say each step: created with the rule's approval, one key's, then the approval
    steps = [
        e
        for e in publish_table_stream()
        if e.detail.get("requestId") == request_id and e.detail_type.startswith("security.join-request.")
    ]
    assert [e.detail_type for e in steps] == [
        "security.join-request.created",
        "security.join-request.approval-recorded",
        "security.join-request.approved",
        "security.join-request.consumed",
    ]
    created = steps[0].detail
    assert [a["by"] for a in created["approvals"]] == ["policy:gpu-hosts"]
    assert (created["approvalsRequired"], created["policyRule"]) == (3, "gpu-hosts")
    assert steps[1].detail["approvedBy"] == key_id_of(alice)


def test_the_simulation_says_a_rules_approval_defers_in_a_pool_needing_two(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any], admin_key: str
) -> None:
    # Given a two-approval pool where gpu-1 was deferred (its token requires approval)
    token = make_token(requireApproval=True)
    assert (
        call(
            "/api/compute/pools/update",
            {"tenantId": "acme", "poolId": "gpu", "approvalsRequired": 2},
            admin_key,
        ).status
        == 200
    )
    assert machine(token, "gpu-1").status == 202
    # When a policy approving gpu-* hosts is simulated
    simulated = call(
        "/api/compute/pools/simulatePolicy",
        {"tenantId": "acme", "poolId": "gpu", "joinPolicy": [GPU_HOSTS]},
        admin_key,
    )
    # Then the join would still wait for a person, the rule's approval being one of two
    assert simulated.status == 200, simulated.body
    [item] = simulated.body["items"]
    assert (item["decision"], item["rule"]) == ("defer", "gpu-hosts")
    # And once switched on, the rule does what the simulation said
    assert set_policy([GPU_HOSTS]).status == 200
    assert machine(token, "gpu-2").status == 202

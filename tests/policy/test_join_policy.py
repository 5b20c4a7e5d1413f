"""A pool's join policy through the real API: saved (and refused) with pools/update, evaluated by
POST /machines/join after the attestors, over the moto server (docs/policy.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from joinplane import events
from joinplane.dal import dynamo
from joinplane.dal.machines import machine_key
from joinplane.dal.requests import request_key
from tests.policy.conftest import rule
from tests.support import call, join
from tests.support.events import record

GPU_HOSTS = rule("gpu-hosts", 'request.hostname.startsWith("gpu-")', "approve", "the GPU racks")


def machine(token: str, hostname: str, **facts: Any) -> Any:
    return join({"joinToken": token, "machineFingerprint": f"fp-{hostname}", "hostname": hostname, **facts})


def stored(key: tuple[str, str]) -> dict[str, Any]:
    item = dynamo.get(*key)
    assert item is not None
    return item


def test_an_approve_rule_admits_gpu_hosts_at_once_and_leaves_the_others_to_a_person(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any]
) -> None:
    # Given a token that requires approval, and the pool's policy approving gpu-* hosts
    token = make_token(requireApproval=True)
    assert set_policy([GPU_HOSTS]).status == 200

    # When gpu-7 and rogue-1 join
    gpu, rogue = machine(token, "gpu-7"), machine(token, "rogue-1")

    # Then gpu-7 is admitted at once and rogue-1 waits for an operator
    assert gpu.status == 200 and gpu.body["ok"] is True, gpu.body
    assert rogue.status == 202 and rogue.body["joinRequest"]["state"] == "pending"
    # And the admission is recorded as the rule's approval: on the machine, and on a request the
    # machine consumed, which keeps why the join had been deferred
    admitted = stored(machine_key(gpu.body["machineId"]))
    assert admitted["policyRule"] == "gpu-hosts"
    request = stored(request_key(admitted["requestId"]))
    assert (request["state"], request["decidedBy"], request["policyRule"]) == (
        "consumed",
        "policy",
        "gpu-hosts",
    )
    assert request["reason"] == "the GPU racks" and request["machineId"] == gpu.body["machineId"]
    assert [r["code"] for r in request["reasons"]] == ["approval_required"]
    # And the events say so: the request consumed by policy, the machine joined by policy
    consumed = events.from_stream_record(record(None, request))
    joined = events.from_stream_record(record(None, admitted))
    assert consumed is not None and joined is not None
    assert (consumed.detail_type, consumed.detail["decidedBy"], consumed.detail["policyRule"]) == (
        "security.join-request.consumed",
        "policy",
        "gpu-hosts",
    )
    assert (joined.detail["decidedBy"], joined.detail["policyRule"]) == ("policy", "gpu-hosts")


def test_a_deny_rule_refuses_with_permission_denied_naming_the_rule(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any]
) -> None:
    # Given a policy that denies small machines
    token = make_token()
    assert set_policy([rule("too-small", "request.gpuCount < 4", "deny", "fewer than 4 GPUs")]).status == 200

    # When a machine with 2 GPUs joins
    reply = machine(token, "gpu-1", gpuCount=2)

    # Then it is refused with gRPC code 7, the rule and its reason in the message
    assert reply.status == 403 and reply.body["code"] == 7, reply.body
    assert "too-small" in reply.body["message"] and "fewer than 4 GPUs" in reply.body["message"]


def test_a_defer_rule_makes_a_person_decide_what_the_attestors_admitted(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any]
) -> None:
    # Given a token the attestors admit with, and a policy deferring hosts outside the lab's names
    token = make_token()
    assert (
        set_policy([rule("strangers", '!request.hostname.startsWith("lab-")', "defer", "unknown")]).status
        == 200
    )

    # When lab-1 and other-1 join
    lab, other = machine(token, "lab-1"), machine(token, "other-1")

    # Then lab-1 is admitted (no rule matched) and other-1 deferred, the rule named on its request
    assert lab.status == 200
    assert other.status == 202 and "strangers" in other.body["errMsg"]
    request = stored(request_key(other.body["joinRequest"]["requestId"]))
    assert request["policyRule"] == "strangers"
    assert [(r["attestor"], r["code"]) for r in request["reasons"]] == [("policy", "policy_defer")]


def test_an_approve_rule_never_admits_what_an_attestor_denied(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any]
) -> None:
    # Given a token whose identity attestor denies a machine without a key, and a policy approving all
    token = make_token(attestation={"identity": "key"})
    assert set_policy([rule("everyone", "true", "approve")]).status == 200

    # When a machine joins with a fingerprint only
    reply = machine(token, "gpu-1")

    # Then the attestor's deny stands
    assert reply.status == 403 and reply.body["code"] == 7 and "key-bound" in reply.body["message"]


def test_a_rule_that_fails_at_join_time_defers_naming_itself(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any]
) -> None:
    # Given a rule that holds for the sample join but indexes past the end of a short list
    token = make_token()
    assert set_policy([rule("second-gpu", 'request.gpuIds[1] == "GPU-1"', "approve")]).status == 200

    # When a machine with no GPU ids joins (the attestors admit it)
    reply = machine(token, "gpu-1")

    # Then it is deferred, never admitted, and its request names the rule and the error
    assert reply.status == 202, reply.body
    request = stored(request_key(reply.body["joinRequest"]["requestId"]))
    assert request["policyRule"] == "second-gpu"
    (reason,) = request["reasons"]
    assert reason["code"] == "policy_error" and "second-gpu" in reason["message"]


def test_a_syntax_error_is_refused_when_saved_with_its_position_and_the_pool_is_unchanged(
    admin_key: str, set_policy: Callable[[Any], Any]
) -> None:
    # Given a pool with a policy
    assert set_policy([GPU_HOSTS]).status == 200
    before = call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "gpu"}, admin_key).body

    # When a policy whose second rule misses a parenthesis on its second line is saved
    broken = rule("broken", 'request.os == "linux" &&\n  request.hostname.startsWith("gpu-"', "approve")
    reply = set_policy([GPU_HOSTS, broken])

    # Then it is refused with the rule, the parser's message and the position
    assert reply.status == 400 and reply.code == "INVALID_ARGUMENT", reply.body
    (detail,) = reply.body["error"]["details"]
    assert (detail["field"], detail["rule"], detail["line"], detail["column"]) == (
        "joinPolicy.1.when",
        "broken",
        2,
        37,
    )
    assert "Syntax error" in detail["reason"]
    # And the pool is as it was
    assert call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "gpu"}, admin_key).body == before


LONG = " || ".join(["request.cpuCount == 1"] * 100)


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ([{**GPU_HOSTS, "priority": 1}], "priority"),
        ([rule(f"r{i}", "true", "defer") for i in range(33)], "32"),
        ([rule("long", LONG, "approve")], "2048"),
        ([{**GPU_HOSTS, "decision": "admit"}], "decision"),
        ([{**GPU_HOSTS, "when": 5}], "when"),
        ([{**GPU_HOSTS, "name": "has space"}], "name"),
        ([GPU_HOSTS, GPU_HOSTS], "repeats the name"),
        ({"gpu-hosts": GPU_HOSTS}, "joinPolicy"),
        (None, "cannot be null"),
        ([rule("typo", 'reqest.hostname == "a"', "approve")], "reqest"),
        ([rule("no-field", "request.rack == 7", "approve")], "rack"),
        ([rule("types", 'request.gpuCount > "4"', "approve")], "overload"),
        ([rule("not-bool", "request.gpuCount + 1", "approve")], "bool"),
        ([rule("nested", "request.gpu.exists(g, request.gpuIds.exists(i, i == g))", "approve")], "inside"),
        ([rule("chained", "request.gpu.map(g, g + g).exists(x, x == 'a')", "approve")], "result"),
        ([rule("control", "true\u0007", "approve")], "when"),
    ],
    ids=[
        "unknown field",
        "33 rules",
        "expression over 2048",
        "unknown decision",
        "when not a string",
        "bad name",
        "names repeated",
        "not a list",
        "null",
        "unknown variable",
        "unknown field of request",
        "wrong types",
        "not a bool",
        "nested comprehension",
        "comprehension over a comprehension",
        "control character",
    ],
)
def test_a_bad_policy_is_refused_and_changes_nothing(
    admin_key: str, set_policy: Callable[[Any], Any], policy: Any, says: str
) -> None:
    # Given a pool with a policy
    assert set_policy([GPU_HOSTS]).status == 200
    before = call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "gpu"}, admin_key).body

    # When the bad policy is saved
    reply = set_policy(policy)

    # Then it is refused with a reason that names what is wrong, and the pool is unchanged
    assert reply.status == 400 and reply.code == "INVALID_ARGUMENT", reply.body
    assert says in str(reply.body["error"]), reply.body
    assert call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "gpu"}, admin_key).body == before


def test_a_policy_is_shown_replaced_and_removed(admin_key: str, set_policy: Callable[[Any], Any]) -> None:
    # Given a pool without a policy
    get = {"tenantId": "acme", "poolId": "gpu"}
    assert call("/api/compute/pools/get", get, admin_key).body["joinPolicy"] == []

    # When a policy is saved, then an update leaves it out, then the empty policy is saved
    saved = set_policy([GPU_HOSTS]).body
    renamed = call("/api/compute/pools/update", {**get, "name": "GPU racks"}, admin_key).body
    removed = set_policy([]).body

    # Then the view shows it, an update without it keeps it, and the empty one removes it
    assert saved["joinPolicy"] == [GPU_HOSTS] and renamed["joinPolicy"] == [GPU_HOSTS]
    assert removed["joinPolicy"] == [] and "joinPolicy" not in stored(("TENANT#acme", "POOL#gpu"))


def test_a_pool_is_created_with_a_policy_that_compiles_and_refused_with_one_that_does_not(
    admin_key: str,
) -> None:
    # Given a pool's body
    body = {"tenantId": "acme", "siteId": "lab", "name": "n", "workspaceId": "w"}

    # When one is created with a policy, another with a broken one
    good = call("/api/compute/pools/create", {**body, "poolId": "p1", "joinPolicy": [GPU_HOSTS]}, admin_key)
    bad = call(
        "/api/compute/pools/create",
        {**body, "poolId": "p2", "joinPolicy": [rule("x", "(", "deny")]},
        admin_key,
    )

    # Then the first has it, and the second does not exist
    assert good.status == 200 and good.body["joinPolicy"] == [GPU_HOSTS]
    assert bad.status == 400 and bad.body["error"]["details"][0]["rule"] == "x"
    assert call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "p2"}, admin_key).status == 404


def test_a_deny_rule_an_operator_removed_no_longer_denies_from_a_warm_container(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any]
) -> None:
    # Given a policy denying gpu hosts, which a join read (the pool is now cached in this container)
    token = make_token()
    assert set_policy([rule("no-gpus", 'request.hostname.startsWith("gpu-")', "deny")]).status == 200
    assert machine(token, "gpu-1").status == 403

    # When an operator removes the policy, and another gpu host joins through the warm container
    assert set_policy([]).status == 200
    reply = machine(token, "gpu-2")

    # Then the deny is not taken from the stale copy: the machine is admitted
    assert reply.status == 200, reply.body


def test_an_approve_rule_leaves_a_cloned_serial_to_a_person(
    make_token: Callable[..., str], set_policy: Callable[[Any], Any]
) -> None:
    # Given a pool approving gpu-* hosts, and gpu-1 admitted with a serial number
    token = make_token()
    assert set_policy([GPU_HOSTS]).status == 200
    assert machine(token, "gpu-1", hardware={"serialNumber": "SN-7781-A"}).status == 200

    # When another machine, also named gpu-*, joins with the same serial (a cloned image)
    clone = machine(token, "gpu-2", hardware={"serialNumber": "SN-7781-A"})

    # Then it waits in the queue as a clone for a person, rather than being told to retry forever
    # (the rule's admission could never commit: the serial's claim is another machine's)
    assert clone.status == 202, clone.body
    request = stored(request_key(clone.body["joinRequest"]["requestId"]))
    assert "duplicate_hardware_id" in [r["code"] for r in request["reasons"]]

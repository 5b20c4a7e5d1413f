"""POST /cluster/accept-join: the answers a Sylve node gets, and what they leave in the table.

The helpers (post, make_cluster, join_body...) are tests/support/clusters.py's.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from joinplane import deadline
from joinplane.clusters import inventory, membership, sylve_wire
from joinplane.dal import dynamo
from joinplane.errors import Unavailable
from tests.support import LambdaContext, call, http_event, load_function
from tests.support.clusters import (
    PATH,
    POOL,
    TENANT,
    Remaining,
    cluster_nodes,
    entries,
    join_body,
    make_cluster,
    post,
    registry,
)
from tests.support.table import all_items


def test_preflight_passes_with_the_merged_report_and_writes_nothing(key: str) -> None:
    # Given a cluster with node-a and its guests 1-3
    assert post(join_body("node-a", "10.0.0.1", [1, 2, 3]), key).status == 200
    before = all_items()
    # When node-b asks for a preflight with guests 10 and 11
    reply = post(join_body("node-b", "10.0.0.2", [10, 11], preflight=True), key)
    # Then it passes, with the leader's merged report (registry claims carry recordId 0, no name)
    assert reply.status == 200
    assert reply.body["status"] == "success"
    assert reply.body["message"] == "cluster_join_preflight_passed"
    assert reply.body["error"] == ""
    merged = inventory.build_report(
        [{"nodeId": "node-a", "guestType": "vm", "guestId": i} for i in (1, 2, 3)]
        + entries("node-b", [10, 11])
    )
    assert reply.body["data"] == merged.model_dump()
    # And nothing changed
    assert all_items() == before


def test_accept_commits_the_node_and_all_of_its_guest_ids(key: str) -> None:
    body = join_body("node-a", "10.0.0.1", [7, 250, 9999], version="0.9.1")
    reply = post(body, key)
    assert reply.status == 200
    assert reply.body == {
        "status": "success",
        "message": "node_added_to_cluster",
        "error": "",
        "data": body["inventory"],
    }
    assert registry() == [(7, "node-a", "vm"), (250, "node-a", "vm"), (9999, "node-a", "vm")]


def test_the_node_item_is_the_node_joined_event(key: str) -> None:
    """The stream publisher turns the INSERT of a `CLUSTERNODE#` item into
    security.cluster.node-joined: exactly one such item per committed node, with these facts."""
    before = {(i["pk"], i["sk"]) for i in all_items()}
    body = join_body("node-a", "10.0.0.1", [1, 2])
    assert post(body, key).status == 200
    new = [i for i in all_items() if (i["pk"], i["sk"]) not in before]
    nodes = [i for i in new if i["pk"].startswith("CLUSTERNODE#")]
    assert len(nodes) == 1
    node = nodes[0]
    assert node["pk"] == "CLUSTERNODE#acme#sylve" and node["sk"] == "NODE#node-a"
    assert set(node) == {
        "pk",
        "sk",
        "tenantId",
        "siteId",
        "poolId",
        "nodeId",
        "nodeIp",
        "nodeVersion",
        "digest",
        "guestCount",
        "joinedAt",
    }
    assert (node["tenantId"], node["siteId"], node["poolId"]) == ("acme", "dc-1", "sylve")
    assert (node["nodeId"], node["nodeIp"], node["nodeVersion"]) == ("node-a", "10.0.0.1", "1.0.0")
    assert node["digest"] == body["inventory"]["digest"] and node["guestCount"] == 2
    assert node["joinedAt"].endswith("Z")


def test_the_publisher_reads_the_node_item_as_node_joined(key: str) -> None:
    from joinplane import events

    body = join_body("node-a", "10.0.0.1", [1, 2])
    assert post(body, key).status == 200
    (node,) = cluster_nodes()
    record = {
        "eventName": "INSERT",
        "dynamodb": {
            "Keys": dynamo.serialize({"pk": node["pk"], "sk": node["sk"]}),
            "NewImage": dynamo.serialize(node),
            "SequenceNumber": "1",
        },
    }
    event = events.from_stream_record(record)
    assert event is not None and event.detail_type == "security.cluster.node-joined"
    assert event.detail["nodeId"] == "node-a" and event.detail["guestCount"] == 2
    assert (event.detail["tenantId"], event.detail["siteId"], event.detail["poolId"]) == (
        "acme",
        "dc-1",
        "sylve",
    )
    # nothing else a join writes is an event
    others = [i for i in all_items() if i["pk"].startswith("CLUSTER#")]
    assert others and all(
        events.from_stream_record({"dynamodb": {"NewImage": dynamo.serialize(i)}}) is None for i in others
    )


def test_an_exact_retry_is_answered_again_and_changes_nothing(key: str) -> None:
    body = join_body("node-a", "10.0.0.1", [1, 2])
    assert post(body, key).status == 200
    before = all_items()
    again = post(body, key)
    assert (again.status, again.body["message"], again.body["data"]) == (
        200,
        "node_added_to_cluster",
        body["inventory"],
    )
    assert post({**body, "preflight": True}, key).body["message"] == "cluster_join_preflight_passed"
    assert all_items() == before


def test_node_version_must_be_the_required_one(admin_key: str) -> None:
    key = make_cluster(admin_key, "versioned", required="2.1.0")
    before = all_items()
    reply = post(join_body("node-a", "10.0.0.1", [1], version="2.0.0"), key)
    assert reply.status == 409
    assert reply.body == {
        "status": "error",
        "message": "cluster_version_mismatch",
        "error": "leader=2.1.0,node=2.0.0",
        "data": None,
    }
    assert all_items() == before
    # Sylve trims both sides before comparing
    assert post(join_body("node-a", "10.0.0.1", [1], version=" 2.1.0 "), key).status == 200


def test_without_a_required_version_any_version_joins_but_a_blank_one(key: str) -> None:
    assert post(join_body("node-a", "10.0.0.1", [1], version="whatever-7"), key).status == 200
    blank = post(join_body("node-b", "10.0.0.2", [2], version="   "), key)
    assert (blank.status, blank.body["message"], blank.body["error"]) == (
        409,
        "cluster_version_mismatch",
        "leader=,node=",
    )


def test_a_changed_required_version_applies_to_the_next_join(admin_key: str, key: str) -> None:
    updated = call(
        "/api/compute/pools/update",
        {"tenantId": TENANT, "poolId": POOL, "cluster": {"requiredNodeVersion": "3.0"}},
        admin_key,
    )
    assert updated.status == 200
    assert post(join_body("node-a", "10.0.0.1", [1], version="1.0.0"), key).status == 409
    assert post(join_body("node-a", "10.0.0.1", [1], version="3.0"), key).status == 200


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (lambda b: b["inventory"].update(digest="0" * 64), "joining_inventory_digest_mismatch"),
        (lambda b: b["inventory"].update(digest=""), "joining_inventory_digest_mismatch"),
        (
            lambda b: b["inventory"].update(digest=b["inventory"]["digest"].upper()),
            "joining_inventory_digest_mismatch",
        ),
        (lambda b: b["inventory"]["entries"].pop(), "joining_inventory_digest_mismatch"),
        (
            lambda b: b["inventory"]["entries"][1].update(nodeId="node-z"),
            "joining_inventory_node_mismatch: expected=node-a actual=node-z",
        ),
        (lambda b: b.update(nodeId="   "), "joining_node_id_required"),
    ],
)
def test_the_joiners_own_inventory_is_checked(key: str, tamper: Any, reason: str) -> None:
    body = join_body("node-a", "10.0.0.1", [1, 2, 3])
    tamper(body)
    before = all_items()
    reply = post(body, key)
    assert reply.status == 409
    assert reply.body == {
        "status": "error",
        "message": "guest_identity_join_preflight_failed",
        "error": reason,
        "data": None,
    }
    assert all_items() == before


def test_conflicts_inside_the_joiners_inventory_are_reported_with_its_report(key: str) -> None:
    items = entries("node-a", [5]) + entries("node-a", [5], "jail") + entries("node-a", [0, 10_000])
    before = all_items()
    reply = post(join_body("node-a", "10.0.0.1", items=items), key)
    assert reply.status == 409
    assert reply.body["message"] == "guest_identity_inventory_conflict"
    expected = inventory.build_report(items)
    assert reply.body["data"] == expected.model_dump()
    reasons = [(c["guestId"], c["reason"]) for c in reply.body["data"]["conflicts"]]
    assert reasons == [(0, "invalid_guest_id"), (5, "shared_guest_id"), (10_000, "invalid_guest_id")]
    conflicts = json.dumps([c.model_dump() for c in expected.conflicts], separators=(",", ":"))
    assert reply.body["error"] == f"guest_identity_inventory_conflict: {conflicts}"
    assert all_items() == before


def test_a_guest_id_claimed_by_a_member_is_a_conflict_with_the_merged_report(key: str) -> None:
    assert post(join_body("node-a", "10.0.0.1", [1, 2]), key).status == 200
    before = all_items()
    reply = post(join_body("node-b", "10.0.0.2", [2, 3], preflight=True), key)
    assert reply.status == 409
    assert reply.body["status"] == "error"
    assert reply.body["message"] == "guest_identity_inventory_conflict"
    data = reply.body["data"]
    assert data["conflicts"] == [
        {
            "guestId": 2,
            "reason": "shared_guest_id",
            "entries": [
                {"nodeId": "node-a", "guestType": "vm", "guestId": 2, "recordId": 0, "name": ""},
                {"nodeId": "node-b", "guestType": "vm", "guestId": 2, "recordId": 2, "name": "vm-2"},
            ],
        }
    ]
    assert [(e["guestId"], e["nodeId"]) for e in data["entries"]] == [
        (1, "node-a"),
        (2, "node-a"),
        (2, "node-b"),
        (3, "node-b"),
    ]
    assert reply.body["error"].startswith('guest_identity_inventory_conflict: [{"guestId":2,')
    # The same for the real accept, and it leaves nothing behind
    assert post(join_body("node-b", "10.0.0.2", [2, 3]), key).status == 409
    assert all_items() == before


def test_a_guest_id_is_one_namespace_for_vms_and_jails(key: str) -> None:
    assert post(join_body("node-a", "10.0.0.1", items=entries("node-a", [42], "jail")), key).status == 200
    reply = post(join_body("node-b", "10.0.0.2", [42]), key)
    assert (reply.status, reply.body["message"]) == (409, "guest_identity_inventory_conflict")


def test_membership_checks(key: str) -> None:
    assert post(join_body("node-a", "10.0.0.1", [1]), key).status == 200
    before = all_items()
    same_id = post(join_body("node-a", "10.0.0.9", [1]), key)
    same_ip = post(join_body("node-b", "10.0.0.1", [2]), key)
    # an IPv4-mapped IPv6 address is the same IPv4 address to Sylve
    mapped = post(join_body("node-c", "::ffff:10.0.0.1", [3]), key)
    for reply, reason in [
        (same_id, "joining_node_id_already_in_use"),
        (same_ip, "joining_node_address_already_in_use"),
        (mapped, "joining_node_address_already_in_use"),
    ]:
        assert (reply.status, reply.body["message"], reply.body["error"]) == (
            409,
            "guest_identity_join_preflight_failed",
            reason,
        )
    assert all_items() == before


def test_ipv6_is_refused_as_sylve_does(key: str) -> None:
    before = all_items()
    reply = post(join_body("node-a", "2001:db8::1", [1]), key)
    assert (reply.status, reply.body["message"], reply.body["error"]) == (
        400,
        "cluster_join_failed",
        "cluster_ipv6_unsupported",
    )
    assert all_items() == before
    assert post(join_body("node-a", "::ffff:192.0.2.7", [1]), key).status == 200
    assert cluster_nodes()[0]["nodeIp"] == "192.0.2.7"


def test_preflight_then_a_concurrent_change_then_accept_rechecks(key: str) -> None:
    # node-b's preflight passes while guest 2 is free
    assert post(join_body("node-b", "10.0.0.2", [2, 3], preflight=True), key).status == 200
    # meanwhile node-a joins with guest 2
    assert post(join_body("node-a", "10.0.0.1", [1, 2]), key).status == 200
    before = all_items()
    # node-b's accept decides again and refuses
    reply = post(join_body("node-b", "10.0.0.2", [2, 3]), key)
    assert (reply.status, reply.body["message"]) == (409, "guest_identity_inventory_conflict")
    assert all_items() == before


def test_preflight_then_a_key_rotation_then_accept_is_refused(admin_key: str, key: str) -> None:
    assert post(join_body("node-a", "10.0.0.1", [1], preflight=True), key).status == 200
    rotated = call("/api/compute/clusters/rotateKey", {"tenantId": TENANT, "poolId": POOL}, admin_key)
    before = all_items()
    assert post(join_body("node-a", "10.0.0.1", [1]), key).status == 401
    assert all_items() == before
    assert post(join_body("node-a", "10.0.0.1", [1]), rotated.body["clusterKey"]).status == 200


def test_a_member_cannot_change_its_inventory_by_joining_again(key: str) -> None:
    assert post(join_body("node-a", "10.0.0.1", [1, 2]), key).status == 200
    before = all_items()
    grown = post(join_body("node-a", "10.0.0.1", [1, 2, 3]), key)
    shrunk = post(join_body("node-a", "10.0.0.1", [1]), key)
    retyped = post(join_body("node-a", "10.0.0.1", items=entries("node-a", [1, 2], "jail")), key)
    assert (grown.status, grown.body["error"]) == (409, "joining_inventory_changed_for_existing_voter")
    assert (shrunk.status, shrunk.body["error"]) == (409, "joining_inventory_changed_for_existing_member")
    assert (retyped.status, retyped.body["message"]) == (409, "guest_identity_inventory_conflict")
    assert all_items() == before


def test_a_node_without_guests_joins(key: str) -> None:
    reply = post(join_body("node-a", "10.0.0.1", []), key)
    assert reply.status == 200
    assert cluster_nodes()[0]["guestCount"] == 0
    assert registry() == []


def test_node_ids_and_inventory_are_taken_in_sylves_canonical_form(key: str) -> None:
    # Sylve trims node IDs and names and lower-cases guest types before anything else
    items = [{"nodeId": " node-a ", "guestType": " VM", "guestId": 4, "recordId": 1, "name": " four "}]
    body = join_body(" node-a\u3000", "10.0.0.1", items=items)
    body["inventory"]["entries"] = items  # as stored on the node, not canonical
    reply = post(body, key)
    assert reply.status == 200
    assert reply.body["data"]["entries"] == items  # the submission is echoed as sent
    assert cluster_nodes()[0]["nodeId"] == "node-a"
    assert registry() == [(4, "node-a", "vm")]


def test_a_store_outage_is_503_inventory_unavailable(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise Unavailable("the store is unavailable, retry later")

    monkeypatch.setattr(dynamo, "query", throttled)
    before = all_items()
    reply = post(join_body("node-a", "10.0.0.1", [1]), key)
    assert reply.status == 503
    assert reply.body["message"] == "guest_identity_inventory_unavailable"
    assert reply.body["error"].startswith("guest_identity_inventory_unavailable:")
    assert reply.body["data"] is None
    assert all_items() == before


def test_a_transaction_refused_for_other_reasons_is_503(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(writes: Any, **_: Any) -> None:
        raise dynamo.TransactionCanceled(["ThrottlingError"])

    monkeypatch.setattr(dynamo, "transact", refused)
    reply = post(join_body("node-a", "10.0.0.1", [1]), key)
    assert (reply.status, reply.body["message"]) == (503, "guest_identity_inventory_unavailable")


def test_a_join_that_keeps_losing_gives_up_with_503_before_its_deadline(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a store on which every commit of this join loses to another transaction
    calls = []

    def lost(writes: Any, **_: Any) -> None:
        calls.append(len(writes))
        raise dynamo.TransactionCanceled(["None", "TransactionConflict"])

    monkeypatch.setattr(dynamo, "transact", lost)
    before = all_items()
    # When it is sent with 1.6 s of its invocation left
    started = time.monotonic()
    reply = post(join_body("node-a", "10.0.0.1", [1]), key, context=Remaining(1.6))
    elapsed = time.monotonic() - started
    # Then it tried more than once, and stopped with time to spare (1 s is kept in reserve)
    assert len(calls) > 1
    assert elapsed < 1.6
    # And the answer is Sylve's 503 with a retry hint, and nothing was written
    assert (reply.status, reply.body["message"]) == (503, "guest_identity_inventory_unavailable")
    assert reply.headers["retry-after"] == "1"
    assert "retry_after_seconds=1" in reply.body["error"]
    assert all_items() == before


def test_a_join_that_keeps_losing_without_a_deadline_stops_after_max_attempts(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given every commit loses, and a caller that gives no Lambda context (no deadline)
    calls = []

    def lost(writes: Any, **_: Any) -> None:
        calls.append(len(writes))
        raise dynamo.TransactionCanceled(["None", "TransactionConflict"])

    monkeypatch.setattr(dynamo, "transact", lost)
    monkeypatch.setattr(deadline.time, "sleep", lambda seconds: None)
    cluster = membership.authenticate(key)
    request = sylve_wire.decode_accept_join(json.dumps(join_body("node-a", "10.0.0.1", [1])).encode())
    # When it joins, Then it gives up after MAX_ATTEMPTS with a retryable error
    with pytest.raises(Unavailable):
        membership.accept_join(cluster, request)
    assert len(calls) == membership.MAX_ATTEMPTS


def test_a_request_exactly_as_a_sylve_node_marshals_it(key: str) -> None:
    """Go's json.Marshal of Sylve's AcceptJoinRequest, plus what newer nodes add: the `clusterKey`
    some versions also put in the body and `inFlightGuestIds` in the report."""
    items = entries("4c4c4544-0042-3510-8052-b4c04f4e4d32", [101, 102])
    built = inventory.build_report(items)
    raw = (
        '{"nodeId":"4c4c4544-0042-3510-8052-b4c04f4e4d32","nodeIp":"192.0.2.10","nodeVersion":"0.2.1",'
        f'"preflight":false,"clusterKey":"{key}","inventory":{{"entries":'
        + inventory.go_json_compact([e.model_dump() for e in built.entries]).decode()
        + f',"conflicts":[],"digest":"{built.digest}","inFlightGuestIds":[103]}}}}'
    )
    reply = post(raw=raw.encode(), key=key)
    assert reply.status == 200, reply.body
    assert reply.body["data"]["inFlightGuestIds"] == [103]
    assert list(reply.body["data"]) == ["entries", "conflicts", "digest", "inFlightGuestIds"]


def test_the_answer_is_gins_json(key: str) -> None:
    body = join_body("node-<a>", "10.0.0.1", [1])
    result = load_function("cluster_join").lambda_handler(
        http_event(PATH, json.dumps(body), {"x-cluster-key": key}), LambdaContext()
    )
    assert result["headers"]["content-type"] == "application/json; charset=utf-8"
    # Go's encoder: compact, struct field order, HTML characters escaped
    assert result["body"].startswith(
        '{"status":"success","message":"node_added_to_cluster","error":"","data":{'
    )
    assert '"nodeId":"node-\\u003ca\\u003e"' in result["body"]


def test_the_api_base_path_a_sylve_node_uses_is_the_same_endpoint(key: str) -> None:
    reply = post(join_body("node-a", "10.0.0.1", [1], preflight=True), key, path="/api/cluster/accept-join")
    assert reply.status == 200
    assert post(join_body("node-a", "10.0.0.1", [1]), key, path="/cluster/elsewhere").status == 404


def test_an_archived_pools_key_stops_working(admin_key: str, key: str) -> None:
    archived = call("/api/compute/pools/archive", {"tenantId": TENANT, "poolId": POOL}, admin_key)
    assert archived.status == 200
    reply = post(join_body("node-a", "10.0.0.1", [1]), key)
    assert (reply.status, reply.body["message"]) == (401, "invalid_cluster_key")

"""POST /cluster/accept-join refuses bad credentials and bad bodies with Sylve's answers, in
Sylve's order (credential, then size, then the body), and none of them writes anything."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from joinplane import credentials
from tests.support import LambdaContext, call, http_event, load_function
from tests.support.clusters import POOL, TENANT, join_body, make_cluster, post
from tests.support.table import all_items

UNAUTHORIZED = {
    "status": "error",
    "message": "invalid_cluster_key",
    "error": "invalid_cluster_key",
    "data": None,
}
FORBIDDEN = {
    "status": "error",
    "message": "cluster_token_forbidden",
    "error": "cluster_token_forbidden",
    "data": None,
}
TOO_LARGE = {
    "status": "error",
    "message": "request_body_too_large",
    "error": "request_body_too_large",
    "data": None,
}
MIB = 1 << 20


@pytest.fixture
def body() -> dict[str, Any]:
    return join_body("node-a", "10.0.0.1", [1, 2])


def refused(reply: Any, status: int, expected: dict[str, Any]) -> None:
    assert (reply.status, reply.body) == (status, expected)


def test_no_key_is_401(key: str, body: dict[str, Any]) -> None:
    before = all_items()
    refused(post(body), 401, UNAUTHORIZED)
    refused(post(body, ""), 401, UNAUTHORIZED)
    assert all_items() == before


@pytest.mark.parametrize(
    "garbage",
    [
        "hello",
        "jck_",
        "jpk_" + "0" * 26 + "_" + "0" * 32,
        # Well formed, names no key; fixed, since every xdist worker must collect the same test ids.
        "jck_01m8r0yd50q39mxq4da14f37wb_" + "0" * 32,
        "jck_" + "A" * 26 + "_" + "0" * 32,  # upper case is not our alphabet
        "x" * 4096,
    ],
)
def test_unknown_or_garbage_keys_are_401(key: str, body: dict[str, Any], garbage: str) -> None:
    before = all_items()
    refused(post(body, garbage), 401, UNAUTHORIZED)
    assert all_items() == before


def test_the_right_key_id_with_the_wrong_secret_is_401(key: str, body: dict[str, Any]) -> None:
    parsed = credentials.parse(key, "jck")
    assert parsed is not None
    forged = credentials.mint("jck", parsed.ulid)
    before = all_items()
    refused(post(body, forged), 401, UNAUTHORIZED)
    assert all_items() == before


def test_a_rotated_key_stops_working(admin_key: str, key: str, body: dict[str, Any]) -> None:
    rotated = call("/api/compute/clusters/rotateKey", {"tenantId": TENANT, "poolId": POOL}, admin_key)
    assert rotated.status == 200
    before = all_items()
    refused(post(body, key), 401, UNAUTHORIZED)
    assert all_items() == before
    assert post(body, rotated.body["clusterKey"]).status == 200


def test_another_clusters_key_opens_only_its_own_pool(admin_key: str, key: str, body: dict[str, Any]) -> None:
    other = make_cluster(admin_key, "other")
    assert post(body, other).status == 200
    nodes = [i for i in all_items() if i["pk"].startswith("CLUSTERNODE#")]
    assert [n["pk"] for n in nodes] == ["CLUSTERNODE#acme#other"]


@pytest.mark.parametrize("wrap", [" {}", "{} ", "\t{}", "{}\t", "\u00a0{}", "{}\u3000", "{}\n"])
def test_whitespace_around_the_key_is_401(key: str, body: dict[str, Any], wrap: str) -> None:
    before = all_items()
    refused(post(body, wrap.format(key)), 401, UNAUTHORIZED)
    assert all_items() == before


@pytest.mark.parametrize("joined", ["{0},{0}", "{0}, {0}", "{0},"])
def test_two_cluster_key_headers_are_401(key: str, body: dict[str, Any], joined: str) -> None:
    """API Gateway (payload 2.0) delivers repeated headers joined with commas."""
    before = all_items()
    refused(post(body, joined.format(key)), 401, UNAUTHORIZED)
    assert all_items() == before


def test_an_api_key_instead_of_a_cluster_key_is_403(admin_key: str, key: str, body: dict[str, Any]) -> None:
    before = all_items()
    refused(post(body, headers={"authorization": f"Bearer {admin_key}"}), 403, FORBIDDEN)
    # ... and also next to a valid cluster key: a request carries one kind of credential
    refused(post(body, key, headers={"authorization": f"Bearer {admin_key}"}), 403, FORBIDDEN)
    assert all_items() == before


@pytest.mark.parametrize("token", ["Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "garbage", ""])
def test_a_cluster_token_is_403(key: str, body: dict[str, Any], token: str) -> None:
    before = all_items()
    refused(post(body, headers={"x-cluster-token": token}), 403, FORBIDDEN)
    refused(post(body, key, headers={"x-cluster-token": token}), 403, FORBIDDEN)
    assert all_items() == before


def oversized(body: dict[str, Any]) -> bytes:
    text = json.dumps(body)
    return (text + " " * (MIB + 1 - len(text))).encode()


def test_an_oversize_body_with_a_bad_key_is_401_not_413(key: str, body: dict[str, Any]) -> None:
    raw = oversized(body)
    assert len(raw) == MIB + 1
    before = all_items()
    refused(post(raw=raw, key="nope"), 401, UNAUTHORIZED)
    refused(post(raw=raw), 401, UNAUTHORIZED)
    refused(post(raw=raw, key=f"{key},{key}"), 401, UNAUTHORIZED)
    refused(post(raw=raw, key=key, headers={"x-cluster-token": "Bearer t"}), 403, FORBIDDEN)
    assert all_items() == before


def test_an_oversize_body_with_the_right_key_is_413(key: str, body: dict[str, Any]) -> None:
    before = all_items()
    refused(post(raw=oversized(body), key=key), 413, TOO_LARGE)
    assert all_items() == before


def test_exactly_one_mib_is_accepted(key: str, body: dict[str, Any]) -> None:
    text = json.dumps(body)
    raw = (text + " " * (MIB - len(text))).encode()
    assert post(raw=raw, key=key).status == 200


def test_base64_bodies_are_measured_decoded(key: str, body: dict[str, Any]) -> None:
    def send(raw: bytes) -> Any:
        event = http_event("/cluster/accept-join", b"", {"x-cluster-key": key})
        event.update(body=base64.b64encode(raw).decode(), isBase64Encoded=True)
        return load_function("cluster_join").lambda_handler(event, LambdaContext())

    assert send(oversized(body))["statusCode"] == 413
    text = json.dumps(body)
    assert send((text + " " * (MIB - len(text))).encode())["statusCode"] == 200


def go_type_error(value: str, where: str, go_type: str) -> str:
    return f"json: cannot unmarshal {value} into Go struct field {where} of type {go_type}"


def required(field: str, tag: str = "required") -> str:
    return f"Key: 'AcceptJoinRequest.{field}' Error:Field validation for '{field}' failed on the '{tag}' tag"


def with_fields(**changes: Any) -> bytes:
    body = join_body("node-a", "10.0.0.1", [1, 2])
    for name, value in changes.items():
        if name.startswith("inventory_"):
            body["inventory"][name.removeprefix("inventory_")] = value
        elif name == "entry":
            body["inventory"]["entries"][0].update(value)
        else:
            body[name] = value
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"", "EOF"),
        (b"  \n", "EOF"),
        (b"{", None),
        (b'{"nodeId": "a",}', None),
        (b"{'nodeId': 'a'}", None),
        (b'{"nodeId":"a"} {"nodeId":"b"}', None),
        (b'{"nodeId": NaN}', None),
        (b"\xef\xbb\xbf{}", None),
        (b"[]", "json: cannot unmarshal array into Go value of type clusterHandlers.AcceptJoinRequest"),
        (b'"x"', "json: cannot unmarshal string into Go value of type clusterHandlers.AcceptJoinRequest"),
        (b"null", "\n".join([required("NodeID"), required("NodeIP"), required("NodeVersion")])),
        (b"{}", "\n".join([required("NodeID"), required("NodeIP"), required("NodeVersion")])),
        (with_fields(nodeId=""), required("NodeID")),
        (with_fields(nodeIp="10.0.0.300"), required("NodeIP", "ip")),
        (with_fields(nodeIp=" 10.0.0.1"), required("NodeIP", "ip")),
        (with_fields(nodeIp="010.0.0.1"), required("NodeIP", "ip")),
        (with_fields(nodeIp="fe80::1%eth0"), required("NodeIP", "ip")),
        (with_fields(nodeIp="node-a.example"), required("NodeIP", "ip")),
        (with_fields(nodeVersion=None), required("NodeVersion")),
        (with_fields(nodeId=5), go_type_error("number", "AcceptJoinRequest.nodeId", "string")),
        (with_fields(nodeIp=["10.0.0.1"]), go_type_error("array", "AcceptJoinRequest.nodeIp", "string")),
        (with_fields(preflight="true"), go_type_error("string", "AcceptJoinRequest.preflight", "bool")),
        (with_fields(preflight=1), go_type_error("number", "AcceptJoinRequest.preflight", "bool")),
        (
            with_fields(inventory=[]),
            go_type_error("array", "AcceptJoinRequest.inventory", "cluster.GuestIdentityInventoryReport"),
        ),
        (
            with_fields(inventory_entries="not-an-array"),
            go_type_error(
                "string",
                "GuestIdentityInventoryReport.inventory.entries",
                "[]cluster.GuestIdentityInventoryEntry",
            ),
        ),
        (
            with_fields(inventory_entries=[7]),
            go_type_error(
                "number",
                "GuestIdentityInventoryReport.inventory.entries",
                "cluster.GuestIdentityInventoryEntry",
            ),
        ),
        (
            with_fields(entry={"guestId": "1"}),
            go_type_error("string", "GuestIdentityInventoryEntry.inventory.entries.guestId", "uint"),
        ),
        (
            with_fields(entry={"guestId": 1.5}),
            go_type_error("number 1.5", "GuestIdentityInventoryEntry.inventory.entries.guestId", "uint"),
        ),
        (
            with_fields(entry={"guestId": 1.0}),
            go_type_error("number 1.0", "GuestIdentityInventoryEntry.inventory.entries.guestId", "uint"),
        ),
        (
            with_fields(entry={"recordId": -1}),
            go_type_error("number -1", "GuestIdentityInventoryEntry.inventory.entries.recordId", "uint"),
        ),
        (
            with_fields(entry={"recordId": 2**64}),
            go_type_error(
                f"number {2**64}", "GuestIdentityInventoryEntry.inventory.entries.recordId", "uint"
            ),
        ),
        (
            with_fields(entry={"nodeId": True}),
            go_type_error("bool", "GuestIdentityInventoryEntry.inventory.entries.nodeId", "string"),
        ),
        (
            with_fields(inventory_digest={"sha256": "x"}),
            go_type_error("object", "GuestIdentityInventoryReport.inventory.digest", "string"),
        ),
        (
            with_fields(inventory_inFlightGuestIds=["7"]),
            go_type_error("string", "GuestIdentityInventoryReport.inventory.inFlightGuestIds", "uint"),
        ),
        (
            with_fields(inventory_conflicts=[{"guestId": 1, "reason": 7}]),
            go_type_error("number", "GuestIdentityInventoryConflict.inventory.conflicts.reason", "string"),
        ),
        (with_fields(nodeId="n" * 129), "nodeId: longer than 128 bytes"),
        (with_fields(nodeVersion="v" * 129), "nodeVersion: longer than 128 bytes"),
    ],
)
def test_bad_bodies_are_400_invalid_request_payload(key: str, raw: bytes, error: str | None) -> None:
    before = all_items()
    reply = post(raw=raw, key=key)
    assert reply.status == 400, reply.body
    assert reply.body["status"] == "error"
    assert reply.body["message"] == "invalid_request_payload"
    assert reply.body["data"] is None
    if error is not None:
        assert reply.body["error"] == error
    assert all_items() == before


def test_the_first_type_error_is_reported_and_beats_validation(key: str) -> None:
    reply = post(raw=b'{"preflight":"yes","nodeId":7}', key=key)
    assert reply.body["error"] == go_type_error("string", "AcceptJoinRequest.preflight", "bool")


def test_a_bad_body_is_only_looked_at_after_the_key(key: str) -> None:
    refused(post(raw=b"{not json", key="nope"), 401, UNAUTHORIZED)
    refused(post(raw=b"{not json", headers={"authorization": "Bearer x"}), 403, FORBIDDEN)


@pytest.mark.parametrize("where", ["entries", "inFlightGuestIds"])
def test_a_5000_digit_guest_id_is_a_bind_failure_not_a_500(admin_key: str, where: str) -> None:
    from tests.support.clusters import make_cluster, post
    from tests.support.table import all_items

    key = make_cluster(admin_key)
    huge = b"1" * 5000
    inventory = (
        b'{"entries":[{"guestId":' + huge + b"}]}"
        if where == "entries"
        else b'{"inFlightGuestIds":[' + huge + b"]}"
    )
    before = all_items()
    reply = post(
        raw=b'{"nodeId":"n1","nodeIp":"10.0.0.1","nodeVersion":"1","inventory":' + inventory + b"}", key=key
    )
    assert reply.status == 400 and reply.body["message"] == "invalid_request_payload", reply.body
    assert all_items() == before

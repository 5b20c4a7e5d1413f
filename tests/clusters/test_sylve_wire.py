"""Reading accept-join bodies as a Sylve leader does (Go's encoding/json + gin's validator), and the
X-Cluster-Key header rules. Pure: no table needed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from joinplane.clusters import sylve_wire
from joinplane.clusters.sylve_wire import SylveError, decode_accept_join

GOOD = {"nodeId": "n1", "nodeIp": "10.0.0.1", "nodeVersion": "1.0"}


def decode(body: Any) -> sylve_wire.AcceptJoin:
    return decode_accept_join(body if isinstance(body, bytes) else json.dumps(body).encode())


def refusal(body: Any) -> str:
    with pytest.raises(SylveError) as refused:
        decode(body)
    assert (refused.value.status, refused.value.message) == (400, "invalid_request_payload")
    return refused.value.error


def test_names_match_case_insensitively_as_go_folds_them() -> None:
    join = decode(
        {
            "NODEID": "n1",
            "nodeip": "10.0.0.1",
            "NodeVersion": "1.0",
            "PREFLIGHT": True,
            "Inventory": {"ENTRIE\u017f": [{"GUESTID": 7, "guesttype": "vm", "NODEID": "n1"}], "Digest": "d"},
        }
    )
    assert (join.node_id, join.node_ip, join.node_version, join.preflight) == ("n1", "10.0.0.1", "1.0", True)
    assert join.entries[0].guestId == 7 and join.entries[0].nodeId == "n1"
    assert join.digest == "d"


def test_a_dotless_i_is_not_an_i_to_go() -> None:
    # Python's upper() folds U+0131 onto I; Go's case folding does not
    assert "NodeID" in refusal({**GOOD, "nodeId": None, "node\u0131d": "n1"})


def test_unknown_fields_are_ignored() -> None:
    join = decode({**GOOD, "clusterKey": "k", "nodePort": 8180, "inventory": {"future": {"x": [1]}}})
    assert join.node_id == "n1"


def test_null_leaves_the_zero_value_and_empties_arrays() -> None:
    join = decode({**GOOD, "preflight": None, "inventory": {"entries": None, "digest": None}})
    assert join.preflight is False
    assert join.echo() == {"entries": None, "conflicts": None, "digest": ""}
    assert decode({**GOOD, "inventory": None}).echo() == {"entries": None, "conflicts": None, "digest": ""}


def test_a_repeated_key_decodes_into_the_same_value_again() -> None:
    raw = (
        b'{"nodeId":"n1","nodeIp":"10.0.0.1","nodeVersion":"1.0",'
        b'"inventory":{"digest":"d","entries":[{"guestId":1,"nodeId":"n1"},{"guestId":2}]},'
        b'"inventory":{"entries":[{"guestType":"vm"}]},"nodeId":"n2"}'
    )
    join = decode(raw)
    assert join.node_id == "n2"
    assert join.digest == "d"  # objects merge
    # array elements decode over the earlier ones; the array takes the new length
    assert [e.model_dump() for e in join.entries] == [
        {"nodeId": "n1", "guestType": "vm", "guestId": 1, "recordId": 0, "name": ""}
    ]


def test_invalid_utf8_and_lone_surrogates_become_replacement_characters() -> None:
    raw = b'{"nodeId":"n\xff\xfe1","nodeIp":"10.0.0.1","nodeVersion":"1.0","inventory":{"digest":"\\ud800x"}}'
    join = decode(raw)
    assert join.node_id == "n\ufffd\ufffd1"
    assert join.digest == "\ufffdx"
    assert "invalid JSON" in refusal(b'{"nodeId"\xff:"n1"}')


def with_guest_id(literal: str) -> str:
    entry = f'{{"guestId":{literal}}}'
    return f'{{"nodeId":"n1","nodeIp":"10.0.0.1","nodeVersion":"1","inventory":{{"entries":[{entry}]}}}}'


@pytest.mark.parametrize("literal", ["0", "9999", "18446744073709551615"])
def test_whole_unsigned_literals_fit_a_go_uint(literal: str) -> None:
    raw = with_guest_id(literal)
    assert decode(raw.encode()).entries[0].guestId == int(literal)


@pytest.mark.parametrize("literal", ["-0", "1e2", "1E2", "0.0", "18446744073709551616"])
def test_other_numbers_do_not(literal: str) -> None:
    raw = with_guest_id(literal)
    assert refusal(raw.encode()) == (
        f"json: cannot unmarshal number {literal} into Go struct field "
        "GuestIdentityInventoryEntry.inventory.entries.guestId of type uint"
    )


def test_the_echo_is_the_submission_as_go_marshals_it_back() -> None:
    submitted = {
        "entries": [{"name": "x", "guestId": 3, "nodeId": "n1", "recordId": 9, "guestType": "VM "}],
        "digest": "abc",
        "inFlightGuestIds": [],
    }
    echo = decode({**GOOD, "inventory": submitted}).echo()
    assert echo == {
        "entries": [{"nodeId": "n1", "guestType": "VM ", "guestId": 3, "recordId": 9, "name": "x"}],
        "conflicts": None,
        "digest": "abc",
    }
    assert list(echo["entries"][0]) == ["nodeId", "guestType", "guestId", "recordId", "name"]
    with_in_flight = decode({**GOOD, "inventory": {**submitted, "inFlightGuestIds": [5, 4]}}).echo()
    assert with_in_flight["inFlightGuestIds"] == [5, 4]


def test_the_envelope_is_gos_bytes() -> None:
    response = sylve_wire.success("node_added_to_cluster", {"name": "<&>\u2028"})
    assert response["body"] == (
        '{"status":"success","message":"node_added_to_cluster","error":"",'
        '"data":{"name":"\\u003c\\u0026\\u003e\\u2028"}}'
    )
    refused = sylve_wire.render_error(sylve_wire.unauthorized())
    assert (refused["statusCode"], json.loads(refused["body"])) == (
        401,
        {"status": "error", "message": "invalid_cluster_key", "error": "invalid_cluster_key", "data": None},
    )


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"x-cluster-key": ""}, 401),
        ({"x-cluster-key": "k k"}, None),  # inner space: not trimmed away, the key lookup refuses it
        ({"x-cluster-key": "k\u2003"}, 401),
        ({"x-cluster-key": "a,b"}, 401),
        ({"x-cluster-key": "k", "x-cluster-token": "Bearer t"}, 403),
        ({"x-cluster-key": "k", "authorization": "Basic eDp5"}, 403),
        ({"x-cluster-key": "k"}, None),
    ],
)
def test_the_cluster_key_header(headers: dict[str, str], status: int | None) -> None:
    if status is None:
        assert sylve_wire.cluster_key(headers) == headers["x-cluster-key"]
        return
    with pytest.raises(SylveError) as refused:
        sylve_wire.cluster_key(headers)
    assert refused.value.status == status

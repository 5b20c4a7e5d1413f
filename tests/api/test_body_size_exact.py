"""Body limits measure a base64 body (API Gateway's form of a body that is not UTF-8) exactly
at the limit: a body is read (and refused for what it says, 400), one
byte more is 413, in every dialect."""

from __future__ import annotations

import base64

import pytest

from joinplane import join_wire, operator_api
from joinplane.clusters import sylve_wire
from joinplane.http import HttpRequest
from tests.support import call, http_event, join
from tests.support.clusters import make_cluster, post


def request_of(raw: bytes) -> HttpRequest:
    return HttpRequest.from_event(http_event("/x", raw))


@pytest.mark.parametrize("size", [*range(0, 13), 65_535, 65_536, 65_537, 1 << 20, (1 << 20) + 1])
def test_body_size_is_the_decoded_size_for_every_padding(size: int) -> None:
    # Given a body that is not UTF-8, which API Gateway hands over base64-encoded
    raw = b"\xff" * size
    request = request_of(raw)
    assert request.base64_encoded or size == 0
    # Then its size is counted exactly, padding and all, without decoding it
    assert request.body_size() == size == len(request.body())


def test_an_unpadded_base64_body_is_counted_exactly() -> None:
    for raw in (b"\xff", b"\xff\xfe", b"\xff\xfe\xfd", b"\xff" * 4):
        text = base64.b64encode(raw).decode().rstrip("=")
        request = HttpRequest("POST", "/x", {}, text, True, {})
        assert request.body_size() == len(raw)


def not_utf8(size: int) -> bytes:
    raw = b"\xff" * size
    with pytest.raises(UnicodeDecodeError):
        raw.decode()
    return raw


def test_operator_api_at_exactly_the_limit_is_read_and_one_byte_more_is_413(admin_key: str) -> None:
    limit = operator_api.MAX_BODY_BYTES
    # When a non-UTF-8 body of exactly the limit is sent, Then it is read: not JSON, 400
    at_limit = call("/api/compute/pools/create", None, admin_key, raw=not_utf8(limit))
    assert (at_limit.status, at_limit.code) == (400, "INVALID_ARGUMENT"), at_limit.body
    # And one byte more is refused unread
    over = call("/api/compute/pools/create", None, admin_key, raw=not_utf8(limit + 1))
    assert (over.status, over.code) == (413, "PAYLOAD_TOO_LARGE")


def test_machine_join_at_exactly_the_limit_is_read_and_one_byte_more_is_413(table: str) -> None:
    limit = join_wire.MAX_BODY_BYTES
    at_limit = join(None, raw=not_utf8(limit))
    assert at_limit.status == 400, at_limit.body
    over = join(None, raw=not_utf8(limit + 1))
    assert over.status == 413, over.body


def test_accept_join_at_exactly_the_limit_is_read_and_one_byte_more_is_413(admin_key: str) -> None:
    key = make_cluster(admin_key)
    limit = sylve_wire.MAX_BODY_BYTES
    at_limit = post(raw=not_utf8(limit), key=key)
    assert (at_limit.status, at_limit.body["message"]) == (400, "invalid_request_payload")
    over = post(raw=not_utf8(limit + 1), key=key)
    assert (over.status, over.body["message"]) == (413, "request_body_too_large")

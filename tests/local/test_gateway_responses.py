"""How a function's result becomes the HTTP response (payload format 2.0 rules)."""

from __future__ import annotations

import json

from tests.support.runtime import Local


def test_a_full_response_maps_status_headers_cookies_and_body(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/shapes/full")

    # Then
    assert reply.status == 201
    assert reply.header("content-type") == "text/plain"
    assert reply.header("x-custom") == "1"
    assert reply.all("set-cookie") == ["a=1", "b=2; Path=/"]
    assert reply.body == b"created"


def test_a_base64_body_is_decoded(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/shapes/binary")

    # Then
    assert reply.status == 200
    assert reply.body == b"\x00\xff\x10"


def test_a_status_only_response_has_an_empty_body(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/shapes/bare")

    # Then
    assert reply.status == 204
    assert reply.body == b""


def test_a_response_without_content_type_gets_text_plain(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/shapes/untyped")

    # Then
    assert reply.header("content-type") == "text/plain; charset=utf-8"
    assert reply.body == b"no content type"


def test_anything_without_a_status_code_is_a_200_json_body(fresh: Local) -> None:
    # When / Then
    for kind, expected in [
        ("object", {"ok": True, "n": 1}),
        ("string", "hello"),
        ("list", [1, 2]),
        ("decimal", {"n": 1.5}),
    ]:
        reply = fresh.call("POST", f"/shapes/{kind}")
        assert reply.status == 200, kind
        assert reply.header("content-type") == "application/json"
        assert json.loads(reply.body) == expected


def test_a_function_that_raises_is_an_internal_server_error_with_the_traceback_logged(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/shapes/boom")

    # Then
    assert (reply.status, reply.json()) == (500, {"message": "Internal Server Error"})
    log = fresh.log.text()
    assert "RuntimeError: kaboom" in log
    assert "Traceback (most recent call last)" in log


def test_malformed_responses_timeouts_and_unmarshallable_results_are_internal_server_errors(
    fresh: Local,
) -> None:
    # When / Then
    for kind in ("malformed", "slow", "unserializable"):
        reply = fresh.call("POST", f"/shapes/{kind}")
        assert (reply.status, reply.json()) == (500, {"message": "Internal Server Error"}), kind
    log = fresh.log.text()
    assert "Task timed out after 1.00 seconds" in log
    assert "body must be a string" in log
    assert "Unable to marshal response" in log

"""Route selection, the payload format 2.0 event, API Gateway's own limits and the local clock."""

from __future__ import annotations

import base64
import email.utils
import http.client
import time

from joinplane import clock
from tests.support.runtime import Local


def test_a_path_parameter_route_gets_the_segment(fresh: Local) -> None:
    # When
    reply = fresh.call("GET", "/items/abc%20d")

    # Then
    assert reply.status == 200
    event = reply.json()["event"]
    assert event["routeKey"] == "GET /items/{id}"
    assert event["pathParameters"] == {"id": "abc d"}
    assert event["rawPath"] == "/items/abc%20d"


def test_an_exact_route_beats_a_parameter_route(fresh: Local) -> None:
    # When
    event = fresh.call("GET", "/items/special").json()["event"]

    # Then
    assert event["routeKey"] == "GET /items/special"
    assert "pathParameters" not in event


def test_a_greedy_any_route_takes_every_method_and_the_rest_of_the_path(fresh: Local) -> None:
    # When
    get = fresh.call("GET", "/files/a/b/c.txt").json()["event"]
    delete = fresh.call("DELETE", "/files/x").json()["event"]

    # Then
    assert get["routeKey"] == "ANY /files/{proxy+}"
    assert get["pathParameters"] == {"proxy": "a/b/c.txt"}
    assert delete["requestContext"]["http"]["method"] == "DELETE"


def test_unknown_routes_and_methods_are_not_found(fresh: Local) -> None:
    # When / Then
    for method, path in [("GET", "/nope"), ("POST", "/items/abc"), ("GET", "/files"), ("GET", "/files/")]:
        reply = fresh.call(method, path)
        assert (reply.status, reply.json()) == (404, {"message": "Not Found"}), (method, path)
        assert reply.header("apigw-requestid")


def test_the_event_is_payload_format_2_0(fresh: Local) -> None:
    # Given
    headers = [
        ("X-Multi", "one"),
        ("X-Multi", "two"),
        ("Cookie", "c1=v1; c2=v2"),
        ("Content-Type", "application/json"),
        ("User-Agent", "tests/1.0"),
    ]

    # When
    reply = fresh.call("POST", "/items?b=2&a=1&a=3&flag", body='{"name":"x"}', headers=headers)

    # Then
    assert reply.status == 200
    event = reply.json()["event"]
    assert list(event) == [
        "version",
        "routeKey",
        "rawPath",
        "rawQueryString",
        "cookies",
        "headers",
        "queryStringParameters",
        "requestContext",
        "body",
        "isBase64Encoded",
    ]
    assert event["version"] == "2.0"
    assert event["routeKey"] == "POST /items"
    assert event["rawPath"] == "/items"
    assert event["rawQueryString"] == "b=2&a=1&a=3&flag"
    assert event["queryStringParameters"] == {"b": "2", "a": "1,3", "flag": ""}
    assert event["cookies"] == ["c1=v1", "c2=v2"]
    assert "cookie" not in event["headers"]
    assert event["headers"]["x-multi"] == "one,two"
    assert event["headers"]["content-type"] == "application/json"
    assert event["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert all(name == name.lower() for name in event["headers"])
    assert event["body"] == '{"name":"x"}'
    assert event["isBase64Encoded"] is False
    assert "pathParameters" not in event
    context = event["requestContext"]
    assert context["http"] == {
        "method": "POST",
        "path": "/items",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": "tests/1.0",
    }
    assert context["routeKey"] == "POST /items"
    assert context["stage"] == "$default"
    assert context["accountId"] == "123456789012"
    assert context["apiId"] and context["domainName"] and context["domainPrefix"]
    assert context["requestId"] == reply.header("apigw-requestid")
    assert abs(context["timeEpoch"] / 1000 - clock.epoch()) < 5
    assert context["time"].endswith(" +0000")
    assert "authorizer" not in context


def test_a_request_without_a_body_has_no_body_field(fresh: Local) -> None:
    # When
    event = fresh.call("GET", "/items/abc").json()["event"]

    # Then
    assert "body" not in event
    assert event["isBase64Encoded"] is False
    assert "queryStringParameters" not in event
    assert "cookies" not in event


def test_a_body_that_is_not_utf8_arrives_base64_encoded(fresh: Local) -> None:
    # Given
    raw = b"\xff\xfe\x00binary"

    # When
    event = fresh.call("POST", "/items", body=raw).json()["event"]

    # Then
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == raw


def test_the_function_gets_a_lambda_context(fresh: Local) -> None:
    # When
    context = fresh.call("GET", "/items/abc").json()["context"]

    # Then
    assert context["function_name"].endswith("-Echo")
    assert context["function_version"] == "$LATEST"
    assert context["invoked_function_arn"].endswith(":function:" + context["function_name"])
    assert context["memory_limit_in_mb"] == "512"  # the function's own MemorySize over Globals'
    assert 4000 < context["remaining_ms"] <= 5000  # Globals Timeout 5
    assert context["log_group_name"] == "/aws/lambda/" + context["function_name"]
    assert context["aws_request_id"]


def test_a_body_over_10_mb_is_refused_before_it_is_read(fresh: Local) -> None:
    # Given: a request that only announces its size
    host, port = fresh.runtime.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.putrequest("POST", "/items")
        connection.putheader("Content-Length", str(10 * 1024 * 1024 + 1))
        connection.endheaders()

        # When
        response = connection.getresponse()

        # Then
        assert response.status == 413
        assert response.read() == b'{"message":"Request Entity Too Large"}'
    finally:
        connection.close()


def test_the_local_clock_is_read_and_advanced_over_http(fresh: Local) -> None:
    # When
    before = fresh.call("GET", "/_local/clock").json()
    after = fresh.call("POST", "/_local/clock", body={"advanceSeconds": 90.5}).json()

    # Then
    assert before["offsetSeconds"] == 0
    assert after["offsetSeconds"] == 90.5
    assert after["now"].endswith("Z")
    assert after["now"] > before["now"]
    assert abs(clock.epoch() - 90.5 - __import__("time").time()) < 1


def test_the_local_clock_refuses_bad_advances(fresh: Local) -> None:
    # When / Then
    for body in [
        '{"advanceSeconds": 0}',
        '{"advanceSeconds": -5}',
        '{"advanceSeconds": "9"}',
        "{}",
        "nope",
        "[]",
    ]:
        reply = fresh.call("POST", "/_local/clock", body=body)
        assert reply.status == 400, body
        assert "advanceSeconds" in reply.json()["message"]
    assert fresh.call("POST", "/_local/clock", body='{"advanceSeconds": true}').status == 400
    assert clock.advance(0) == 0


def test_the_local_clock_is_reset_to_the_real_time(fresh: Local) -> None:
    # Given a clock moved ahead
    fresh.call("POST", "/_local/clock", body={"advanceSeconds": 600})

    # When
    reply = fresh.call("POST", "/_local/clock", body={"reset": True})

    # Then
    assert reply.status == 200
    assert reply.json()["offsetSeconds"] == 0
    assert fresh.call("GET", "/_local/clock").json()["offsetSeconds"] == 0
    assert abs(clock.epoch() - time.time()) < 1


def test_the_local_clock_refuses_bad_resets_and_changes_nothing(fresh: Local) -> None:
    # Given
    fresh.call("POST", "/_local/clock", body={"advanceSeconds": 60})

    # When / Then
    for body in [
        '{"reset": false}',
        '{"reset": "yes"}',
        '{"reset": 1}',
        '{"reset": true, "advanceSeconds": 5}',
        '{"advanceSeconds": 5, "extra": 1}',
    ]:
        reply = fresh.call("POST", "/_local/clock", body=body)
        assert reply.status == 400, body
        assert '{\\"reset\\": true}' in reply.body.decode(), reply.body
    assert clock.advance(0) == 60


def test_the_date_header_is_the_local_clock_and_a_function_cannot_send_another(fresh: Local) -> None:
    # Given the clock a day ahead
    fresh.call("POST", "/_local/clock", body={"advanceSeconds": 86_400})

    # When a function answers with a Date of its own, and the gateway answers by itself
    dated = fresh.call("POST", "/shapes/dated")
    missing = fresh.call("GET", "/nope")

    # Then both carry one Date, the local clock's
    for reply in (dated, missing):
        assert len(reply.all("date")) == 1
        sent = email.utils.parsedate_to_datetime(reply.header("date") or "").timestamp()
        assert abs(sent - clock.epoch()) < 2, reply.header("date")
    assert dated.body == b"old"


def test_every_request_is_logged_with_status_and_duration(fresh: Local) -> None:
    # When
    fresh.call("GET", "/items/logged-one?secret=1")

    # Then
    line = next(line for line in fresh.log.text().splitlines() if "/items/logged-one" in line)
    assert "GET /items/logged-one 200 " in line
    assert " ms (Echo)" in line
    assert "secret" not in line

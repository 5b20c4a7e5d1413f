"""The Lambda REQUEST authorizer: identity check, simple responses, and the result cache."""

from __future__ import annotations

from tests.support.runtime import Local


def test_a_missing_identity_source_is_unauthorized_without_invoking_the_authorizer(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/private/echo", body="{}")

    # Then
    assert (reply.status, reply.json()) == (401, {"message": "Unauthorized"})
    assert fresh.module("Gatekeeper").CALLS == []


def test_a_denied_request_is_forbidden(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/private/echo", body="{}", headers=[("Authorization", "Bearer bad")])

    # Then
    assert (reply.status, reply.json()) == (403, {"message": "Forbidden"})


def test_an_allowed_request_carries_the_authorizer_context(fresh: Local) -> None:
    # When
    reply = fresh.call("POST", "/private/echo?x=1", body="{}", headers=[("Authorization", "Bearer good")])

    # Then
    assert reply.status == 200
    assert reply.json()["event"]["requestContext"]["authorizer"] == {"lambda": {"who": "x"}}
    (call,) = fresh.module("Gatekeeper").CALLS
    assert call["version"] == "2.0"
    assert call["type"] == "REQUEST"
    assert call["identitySource"] == ["Bearer good"]
    assert call["routeKey"] == "POST /private/echo"
    assert call["routeArn"].endswith(":1234567890/$default/POST/private/echo")
    assert call["routeArn"].startswith("arn:aws:execute-api:us-east-1:123456789012:")
    assert call["rawPath"] == "/private/echo"
    assert call["queryStringParameters"] == {"x": "1"}
    assert call["requestContext"]["http"]["method"] == "POST"
    assert "body" not in call


def test_results_are_cached_per_identity_until_the_clock_passes_the_ttl(fresh: Local) -> None:
    # Given
    good = [("Authorization", "Bearer good")]
    calls = fresh.module("Gatekeeper").CALLS
    assert fresh.call("POST", "/private/echo", body="{}", headers=good).status == 200

    # When: the same identity again, on another route of the same authorizer, within the TTL
    assert fresh.call("GET", "/private/other", headers=good).status == 200
    assert fresh.call("POST", "/_local/clock", body={"advanceSeconds": 299}).status == 200
    assert fresh.call("POST", "/private/echo", body="{}", headers=good).status == 200

    # Then
    assert len(calls) == 1

    # When: a denial is cached too, per identity
    assert fresh.call("GET", "/private/other", headers=[("Authorization", "Bearer bad")]).status == 403
    assert fresh.call("GET", "/private/other", headers=[("Authorization", "Bearer bad")]).status == 403
    assert len(calls) == 2

    # When: the clock passes ReauthorizeEvery (300 s) since the first result
    assert fresh.call("POST", "/_local/clock", body={"advanceSeconds": 2}).status == 200
    assert fresh.call("POST", "/private/echo", body="{}", headers=good).status == 200

    # Then
    assert len(calls) == 3

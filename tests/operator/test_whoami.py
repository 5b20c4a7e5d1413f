"""apiKeys/whoami: any valid key learns its own id, tenant and grants (what a console or CLI needs
to know what to show), never its secret, and nothing about any other key."""

from __future__ import annotations

import json

import pytest

from tests.support import LambdaContext, call, http_event, load_function, route_handler

WHOAMI = "/api/compute/apiKeys/whoami"


def make_key(admin: str, *grants: str, tenant: str = "acme", description: str = "") -> dict:
    body = {"tenantId": tenant, "grants": list(grants), "description": description}
    reply = call("/api/compute/apiKeys/create", body, admin)
    assert reply.status == 200, reply.body
    return dict(reply.body)


def test_a_narrow_key_learns_its_tenant_and_grants_but_never_its_secret(admin_key: str) -> None:
    # Given a key holding one pool-scoped read grant and nothing to do with API keys
    created = make_key(admin_key, "compute:join-tokens:read@compute-pool/gpu", description="console")
    # When it asks about itself
    reply = call(WHOAMI, {}, created["key"])
    # Then it is told its own record, exactly as apiKeys/list would show it, without the secret
    assert reply.status == 200, reply.body
    assert reply.body == {k: v for k, v in created.items() if k != "key"}
    assert reply.body["tenantId"] == "acme" and reply.body["state"] == "active"
    assert reply.body["grants"] == ["compute:join-tokens:read@compute-pool/gpu"]
    assert reply.body["description"] == "console"
    assert created["key"] not in json.dumps(reply.body)
    assert "secretSha256" not in reply.body


def test_each_key_sees_only_itself_whichever_tenant_it_belongs_to(admin_key: str) -> None:
    # Given keys of two tenants
    acme = make_key(admin_key, "compute:pools:read@tenant")
    globex = make_key(admin_key, "compute:pools:read@tenant", tenant="globex")
    # When each asks, Then each is told its own id and tenant (the body names no tenant to ask about)
    for created, tenant in [(acme, "acme"), (globex, "globex")]:
        reply = call(WHOAMI, {}, created["key"])
        assert (reply.body["keyId"], reply.body["tenantId"]) == (created["keyId"], tenant)
    # And the admin sees its own platform grants, not the keys it made
    admin = call(WHOAMI, {}, admin_key).body
    assert admin["keyId"] not in (acme["keyId"], globex["keyId"])
    assert any(grant.endswith("@platform") for grant in admin["grants"])


@pytest.mark.parametrize(
    ("body", "field"),
    [({"tenantId": "acme"}, "tenantId"), ({"keyId": "key_" + "0" * 26}, "keyId"), ([], "(body)")],
)
def test_a_body_other_than_an_empty_object_is_invalid(admin_key: str, body: object, field: str) -> None:
    # Given a body that tries to ask about something else, When it is sent
    reply = call(WHOAMI, body, admin_key)
    # Then it is INVALID_ARGUMENT naming the field, as on every route
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
    assert reply.body["error"]["details"][0]["field"] == field


def test_an_empty_body_counts_as_an_empty_object(admin_key: str) -> None:
    # Given no body at all (a client that posts nothing), Then the key is told about itself
    reply = call(WHOAMI, None, admin_key, raw=b"")
    assert reply.status == 200 and reply.body["state"] == "active"


@pytest.mark.parametrize("key", [None, "jpk_nonsense", "jpk_" + "0" * 26 + "_" + "0" * 32])
def test_no_key_or_an_unknown_one_is_unauthenticated(admin_key: str, key: str | None) -> None:
    reply = call(WHOAMI, {}, key)
    assert (reply.status, reply.code) == (401, "UNAUTHENTICATED")


def test_a_revoked_key_is_told_at_once_even_while_the_gateway_caches_its_authorization(
    admin_key: str,
) -> None:
    # Given a key whose authorization API Gateway has cached (the authorizer's context, kept)
    created = make_key(admin_key, "compute:pools:read@tenant")
    headers = {"authorization": f"Bearer {created['key']}"}
    cached = load_function("authorizer").lambda_handler(http_event(WHOAMI, b"", headers), LambdaContext())
    # When the key is revoked and then asks about itself through the cached authorization
    revoked = call("/api/compute/apiKeys/revoke", {"tenantId": "acme", "keyId": created["keyId"]}, admin_key)
    assert revoked.status == 200
    event = http_event(WHOAMI, b"{}", headers, authorizer=cached["context"])
    result = route_handler(WHOAMI)(event, LambdaContext())
    # Then it is UNAUTHENTICATED now, not in five minutes: a console signing in is told plainly
    body = json.loads(result["body"])
    assert result["statusCode"] == 401 and body["error"]["code"] == "UNAUTHENTICATED"
    assert "not valid" in body["error"]["message"]

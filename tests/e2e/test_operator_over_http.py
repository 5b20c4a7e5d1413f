"""The operator API over HTTP: the local runtime serves the template's routes with the real authorizer."""

from __future__ import annotations

from tests.support.runtime import Http


def test_no_authorization_header_is_the_gateways_401(http: Http) -> None:
    status, body = http.post("/api/compute/pools/list", {"tenantId": "dev"})
    assert (status, body) == (401, {"message": "Unauthorized"})


def test_an_unknown_key_is_401_in_our_envelope(http: Http) -> None:
    status, body = http.post("/api/compute/pools/list", {"tenantId": "dev"}, key="jpk_wrong")
    assert status == 401 and body["error"]["code"] == "UNAUTHENTICATED"


def test_the_dev_tenant_is_seeded(http: Http) -> None:
    status, body = http.post("/api/compute/pools/get", {"tenantId": "dev", "poolId": "dev-pool"}, http.admin)
    assert status == 200 and body["siteId"] == "dev-site"
    assert body["bootstrap"]["controlplaneHttpUrl"] == http.runtime.url


def test_a_pool_reader_key_over_http(http: Http) -> None:
    # Given pools a and b, a pool of another tenant, and a key that only reads pool a's tokens
    for tenant, pool in [("dev", "a"), ("dev", "b"), ("globex", "z")]:
        status, _ = http.post(
            "/api/compute/pools/create",
            {"tenantId": tenant, "poolId": pool, "siteId": "s", "name": pool, "workspaceId": "w"},
            http.admin,
        )
        assert status == 200
    status, created = http.post(
        "/api/compute/apiKeys/create",
        {"tenantId": "dev", "grants": ["compute:join-tokens:read@compute-pool/a"]},
        http.admin,
    )
    key = created["key"]
    # Then it cannot create tokens, cannot see b, and another tenant's pool is not found
    assert http.post("/api/compute/joinTokens/list", {"tenantId": "dev", "poolId": "a"}, key)[0] == 200
    denied = http.post("/api/compute/joinTokens/create", {"tenantId": "dev", "poolId": "a"}, key)
    assert denied[0] == 403 and denied[1]["error"]["code"] == "PERMISSION_DENIED"
    for pool in ("b", "z"):
        hidden = http.post("/api/compute/joinTokens/list", {"tenantId": "dev", "poolId": pool}, key)
        assert hidden[0] == 404 and hidden[1]["error"]["code"] == "NOT_FOUND"


def test_a_revoked_key_works_until_the_authorizer_cache_expires(http: Http) -> None:
    # Given a key that was used once (its authorization is now cached for 300 s)
    _, created = http.post(
        "/api/compute/apiKeys/create",
        {"tenantId": "dev", "grants": ["compute:pools:read@tenant"]},
        http.admin,
    )
    key = created["key"]
    assert http.post("/api/compute/pools/list", {"tenantId": "dev"}, key)[0] == 200
    # When it is revoked
    assert (
        http.post("/api/compute/apiKeys/revoke", {"tenantId": "dev", "keyId": created["keyId"]}, http.admin)[
            0
        ]
        == 200
    )
    # Then it keeps working within the cache TTL, and fails once the TTL has passed
    assert http.post("/api/compute/pools/list", {"tenantId": "dev"}, key)[0] == 200
    http.advance(301)
    assert http.post("/api/compute/pools/list", {"tenantId": "dev"}, key)[0] == 401


def test_oversize_body_is_413_over_http(http: Http) -> None:
    status, body = http.post(
        "/api/compute/pools/create", None, http.admin, raw=b"{" + b" " * (70 * 1024) + b"}"
    )
    assert status == 413 and body["error"]["code"] == "PAYLOAD_TOO_LARGE"

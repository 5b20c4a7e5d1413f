"""The operator routes through the real authorizer and handlers, over the moto server."""

from __future__ import annotations

import pytest

from joinplane import clock
from tests.support import call
from tests.support.table import all_items


def make_key(admin: str, *grants: str, tenant: str = "acme") -> str:
    reply = call("/api/compute/apiKeys/create", {"tenantId": tenant, "grants": list(grants)}, admin)
    assert reply.status == 200, reply.body
    return str(reply.body["key"])


def make_pool(admin: str, pool: str, site: str = "site-1", tenant: str = "acme", **extra: object) -> dict:
    body = {
        "tenantId": tenant,
        "poolId": pool,
        "siteId": site,
        "name": pool.upper(),
        "workspaceId": "ws-1",
        **extra,
    }
    reply = call("/api/compute/pools/create", body, admin)
    assert reply.status == 200, reply.body
    return reply.body


# --- authentication -------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "", "jpk_nonsense", "jpk_" + "0" * 26 + "_" + "0" * 32, "Basic abc"])
def test_missing_or_unknown_keys_are_unauthenticated(admin_key: str, key: str | None) -> None:
    reply = call("/api/compute/pools/list", {"tenantId": "acme"}, key)
    assert reply.status == 401
    assert reply.code == "UNAUTHENTICATED"


def test_a_key_with_a_forged_secret_for_a_real_id_is_refused(admin_key: str) -> None:
    forged = admin_key[:-4] + ("aaaa" if not admin_key.endswith("aaaa") else "bbbb")
    assert call("/api/compute/pools/list", {"tenantId": "acme"}, forged).status == 401


def test_api_key_lifecycle_shows_the_secret_once(admin_key: str) -> None:
    # Given a key created by the admin
    created = call(
        "/api/compute/apiKeys/create",
        {"tenantId": "acme", "grants": ["compute:pools:read@tenant"], "description": "ci"},
        admin_key,
    )
    assert created.status == 200
    secret, key_id = created.body["key"], created.body["keyId"]
    assert secret.startswith("jpk_") and key_id.startswith("key_")
    # Then the list never shows the secret, nor does the table hold it
    listed = call("/api/compute/apiKeys/list", {"tenantId": "acme"}, admin_key)
    assert key_id in [k["keyId"] for k in listed.body["apiKeys"]]
    assert secret not in str(listed.body) and secret not in str(all_items())
    # When it is revoked (twice: the second changes nothing)
    first = call("/api/compute/apiKeys/revoke", {"tenantId": "acme", "keyId": key_id}, admin_key)
    again = call("/api/compute/apiKeys/revoke", {"tenantId": "acme", "keyId": key_id}, admin_key)
    assert first.body["state"] == "revoked" and again.body == first.body
    # Then it no longer authenticates
    assert call("/api/compute/pools/list", {"tenantId": "acme"}, secret).status == 401


def test_a_key_cannot_mint_a_stronger_key(admin_key: str) -> None:
    # Given a tenant key manager limited to pool a
    manager = make_key(admin_key, "iam:api-keys:write@tenant", "compute:*@compute-pool/a")
    # Then it may hand out what it holds, not more
    ok = call(
        "/api/compute/apiKeys/create",
        {"tenantId": "acme", "grants": ["compute:pools:read@compute-pool/a"]},
        manager,
    )
    assert ok.status == 200
    for grant in [
        "compute:pools:read@compute-pool/b",
        "compute:pools:read@tenant",
        "*@platform",
        "iam:api-keys:write@tenant",
    ]:
        refused = call("/api/compute/apiKeys/create", {"tenantId": "acme", "grants": [grant]}, manager)
        if grant == "iam:api-keys:write@tenant":
            assert refused.status == 200  # it holds exactly that grant
        else:
            assert (refused.status, refused.code) == (403, "PERMISSION_DENIED"), grant


def test_revoking_another_tenants_key_is_not_found(admin_key: str) -> None:
    other_admin = make_key(admin_key, "*@tenant", tenant="globex")
    other = call(
        "/api/compute/apiKeys/create",
        {"tenantId": "globex", "grants": ["compute:pools:read@tenant"]},
        other_admin,
    )
    acme_admin = make_key(admin_key, "*@tenant")
    reply = call(
        "/api/compute/apiKeys/revoke", {"tenantId": "acme", "keyId": other.body["keyId"]}, acme_admin
    )
    assert (reply.status, reply.code) == (404, "NOT_FOUND")


# --- the isolation scenario of the issue ----------------------------------------------------


def test_a_pool_read_key_cannot_create_cannot_see_b_and_gets_not_found_elsewhere(admin_key: str) -> None:
    # Given pools a and b of acme, pool z of globex, and a key with only join-token read on pool a
    make_pool(admin_key, "a")
    make_pool(admin_key, "b", site="site-2")
    make_pool(admin_key, "z", tenant="globex")
    reader = make_key(admin_key, "compute:join-tokens:read@compute-pool/a")

    # Then it lists pool a's tokens
    assert call("/api/compute/joinTokens/list", {"tenantId": "acme", "poolId": "a"}, reader).status == 200
    # It cannot create tokens on a
    denied = call("/api/compute/joinTokens/create", {"tenantId": "acme", "poolId": "a"}, reader)
    assert (denied.status, denied.code) == (403, "PERMISSION_DENIED")
    # It cannot see pool b: not found, exactly as for a pool that does not exist
    for pool in ["b", "does-not-exist"]:
        hidden = call("/api/compute/joinTokens/list", {"tenantId": "acme", "poolId": pool}, reader)
        assert (hidden.status, hidden.code) == (404, "NOT_FOUND")
        assert hidden.body["error"]["message"] == "pool not found"
    # Another tenant's pool, asked for under its own tenant: not found (no grant reaches it)
    elsewhere = call("/api/compute/joinTokens/list", {"tenantId": "acme", "poolId": "z"}, reader)
    assert (elsewhere.status, elsewhere.code) == (404, "NOT_FOUND")
    # ...and naming the other tenant in the body is refused outright
    foreign = call("/api/compute/joinTokens/list", {"tenantId": "globex", "poolId": "z"}, reader)
    assert (foreign.status, foreign.code) == (403, "PERMISSION_DENIED")
    # The pool list shows none of it: the key holds no pools:read
    assert call("/api/compute/pools/list", {"tenantId": "acme"}, reader).body == {"pools": []}


# --- pools ----------------------------------------------------------------------------------


def test_pool_create_get_update_archive(admin_key: str) -> None:
    created = make_pool(
        admin_key,
        "gpu-east",
        bootstrap={"controlplaneGrpcPort": 443, "workerImage": "w:1"},
        cluster={"requiredNodeVersion": "0.9.1"},
    )
    assert created["state"] == "active" and created["joinRequestTtlSeconds"] == 86400
    assert created["certificateTtlSeconds"] == 86400 and created["bootstrap"]["workerImage"] == "w:1"

    again = call(
        "/api/compute/pools/create",
        {"tenantId": "acme", "poolId": "gpu-east", "siteId": "site-1", "name": "x", "workspaceId": "w"},
        admin_key,
    )
    assert (again.status, again.code) == (409, "ALREADY_EXISTS")

    updated = call(
        "/api/compute/pools/update",
        {
            "tenantId": "acme",
            "poolId": "gpu-east",
            "name": "GPU East",
            "certificateTtlSeconds": 3600,
            "cluster": None,
        },
        admin_key,
    )
    assert updated.status == 200, updated.body
    assert updated.body["name"] == "GPU East" and updated.body["cluster"] is None
    assert updated.body["bootstrap"]["workerImage"] == "w:1"  # untouched fields stay

    moved = call(
        "/api/compute/pools/update", {"tenantId": "acme", "poolId": "gpu-east", "siteId": "s2"}, admin_key
    )
    assert moved.code == "INVALID_ARGUMENT"

    archived = call("/api/compute/pools/archive", {"tenantId": "acme", "poolId": "gpu-east"}, admin_key)
    assert archived.body["state"] == "archived"
    assert (
        call("/api/compute/pools/archive", {"tenantId": "acme", "poolId": "gpu-east"}, admin_key).body
        == archived.body
    )
    frozen = call(
        "/api/compute/pools/update", {"tenantId": "acme", "poolId": "gpu-east", "name": "n"}, admin_key
    )
    assert (frozen.status, frozen.code) == (409, "INVALID_STATE")
    token = call("/api/compute/joinTokens/create", {"tenantId": "acme", "poolId": "gpu-east"}, admin_key)
    assert (token.status, token.code) == (409, "INVALID_STATE")
    got = call("/api/compute/pools/get", {"tenantId": "acme", "poolId": "gpu-east"}, admin_key)
    assert got.body == archived.body


def test_pool_list_pages_and_filters_by_grant(admin_key: str) -> None:
    for name in ["p1", "p2", "p3", "p4", "p5"]:
        make_pool(admin_key, name, site="s1" if name in ("p1", "p2") else "s2")
    first = call("/api/compute/pools/list", {"tenantId": "acme", "limit": 2}, admin_key)
    assert [p["poolId"] for p in first.body["pools"]] == ["p1", "p2"]
    rest = call(
        "/api/compute/pools/list", {"tenantId": "acme", "cursor": first.body["nextCursor"]}, admin_key
    )
    assert [p["poolId"] for p in rest.body["pools"]] == ["p3", "p4", "p5"] and "nextCursor" not in rest.body
    site_reader = make_key(admin_key, "compute:pools:read@site/s1")
    mine = call("/api/compute/pools/list", {"tenantId": "acme"}, site_reader)
    assert [p["poolId"] for p in mine.body["pools"]] == ["p1", "p2"]


# --- join tokens ----------------------------------------------------------------------------


def test_join_token_create_list_revoke(admin_key: str) -> None:
    make_pool(admin_key, "a")
    created = call(
        "/api/compute/joinTokens/create",
        {
            "tenantId": "acme",
            "poolId": "a",
            "ttlSeconds": 600,
            "maxUses": 3,
            "requireApproval": True,
            "attestation": {"discovery": "defer-unknown", "tpm": "require"},
            "description": "rack 7",
        },
        admin_key,
    )
    assert created.status == 200, created.body
    body = created.body
    assert body["token"].startswith("jpt_") and body["tokenId"].startswith("jtok_")
    assert body["usesRemaining"] == 3 and body["state"] == "active" and body["siteId"] == "site-1"
    assert body["expiresAt"].endswith("Z")

    listed = call("/api/compute/joinTokens/list", {"tenantId": "acme", "poolId": "a"}, admin_key)
    [shown] = listed.body["joinTokens"]
    assert (
        "token" not in shown
        and body["token"] not in str(listed.body)
        and body["token"] not in str(all_items())
    )

    # Expiry is read from the clock, no job needed
    clock.advance(601)
    [later] = call("/api/compute/joinTokens/list", {"tenantId": "acme", "poolId": "a"}, admin_key).body[
        "joinTokens"
    ]
    assert later["state"] == "expired"

    revoked = call(
        "/api/compute/joinTokens/revoke", {"tenantId": "acme", "tokenId": body["tokenId"]}, admin_key
    )
    assert revoked.body["state"] == "revoked" and revoked.body["revokedBy"]


def test_site_tokens_need_a_known_site_and_a_site_grant(admin_key: str) -> None:
    make_pool(admin_key, "a", site="rack-9")
    site_admin = make_key(admin_key, "compute:join-tokens:*@site/rack-9")
    ok = call("/api/compute/joinTokens/create", {"tenantId": "acme", "siteId": "rack-9"}, site_admin)
    assert ok.status == 200 and ok.body["poolId"] is None
    unknown = call("/api/compute/joinTokens/create", {"tenantId": "acme", "siteId": "rack-0"}, admin_key)
    assert unknown.code == "NOT_FOUND"
    both = call(
        "/api/compute/joinTokens/create", {"tenantId": "acme", "siteId": "rack-9", "poolId": "a"}, admin_key
    )
    assert both.code == "INVALID_ARGUMENT"
    pool_key = make_key(admin_key, "compute:join-tokens:*@compute-pool/a")
    assert (
        call("/api/compute/joinTokens/create", {"tenantId": "acme", "siteId": "rack-9"}, pool_key).code
        == "NOT_FOUND"
    )


def test_revoking_a_token_of_another_tenant_is_not_found(admin_key: str) -> None:
    make_pool(admin_key, "z", tenant="globex")
    theirs = call("/api/compute/joinTokens/create", {"tenantId": "globex", "poolId": "z"}, admin_key).body
    acme = make_key(admin_key, "*@tenant")
    reply = call("/api/compute/joinTokens/revoke", {"tenantId": "acme", "tokenId": theirs["tokenId"]}, acme)
    assert (reply.status, reply.code) == (404, "NOT_FOUND")


def test_a_platform_key_writer_cannot_carry_its_tenant_grants_into_another_tenant(admin_key: str) -> None:
    # Given a key that may write keys anywhere but holds compute rights only in its own tenant
    make_pool(admin_key, "p1", tenant="globex")
    writer = make_key(admin_key, "iam:api-keys:write@platform", "compute:*@tenant")
    assert call("/api/compute/pools/get", {"tenantId": "globex", "poolId": "p1"}, writer).status == 403
    # When it mints a key for the other tenant with its tenant-relative grant
    minted = call(
        "/api/compute/apiKeys/create", {"tenantId": "globex", "grants": ["compute:*@tenant"]}, writer
    )
    # Then it is refused: it holds no compute rights in globex to hand out
    assert (minted.status, minted.code) == (403, "PERMISSION_DENIED")


def test_a_narrow_key_cannot_revoke_a_stronger_one(admin_key: str) -> None:
    low = make_key(admin_key, "iam:api-keys:*@tenant")
    admin_key_id = call("/api/compute/apiKeys/list", {"tenantId": "acme"}, admin_key).body["apiKeys"][0][
        "keyId"
    ]
    refused = call("/api/compute/apiKeys/revoke", {"tenantId": "acme", "keyId": admin_key_id}, low)
    assert (refused.status, refused.code) == (403, "PERMISSION_DENIED")
    assert call("/api/compute/pools/list", {"tenantId": "acme"}, admin_key).status == 200
    # It can revoke a key it could have made
    peer = call(
        "/api/compute/apiKeys/create", {"tenantId": "acme", "grants": ["iam:api-keys:read@tenant"]}, low
    ).body
    assert (
        call("/api/compute/apiKeys/revoke", {"tenantId": "acme", "keyId": peer["keyId"]}, low).status == 200
    )

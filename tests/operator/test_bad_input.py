"""Bad input gets a clear error naming the field, and changes nothing."""

from __future__ import annotations

import json

import pytest

from tests.support import call
from tests.support.table import all_items

GOOD_POOL = {"tenantId": "acme", "poolId": "p", "siteId": "s", "name": "P", "workspaceId": "w"}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/compute/pools/create", {**GOOD_POOL, "colour": "red"}, "colour"),
        ("/api/compute/pools/create", {**GOOD_POOL, "joinRequestTtlSeconds": "600"}, "joinRequestTtlSeconds"),
        ("/api/compute/pools/create", {**GOOD_POOL, "joinRequestTtlSeconds": 59}, "joinRequestTtlSeconds"),
        (
            "/api/compute/pools/create",
            {**GOOD_POOL, "certificateTtlSeconds": 2_592_001},
            "certificateTtlSeconds",
        ),
        ("/api/compute/pools/create", {**GOOD_POOL, "poolId": "-leading-dash"}, "poolId"),
        ("/api/compute/pools/create", {**GOOD_POOL, "name": "bad\u0007name"}, "name"),
        (
            "/api/compute/pools/create",
            {**GOOD_POOL, "bootstrap": {"controlplaneGrpcPort": "443"}},
            "bootstrap.controlplaneGrpcPort",
        ),
        (
            "/api/compute/pools/create",
            {**GOOD_POOL, "bootstrap": {"workspaceId": "x"}},
            "bootstrap.workspaceId",
        ),
        ("/api/compute/pools/create", {k: v for k, v in GOOD_POOL.items() if k != "siteId"}, "siteId"),
        ("/api/compute/joinTokens/create", {"tenantId": "acme", "poolId": "p", "maxUses": 0}, "maxUses"),
        ("/api/compute/joinTokens/create", {"tenantId": "acme", "poolId": "p", "maxUses": 10_001}, "maxUses"),
        (
            "/api/compute/joinTokens/create",
            {"tenantId": "acme", "poolId": "p", "ttlSeconds": 59},
            "ttlSeconds",
        ),
        (
            "/api/compute/joinTokens/create",
            {"tenantId": "acme", "poolId": "p", "requireApproval": "yes"},
            "requireApproval",
        ),
        (
            "/api/compute/joinTokens/create",
            {"tenantId": "acme", "poolId": "p", "attestation": {"tpm": "maybe"}},
            "attestation.tpm",
        ),
        ("/api/compute/joinTokens/revoke", {"tenantId": "acme", "tokenId": "jtok_forged!"}, "tokenId"),
        ("/api/compute/apiKeys/revoke", {"tenantId": "acme", "keyId": "key_" + "u" * 26}, "keyId"),
        ("/api/compute/apiKeys/create", {"tenantId": "acme", "grants": []}, "grants"),
        ("/api/compute/apiKeys/create", {"tenantId": "acme", "grants": "compute:*@tenant"}, "grants"),
        ("/api/compute/pools/list", {"tenantId": "a" * 129}, "tenantId"),
    ],
)
def test_invalid_fields_are_named_and_nothing_is_written(
    admin_key: str, path: str, body: dict, field: str
) -> None:
    before = all_items()
    reply = call(path, body, admin_key)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
    assert field in [d["field"] for d in reply.body["error"]["details"]], reply.body
    assert field in reply.body["error"]["message"]
    assert all_items() == before


@pytest.mark.parametrize("raw", [b"{not json", b"[]", b'"text"', b"\xff\xfe\x00", b'{"tenantId": "acme",}'])
def test_malformed_bodies_are_invalid_argument(admin_key: str, raw: bytes) -> None:
    before = all_items()
    reply = call("/api/compute/pools/create", None, admin_key, raw=raw)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT")
    assert all_items() == before


def test_bodies_over_64_kib_are_refused_before_parsing(admin_key: str) -> None:
    before = all_items()
    oversize = json.dumps({**GOOD_POOL, "name": "x" * (64 * 1024)}).encode()
    reply = call("/api/compute/pools/create", None, admin_key, raw=oversize)
    assert (reply.status, reply.code) == (413, "PAYLOAD_TOO_LARGE")
    # Not even valid JSON is needed to be refused for size
    assert call("/api/compute/pools/create", None, admin_key, raw=b"{" * (65 * 1024)).status == 413
    assert all_items() == before


def test_a_malformed_grant_fails_the_whole_key(admin_key: str) -> None:
    before = all_items()
    reply = call(
        "/api/compute/apiKeys/create",
        {"tenantId": "acme", "grants": ["compute:*@tenant", "bogus"]},
        admin_key,
    )
    assert reply.code == "INVALID_ARGUMENT" and "bogus" in reply.body["error"]["message"]
    assert all_items() == before


def test_unknown_routes_answer_in_the_envelope(admin_key: str) -> None:
    reply = call("/api/compute/pools/destroy", {}, admin_key)
    assert (reply.status, reply.code) == (404, "NOT_FOUND")


def test_a_whole_number_written_with_a_fraction_is_an_integer(admin_key: str) -> None:
    # JSON has one number type: 2.0 is the integer 2 (JSON Schema agrees); 2.5 and "2" are not
    body = b'{"tenantId": "dev", "limit": 2.0}'
    assert call("/api/compute/pools/list", None, admin_key, raw=body).status == 200
    assert call("/api/compute/pools/list", None, admin_key, raw=body.replace(b"2.0", b"2e0")).status == 200
    for wrong in (b"2.5", b'"2"', b"1e400"):
        reply = call("/api/compute/pools/list", None, admin_key, raw=body.replace(b"2.0", wrong))
        assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), wrong

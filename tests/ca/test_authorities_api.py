"""Pool CAs over the HTTP API: certificateAuthorities/get and /rotate (authorizer and function as
API Gateway calls them), joins and renewals handing out the bundle, every result checked with the
openssl CLI, and every change an audit event naming the acting key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from joinplane.dal import authorities as authorities_db
from tests.support import call, join, key_id_of, openssl_csr
from tests.support.csr import openssl
from tests.support.events import publish_table_stream

TENANT = {"tenantId": "acme"}
POOL = {**TENANT, "poolId": "gpu"}
GET, ROTATE = "/api/compute/certificateAuthorities/get", "/api/compute/certificateAuthorities/rotate"


def verify(directory: Path, bundle: str, certificate: str) -> Any:
    (directory / "bundle.pem").write_text(bundle)
    (directory / "machine.crt").write_text(certificate)
    return openssl(
        "verify", "-CAfile", str(directory / "bundle.pem"), str(directory / "machine.crt"), check=False
    )


def key_with(admin_key: str, *grants: str) -> str:
    reply = call("/api/compute/apiKeys/create", {**TENANT, "grants": list(grants)}, admin_key)
    assert reply.status == 200, reply.body
    return str(reply.body["key"])


def admit(token: str, directory: Path) -> dict[str, Any]:
    directory.mkdir()
    reply = join({"joinToken": token, "csr": openssl_csr(directory, "/CN=m")})
    assert reply.status == 200, reply.body
    return dict(reply.body)


def test_get_makes_the_first_ca_and_shows_it_with_the_bundle(
    admin_key: str, pool: str, tmp_path: Path
) -> None:
    # When an operator reads the CA of a pool no machine has joined
    reply = call(GET, POOL, admin_key)
    # Then the pool has its first CA, made by this key, self-signed, and the bundle is that CA
    assert reply.status == 200, reply.body
    active = reply.body["active"]
    assert set(active) == {"caId", "certificate", "notBefore", "notAfter", "state", "createdAt", "upstream"}
    assert (active["state"], active["upstream"]) == ("active", False)
    assert reply.body["bundle"] == [active["certificate"]]
    stored = authorities_db.read("acme", "gpu")
    assert stored is not None and stored.active.created_by == key_id_of(admin_key)
    # And reading it again shows the same CA
    assert call(GET, POOL, admin_key).body == reply.body
    # And openssl reads it as a CA certificate
    (tmp_path / "ca.pem").write_text(active["certificate"])
    text = openssl("x509", "-in", str(tmp_path / "ca.pem"), "-noout", "-text").stdout
    assert "CA:TRUE" in text and "Certificate Sign" in text and active["caId"] in text


def test_an_emergency_rotation_over_the_api_keeps_machines_joined_before_it_verifying(
    admin_key: str, token: str, tmp_path: Path
) -> None:
    # Given a machine admitted under the pool's first CA
    before = admit(token, tmp_path / "before")
    first = call(GET, POOL, admin_key).body["active"]
    assert before["caCertificates"] == first["certificate"]
    # When the operator rotates the CA in an emergency
    rotated = call(ROTATE, {**POOL, "emergency": True}, admin_key)
    # Then a new CA is active at once, and the bundle is the new CA then the retired one
    assert rotated.status == 200, rotated.body
    active = rotated.body["active"]
    assert active["caId"] != first["caId"] and active["state"] == "active"
    assert rotated.body["bundle"] == [active["certificate"], first["certificate"]]
    # And the answer says what that breaks; the rest is what get shows
    breaks = rotated.body.pop("breaks")
    assert "rejects every certificate issued from now on" in breaks and first["caId"] in breaks
    assert call(GET, POOL, admin_key).body == rotated.body
    # And a machine joining now gets a certificate of the new CA, with the whole bundle
    after = admit(token, tmp_path / "after")
    assert after["caCertificates"] == active["certificate"] + first["certificate"]
    # And openssl verifies both machines with the bundle
    bundle = "".join(rotated.body["bundle"])
    for machine in (before, after):
        result = verify(tmp_path, bundle, machine["certificate"])
        assert result.returncode == 0, result.stderr
    # And the machine from before, renewing, picks up the bundle (its new certificate from the new CA)
    renewed = join(
        {"machineToken": before["machineToken"], "csr": (tmp_path / "before" / "csr.pem").read_text()},
        path="/machines/renew",
        signed_by=tmp_path / "before" / "key.pem",
    )
    assert renewed.status == 200, renewed.body
    assert renewed.body["caCertificates"] == after["caCertificates"]
    assert verify(tmp_path, active["certificate"], renewed.body["certificate"]).returncode == 0


def test_get_needs_pools_read_and_rotate_pools_write(admin_key: str, pool: str) -> None:
    reader = key_with(admin_key, "compute:pools:read@compute-pool/gpu")
    outsider = key_with(admin_key, "compute:join-tokens:*@compute-pool/gpu")
    # A reader reads, and cannot rotate
    assert call(GET, POOL, reader).status == 200
    before = call(GET, POOL, admin_key).body
    refused = call(ROTATE, POOL, reader)
    assert (refused.status, refused.code) == (403, "PERMISSION_DENIED")
    # A key without a pools grant is refused, exactly as pools/get refuses it
    hidden = call(GET, POOL, outsider)
    assert (hidden.status, hidden.code) == (403, "PERMISSION_DENIED")
    assert call("/api/compute/pools/get", POOL, outsider).status == 403
    # And nothing changed
    assert call(GET, POOL, admin_key).body == before


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({**POOL, "extra": 1}, 400),
        ({"tenantId": "acme"}, 400),
        ({"tenantId": "acme", "poolId": "a/b"}, 400),
        ({"tenantId": "globex", "poolId": "gpu"}, 404),
        ({"tenantId": "acme", "poolId": "absent"}, 404),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    admin_key: str, pool: str, body: dict[str, Any], status: int
) -> None:
    for route in (GET, ROTATE):
        reply = call(route, body, admin_key)
        assert reply.status == status, reply.body
    # No CA was made for anything refused (the pool itself has none yet either)
    assert authorities_db.get_pointer("acme", "gpu") is None
    assert authorities_db.get_pointer("acme", "absent") is None


def test_rotating_an_archived_pool_is_refused(admin_key: str, pool: str) -> None:
    before = call(GET, POOL, admin_key).body
    assert call("/api/compute/pools/archive", POOL, admin_key).status == 200
    refused = call(ROTATE, POOL, admin_key)
    assert (refused.status, refused.reason) == (409, "POOL_ARCHIVED")
    assert call(GET, POOL, admin_key).body == before


def test_an_archived_pool_that_never_had_a_ca_gets_none(admin_key: str, pool: str) -> None:
    # Given a pool archived before any machine joined
    assert call("/api/compute/pools/archive", POOL, admin_key).status == 200
    # When its CA is asked for / Then it is refused, and no key was made for it
    refused = call(GET, POOL, admin_key)
    assert (refused.status, refused.reason) == (409, "POOL_ARCHIVED")
    assert authorities_db.get_pointer("acme", "gpu") is None


def test_creation_and_an_emergency_rotation_are_audit_events_naming_the_acting_key(
    admin_key: str, token: str, tmp_path: Path
) -> None:
    # Given a pool whose first CA a join made, then an operator's rotation
    admit(token, tmp_path / "m")
    first = call(GET, POOL, admin_key).body["active"]["caId"]
    rotated = call(ROTATE, {**POOL, "emergency": True}, admin_key).body["active"]["caId"]
    # When the table's stream is published
    published = {
        e.detail_type: e.detail for e in publish_table_stream() if "certificate-authority" in e.detail_type
    }
    # Then there is one event per change: created by the join, rotated by the operator's key
    created = published["security.certificate-authority.created"]
    assert (created["caId"], created["decidedBy"], created["previousCaId"]) == (first, "join", None)
    rotation = published["security.certificate-authority.rotated"]
    assert (rotation["caId"], rotation["previousCaId"], rotation["decidedBy"]) == (
        rotated,
        first,
        key_id_of(admin_key),
    )
    assert (rotation["tenantId"], rotation["poolId"], rotation["siteId"]) == ("acme", "gpu", "s1")
    # And the audit trail lists them
    listed = call(
        "/api/compute/auditEvents/list",
        {**TENANT, "detailType": "security.certificate-authority.rotated"},
        admin_key,
    )
    assert [e["detail"]["caId"] for e in listed.body["events"]] == [rotated]

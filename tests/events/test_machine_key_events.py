"""Every change of a machine's key is audited. A renewal onto a new key is a security event
(`security.machine.key-rotated`) and so is a re-join (`security.machine.joined`, `rejoin: true`),
each naming the old and new key hashes and certificate serials. A renewal that keeps the key is
routine: no event, but counted (Renewals, outcome renewed) and shown on the machine (lastRenewedAt,
the certificates it holds). Made over the machine routes as API Gateway calls them; the table's
stream, through the template's filter, goes through the publisher into the audit trail."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.support import call, csr_for_key, join, make_csr, sign_proof
from tests.support.events import publish_table_stream, table_stream
from tests.support.logs import counted

TENANT = {"tenantId": "acme"}
POOL = {**TENANT, "poolId": "gpu"}


def key_sha256(key_path: Path) -> str:
    """The hex SHA-256 of a key file's SubjectPublicKeyInfo (DER): the key's join identity."""
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    spki = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(spki).hexdigest()


def serial_of(certificate_pem: str) -> str:
    return format(x509.load_pem_x509_certificate(certificate_pem.encode()).serial_number, "x")


def renew_same_key(machine_token: str, key: Path) -> dict[str, Any]:
    renewed = join(
        {"machineToken": machine_token, "csr": csr_for_key(key)}, path="/machines/renew", signed_by=key
    )
    assert renewed.status == 200, renewed.body
    return dict(renewed.body)


def renew_onto(machine_token: str, key: Path, new_key: Path, new_csr: str) -> dict[str, Any]:
    """A renewal onto a new key: the proof made with the current key, countersigned by the new one."""
    raw = json.dumps({"machineToken": machine_token, "csr": new_csr}).encode()
    proof = sign_proof(
        key, purpose="renew", credential=machine_token, body=raw, public_key=key, new_key=new_key
    )
    renewed = join(None, raw=raw, proof=proof, path="/machines/renew")
    assert renewed.status == 200, renewed.body
    return dict(renewed.body)


def machine_events(admin_key: str, machine_id: str) -> list[dict[str, Any]]:
    """Every event of the audit trail about the machine."""
    reply = call("/api/compute/auditEvents/list", {**TENANT, "limit": 200}, admin_key)
    assert reply.status == 200, reply.body
    return [e for e in reply.body["events"] if e["detail"].get("machineId") == machine_id]


def machine_view(admin_key: str, machine_id: str) -> dict[str, Any]:
    reply = call("/api/compute/machines/get", {**TENANT, "machineId": machine_id}, admin_key)
    assert reply.status == 200, reply.body
    return dict(reply.body)


@pytest.fixture
def token(admin_key: str) -> str:
    pool = {**POOL, "siteId": "s1", "name": "GPU", "workspaceId": "w", "certificateTtlSeconds": 3600}
    assert call("/api/compute/pools/create", pool, admin_key).status == 200
    reply = call("/api/compute/joinTokens/create", {**POOL, "maxUses": 1}, admin_key)
    assert reply.status == 200, reply.body
    return str(reply.body["token"])


def test_four_renewals_a_rotation_and_a_rejoin_make_exactly_their_two_events(
    admin_key: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a machine admitted with its key
    old = make_csr(tmp_path / "old", "p256", "/CN=m")
    admitted = join({"joinToken": token, "csr": old.pem})
    assert admitted.status == 200, admitted.body
    machine_id, machine_token = admitted.body["machineId"], admitted.body["machineToken"]
    capsys.readouterr()

    # When it renews four times with the same key
    same_key = [renew_same_key(machine_token, old.key_path) for _ in range(4)]
    after_renewals = machine_view(admin_key, machine_id)
    routine = counted(capsys.readouterr().out)
    # And then onto a new key
    new = make_csr(tmp_path / "new", "p256", "/CN=m")
    rotated = renew_onto(machine_token, old.key_path, new.key_path, new.pem)
    rotation = counted(capsys.readouterr().out)
    after_rotation = machine_view(admin_key, machine_id)
    # And then re-joins with the new key
    rejoined = join({"joinToken": token, "csr": csr_for_key(new.key_path)}, signed_by=new.key_path)
    assert rejoined.status == 200 and rejoined.body["machineId"] == machine_id, rejoined.body
    published = publish_table_stream()
    trail = machine_events(admin_key, machine_id)

    # Then the trail holds the join, one key rotation and one re-join, and nothing for the renewals
    assert sorted((e["detailType"], e["detail"].get("rejoin")) for e in trail) == [
        ("security.machine.joined", False),
        ("security.machine.joined", True),
        ("security.machine.key-rotated", None),
    ]
    assert len([e for e in published if e.detail.get("machineId") == machine_id]) == 3
    # And the rotation names both keys and the certificate it replaced, that of the last renewal
    [rotation_event] = [e["detail"] for e in trail if e["detailType"] == "security.machine.key-rotated"]
    old_hash, new_hash = key_sha256(old.key_path), key_sha256(new.key_path)
    assert {k: rotation_event[k] for k in ("machineId", "state", "decidedBy")} == {
        "machineId": machine_id,
        "state": "active",
        "decidedBy": "machine",
    }
    assert (rotation_event["previousPublicKeySha256"], rotation_event["publicKeySha256"]) == (
        old_hash,
        new_hash,
    )
    assert (rotation_event["previousCertificateSerial"], rotation_event["certificateSerial"]) == (
        serial_of(same_key[-1]["certificate"]),
        serial_of(rotated["certificate"]),
    )
    assert rotation_event["occurredAt"] == after_rotation["lastRenewedAt"]
    # And the re-join names its key (the new one, unchanged) and the certificate it replaced
    [rejoin_event] = [e["detail"] for e in trail if e["detail"].get("rejoin") is True]
    assert (rejoin_event["previousPublicKeySha256"], rejoin_event["publicKeySha256"]) == (new_hash, new_hash)
    assert (rejoin_event["previousCertificateSerial"], rejoin_event["certificateSerial"]) == (
        serial_of(rotated["certificate"]),
        serial_of(rejoined.body["certificate"]),
    )
    # And the first join names its key and certificate, with nothing before them
    [first] = [e["detail"] for e in trail if e["detail"].get("rejoin") is False]
    assert (first["publicKeySha256"], first["certificateSerial"]) == (
        old_hash,
        serial_of(admitted.body["certificate"]),
    )
    assert (first["previousPublicKeySha256"], first["previousCertificateSerial"]) == (None, None)

    # And the routine renewals were counted, four, apart from the rotation
    assert [(m, o) for m, o, _ in routine if m == "Renewals"] == [("Renewals", "renewed")] * 4
    assert [(m, o) for m, o, _ in rotation if m == "Renewals"] == [("Renewals", "rotated")]
    # And the machine showed them: when it last renewed, and the five certificates its key held
    held = [serial_of(admitted.body["certificate"]), *(serial_of(r["certificate"]) for r in same_key)]
    assert [c["serial"] for c in after_renewals["certificates"]] == held
    assert after_renewals["certificateSerial"] == held[-1]
    assert after_renewals["publicKeySha256"] == old_hash
    assert after_renewals["lastRenewedAt"] is not None and after_renewals["rejoinedAt"] is None
    # And after the rotation only the new key's certificate: the old key's went on the CRL
    assert [c["serial"] for c in after_rotation["certificates"]] == [serial_of(rotated["certificate"])]
    assert after_rotation["publicKeySha256"] == new_hash


def test_the_stream_filter_drops_a_same_key_renewal_and_nothing_else_of_a_machine(
    admin_key: str, token: str, tmp_path: Path
) -> None:
    # Given a machine admitted with its key
    csr = make_csr(tmp_path / "k", "p256", "/CN=m")
    admitted = join({"joinToken": token, "csr": csr.pem})
    assert admitted.status == 200, admitted.body
    machine_id = admitted.body["machineId"]
    # When it renews with the same key, re-joins, renews with the same key again, and is revoked
    renew_same_key(admitted.body["machineToken"], csr.key_path)
    rejoined = join({"joinToken": token, "csr": csr_for_key(csr.key_path)}, signed_by=csr.key_path)
    assert rejoined.status == 200, rejoined.body
    renew_same_key(rejoined.body["machineToken"], csr.key_path)
    revoked = call("/api/compute/machines/revoke", {**TENANT, "machineId": machine_id}, admin_key)
    assert revoked.status == 200, revoked.body
    # Then the publisher is handed the join, the re-join and the revocation, never a renewal's write
    records = [r for r in table_stream() if r["dynamodb"]["Keys"]["pk"]["S"] == f"MACHINE#{machine_id}"]
    assert [r["eventName"] for r in records] == ["INSERT", "MODIFY", "MODIFY"]
    assert "rejoinedAt" in records[1]["dynamodb"]["NewImage"]
    assert records[2]["dynamodb"]["NewImage"]["state"] == {"S": "revoked"}
    # And each of them is in the trail
    publish_table_stream()
    assert sorted(e["detailType"] for e in machine_events(admin_key, machine_id)) == [
        "security.machine.joined",
        "security.machine.joined",
        "security.machine.revoked",
    ]

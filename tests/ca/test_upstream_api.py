"""Over the HTTP API: an upstream root (bring your own). The operator asks for a CSR
(certificateAuthorities/createCsr), the organisation's CA (the openssl CLI here, as its operators
would run it) signs it, and certificateAuthorities/importCertificate installs the result as the
pool's next CA (prepared, like a rotation's), which certificateAuthorities/activate makes its
issuing CA. Machines then verify up to the organisation's root with
`openssl verify -CAfile root.pem -untrusted ca.crt machine.crt`; every refusal changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from joinplane import aws, clock, expiry
from joinplane.dal import authorities as authorities_db
from joinplane_local import iam
from tests.support import call, join, key_id_of, openssl_csr
from tests.support.crl import fetched_crl
from tests.support.csr import openssl
from tests.support.events import publish_table_stream
from tests.support.openssl_ca import INTERMEDIATE, Authority, OrgPki

TENANT = {"tenantId": "acme"}
POOL = {**TENANT, "poolId": "gpu"}
GET = "/api/compute/certificateAuthorities/get"
CREATE_CSR = "/api/compute/certificateAuthorities/createCsr"
IMPORT = "/api/compute/certificateAuthorities/importCertificate"
ACTIVATE = "/api/compute/certificateAuthorities/activate"


@pytest.fixture
def org(tmp_path: Path) -> OrgPki:
    return OrgPki(tmp_path / "org")


@pytest.fixture
def root(org: OrgPki) -> Authority:
    return org.root()


def admit(token: str, directory: Path) -> dict[str, Any]:
    directory.mkdir()
    reply = join({"joinToken": token, "csr": openssl_csr(directory, "/CN=m")})
    assert reply.status == 200, reply.body
    return dict(reply.body)


def signed_request(admin_key: str, org: OrgPki, issuer: Authority, name: str = "pool-ca", **how: Any) -> str:
    """A createCsr over the API, signed by `issuer` as the organisation chooses (`how`)."""
    reply = call(CREATE_CSR, POOL, admin_key)
    assert reply.status == 200, reply.body
    return org.sign(issuer, reply.body["csr"], name, **how).pem


def kms_key_count() -> int:
    pages = aws.client("kms").get_paginator("list_keys").paginate()
    return sum(len(page["Keys"]) for page in pages)


def state(admin_key: str) -> tuple[Any, ...]:
    """What a refused import must leave as it was: the answer of get and every CA record."""
    return call(GET, POOL, admin_key).body, sorted(authorities_db.list_pool("acme", "gpu"))


def test_an_upstream_signed_ca_issues_machines_that_verify_up_to_the_organisations_root(
    admin_key: str, token: str, org: OrgPki, root: Authority, tmp_path: Path
) -> None:
    # Given a machine admitted under the pool's own (self-signed) first CA
    before = admit(token, tmp_path / "before")
    first = call(GET, POOL, admin_key).body["active"]
    # When the operator asks for a CSR
    requested = call(CREATE_CSR, POOL, admin_key)
    assert requested.status == 200, requested.body
    assert set(requested.body) == {"caId", "csr", "createdAt"}
    # Then it is a CA request for a P-256 key, signed by that key, and the pool still issues from its CA
    (tmp_path / "pool.csr").write_text(requested.body["csr"])
    text = openssl("req", "-in", str(tmp_path / "pool.csr"), "-noout", "-text", "-verify").stdout
    assert "CA:TRUE, pathlen:0" in text and "Certificate Sign, CRL Sign" in text and "P-256" in text
    shown = call(GET, POOL, admin_key).body
    assert shown["active"] == first and shown["pending"] == requested.body

    # When the organisation's root signs it and the operator imports it with the chain
    intermediate = org.sign(root, requested.body["csr"], "pool-ca")
    imported = call(IMPORT, {**POOL, "certificate": intermediate.pem, "chain": [root.pem]}, admin_key)

    # Then it is the pool's next CA, upstream and prepared: published in the bundle with its root
    # after the CA that still signs
    assert imported.status == 200, imported.body
    prepared = imported.body["next"]
    assert (prepared["caId"], prepared["upstream"], prepared["state"]) == (
        requested.body["caId"],
        True,
        "prepared",
    )
    assert imported.body["active"] == first
    assert imported.body["bundle"] == [first["certificate"], prepared["certificate"], root.pem]
    assert "pending" not in imported.body

    # When the operator activates it
    activated = call(ACTIVATE, {**POOL, "caId": prepared["caId"]}, admin_key)
    # Then it is the pool's active CA, and the bundle holds it, its root, then the retired CA
    assert activated.status == 200, activated.body
    imported = activated
    active = imported.body["active"]
    assert (active["caId"], active["upstream"], active["state"]) == (requested.body["caId"], True, "active")
    assert imported.body["bundle"] == [active["certificate"], root.pem, first["certificate"]]
    assert [retired["caId"] for retired in imported.body["retired"]] == [first["caId"]]
    assert call(GET, POOL, admin_key).body == imported.body

    # And a machine joining now verifies up to the organisation's root, with the CA as untrusted
    after = admit(token, tmp_path / "after")
    assert after["caCertificates"] == active["certificate"] + root.pem + first["certificate"]
    assert org.verify(root, [active["certificate"]], after["certificate"]).endswith("OK\n")
    # And (without the chain) not to the root alone, nor to the old CA
    assert "OK" not in org.verify(root, [], after["certificate"])
    # And the machine from before still verifies with the bundle it is handed on renewal
    (tmp_path / "bundle.pem").write_text("".join(imported.body["bundle"]))
    (tmp_path / "before.crt").write_text(before["certificate"])
    done = openssl(
        "verify", "-CAfile", str(tmp_path / "bundle.pem"), str(tmp_path / "before.crt"), check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_revoked_machine_of_an_upstream_ca_fails_crl_check_and_others_pass(
    admin_key: str, token: str, org: OrgPki, root: Authority, tmp_path: Path
) -> None:
    # Given the pool's CA is the organisation's intermediate, and two machines joined under it
    certificate = signed_request(admin_key, org, root)
    assert call(IMPORT, {**POOL, "certificate": certificate, "chain": [root.pem]}, admin_key).status == 200
    kept, revoked = admit(token, tmp_path / "kept"), admit(token, tmp_path / "revoked")
    # When one of them is revoked
    reply = call("/api/compute/machines/revoke", {**TENANT, "machineId": revoked["machineId"]}, admin_key)
    assert reply.status == 200, reply.body
    # Then the CRL its certificate names, signed by the intermediate, lists it and not the other
    crl = fetched_crl(revoked["certificate"], tmp_path)
    for machine, expected in ((revoked, "certificate revoked"), (kept, "OK")):
        (tmp_path / "machine.crt").write_text(machine["certificate"])
        (tmp_path / "ca.crt").write_text(certificate)
        done = openssl(
            "verify", "-crl_check", "-CRLfile", str(crl), "-CAfile", str(root.certificate),
            "-untrusted", str(tmp_path / "ca.crt"), str(tmp_path / "machine.crt"), check=False,
        )  # fmt: skip
        assert expected in done.stdout + done.stderr, done.stdout + done.stderr


def test_import_without_a_request_is_refused_with_its_reason(
    admin_key: str, pool: str, root: Authority
) -> None:
    before = state(admin_key)
    reply = call(IMPORT, {**POOL, "certificate": root.pem, "chain": [root.pem]}, admin_key)
    assert (reply.status, reply.code, reply.reason) == (400, "FAILED_PRECONDITION", "NO_PENDING_CA")
    assert state(admin_key) == before


@pytest.mark.parametrize(
    ("mistake", "code", "reason"),
    [
        ("a certificate for another key", "FAILED_PRECONDITION", "CA_KEY_MISMATCH"),
        ("not a CA", "INVALID_ARGUMENT", "VALIDATION_FAILED"),
        ("a CA that may not sign CRLs", "INVALID_ARGUMENT", "VALIDATION_FAILED"),
        ("a chain that is not its issuer", "INVALID_ARGUMENT", "VALIDATION_FAILED"),
        ("a chain without its root", "INVALID_ARGUMENT", "VALIDATION_FAILED"),
        ("expiring in ten days", "FAILED_PRECONDITION", "CA_CERTIFICATE_NOT_VALID"),
        ("garbage PEM", "INVALID_ARGUMENT", "VALIDATION_FAILED"),
        ("two certificates in one entry", "INVALID_ARGUMENT", "VALIDATION_FAILED"),
        ("a root with an RSA-1024 key", "INVALID_ARGUMENT", "CA_KEY_TOO_SMALL"),
        (
            "name constraints without the trust domain",
            "FAILED_PRECONDITION",
            "CA_NAME_CONSTRAINTS_EXCLUDE_POOL",
        ),
    ],
)
def test_an_unfit_certificate_is_refused_and_changes_nothing(
    admin_key: str, pool: str, org: OrgPki, root: Authority, mistake: str, code: str, reason: str
) -> None:
    # Given a pending request (and the pool's CA made by get)
    call(GET, POOL, admin_key)
    csr = call(CREATE_CSR, POOL, admin_key).body["csr"]
    other_root = org.root("other-root")
    certificate, chain = org.sign(root, csr, "pool-ca").pem, [root.pem]
    if mistake == "a certificate for another key":
        certificate = org.intermediate_with_key(root, "stranger").pem
    elif mistake == "not a CA":
        certificate = org.sign(root, csr, "leaf", extensions=("basicConstraints=critical,CA:false",)).pem
    elif mistake == "a CA that may not sign CRLs":
        no_crl = ("basicConstraints=critical,CA:true,pathlen:0", "keyUsage=critical,keyCertSign")
        certificate = org.sign(root, csr, "no-crl", extensions=(*no_crl, "subjectKeyIdentifier=hash")).pem
    elif mistake == "a chain that is not its issuer":
        chain = [other_root.pem]
    elif mistake == "a chain without its root":
        middle = org.intermediate_with_key(
            root, "middle", extensions=(*INTERMEDIATE[1:], "basicConstraints=critical,CA:true")
        )
        certificate, chain = org.sign(middle, csr, "below-middle").pem, [middle.pem]
    elif mistake == "expiring in ten days":
        certificate = org.sign(root, csr, "short", days=10).pem
    elif mistake == "garbage PEM":
        certificate = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
    elif mistake == "two certificates in one entry":
        chain = [root.pem + other_root.pem]
    elif mistake == "a root with an RSA-1024 key":
        weak_root = org.root("weak-root", newkey=("rsa:1024",))
        certificate, chain = org.sign(weak_root, csr, "under-weak").pem, [weak_root.pem]
    elif mistake == "name constraints without the trust domain":
        # The deployment's trust domain is joinplane.internal: its machines' SPIFFE IDs are left out.
        constrained = (*INTERMEDIATE, "nameConstraints=critical,permitted;URI:.example.org")
        certificate = org.sign(root, csr, "constrained", extensions=constrained).pem
    before = state(admin_key)
    # When it is imported
    reply = call(IMPORT, {**POOL, "certificate": certificate, "chain": chain}, admin_key)
    # Then it is refused with a message, and nothing changed: same CA, same bundle, request still pending
    assert (reply.status, reply.code, reply.reason) == (400, code, reason), reply.body
    assert reply.body["error"]["message"]
    assert state(admin_key) == before


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({**POOL, "certificate": "x", "chain": ["y"], "extra": 1}, 400),
        ({**POOL, "certificate": "x"}, 400),
        ({**POOL, "certificate": "x", "chain": []}, 400),
        ({**POOL, "certificate": "x", "chain": "y"}, 400),
        ({**POOL, "certificate": 1, "chain": ["y"]}, 400),
        ({**POOL, "certificate": "x" * 20000, "chain": ["y"]}, 400),
        ({**POOL, "certificate": "x", "chain": ["y"] * 9}, 400),
        ({"tenantId": "globex", "poolId": "gpu", "certificate": "x", "chain": ["y"]}, 404),
    ],
)
def test_bad_import_bodies_are_refused(admin_key: str, pool: str, body: dict[str, Any], status: int) -> None:
    call(CREATE_CSR, POOL, admin_key)
    before = state(admin_key)
    assert call(IMPORT, body, admin_key).status == status
    assert state(admin_key) == before


def test_a_newer_request_replaces_the_pending_one_and_its_key_is_scheduled_for_deletion(
    admin_key: str, pool: str, org: OrgPki, root: Authority
) -> None:
    # Given a request signed by the organisation, then a newer request
    first = call(CREATE_CSR, POOL, admin_key).body
    signed_first = org.sign(root, first["csr"], "first").pem
    second = call(CREATE_CSR, POOL, admin_key).body
    # Then only the newer one is pending; the first is abandoned and its KMS key on its way out
    assert call(GET, POOL, admin_key).body["pending"] == second
    abandoned = authorities_db.get(first["caId"])
    assert abandoned is not None and abandoned.state == "abandoned"
    clock.advance(expiry.ABANDONED_KEY_GRACE_SECONDS + 1)
    with iam.acting_as("RetentionFunction"):
        assert expiry.delete_abandoned_keys() == 1
    metadata = aws.client("kms").describe_key(KeyId=abandoned.key_id)["KeyMetadata"]
    assert metadata["KeyState"] == "PendingDeletion"
    # And importing the first request's certificate is refused: it is not for the pending key
    reply = call(IMPORT, {**POOL, "certificate": signed_first, "chain": [root.pem]}, admin_key)
    assert (reply.status, reply.reason) == (400, "CA_KEY_MISMATCH")
    # And the newer one imports
    signed_second = org.sign(root, second["csr"], "second").pem
    assert call(IMPORT, {**POOL, "certificate": signed_second, "chain": [root.pem]}, admin_key).status == 200


def test_a_pool_without_a_ca_gets_the_imported_one_as_its_first(
    admin_key: str, token: str, org: OrgPki, root: Authority, tmp_path: Path
) -> None:
    # Given a pool no machine has joined and whose CA nobody read: it has no CA
    assert authorities_db.get_pointer("acme", "gpu") is None
    # When the operator brings the organisation's intermediate before the first join
    certificate = signed_request(admin_key, org, root)
    imported = call(IMPORT, {**POOL, "certificate": certificate, "chain": [root.pem]}, admin_key)
    # Then it is the pool's first CA, alone in the bundle with its root, and the first join uses it
    assert imported.status == 200, imported.body
    assert imported.body["bundle"] == [imported.body["active"]["certificate"], root.pem]
    machine = admit(token, tmp_path / "m")
    assert org.verify(root, [certificate], machine["certificate"]).endswith("OK\n")


def test_requests_and_imports_need_pools_write_and_are_audit_events(
    admin_key: str, pool: str, org: OrgPki, root: Authority
) -> None:
    reply = call(
        "/api/compute/apiKeys/create", {**TENANT, "grants": ["compute:pools:read@tenant"]}, admin_key
    )
    reader = str(reply.body["key"])
    # A reader can neither ask for a CSR nor import
    assert call(CREATE_CSR, POOL, reader).code == "PERMISSION_DENIED"
    call(GET, POOL, admin_key)
    certificate = signed_request(admin_key, org, root)
    refused = call(IMPORT, {**POOL, "certificate": certificate, "chain": [root.pem]}, reader)
    assert (refused.status, refused.code) == (403, "PERMISSION_DENIED")
    # The operator imports, then activates (which a reader cannot)
    imported = call(IMPORT, {**POOL, "certificate": certificate, "chain": [root.pem]}, admin_key).body
    assert call(ACTIVATE, POOL, reader).code == "PERMISSION_DENIED"
    assert call(ACTIVATE, POOL, admin_key).status == 200
    # Then the request, the import and the activation are each one event naming the acting key
    published = [e for e in publish_table_stream() if "certificate-authority" in e.detail_type]
    by_type = {e.detail_type: e.detail for e in published}
    assert [e.detail_type for e in published].count("security.certificate-authority.requested") == 1
    requested, prepared, activated = (
        by_type["security.certificate-authority.requested"],
        by_type["security.certificate-authority.prepared"],
        by_type["security.certificate-authority.activated"],
    )
    assert requested["caId"] == prepared["caId"] == activated["caId"] == imported["next"]["caId"]
    assert (requested["upstream"], requested["state"], requested["decidedBy"]) == (
        True,
        "pending",
        key_id_of(admin_key),
    )
    assert (prepared["upstream"], prepared["state"], prepared["decidedBy"]) == (
        True,
        "prepared",
        key_id_of(admin_key),
    )
    assert (activated["upstream"], activated["state"], activated["decidedBy"]) == (
        True,
        "active",
        key_id_of(admin_key),
    )
    created = by_type["security.certificate-authority.created"]["caId"]
    assert prepared["previousCaId"] == activated["previousCaId"] == created


def test_an_archived_pool_takes_no_request_and_no_import(
    admin_key: str, pool: str, org: OrgPki, root: Authority
) -> None:
    call(GET, POOL, admin_key)
    certificate = signed_request(admin_key, org, root)
    assert call("/api/compute/pools/archive", POOL, admin_key).status == 200
    before = state(admin_key)
    for route, body in (
        (CREATE_CSR, POOL),
        (IMPORT, {**POOL, "certificate": certificate, "chain": [root.pem]}),
    ):
        reply = call(route, body, admin_key)
        assert (reply.status, reply.reason) == (409, "POOL_ARCHIVED")
    assert state(admin_key) == before


def test_another_tenants_key_can_neither_ask_for_nor_import_a_pools_ca(
    admin_key: str, pool: str, org: OrgPki, root: Authority
) -> None:
    # Given a pool of acme with a signed request waiting, and a key of tenant globex that holds
    # every compute permission in its own tenant
    certificate = signed_request(admin_key, org, root)
    before = state(admin_key)
    reply = call(
        "/api/compute/apiKeys/create", {"tenantId": "globex", "grants": ["compute:*@tenant"]}, admin_key
    )
    assert reply.status == 200, reply.body
    outsider = str(reply.body["key"])
    keys_before = kms_key_count()
    # When it asks for acme's CSR, or imports into acme's pool
    for route, body in (
        (CREATE_CSR, POOL),
        (IMPORT, {**POOL, "certificate": certificate, "chain": [root.pem]}),
    ):
        refused = call(route, body, outsider)
        # Then it is refused as if the pool did not exist for it, and nothing changed (no KMS key either)
        assert refused.status in (403, 404), refused.body
    assert state(admin_key) == before
    assert kms_key_count() == keys_before

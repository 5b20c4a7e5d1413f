"""The `intermediate` signing mode: the pool CA's KMS key signs a short-lived intermediate per
container, whose in-memory key signs machine certificates. Checked against the session's moto server
and with the openssl CLI and cryptography's verifier, as a verifier holding only the pool's bundle
would check what a machine presents (its certificate followed by the intermediate)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import verification
from cryptography.x509.oid import NameOID

from joinplane import aws, ca, clock, container, crl, csr_checks, intermediates, machine_certificates
from joinplane.dal import authorities as authorities_db
from joinplane.dal import dynamo
from joinplane.dal import intermediates as intermediates_db
from joinplane.dal.pools import pool_key
from joinplane.errors import Internal
from tests.support import call, join, openssl_csr
from tests.support.crl import get_crl
from tests.support.csr import Csrs, openssl
from tests.support.http import sign_proof

TENANT, SITE = "acme", "s1"
BASE_URL = "https://api.example.com"


@pytest.fixture
def pool(table: str) -> str:
    pool_id = f"pool-{uuid.uuid4().hex[:8]}"
    pk, sk = pool_key(TENANT, pool_id)
    dynamo.put({"pk": pk, "sk": sk, "state": "active", "tenantId": TENANT, "poolId": pool_id})
    return pool_id


@pytest.fixture
def intermediate_mode(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SIGNING_MODE", "intermediate")
    container.reset(keep_clients=True)
    yield
    clock.reset()


@pytest.fixture
def kms_signs() -> Iterator[list[str]]:
    signed: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        signed.append(str(params.get("KeyId")))

    client = aws.client("kms")
    client.meta.events.register("provide-client-params.kms.Sign", count, unique_id="intermediate-signs")
    yield signed
    client.meta.events.unregister("provide-client-params.kms.Sign", unique_id="intermediate-signs")


def issue(
    csrs: Csrs, pool: str, machine: str = "mach_01", lifetime: int = 3600
) -> machine_certificates.IssuedCertificate:
    return machine_certificates.issue_machine_certificate(
        tenant_id=TENANT,
        site_id=SITE,
        pool_id=pool,
        machine_id=machine,
        csr=csr_checks.parse_csr(csrs["p256"].pem),
        lifetime_seconds=lifetime,
        crl_base_url=BASE_URL,
    )


def certificates(pem: str) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem.encode())


def openssl_verify(directory: Path, bundle: str, presented: str, *extra: str) -> str:
    """`openssl verify` as a TLS verifier does it: the pool's bundle trusted, the machine's
    certificate and the chain it presents (everything after its first certificate) untrusted."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "bundle.pem").write_text(bundle)
    (directory / "presented.pem").write_text(presented)
    leaf = certificates(presented)[0]
    (directory / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    result = openssl(
        "verify",
        "-CAfile",
        str(directory / "bundle.pem"),
        "-untrusted",
        str(directory / "presented.pem"),
        "-purpose",
        "sslclient",
        *extra,
        str(directory / "leaf.pem"),
        check=False,
    )
    return result.stdout + result.stderr


def test_a_machine_certificate_verifies_against_the_pool_bundle_through_the_chain_it_is_given(
    intermediate_mode: None, csrs: Csrs, pool: str, tmp_path: Path
) -> None:
    # Given a pool in the intermediate mode
    # When a machine certificate is issued
    issued = issue(csrs, pool)
    # Then the certificate field holds the machine's certificate followed by one intermediate CA
    leaf, intermediate = certificates(issued.certificate_pem)
    pool_ca = certificates(issued.ca_certificates_pem)[0]
    assert leaf.issuer == intermediate.subject and intermediate.issuer == pool_ca.subject
    constraints = intermediate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    # And openssl verifies it with the pool's bundle alone trusted
    assert ": OK" in openssl_verify(tmp_path, issued.ca_certificates_pem, issued.certificate_pem)
    # And so does cryptography's verifier, as a client-certificate verifier
    store = verification.Store(certificates(issued.ca_certificates_pem))
    verifier = verification.PolicyBuilder().store(store).time(clock.now()).build_client_verifier()
    verified = verifier.verify(leaf, [intermediate])
    assert verified.chain[-1] == pool_ca
    # And the machine's SPIFFE ID, subject and CA id are what the KMS mode gives
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "mach_01"
    assert issued.ca_id == ca.pool_authorities(TENANT, SITE, pool).authorities.active.ca_id
    # And the intermediate names the pool CA's CRL, the machine certificate the intermediate's
    assert crl_url_of(intermediate) == f"{BASE_URL}/crl/{issued.ca_id}"
    assert crl_url_of(leaf).startswith(f"{BASE_URL}/crl/int_")
    # And a verifier checking every CRL of the path with what those URLs serve accepts it
    crls = fetched_crls(tmp_path, leaf, intermediate)
    assert ": OK" in openssl_verify(tmp_path, issued.ca_certificates_pem, issued.certificate_pem, *crls)


def crl_url_of(certificate: x509.Certificate) -> str:
    points = certificate.extensions.get_extension_for_class(x509.CRLDistributionPoints).value
    (point,) = points
    assert point.full_name is not None
    return str(point.full_name[0].value)


def fetched_crls(directory: Path, *named_by: x509.Certificate) -> list[str]:
    """`-crl_check_all` and a -CRLfile for each CRL the certificates name, fetched from the route
    that serves them (`GET /crl/<id>`, as API Gateway delivers it)."""
    directory.mkdir(parents=True, exist_ok=True)
    arguments = ["-crl_check_all"]
    for n, certificate in enumerate(named_by):
        answer = get_crl(urlsplit(crl_url_of(certificate)).path)
        assert answer["statusCode"] == 200, answer
        path = directory / f"crl{n}.pem"
        der = base64.b64decode(answer["body"])
        path.write_bytes(x509.load_der_x509_crl(der).public_bytes(serialization.Encoding.PEM))
        arguments += ["-CRLfile", str(path)]
    return arguments


def test_a_machine_joins_renews_and_is_revoked_over_the_api_in_the_intermediate_mode(
    intermediate_mode: None, admin_key: str, tmp_path: Path, kms_signs: list[str]
) -> None:
    # Given a pool and a token made over the operator API, and a machine already joined (this
    # container's intermediate made)
    pool = f"pool-{uuid.uuid4().hex[:8]}"
    made = call(
        "/api/compute/pools/create",
        {"tenantId": TENANT, "poolId": pool, "siteId": SITE, "name": "GPU", "workspaceId": "w"},
        admin_key,
    )
    assert made.status == 200, made.body
    token = call(
        "/api/compute/joinTokens/create", {"tenantId": TENANT, "poolId": pool, "maxUses": 5}, admin_key
    )
    assert token.status == 200, token.body
    joined = [
        join({"joinToken": token.body["token"], "csr": openssl_csr(tmp_path / f"m{n}", "/CN=m")})
        for n in (0, 1)
    ]
    assert all(reply.status == 200 for reply in joined), joined
    machine = joined[1].body
    kms_signs.clear()
    # When the machine renews with the same key
    body = {"machineToken": machine["machineToken"], "csr": (tmp_path / "m1" / "csr.pem").read_text()}
    proof = sign_proof(
        tmp_path / "m1" / "key.pem",
        purpose="renew",
        credential=machine["machineToken"],
        body=json.dumps(body).encode(),
    )
    renewed = join(body, path="/machines/renew", proof=proof)
    # Then it gets a certificate signed in memory (no KMS call), followed by its intermediate
    assert renewed.status == 200, renewed.body
    assert kms_signs == []
    leaf, intermediate = certificates(renewed.body["certificate"])
    assert renewed.body["certificateExpiresAt"] == clock.rfc3339(leaf.not_valid_after_utc)
    # And a verifier holding the bundle and checking every CRL of the path accepts it
    crls = fetched_crls(tmp_path / "renewed", leaf, intermediate)
    verified = openssl_verify(
        tmp_path / "renewed", renewed.body["caCertificates"], renewed.body["certificate"], *crls
    )
    assert ": OK" in verified, verified
    # When the operator revokes the machine
    revoked = call(
        "/api/compute/machines/revoke", {"tenantId": TENANT, "machineId": machine["machineId"]}, admin_key
    )
    assert revoked.status == 200, revoked.body
    # Then its renewal is refused at once
    proof = sign_proof(
        tmp_path / "m1" / "key.pem",
        purpose="renew",
        credential=machine["machineToken"],
        body=json.dumps(body).encode(),
    )
    assert join(body, path="/machines/renew", proof=proof).status != 200
    # But the certificate it holds still verifies with every CRL of its path until it expires (at
    # most two hours): nobody holds its intermediate's key to list it (docs/pki.md says so)
    crls = fetched_crls(tmp_path / "revoked", leaf, intermediate)
    verified = openssl_verify(
        tmp_path / "revoked", renewed.body["caCertificates"], renewed.body["certificate"], *crls
    )
    assert ": OK" in verified, verified


def test_a_container_signs_many_certificates_with_one_kms_sign(
    intermediate_mode: None, csrs: Csrs, pool: str, kms_signs: list[str]
) -> None:
    # Given a pool whose CA exists
    ca.pool_authorities(TENANT, SITE, pool)
    kms_signs.clear()
    # When one container issues five certificates
    issued = [issue(csrs, pool, f"mach_{n}") for n in range(5)]
    # Then KMS signed once (the intermediate), and all five chain through the same intermediate
    assert len(kms_signs) == 1
    assert len({certificates(i.certificate_pem)[1].serial_number for i in issued}) == 1
    # And the intermediate is recorded under its pool CA, before any certificate was handed out
    (recorded,) = intermediates_db.of_ca(issued[0].ca_id)
    assert int(recorded.serial, 16) == certificates(issued[0].certificate_pem)[1].serial_number
    # When the signing window has passed
    clock.advance(intermediates.SIGNING_WINDOW.total_seconds() + 1)
    later = issue(csrs, pool, "mach_9")
    # Then the container made a new intermediate: one more KMS Sign
    assert len(kms_signs) == 2
    assert certificates(later.certificate_pem)[1].serial_number != int(recorded.serial, 16)


def test_no_machine_certificate_outlives_its_intermediate(
    intermediate_mode: None, csrs: Csrs, pool: str, tmp_path: Path
) -> None:
    # Given a container whose intermediate is near the end of its signing window
    issue(csrs, pool, "mach_0")
    clock.advance(intermediates.SIGNING_WINDOW.total_seconds() - 60)
    # When a machine asks for thirty days
    issued = issue(csrs, pool, lifetime=30 * 24 * 3600)
    leaf, intermediate = certificates(issued.certificate_pem)
    # Then its certificate ends with the intermediate, a little over an hour from now
    assert leaf.not_valid_after_utc == intermediate.not_valid_after_utc == issued.expires_at
    assert issued.expires_at - clock.now() < timedelta(hours=1, minutes=2)
    # And it still verifies a second before that, and not after
    before = str(int(issued.expires_at.timestamp()) - 1)
    assert ": OK" in openssl_verify(
        tmp_path / "a", issued.ca_certificates_pem, issued.certificate_pem, "-attime", before
    )
    after = str(int(issued.expires_at.timestamp()) + 1)
    assert "certificate has expired" in openssl_verify(
        tmp_path / "b", issued.ca_certificates_pem, issued.certificate_pem, "-attime", after
    )


def test_the_intermediate_cannot_sign_a_ca(
    intermediate_mode: None, csrs: Csrs, pool: str, tmp_path: Path
) -> None:
    # Given the intermediate of this container (its key is in memory: what a compromised function holds)
    issued = issue(csrs, pool)
    held = intermediates.current(ca.pool_authorities(TENANT, SITE, pool), f"{BASE_URL}/crl/{issued.ca_id}")
    # When it signs a CA, and that CA signs a client certificate
    now = clock.now()
    rogue_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    rogue_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rogue")])
    rogue = intermediates.sign(
        held,
        x509.CertificateBuilder()
        .subject_name(rogue_name)
        .issuer_name(held.certificate.subject)
        .public_key(rogue_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(minutes=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True),
    )
    forged = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mach_forged")]))
        .issuer_name(rogue_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(minutes=20))
        .sign(rogue_key, hashes.SHA256())
    )
    presented = "".join(
        c.public_bytes(serialization.Encoding.PEM).decode() for c in (forged, rogue, held.certificate)
    )
    # Then openssl refuses the path (pathLenConstraint 0)
    refused = openssl_verify(tmp_path, issued.ca_certificates_pem, presented)
    assert "path length constraint exceeded" in refused
    # And so does cryptography's verifier
    store = verification.Store(certificates(issued.ca_certificates_pem))
    verifier = verification.PolicyBuilder().store(store).time(now).build_client_verifier()
    with pytest.raises(verification.VerificationError):
        verifier.verify(forged, [rogue, held.certificate])


def test_an_emergency_rotation_puts_the_retired_cas_intermediates_on_its_crl(
    intermediate_mode: None, csrs: Csrs, admin_key: str, tmp_path: Path
) -> None:
    # Given a pool made over the operator API and a machine certificate from this container's intermediate
    pool = f"pool-{uuid.uuid4().hex[:8]}"
    made = call(
        "/api/compute/pools/create",
        {"tenantId": TENANT, "poolId": pool, "siteId": SITE, "name": "GPU", "workspaceId": "w"},
        admin_key,
    )
    assert made.status == 200, made.body
    issued = issue(csrs, pool)
    _, intermediate = certificates(issued.certificate_pem)
    # When the operator rotates the pool's CA in an emergency (a key is suspected)
    rotated = call(
        "/api/compute/certificateAuthorities/rotate",
        {"tenantId": TENANT, "poolId": pool, "emergency": True},
        admin_key,
    )
    # Then the answer says the intermediate was revoked, and what that breaks
    assert rotated.status == 200, rotated.body
    assert "1 unexpired intermediate(s) are listed on its CRL" in rotated.body["breaks"]
    # And the retired CA's CRL lists the intermediate
    listed = x509.load_der_x509_crl(crl.served(issued.ca_id).der)
    assert listed.get_revoked_certificate_by_serial_number(intermediate.serial_number) is not None
    # And a verifier checking the chain's CRLs refuses the machine certificate it signed
    bundle = ca.pool_authorities(TENANT, SITE, pool).bundle_pem
    crls = fetched_crls(tmp_path, certificates(issued.certificate_pem)[0], intermediate)
    refused = openssl_verify(tmp_path, bundle, issued.certificate_pem, *crls)
    assert "at 1 depth lookup: certificate revoked" in refused, refused
    # And the container's next certificate comes from a new intermediate under the new CA
    ca.forget(TENANT, pool)
    after = issue(csrs, pool, "mach_02")
    new_leaf, new_intermediate = certificates(after.certificate_pem)
    assert after.ca_id != issued.ca_id and new_intermediate.serial_number != intermediate.serial_number
    crls = fetched_crls(tmp_path / "after", new_leaf, new_intermediate)
    verified = openssl_verify(tmp_path / "after", after.ca_certificates_pem, after.certificate_pem, *crls)
    assert ": OK" in verified


def test_a_container_holding_a_retired_ca_makes_no_intermediate_of_it(
    intermediate_mode: None, csrs: Csrs, pool: str
) -> None:
    # Given a container that read the pool's CA, then another rotated it (normal: prepared, then activated)
    pool_ca = ca.pool_authorities(TENANT, SITE, pool)
    ca.rotate(TENANT, SITE, pool, by="jpk_admin", propagation_seconds=3600)
    ca.activate(TENANT, pool, by="jpk_admin")
    # When the stale container makes its intermediate
    # Then the record's condition refuses it: no intermediate of a retired CA exists
    with pytest.raises(intermediates.CaRotated):
        intermediates.current(pool_ca, "")
    assert intermediates_db.of_ca(pool_ca.authorities.active.ca_id) == []
    # And an issuance in that container reads the pool's CAs again and signs under the new one
    issued = issue(csrs, pool)
    assert issued.ca_id != pool_ca.authorities.active.ca_id


def test_a_pool_ca_made_in_the_kms_mode_keeps_signing_in_kms(
    monkeypatch: pytest.MonkeyPatch, csrs: Csrs, pool: str, kms_signs: list[str]
) -> None:
    # Given a pool whose CA was made in the kms mode (pathLenConstraint 0: no CA may sit below it)
    ca.pool_authorities(TENANT, SITE, pool)
    # When the deployment switches to the intermediate mode and issues
    monkeypatch.setenv("SIGNING_MODE", "intermediate")
    container.reset(keep_clients=True)
    kms_signs.clear()
    issued = [issue(csrs, pool, f"mach_{n}") for n in range(2)]
    # Then each certificate is signed by the pool CA in KMS, as before, until the CA is rotated
    assert len(kms_signs) == 2
    assert all(len(certificates(i.certificate_pem)) == 1 for i in issued)


def test_an_unknown_signing_mode_fails_issuance_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, csrs: Csrs, pool: str
) -> None:
    # Given a deployment whose SIGNING_MODE was hand-edited to neither kms nor intermediate
    monkeypatch.setenv("SIGNING_MODE", "hsm")
    container.reset(keep_clients=True)
    # When a certificate is asked for
    # Then it is refused as the deployment's fault, naming the values it takes, and no CA is made
    with pytest.raises(Internal, match="must be one of kms, intermediate"):
        issue(csrs, pool)
    assert authorities_db.read(TENANT, pool) is None


def test_an_intermediates_crl_is_served_while_it_lives_and_unknown_ones_are_not_found(
    intermediate_mode: None, csrs: Csrs, pool: str
) -> None:
    # Given an intermediate's CRL, named by the certificate it signed
    leaf, _ = certificates(issue(csrs, pool).certificate_pem)
    path = urlsplit(crl_url_of(leaf)).path
    # Then it is served, cacheable no longer than the intermediate lives
    answer = get_crl(path)
    assert answer["statusCode"] == 200 and answer["headers"]["cache-control"] == "public, max-age=300"
    # And an intermediate id that was never made, or a forged one, is NOT_FOUND
    assert get_crl(f"/crl/int_{'0' * 26}")["statusCode"] == 404
    assert get_crl("/crl/int_../../etc")["statusCode"] == 404
    # When the intermediate has expired
    clock.advance(intermediates.INTERMEDIATE_VALIDITY.total_seconds() + 1)
    # Then its CRL is gone too: nothing it signed can verify any more
    assert get_crl(path)["statusCode"] == 404

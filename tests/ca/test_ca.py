"""Machine certificates, checked the way their users see them: CSRs made by the openssl CLI, issued
certificates verified by `openssl verify`. The pool CA's own life (its KMS key, rotation, races) is
tests/ca/test_kms_authorities.py."""

from __future__ import annotations

import base64
import re
import uuid
from datetime import timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from joinplane import ca, clock, csr_checks, machine_certificates
from joinplane.errors import FailedPrecondition, InvalidArgument
from tests.support.csr import Csrs, OpensslTool, openssl

TENANT, POOL = "acme", "gpu-east"
# Fresh per run: the threaded moto server's backends are process-global and never reset (conftest).
RACE_NATURAL, RACE_FORCED = (f"race-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("natural", "forced"))
THIRTY_DAYS = 30 * 24 * 3600


def issue(
    csr_pem: str, *, tenant: str = TENANT, pool: str = POOL, machine: str = "mach_01", lifetime: int = 3600
) -> machine_certificates.IssuedCertificate:
    return machine_certificates.issue_machine_certificate(
        tenant_id=tenant,
        site_id="s1",
        pool_id=pool,
        machine_id=machine,
        csr=csr_checks.parse_csr(csr_pem),
        lifetime_seconds=lifetime,
    )


def certificate(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def pem(label: str, der: bytes) -> str:
    body = base64.encodebytes(der).decode()
    return f"-----BEGIN {label}-----\n{body}-----END {label}-----\n"


def csr_der(csr_pem: str) -> bytes:
    return x509.load_pem_x509_csr(csr_pem.encode()).public_bytes(serialization.Encoding.DER)


def spki(csr_pem: str) -> bytes:
    key = x509.load_pem_x509_csr(csr_pem.encode()).public_key()
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def rejected(csr_pem: str) -> str:
    with pytest.raises(InvalidArgument) as raised:
        csr_checks.parse_csr(csr_pem)
    return raised.value.message


# --- parse_csr: what a machine may propose -----------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "key_type"),
    [
        ("p256", "ECDSA P-256"),
        ("p384", "ECDSA P-384"),
        ("ed25519", "Ed25519"),
        ("rsa2048", "RSA 2048"),
        ("rsa4096", "RSA 4096"),
    ],
)
def test_allowed_key_types_parse_and_their_join_identity_is_the_spki_sha256(
    csrs: Csrs, ossl: OpensslTool, kind: str, key_type: str
) -> None:
    # Given a CSR made by openssl with an allowed key
    csr_pem = csrs[kind].pem
    # When it is parsed
    parsed = csr_checks.parse_csr(csr_pem)
    # Then the key is accepted, and the join identity is what the machine computes with openssl alone
    assert parsed.key_type == key_type
    assert parsed.public_key_sha256 == ossl.spki_sha256(csr_pem)
    assert re.fullmatch("[0-9a-f]{64}", parsed.public_key_sha256)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("rsa1024", "RSA key of 1024 bits is outside 2048-4096"),
        (
            "p521",
            "csr key type ECDSA secp521r1 is not allowed; use ECDSA P-256/P-384, Ed25519 or RSA 2048-4096",
        ),
        (
            "secp256k1",
            "csr key type ECDSA secp256k1 is not allowed; use ECDSA P-256/P-384, Ed25519 or RSA 2048-4096",
        ),
        ("ed448", "csr key type Ed448 is not allowed; use ECDSA P-256/P-384, Ed25519 or RSA 2048-4096"),
        ("rsa-pss", "csr key type RSA-PSS is not allowed; use ECDSA P-256/P-384, Ed25519 or RSA 2048-4096"),
        ("p256-sha1", "csr is signed with SHA1; sign it with SHA-256 or stronger"),
    ],
)
def test_disallowed_keys_and_weak_signatures_are_rejected_with_the_reason(
    csrs: Csrs, kind: str, message: str
) -> None:
    # Given a well-formed, correctly self-signed CSR whose key or digest is not allowed
    # When it is parsed / Then it is an invalid argument that says why
    assert rejected(csrs[kind].pem) == message


def test_a_dsa_key_is_rejected(csrs: Csrs) -> None:
    # Given a DSA key (its parameters generated first, as openssl requires)
    params = csrs.workdir / "dsa-params.pem"
    openssl(
        "genpkey",
        "-genparam",
        "-algorithm",
        "DSA",
        "-pkeyopt",
        "dsa_paramgen_bits:2048",
        "-out",
        str(params),
        cwd=csrs.workdir,
    )
    csr = csrs.with_key_args("dsa", "-paramfile", str(params))
    # When its CSR is parsed / Then it is rejected by name
    assert (
        rejected(csr.pem)
        == "csr key type DSA is not allowed; use ECDSA P-256/P-384, Ed25519 or RSA 2048-4096"
    )


def test_an_rsa_key_with_public_exponent_3_is_rejected(csrs: Csrs) -> None:
    # Given RSA 2048 with e=3, the exponent behind the classic RSA signature forgeries
    csr = csrs.with_key_args(
        "rsa-e3", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-pkeyopt", "rsa_keygen_pubexp:3"
    )
    # When parsed / Then rejected, naming the exponent
    assert rejected(csr.pem) == "RSA public exponent 3 is not allowed; use 65537"


def test_a_compressed_ec_point_is_rejected_because_the_certificate_would_carry_other_bytes(
    csrs: Csrs,
) -> None:
    # Given a P-256 key whose public point openssl writes in compressed form
    key = csrs.workdir / "compressed.key"
    openssl(
        "ec",
        "-in",
        str(csrs["p256"].key_path),
        "-conv_form",
        "compressed",
        "-out",
        str(key),
        cwd=csrs.workdir,
    )
    csr_pem = csrs.for_key(key, "compressed")
    # When parsed / Then rejected: its SPKI hash would not be the SPKI hash of the issued certificate
    assert "not DER-encoded as usual" in rejected(csr_pem)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello",
        "-----BEGIN CERTIFICATE REQUEST-----\nnot base64 !!\n-----END CERTIFICATE REQUEST-----\n",
        "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE-----\n",
    ],
    ids=["empty", "garbage", "not-base64", "not-der", "mismatched-labels"],
)
def test_text_that_is_not_a_pem_csr_is_rejected(text: str) -> None:
    assert rejected(text) == "csr is not a PEM certificate request"


def test_a_certificate_is_not_a_csr(csrs: Csrs, ossl: OpensslTool) -> None:
    # Given a self-signed certificate, sent as-is and relabelled as a certificate request
    cert_pem = openssl(
        "req", "-x509", "-key", str(csrs["p256"].key_path), "-subj", "/CN=x", "-days", "1", cwd=ossl.workdir
    ).stdout
    relabelled = cert_pem.replace("CERTIFICATE", "CERTIFICATE REQUEST")
    # When either is parsed / Then neither is a CSR
    assert rejected(cert_pem) == "csr is not a PEM certificate request"
    assert rejected(relabelled) == "csr is not a PEM certificate request"


def test_the_legacy_new_certificate_request_label_is_accepted(csrs: Csrs) -> None:
    # Some older tools (Netscape, Windows certreq) still write this label for the same PKCS#10 body.
    legacy = csrs["p256"].pem.replace("CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST")
    assert (
        csr_checks.parse_csr(legacy).public_key_sha256
        == csr_checks.parse_csr(csrs["p256"].pem).public_key_sha256
    )


def test_two_csrs_in_one_pem_are_rejected(csrs: Csrs) -> None:
    # Only one key can be the join identity; picking the first silently would be a guess.
    assert rejected(csrs["p256"].pem + csrs["ed25519"].pem) == "csr is not a PEM certificate request"


def test_csr_text_over_16_kib_is_rejected_before_parsing_but_whitespace_within_it_is_fine(csrs: Csrs) -> None:
    # Given the same valid CSR, padded to exactly the limit and to one character over it
    csr_pem = csrs["p256"].pem.replace("\n", "\r\n")
    at_limit = "\n" + csr_pem + " " * (csr_checks.MAX_CSR_CHARS - len(csr_pem) - 1)
    assert len(at_limit) == csr_checks.MAX_CSR_CHARS
    # When parsed / Then CRLF line endings and surrounding whitespace are accepted, one more char is not
    assert csr_checks.parse_csr(at_limit).key_type == "ECDSA P-256"
    assert rejected(at_limit + " ") == "csr must be PEM text of at most 16384 characters"


def test_a_tampered_signature_fails_proof_of_possession(csrs: Csrs) -> None:
    # Given a CSR whose last signature byte was flipped (the DER still parses)
    der = bytearray(csr_der(csrs["p256"].pem))
    der[-1] ^= 0x01
    tampered = pem("CERTIFICATE REQUEST", bytes(der))
    x509.load_pem_x509_csr(tampered.encode())
    # When parsed / Then the signature does not verify
    assert rejected(tampered) == "csr signature does not verify (proof of possession failed)"


def test_a_csr_with_someone_elses_public_key_fails_proof_of_possession(csrs: Csrs) -> None:
    # Given machine A's CSR with its public key swapped for machine B's (same size, so the DER is valid)
    mine, theirs = csrs["p256"].pem, csrs.fresh("p256", "victim").pem
    der = csr_der(mine)
    assert der.count(spki(mine)) == 1 and len(spki(mine)) == len(spki(theirs))
    swapped = pem("CERTIFICATE REQUEST", der.replace(spki(mine), spki(theirs)))
    # When parsed / Then A cannot obtain a certificate for B's key
    assert rejected(swapped) == "csr signature does not verify (proof of possession failed)"


def test_the_join_identity_follows_the_key_not_the_csr(csrs: Csrs) -> None:
    # Given two CSRs for the same key with different subjects (a machine's retry)
    first = csrs["ed25519"].pem
    retry = csrs.for_key(csrs["ed25519"].key_path, "ed25519-retry", "/CN=something-else/O=retry")
    # Then they have one join identity, and another key has another
    assert csr_checks.parse_csr(first).public_key_sha256 == csr_checks.parse_csr(retry).public_key_sha256
    assert (
        csr_checks.parse_csr(csrs["p256"].pem).public_key_sha256
        != csr_checks.parse_csr(first).public_key_sha256
    )


# --- issue_machine_certificate: what the server decides ----------------------------------------


@pytest.mark.usefixtures("table")
@pytest.mark.parametrize("kind", ["p256", "p384", "ed25519", "rsa2048", "rsa4096"])
def test_issued_certificates_verify_with_openssl_as_tls_clients(
    csrs: Csrs, ossl: OpensslTool, kind: str
) -> None:
    # Given a machine's CSR
    # When a certificate is issued for it
    issued = issue(csrs[kind].pem)
    # Then openssl accepts it as a TLS client certificate under the pool CA, and as nothing else
    result = ossl.verify(issued.ca_certificates_pem, issued.certificate_pem)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(": OK")
    assert (
        ossl.verify(issued.ca_certificates_pem, issued.certificate_pem, purpose="sslserver").returncode != 0
    )


@pytest.mark.usefixtures("table")
@pytest.mark.parametrize(
    ("kind", "key_encipherment"), [("p256", False), ("ed25519", False), ("rsa2048", True)]
)
def test_the_certificate_holds_exactly_what_the_server_decides(
    csrs: Csrs, ossl: OpensslTool, kind: str, key_encipherment: bool
) -> None:
    # Given a CSR
    csr_pem = csrs[kind].pem
    # When issued for machine mach_01 of acme/gpu-east
    issued = issue(csr_pem)
    cert, ca_cert = certificate(issued.certificate_pem), certificate(issued.ca_certificates_pem)
    # Then the subject is CN=<machineId> only and the issuer is the pool CA
    assert cert.subject == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mach_01")])
    assert cert.issuer == ca_cert.subject
    assert cert.public_key() == x509.load_pem_x509_csr(csr_pem.encode()).public_key()
    # And the extensions are exactly these
    extensions = {ext.oid: ext for ext in cert.extensions}
    assert set(extensions) == {
        x509.BasicConstraints.oid,
        x509.KeyUsage.oid,
        x509.ExtendedKeyUsage.oid,
        x509.SubjectAlternativeName.oid,
        x509.SubjectKeyIdentifier.oid,
        x509.AuthorityKeyIdentifier.oid,
    }
    san = extensions[x509.SubjectAlternativeName.oid].value
    assert list(san) == [
        x509.UniformResourceIdentifier(
            "spiffe://joinplane.internal/tenant/acme/pool/gpu-east/machine/mach_01"
        )
    ]
    assert list(extensions[x509.ExtendedKeyUsage.oid].value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    basic = extensions[x509.BasicConstraints.oid]
    assert basic.critical and basic.value.ca is False
    usage = extensions[x509.KeyUsage.oid]
    assert usage.critical and usage.value.digital_signature
    assert usage.value.key_encipherment is key_encipherment
    assert not (usage.value.key_cert_sign or usage.value.crl_sign or usage.value.content_commitment)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert extensions[x509.AuthorityKeyIdentifier.oid].value.key_identifier == ca_ski.digest
    assert extensions[x509.SubjectKeyIdentifier.oid].value == x509.SubjectKeyIdentifier.from_public_key(
        cert.public_key()
    )
    # And openssl reads the same
    text = ossl.text(issued.certificate_pem)
    assert "URI:spiffe://joinplane.internal/tenant/acme/pool/gpu-east/machine/mach_01" in text
    assert "CA:FALSE" in text and "TLS Web Client Authentication" in text


@pytest.mark.usefixtures("table")
def test_every_extension_the_csr_asks_for_is_ignored(csrs: Csrs, ossl: OpensslTool) -> None:
    # Given a CSR asking for a DNS SAN, another tenant's SPIFFE id, CA:TRUE, keyCertSign and serverAuth
    csr_pem = csrs["p256-asks-for-more"].pem
    assert len(x509.load_pem_x509_csr(csr_pem.encode()).extensions) == 4
    # When it is issued
    issued = issue(csr_pem)
    # Then none of it is in the certificate, which cannot sign certificates or serve TLS
    text = ossl.text(issued.certificate_pem)
    for requested in (
        "evil.example",
        "other-tenant",
        "CA:TRUE",
        "Certificate Sign",
        "Server Authentication",
        "Code Signing",
    ):
        assert requested not in text
    cert = certificate(issued.certificate_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(name.value) for name in san] == [
        "spiffe://joinplane.internal/tenant/acme/pool/gpu-east/machine/mach_01"
    ]
    assert ossl.verify(issued.ca_certificates_pem, issued.certificate_pem).returncode == 0
    assert (
        ossl.verify(issued.ca_certificates_pem, issued.certificate_pem, purpose="sslserver").returncode != 0
    )


@pytest.mark.usefixtures("table")
@pytest.mark.parametrize(
    ("asked", "granted"),
    [
        (3600, 3600),
        (THIRTY_DAYS, THIRTY_DAYS),
        (THIRTY_DAYS + 1, THIRTY_DAYS),
        (10**9, THIRTY_DAYS),
        (299, 300),
        (0, 300),
        (-5, 300),
    ],
)
def test_lifetime_is_clamped_to_5_minutes_to_30_days_and_back_dated_for_clock_skew(
    csrs: Csrs, asked: int, granted: int
) -> None:
    # Given the clock now
    before = clock.now().replace(microsecond=0)
    # When a certificate is issued for the asked lifetime
    issued = issue(csrs["p256"].pem, lifetime=asked)
    after = clock.now()
    cert = certificate(issued.certificate_pem)
    # Then it is valid from five minutes before issuance until the granted lifetime after it
    issued_at = cert.not_valid_before_utc + timedelta(minutes=5)
    assert before <= issued_at <= after
    assert cert.not_valid_after_utc - issued_at == timedelta(seconds=granted)
    assert issued.expires_at == cert.not_valid_after_utc
    assert issued.expires_at.utcoffset() == timedelta(0)


@pytest.mark.usefixtures("table")
def test_serials_are_random_positive_159_bit_numbers(csrs: Csrs) -> None:
    # When the same CSR is issued twice
    first, second = issue(csrs["p256"].pem), issue(csrs["p256"].pem)
    # Then the serials differ, are 159 bits, and `serial` is the certificate's serial in hex
    serials = [certificate(issued.certificate_pem).serial_number for issued in (first, second)]
    assert serials[0] != serials[1]
    assert [serial.bit_length() for serial in serials] == [159, 159]
    assert [int(first.serial, 16), int(second.serial, 16)] == serials
    assert re.fullmatch("[0-9a-f]{40}", first.serial)


@pytest.mark.usefixtures("table")
def test_each_pool_has_its_own_ca_and_certificates_do_not_cross_pools(csrs: Csrs, ossl: OpensslTool) -> None:
    # Given certificates issued in two pools of one tenant and the same pool name in another tenant
    east = issue(csrs["p256"].pem, pool="gpu-east")
    west = issue(csrs["p256"].pem, pool="gpu-west")
    other_tenant = issue(csrs["p256"].pem, tenant="globex", pool="gpu-east")
    # Then there are three CAs, and each certificate verifies only under its own pool's CA
    assert len({east.ca_certificates_pem, west.ca_certificates_pem, other_tenant.ca_certificates_pem}) == 3
    assert ossl.verify(west.ca_certificates_pem, east.certificate_pem).returncode != 0
    assert ossl.verify(east.ca_certificates_pem, other_tenant.certificate_pem).returncode != 0
    assert ossl.verify(other_tenant.ca_certificates_pem, other_tenant.certificate_pem).returncode == 0


# --- the pool CA -------------------------------------------------------------------------------


@pytest.mark.usefixtures("table")
def test_a_certificate_never_outlives_its_ca(csrs: Csrs) -> None:
    # Given a pool CA that expires in ten days
    ca_cert = ca.pool_authorities(TENANT, "s1", POOL).certificate
    clock.advance((ca_cert.not_valid_after_utc - clock.now() - timedelta(days=10)).total_seconds())
    # When a 30-day certificate is asked for / Then it ends with the CA
    issued = issue(csrs["p256"].pem, lifetime=THIRTY_DAYS)
    assert issued.expires_at == ca_cert.not_valid_after_utc
    # And once the CA is about to expire, issuing is refused rather than handing out a dead certificate
    clock.advance(timedelta(days=10).total_seconds() - 60)
    with pytest.raises(FailedPrecondition, match="expires at") as refused:
        issue(csrs["p256"].pem)
    assert refused.value.reason == "POOL_CA_EXPIRED"


@pytest.mark.usefixtures("table")
def test_long_ids_shorten_the_ca_name_to_64_characters_and_keep_pools_apart(
    csrs: Csrs, ossl: OpensslTool
) -> None:
    # Given the longest ids the API allows, in two pools that differ only at the very end
    tenant, pool_a, pool_b = "t" * 128, "p" * 127 + "a", "p" * 127 + "b"
    # When certificates are issued in both
    a = issue(csrs["p256"].pem, tenant=tenant, pool=pool_a, machine="m" * 64)
    b = issue(csrs["p256"].pem, tenant=tenant, pool=pool_b, machine="m" * 64)
    # Then each CA's CN fits X.520's 64 characters, the two names differ, and the SPIFFE id is whole
    names = [
        certificate(i.ca_certificates_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME) for i in (a, b)
    ]
    common_names = [str(name[0].value) for name in names]
    assert all(len(cn) == 64 and cn.startswith("Joinplane pool CA ttt") for cn in common_names)
    assert common_names[0] != common_names[1] and all("~" in cn for cn in common_names)
    san = certificate(a.certificate_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(n.value) for n in san] == [
        f"spiffe://joinplane.internal/tenant/{tenant}/pool/{pool_a}/machine/{'m' * 64}"
    ]
    # And openssl verifies each certificate under its own CA only
    assert ossl.verify(a.ca_certificates_pem, a.certificate_pem).returncode == 0
    assert ossl.verify(b.ca_certificates_pem, a.certificate_pem).returncode != 0


@pytest.mark.usefixtures("table")
@pytest.mark.parametrize(
    ("tenant", "pool", "machine", "message"),
    [
        ("acme/evil", POOL, "mach_01", "tenantId"),
        ("", POOL, "mach_01", "tenantId"),
        (TENANT, ".hidden", "mach_01", "poolId"),
        (TENANT, "a/b", "mach_01", "poolId"),
        (TENANT, POOL, "m#fragment", "machineId"),
        (TENANT, POOL, "m" * 65, "machineId"),
        # The machine id is the SPIFFE ID's last segment as it is, and ':' is no segment character.
        (TENANT, POOL, "mach:01", "machineId"),
    ],
)
def test_ids_that_would_bend_the_spiffe_uri_or_the_key_tags_are_refused(
    csrs: Csrs, tenant: str, pool: str, machine: str, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        issue(csrs["p256"].pem, tenant=tenant, pool=pool, machine=machine)

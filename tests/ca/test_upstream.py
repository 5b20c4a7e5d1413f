"""An upstream root, its crypto core: a pool CA whose KMS key is certified by the organisation's own
root. The organisation's side is the openssl CLI (tests/support/openssl_ca.py), as its operators
would run it; the KMS keys are moto's (the session's emulator)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from joinplane import ca_keys, errors, upstream
from joinplane.errors import FailedPrecondition, Internal, InvalidArgument, JoinplaneError
from tests.support.csr import openssl
from tests.support.openssl_ca import (
    INTERMEDIATE,
    MACHINE_SPIFFE_ID,
    ROOT,
    Authority,
    OrgPki,
    kms_signing_key,
    machine_certificate,
)

SUBJECT = x509.Name(
    [
        x509.NameAttribute(NameOID.COMMON_NAME, "Joinplane pool CA acme/p1"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ca_01UPSTREAM"),
    ]
)
# An organisation's intermediate that may itself certify one more CA (the pool's).
ISSUING_INTERMEDIATE = (
    "basicConstraints=critical,CA:true,pathlen:1",
    "keyUsage=critical,keyCertSign,cRLSign",
)


class PendingKey:
    """A KMS key as createCsr leaves it: no certificate yet, only its CSR."""

    def __init__(self) -> None:
        self.key_id, self.public_key = kms_signing_key()
        self.csr = upstream.csr_for_key(self.key_id, SUBJECT)


@pytest.fixture
def pending(table: str) -> PendingKey:
    return PendingKey()


@pytest.fixture
def org(tmp_path: Path) -> OrgPki:
    return OrgPki(tmp_path / "org")


@pytest.fixture
def root(org: OrgPki) -> Authority:
    return org.root()


def now() -> datetime:
    return datetime.now(UTC)


def refusal(
    pending: PendingKey, certificate: Authority, chain: list[Authority], at: datetime | None = None
) -> JoinplaneError:
    with pytest.raises(JoinplaneError) as refused:
        upstream.check_intermediate(
            certificate.pem,
            [c.pem for c in chain],
            pending.public_key,
            at or now(),
            spiffe_id=MACHINE_SPIFFE_ID,
        )
    return refused.value


# --- The request -------------------------------------------------------------------------------


def test_the_csr_is_for_the_kms_key_signed_by_it_and_asks_for_a_pool_ca(
    pending: PendingKey, org: OrgPki
) -> None:
    # Given the CSR of a pending KMS key, handed to the organisation
    path = org.workdir / "pool.csr"
    path.write_text(pending.csr)

    # When openssl checks it, Then its self-signature verifies (made by kms:Sign)
    checked = openssl("req", "-in", str(path), "-verify", "-noout", check=False)
    assert checked.returncode == 0, checked.stderr
    assert "verify OK" in checked.stdout + checked.stderr
    # And the key it proposes is the KMS key's, byte for byte
    kms_pem = pending.public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    assert openssl("req", "-in", str(path), "-noout", "-pubkey").stdout == kms_pem
    # And it asks for what a pool CA needs, under the pool CA's name
    text = openssl("req", "-in", str(path), "-noout", "-text").stdout
    assert "CA:TRUE, pathlen:0" in text
    assert "Certificate Sign, CRL Sign" in text
    assert "CN = Joinplane pool CA acme/p1" in text and "OU = ca_01UPSTREAM" in text


def test_a_csr_kms_signed_with_another_key_fails_loudly_instead_of_shipping(
    pending: PendingKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given KMS signing with a key other than the one whose public key the CSR carries
    other_key_id, _ = kms_signing_key()
    sign = ca_keys.kms_sign_tbs
    monkeypatch.setattr(ca_keys, "kms_sign_tbs", lambda _key_id, tbs: sign(other_key_id, tbs))

    # When the CSR is made, Then it is refused as INTERNAL: a request that does not verify never ships
    with pytest.raises(Internal, match="does not verify"):
        upstream.csr_for_key(pending.key_id, SUBJECT)


# --- Accepted ----------------------------------------------------------------------------------


def test_an_intermediate_signed_by_the_organisations_root_issues_machines_that_verify_to_that_root(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given the organisation signs the pool's CSR with its root (openssl x509 -req)
    intermediate = org.sign(root, pending.csr, "pool-ca")

    # When the intermediate is checked with its chain (the root)
    checked = upstream.check_intermediate(
        intermediate.pem, [root.pem], pending.public_key, now(), spiffe_id=MACHINE_SPIFFE_ID
    )

    # Then it is accepted, for as long as both last
    assert checked.certificate == x509.load_pem_x509_certificate(intermediate.pem.encode())
    assert checked.chain == (checked.root,)
    assert checked.root == x509.load_pem_x509_certificate(root.pem.encode())
    assert checked.not_after == checked.certificate.not_valid_after_utc
    # And a machine certificate the KMS key signs verifies up to the organisation's root
    machine = machine_certificate(checked.certificate, pending.key_id, pending.public_key)
    assert org.verify(root, [intermediate.pem], machine).strip().endswith("OK")
    # And not without the intermediate: the machine really hangs from it
    assert "OK" not in org.verify(root, [], machine)


def test_a_chain_through_an_organisation_intermediate_verifies_and_clips_to_its_earliest_expiry(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given root -> the organisation's issuing intermediate (pathlen:1, 200 days) -> the pool CA (365 days)
    middle = org.intermediate_with_key(root, "org-issuing", ISSUING_INTERMEDIATE, days=200)
    intermediate = org.sign(middle, pending.csr, "pool-ca")

    # When it is checked with the chain, issuer first
    checked = upstream.check_intermediate(
        intermediate.pem, [middle.pem, root.pem], pending.public_key, now(), spiffe_id=MACHINE_SPIFFE_ID
    )

    # Then the path lasts as long as its shortest-lived certificate
    assert checked.not_after == x509.load_pem_x509_certificate(middle.pem.encode()).not_valid_after_utc
    assert checked.not_after < checked.certificate.not_valid_after_utc
    # And a machine verifies with the root trusted and the chain untrusted
    machine = machine_certificate(checked.certificate, pending.key_id, pending.public_key)
    assert org.verify(root, [intermediate.pem, middle.pem], machine).strip().endswith("OK")


# --- Refused -----------------------------------------------------------------------------------


def test_a_certificate_for_another_key_is_refused(pending: PendingKey, org: OrgPki, root: Authority) -> None:
    # Given a valid pool CA certificate, but for another pending key (another pool's CSR)
    another = PendingKey()
    theirs = org.sign(root, another.csr, "their-ca")

    # When it is imported for this pool's key, Then FAILED_PRECONDITION names the key
    refused = refusal(pending, theirs, [root])
    assert isinstance(refused, FailedPrecondition)
    assert "pending key" in refused.message


@pytest.mark.parametrize(
    ("extensions", "says"),
    [
        (("basicConstraints=critical,CA:false", "keyUsage=critical,keyCertSign,cRLSign"), "not a CA"),
        (("keyUsage=critical,keyCertSign,cRLSign",), "not a CA"),
        (
            ("basicConstraints=critical,CA:true,pathlen:0", "keyUsage=critical,cRLSign,digitalSignature"),
            "keyCertSign",
        ),
        (("basicConstraints=critical,CA:true,pathlen:0", "keyUsage=critical,keyCertSign"), "cRLSign"),
        (("basicConstraints=critical,CA:true,pathlen:0",), "keyUsage"),
        ((*INTERMEDIATE, "extendedKeyUsage=serverAuth"), "clientAuth"),
        (
            (*INTERMEDIATE[:2], "subjectKeyIdentifier=none", "authorityKeyIdentifier=none"),
            "subjectKeyIdentifier",
        ),
    ],
    ids=[
        "CA-false",
        "no-basic-constraints",
        "no-keyCertSign",
        "no-cRLSign",
        "no-key-usage",
        "serverAuth-only",
        "no-SKI",
    ],
)
def test_an_intermediate_that_may_not_issue_machine_certificates_and_crls_is_refused(
    pending: PendingKey, org: OrgPki, root: Authority, extensions: tuple[str, ...], says: str
) -> None:
    # Given the root signed the pool's key with extensions a pool CA cannot work with
    intermediate = org.sign(root, pending.csr, "pool-ca", extensions)

    # When it is imported, Then INVALID_ARGUMENT says what is missing
    refused = refusal(pending, intermediate, [root])
    assert isinstance(refused, InvalidArgument)
    assert says in refused.message


def test_the_eku_refusal_is_what_openssl_would_do_to_every_machine(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given an intermediate limited to serverAuth (refused above), issuing a machine anyway
    intermediate = org.sign(root, pending.csr, "pool-ca", (*INTERMEDIATE, "extendedKeyUsage=serverAuth"))
    certificate = x509.load_pem_x509_certificate(intermediate.pem.encode())
    machine = machine_certificate(certificate, pending.key_id, pending.public_key)

    # When a verifier checks the machine as a client, Then openssl refuses it: the refusal spares a broken CA
    assert "unsuitable certificate purpose" in org.verify(root, [intermediate.pem], machine)


def test_an_unprocessed_critical_extension_is_refused_as_openssl_would_refuse_every_machine(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given an intermediate carrying a private critical extension no verifier knows
    unknown = (*INTERMEDIATE, "1.3.6.1.4.1.99999.1=critical,ASN1:UTF8String:hello")
    intermediate = org.sign(root, pending.csr, "pool-ca", unknown)
    # When it is imported, Then INVALID_ARGUMENT names the extension
    refused = refusal(pending, intermediate, [root])
    assert isinstance(refused, InvalidArgument) and "1.3.6.1.4.1.99999.1" in refused.message
    # And a machine issued under it anyway is what openssl refuses: the refusal spares a broken CA
    certificate = x509.load_pem_x509_certificate(intermediate.pem.encode())
    machine = machine_certificate(certificate, pending.key_id, pending.public_key)
    assert "unhandled critical extension" in org.verify(root, [intermediate.pem], machine)
    # And the same extension on the root is refused too
    odd_root = org.root("odd-root", extensions=(*ROOT, "1.3.6.1.4.1.99999.1=critical,ASN1:UTF8String:x"))
    refused = refusal(pending, org.sign(odd_root, pending.csr, "pool-ca-2"), [odd_root])
    assert isinstance(refused, InvalidArgument) and "chain[0]" in refused.message


def test_a_chain_whose_root_did_not_sign_the_intermediate_is_refused(
    pending: PendingKey, org: OrgPki, root: Authority, tmp_path: Path
) -> None:
    # Given the pool CA signed by the root, and another root of the very same name but its own key
    intermediate = org.sign(root, pending.csr, "pool-ca")
    impostor = OrgPki(tmp_path / "impostor").root()
    assert impostor.pem != root.pem

    # When the intermediate is imported with the impostor as its chain, Then the signature is checked,
    # not just the name
    refused = refusal(pending, intermediate, [impostor])
    assert isinstance(refused, InvalidArgument)
    assert "not issued by chain[0]" in refused.message


def test_a_chain_of_unrelated_certificates_is_refused(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given the pool CA signed by the root, and a chain naming an unrelated second root
    intermediate = org.sign(root, pending.csr, "pool-ca")
    other = org.root("other-root")

    # When it is imported, Then the chain does not link
    refused = refusal(pending, intermediate, [other])
    assert isinstance(refused, InvalidArgument)
    assert "not issued by chain[0]" in refused.message


def test_a_chain_that_stops_short_of_a_self_signed_root_is_refused(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given root -> the organisation's intermediate -> the pool CA, and a chain without the root
    middle = org.intermediate_with_key(root, "org-issuing", ISSUING_INTERMEDIATE)
    intermediate = org.sign(middle, pending.csr, "pool-ca")

    # When it is imported, Then the chain must end in the root
    refused = refusal(pending, intermediate, [middle])
    assert isinstance(refused, InvalidArgument)
    assert "self-signed root" in refused.message
    # And an empty chain likewise names what is missing
    empty = refusal(pending, intermediate, [])
    assert isinstance(empty, InvalidArgument)
    assert "chain" in empty.message


def test_a_chain_with_a_non_ca_in_the_middle_is_refused(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given an end-entity certificate (CA:false) that nonetheless signed the pool CA
    middle = org.intermediate_with_key(
        root, "not-a-ca", ("basicConstraints=critical,CA:false", "keyUsage=critical,keyCertSign,cRLSign")
    )
    intermediate = org.sign(middle, pending.csr, "pool-ca")

    # When it is imported, Then the middle of the chain is no CA
    refused = refusal(pending, intermediate, [middle, root])
    assert isinstance(refused, InvalidArgument)
    assert "chain[0] is not a CA" in refused.message


def test_a_chain_whose_path_length_leaves_no_room_for_the_pool_ca_is_refused(
    pending: PendingKey, org: OrgPki
) -> None:
    # Given a root constrained to pathlen:0 that signed an intermediate, which signed the pool CA
    root = org.root("strict-root", ("basicConstraints=critical,CA:true,pathlen:0", *ROOT[1:]))
    middle = org.intermediate_with_key(root, "org-issuing", ISSUING_INTERMEDIATE)
    intermediate = org.sign(middle, pending.csr, "pool-ca")

    # When it is imported, Then the root's path length forbids the pool CA below the intermediate
    refused = refusal(pending, intermediate, [middle, root])
    assert isinstance(refused, InvalidArgument)
    assert "chain[1]'s pathlen:0" in refused.message
    # And openssl would have refused every machine it issued
    machine = machine_certificate(
        x509.load_pem_x509_certificate(intermediate.pem.encode()), pending.key_id, pending.public_key
    )
    assert "path length constraint exceeded" in org.verify(root, [intermediate.pem, middle.pem], machine)


# --- Name constraints, keys and signatures: what would fail every machine at the verifier ----------


# Each puts the pool's machines (CN=mach_..., spiffe://joinplane.internal/...) outside the subtrees
# a verifier lets the pool CA name; openssl then refuses every machine with this error.
@pytest.mark.parametrize(
    ("constraint", "openssl_says"),
    [
        ("nameConstraints=critical,excluded;URI:joinplane.internal", "error 48 at 0 depth"),
        ("nameConstraints=critical,permitted;URI:.example.org", "error 47 at 0 depth"),
        # A leading dot permits hosts below the domain, not the domain itself (RFC 5280).
        ("nameConstraints=critical,permitted;URI:.joinplane.internal", "error 47 at 0 depth"),
        ("nameConstraints=critical,permitted;dirName:dn\n[dn]\nO=Example Org", "error 47 at 0 depth"),
    ],
    ids=[
        "excluded-trust-domain",
        "permitted-other-domain",
        "permitted-subdomains-only",
        "permitted-other-subjects",
    ],
)
def test_name_constraints_that_leave_out_the_pools_machines_are_refused_as_openssl_refuses_them(
    pending: PendingKey, org: OrgPki, root: Authority, constraint: str, openssl_says: str
) -> None:
    # Given the root signed the pool's key with name constraints that leave the pool's machines out
    intermediate = org.sign(root, pending.csr, "pool-ca", (*INTERMEDIATE, *constraint.split("\n")))

    # When it is imported, Then FAILED_PRECONDITION says the constraints exclude the pool's machines
    refused = refusal(pending, intermediate, [root])
    assert (
        isinstance(refused, FailedPrecondition) and refused.reason == errors.CA_NAME_CONSTRAINTS_EXCLUDE_POOL
    )
    assert "certificate's name constraints exclude" in refused.message
    # And a machine certificate issued under it anyway is what openssl refuses, every one of them
    certificate = x509.load_pem_x509_certificate(intermediate.pem.encode())
    machine = machine_certificate(certificate, pending.key_id, pending.public_key)
    assert openssl_says in org.verify(root, [intermediate.pem], machine)


def test_a_roots_name_constraints_apply_to_the_pools_machines_too(pending: PendingKey, org: OrgPki) -> None:
    # Given a root whose constraints exclude every host under .internal (the trust domain among them)
    root = org.root("constrained-root", (*ROOT, "nameConstraints=critical,excluded;URI:.internal"))
    intermediate = org.sign(root, pending.csr, "pool-ca")

    # When the pool CA it signed is imported, Then the root's constraints are named as the reason
    refused = refusal(pending, intermediate, [root])
    assert refused.reason == errors.CA_NAME_CONSTRAINTS_EXCLUDE_POOL and "chain[0]'s" in refused.message
    # And openssl agrees, for every machine under it
    certificate = x509.load_pem_x509_certificate(intermediate.pem.encode())
    machine = machine_certificate(certificate, pending.key_id, pending.public_key)
    assert "excluded subtree violation" in org.verify(root, [intermediate.pem], machine)


def test_name_constraints_that_permit_the_trust_domain_are_accepted_and_machines_verify(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given an intermediate allowed the deployment's trust domain and nothing else of its kind
    constraint = "nameConstraints=critical,permitted;URI:joinplane.internal,excluded;URI:.example.org"
    intermediate = org.sign(root, pending.csr, "pool-ca", (*INTERMEDIATE, constraint))

    # When it is imported, Then it is accepted
    checked = upstream.check_intermediate(
        intermediate.pem, [root.pem], pending.public_key, now(), spiffe_id=MACHINE_SPIFFE_ID
    )
    # And its machines verify; one of another trust domain would not (the constraint is real)
    machine = machine_certificate(checked.certificate, pending.key_id, pending.public_key)
    assert org.verify(root, [intermediate.pem], machine).strip().endswith("OK")
    foreign = machine_certificate(
        checked.certificate,
        pending.key_id,
        pending.public_key,
        "spiffe://example.com/tenant/a/pool/b/machine/mach_1",
    )
    assert "permitted subtree violation" in org.verify(root, [intermediate.pem], foreign)
    # And the check follows the deployment's trust domain: for another one the same CA is refused
    with pytest.raises(FailedPrecondition, match="SPIFFE IDs"):
        upstream.check_intermediate(
            intermediate.pem,
            [root.pem],
            pending.public_key,
            now(),
            spiffe_id="spiffe://corp.example/x/mach_1",
        )


@pytest.mark.parametrize(
    ("newkey", "digest", "reason", "says"),
    [
        (("rsa:1024",), "sha256", errors.CA_KEY_TOO_SMALL, "RSA-1024"),
        (("rsa:2047",), "sha256", errors.CA_KEY_TOO_SMALL, "RSA-2047"),
        (("ec", "-pkeyopt", "ec_paramgen_curve:P-521"), "sha256", errors.CA_KEY_UNSUPPORTED, "secp521r1"),
        (("ec", "-pkeyopt", "ec_paramgen_curve:secp256k1"), "sha256", errors.CA_KEY_UNSUPPORTED, "secp256k1"),
        (("ed25519",), None, errors.CA_KEY_UNSUPPORTED, "an Ed25519 key"),
    ],
    ids=["rsa-1024", "rsa-2047", "p-521", "secp256k1", "ed25519"],
)
def test_a_root_whose_key_verifiers_refuse_is_refused_with_its_reason(
    pending: PendingKey, org: OrgPki, newkey: tuple[str, ...], digest: str | None, reason: str, says: str
) -> None:
    # Given the organisation's root holds such a key, and signed the pool's key
    root = org.root("odd-root", newkey=newkey, digest=digest)
    intermediate = org.sign(root, pending.csr, "pool-ca", digest=digest)

    # When it is imported, Then INVALID_ARGUMENT names the root's key, with the reason
    refused = refusal(pending, intermediate, [root])
    assert isinstance(refused, InvalidArgument) and refused.reason == reason
    assert refused.message.startswith("chain[0] has") and says in refused.message


def test_an_rsa_1024_root_is_what_a_verifier_at_the_default_security_level_refuses(
    pending: PendingKey, org: OrgPki
) -> None:
    # Given a pool CA under an RSA-1024 root (refused above), issuing a machine anyway
    root = org.root("weak-root", newkey=("rsa:1024",))
    intermediate = org.sign(root, pending.csr, "pool-ca")
    certificate = x509.load_pem_x509_certificate(intermediate.pem.encode())
    machine = machine_certificate(certificate, pending.key_id, pending.public_key)

    # When a TLS server at OpenSSL's default security level checks the machine, Then it refuses it
    assert "CA certificate key too weak" in org.verify(root, [intermediate.pem], machine, auth_level=2)


@pytest.mark.parametrize(
    "newkey",
    [("rsa:2048",), ("ec", "-pkeyopt", "ec_paramgen_curve:P-384")],
    ids=["rsa-2048", "p-384"],
)
def test_roots_with_rsa_2048_or_p_384_keys_are_accepted(
    pending: PendingKey, org: OrgPki, newkey: tuple[str, ...]
) -> None:
    # Given a root with the smallest RSA key or the other curve accepted, which signed the pool's key
    root = org.root("root-ok", newkey=newkey)
    intermediate = org.sign(root, pending.csr, "pool-ca")
    # When it is imported, Then it is accepted and its machines verify at the default security level
    checked = upstream.check_intermediate(
        intermediate.pem, [root.pem], pending.public_key, now(), spiffe_id=MACHINE_SPIFFE_ID
    )
    machine = machine_certificate(checked.certificate, pending.key_id, pending.public_key)
    assert org.verify(root, [intermediate.pem], machine, auth_level=2).strip().endswith("OK")


def test_a_sha1_signature_on_the_path_is_refused_as_a_verifier_refuses_it(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    # Given the root signed the pool's key with SHA-1
    intermediate = org.sign(root, pending.csr, "pool-ca", digest="sha1")
    # When it is imported, Then INVALID_ARGUMENT names the SHA-1 signature
    refused = refusal(pending, intermediate, [root])
    assert isinstance(refused, InvalidArgument) and refused.reason == errors.CA_SIGNATURE_TOO_WEAK
    assert refused.message.startswith("certificate is signed with SHA1")
    # And a TLS server at OpenSSL's default security level refuses every machine under it
    certificate = x509.load_pem_x509_certificate(intermediate.pem.encode())
    machine = machine_certificate(certificate, pending.key_id, pending.public_key)
    verdict = org.verify(root, [intermediate.pem], machine, auth_level=2)
    assert "CA signature digest algorithm too weak" in verdict
    # And a SHA-1 signature higher up (the organisation's own intermediate) likewise
    middle = org.intermediate_with_key(root, "org-issuing", ISSUING_INTERMEDIATE, digest="sha1")
    refused = refusal(pending, org.sign(middle, pending.csr, "pool-ca-2"), [middle, root])
    assert refused.reason == errors.CA_SIGNATURE_TOO_WEAK and refused.message.startswith("chain[0] is signed")


def test_a_sha1_self_signed_root_is_accepted_as_verifiers_accept_it(pending: PendingKey, org: OrgPki) -> None:
    # Given an RSA-2048 root that signed itself with SHA-1, and the pool's key with SHA-256
    root = org.root("legacy-root", newkey=("rsa:2048",), digest="sha1")
    intermediate = org.sign(root, pending.csr, "pool-ca")
    # When it is imported, Then it is accepted: a trust anchor's own signature is never checked
    checked = upstream.check_intermediate(
        intermediate.pem, [root.pem], pending.public_key, now(), spiffe_id=MACHINE_SPIFFE_ID
    )
    # And a TLS server at the default security level accepts its machines
    machine = machine_certificate(checked.certificate, pending.key_id, pending.public_key)
    assert org.verify(root, [intermediate.pem], machine, auth_level=2).strip().endswith("OK")


@pytest.mark.parametrize(
    ("days", "at", "says"),
    [
        (365, timedelta(days=400), "expired at"),
        (365, timedelta(days=-2), "not valid before"),
        (10, timedelta(0), "sooner than a machine certificate may live"),
        (365, timedelta(days=340), "sooner than a machine certificate may live"),
    ],
    ids=["expired", "not-yet-valid", "ten-day-intermediate", "expiring-in-25-days"],
)
def test_an_intermediate_not_valid_now_or_not_for_long_enough_is_refused(
    pending: PendingKey, org: OrgPki, root: Authority, days: int, at: timedelta, says: str
) -> None:
    # Given an intermediate valid for `days` from today
    intermediate = org.sign(root, pending.csr, "pool-ca", days=days)

    # When it is imported at `at` from now, Then FAILED_PRECONDITION says when it is (or is not) valid
    refused = refusal(pending, intermediate, [root], now() + at)
    assert isinstance(refused, FailedPrecondition)
    assert says in refused.message


@pytest.mark.parametrize(
    "garbage",
    ["", "hello", "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", 42, "x" * 20_000],
    ids=["empty", "text", "bad-base64", "not-a-string", "too-long"],
)
def test_garbage_instead_of_a_certificate_is_refused(
    pending: PendingKey, root: Authority, garbage: object
) -> None:
    # When garbage is imported as the certificate, Then INVALID_ARGUMENT
    with pytest.raises(InvalidArgument, match="certificate"):
        upstream.check_intermediate(
            garbage,  # type: ignore[arg-type]
            [root.pem],
            pending.public_key,
            now(),
            spiffe_id=MACHINE_SPIFFE_ID,
        )


def test_a_csr_or_two_certificates_in_one_field_are_refused(
    pending: PendingKey, org: OrgPki, root: Authority
) -> None:
    intermediate = org.sign(root, pending.csr, "pool-ca")

    # When the CSR is sent back instead of the certificate, Then it is not a certificate
    with pytest.raises(InvalidArgument, match=r"not a PEM certificate|holds 0 certificates"):
        upstream.check_intermediate(
            pending.csr, [root.pem], pending.public_key, now(), spiffe_id=MACHINE_SPIFFE_ID
        )
    # When the certificate and its root come as one PEM, Then one per entry is asked for
    with pytest.raises(InvalidArgument, match="holds 2 certificates"):
        upstream.check_intermediate(
            intermediate.pem + root.pem, [root.pem], pending.public_key, now(), spiffe_id=MACHINE_SPIFFE_ID
        )
    # And likewise in the chain
    with pytest.raises(InvalidArgument, match=r"chain\[0\] holds 2 certificates"):
        upstream.check_intermediate(
            intermediate.pem, [root.pem + root.pem], pending.public_key, now(), spiffe_id=MACHINE_SPIFFE_ID
        )

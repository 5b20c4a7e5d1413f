"""An upstream root (bring your own): the pool's issuing CA as an intermediate of the organisation's PKI.

Two steps, each its own operator call:

1. `csr_for_key`: a PKCS#10 request for a pending KMS key, signed in KMS, asking for what the pool
   CA needs (`CA:TRUE, pathlen:0`; `keyCertSign, cRLSign`). The organisation's CA signs it however
   it likes; the request is only a proposal.
2. `check_intermediate`: what comes back is checked before anything is stored; it must be for that
   key, a CA that may sign machine certificates and CRLs, valid long enough to carry a full-length
   machine certificate, and chain, certificate by certificate, to a self-signed root. The chain is
   what machines are handed after the CA in `caCertificates` (`openssl verify -CAfile root.pem
   -untrusted chain machine.crt`), so a chain that does not link is refused here rather than
   discovered by every machine.

Decisions: the chain must end in a self-signed root (the organisation's trust anchor;
a chain ending in an intermediate would be trusted by nothing a verifier could check here); the
intermediate, and every certificate of its chain, must stay valid for at least MAX_LIFETIME_SECONDS
from the import (an intermediate made with `-days 1` is a mistake to catch now, not in a month);
after that, issuance must clip each machine certificate to the earliest notAfter of the path
(`Checked.not_after`; joinplane.machine_certificates clips to the CA's own notAfter, and a chain
certificate may expire first).

Only certificate code imports this module (the certificate authorities function); it still loads
`cryptography` inside its functions, as every module but the certificate code does
(tests/architecture).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from joinplane.errors import (
    CA_CERTIFICATE_NOT_VALID,
    CA_KEY_MISMATCH,
    CA_KEY_TOO_SMALL,
    CA_KEY_UNSUPPORTED,
    CA_NAME_CONSTRAINTS_EXCLUDE_POOL,
    CA_SIGNATURE_TOO_WEAK,
    FailedPrecondition,
    Internal,
    InvalidArgument,
)

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

_E = TypeVar("_E", bound="x509.ExtensionType")

# A certificate is a few kilobytes at most; a chain of more than a handful is no PKI we can check.
MAX_CERTIFICATE_CHARS = 16 * 1024
MAX_CHAIN_LENGTH = 8
# Keys of the path every verifier of a machine accepts: RSA from 2048 bits (OpenSSL's default
# security level refuses less, "CA certificate key too weak", and machines' own CSRs need 2048) and
# ECDSA on P-256 or P-384 (BoringSSL-based verifiers, Chrome's and Go's among them for some uses,
# know no P-521; secp256k1 and brainpool curves even fewer).
MIN_RSA_BITS = 2048
CURVES = {"secp256r1": "P-256", "secp384r1": "P-384"}
# Digests a verifier at OpenSSL's default security level refuses in a CA's signature ("CA signature
# digest algorithm too weak"); collisions in them are practical.
WEAK_DIGESTS = frozenset({"md5", "sha1"})


class Checked(NamedTuple):
    """An intermediate fit to be the pool's issuing CA, its chain (issuer first) and the root."""

    certificate: x509.Certificate
    chain: tuple[x509.Certificate, ...]
    root: x509.Certificate
    # The earliest notAfter of the path: no machine certificate may outlive it.
    not_after: datetime


# --- The request -------------------------------------------------------------------------------


def csr_for_key(key_id: str, subject: x509.Name) -> str:
    """A PEM CSR for the KMS key `key_id` (P-256), signed by it with one kms:Sign, and verified
    against the key's public key before it is returned."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    from joinplane import ca, ca_keys, der

    public_key = ca_keys.kms_public_key(key_id)
    spki = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    draft = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(ca.ca_key_usage(), critical=True)
        .sign(ca_keys.throwaway_key(), hashes.SHA256())
    )
    # A CSR carries the signer's own key and cryptography signs only with keys it holds: keep the
    # draft's version, subject and attributes, and put the KMS key's SubjectPublicKeyInfo in place
    # of the throwaway's (CertificationRequestInfo: version, subject, subjectPKInfo, attributes).
    drafted = draft.tbs_certrequest_bytes
    info = der.sequence(
        der.sequence_element(drafted, 0),
        der.sequence_element(drafted, 1),
        spki,
        der.sequence_element(drafted, 3),
    )
    signed = der.signed(info, der.ECDSA_WITH_SHA256, ca_keys.kms_sign_tbs(key_id, info))
    try:
        request = x509.load_der_x509_csr(signed)
        verified = request.is_signature_valid and request.public_key() == public_key
    except ValueError:
        verified = False
    if not verified:
        raise Internal(f"the certificate request KMS key {key_id} signed does not verify")
    return request.public_bytes(serialization.Encoding.PEM).decode()


# --- The signed intermediate -------------------------------------------------------------------


def check_intermediate(
    certificate_pem: str,
    chain_pems: list[str],
    kms_public_key: ec.EllipticCurvePublicKey,
    now: datetime,
    *,
    spiffe_id: str,
) -> Checked:
    """The intermediate `certificate_pem` and its `chain_pems` (its issuer first, the self-signed root
    last), if the intermediate may be the issuing CA of the pool whose pending key is `kms_public_key`
    from `now` on, for machine certificates like the pool's: `CN=<machine id>` and the SAN URI
    `spiffe_id` (any machine's SPIFFE ID of the pool stands for all of them). Refuses with
    INVALID_ARGUMENT (not certificates, not a CA, a chain that does not link, a weak key, curve or
    signature) or FAILED_PRECONDITION (another key; not valid now or long enough; name constraints
    that exclude the pool's machines); reads and writes nothing."""
    from cryptography.hazmat.primitives import serialization

    certificate = _one_certificate(certificate_pem, "certificate")
    if not isinstance(chain_pems, list) or not chain_pems:
        raise InvalidArgument("chain must list the certificate's issuer, up to and including the root")
    if len(chain_pems) > MAX_CHAIN_LENGTH:
        raise InvalidArgument(f"chain holds {len(chain_pems)} certificates; at most {MAX_CHAIN_LENGTH}")
    chain = tuple(_one_certificate(pem, f"chain[{index}]") for index, pem in enumerate(chain_pems))

    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if certificate.public_key().public_bytes(serialization.Encoding.DER, spki) != kms_public_key.public_bytes(
        serialization.Encoding.DER, spki
    ):
        raise FailedPrecondition(
            "certificate is not issued for this pool's pending key (see createCsr)", reason=CA_KEY_MISMATCH
        )

    _check_issuing_ca(certificate)
    for index, each in enumerate((certificate, *chain)):
        _check_critical_extensions(each, "certificate" if index == 0 else f"chain[{index - 1}]")
    # Before the links: a signature by a digest cryptography does not verify reads as "not issued by".
    _check_keys_and_signatures((certificate, *chain))
    _check_links(certificate, chain)
    _check_name_constraints((certificate, *chain), spiffe_id)
    not_after = _check_validity((certificate, *chain), now)
    return Checked(certificate, chain, chain[-1], not_after)


def _one_certificate(pem: object, field: str) -> x509.Certificate:
    from cryptography import x509

    if not isinstance(pem, str) or len(pem) > MAX_CERTIFICATE_CHARS:
        raise InvalidArgument(f"{field} must be PEM text of at most {MAX_CERTIFICATE_CHARS} characters")
    try:
        certificates = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        raise InvalidArgument(f"{field} is not a PEM certificate") from None
    if len(certificates) != 1:
        raise InvalidArgument(f"{field} holds {len(certificates)} certificates; give one per entry")
    return certificates[0]


def _check_issuing_ca(certificate: x509.Certificate) -> None:
    """The pool CA signs machine certificates (keyCertSign) and its CRLs (cRLSign), and machine
    certificates name it by its subject key identifier."""
    from cryptography import x509

    constraints = _extension(certificate, x509.BasicConstraints)
    if constraints is None or not constraints.ca:
        raise InvalidArgument("certificate is not a CA certificate (basicConstraints CA:TRUE)")
    # Path length counts the CAs below: 0 lets it sign machine certificates and nothing more, which is
    # all the pool CA does; cryptography refuses a negative one when parsing.
    usage = _extension(certificate, x509.KeyUsage)
    if usage is None or not (usage.key_cert_sign and usage.crl_sign):
        raise InvalidArgument("certificate's keyUsage must allow keyCertSign and cRLSign")
    _check_client_auth(certificate, "certificate")
    if _extension(certificate, x509.SubjectKeyIdentifier) is None:
        raise InvalidArgument(
            "certificate has no subjectKeyIdentifier (RFC 5280 requires one on a CA certificate): "
            "sign it with subjectKeyIdentifier=hash"
        )


def _check_critical_extensions(certificate: x509.Certificate, name: str) -> None:
    """A verifier must reject a path with a critical extension it does not process (RFC 5280
    4.2), so one in the path would make every machine certificate fail to verify (openssl: error 34,
    unhandled critical extension). Allowed critical: what path validation itself processes."""
    from cryptography.x509.oid import ExtensionOID

    processed = {
        ExtensionOID.BASIC_CONSTRAINTS,
        ExtensionOID.KEY_USAGE,
        ExtensionOID.EXTENDED_KEY_USAGE,
        ExtensionOID.SUBJECT_ALTERNATIVE_NAME,
        ExtensionOID.CERTIFICATE_POLICIES,
        ExtensionOID.POLICY_CONSTRAINTS,
        ExtensionOID.POLICY_MAPPINGS,
        ExtensionOID.INHIBIT_ANY_POLICY,
        ExtensionOID.NAME_CONSTRAINTS,
    }
    try:
        extensions = list(certificate.extensions)
    except ValueError:
        raise InvalidArgument(f"{name} has an extension that cannot be parsed") from None
    for extension in extensions:
        if extension.critical and extension.oid not in processed:
            raise InvalidArgument(
                f"{name} has a critical extension {extension.oid.dotted_string} that verifiers do not "
                "process: every machine certificate under it would fail to verify"
            )


def _check_links(certificate: x509.Certificate, chain: tuple[x509.Certificate, ...]) -> None:
    """Each certificate issued by the next, each issuer a CA allowed to sign certificates with room
    for the CAs below it, the last one a self-signed root."""
    from cryptography import x509

    below = (certificate, *chain)
    for index, issuer in enumerate(chain):
        name = "certificate" if index == 0 else f"chain[{index - 1}]"
        if not _issued_by(below[index], issuer):
            raise InvalidArgument(f"{name} is not issued by chain[{index}] (its issuer name or signature)")
        constraints = _extension(issuer, x509.BasicConstraints)
        if constraints is None or not constraints.ca:
            raise InvalidArgument(f"chain[{index}] is not a CA certificate (basicConstraints CA:TRUE)")
        # CAs that follow it in a machine's path: chain[index - 1] ... chain[0] and the pool CA.
        if constraints.path_length is not None and constraints.path_length < index + 1:
            raise InvalidArgument(
                f"chain[{index}]'s pathlen:{constraints.path_length} forbids the {index + 1} CA(s) below it"
            )
        usage = _extension(issuer, x509.KeyUsage)
        if usage is not None and not usage.key_cert_sign:
            raise InvalidArgument(f"chain[{index}]'s keyUsage does not allow keyCertSign")
        _check_client_auth(issuer, f"chain[{index}]")

    root = chain[-1]
    if not _self_signed(root):
        raise InvalidArgument(
            f"chain[{len(chain) - 1}] is not a self-signed root: the chain must end in the root"
        )


def _name(index: int) -> str:
    """A certificate of the path as the request names it."""
    return "certificate" if index == 0 else f"chain[{index - 1}]"


def _check_keys_and_signatures(path: tuple[x509.Certificate, ...]) -> None:
    """Every key of the path one every verifier accepts, every signature a verifier checks made with
    a digest it accepts: a path that fails either fails every machine under it. The root's signature
    on itself is left alone, as verifiers leave it (the root is trusted because it is configured, not
    because it signed itself): an organisation need not re-issue a SHA-1 self-signed root."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

    for index, certificate in enumerate(path):
        name = _name(index)
        key = certificate.public_key()
        if isinstance(key, rsa.RSAPublicKey):
            if key.key_size < MIN_RSA_BITS:
                raise InvalidArgument(
                    f"{name} has an RSA-{key.key_size} key: verifiers refuse CA keys under "
                    f"{MIN_RSA_BITS} bits",
                    reason=CA_KEY_TOO_SMALL,
                )
        elif isinstance(key, ec.EllipticCurvePublicKey):
            if key.curve.name not in CURVES:
                raise InvalidArgument(
                    f"{name} has a key on the curve {key.curve.name}: only P-256 and P-384 are accepted",
                    reason=CA_KEY_UNSUPPORTED,
                )
        else:
            kinds = (
                (dsa.DSAPublicKey, "a DSA"),
                (ed25519.Ed25519PublicKey, "an Ed25519"),
                (ed448.Ed448PublicKey, "an Ed448"),
            )
            kind = next((label for cls, label in kinds if isinstance(key, cls)), "another kind of")
            raise InvalidArgument(
                f"{name} has {kind} key: only RSA (at least {MIN_RSA_BITS} bits) and ECDSA on P-256 "
                "or P-384 are accepted",
                reason=CA_KEY_UNSUPPORTED,
            )
        if index == len(path) - 1:
            continue  # the root's self-signature (the links check it is self-signed)
        try:
            digest = certificate.signature_hash_algorithm
        except UnsupportedAlgorithm:
            digest = None
        if digest is not None and digest.name in WEAK_DIGESTS:
            raise InvalidArgument(
                f"{name} is signed with {digest.name.upper()}: verifiers refuse CA signatures by it; "
                "sign with SHA-256 or better",
                reason=CA_SIGNATURE_TOO_WEAK,
            )


def _check_name_constraints(path: tuple[x509.Certificate, ...], spiffe_id: str) -> None:
    """No nameConstraints in the path exclude what the pool issues: a machine's SPIFFE ID (a URI,
    constrained by its host, the trust domain) and its subject `CN=<machine id>`; nor the subjects of
    the CAs below each constrained certificate. Verifiers apply a CA's constraints to every
    certificate under it (the root's too), so one that excludes a machine's names fails every machine
    (`openssl verify`: error 47, permitted subtree violation, or 48, excluded subtree violation).
    Machine certificates hold no DNS name, address or e-mail, and a `mach_...` CN has no dot, so
    verifiers that read a CN as a host name do not here: only URI and directoryName constraints
    can exclude them."""
    from urllib.parse import urlsplit

    from cryptography import x509
    from cryptography.x509.oid import NameOID

    trust_domain = urlsplit(spiffe_id).hostname or ""
    machine = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, spiffe_id.rsplit("/", 1)[-1])])
    for index, certificate in enumerate(path):
        constraints = _extension(certificate, x509.NameConstraints)
        if constraints is None:
            continue
        refused = f"{_name(index)}'s name constraints"
        if not _within(constraints, x509.UniformResourceIdentifier, partial(_host_in, trust_domain)):
            raise FailedPrecondition(
                f"{refused} exclude the pool's SPIFFE IDs (spiffe://{trust_domain}/...): every machine "
                "certificate would fail to verify",
                reason=CA_NAME_CONSTRAINTS_EXCLUDE_POOL,
            )
        below = [("the pool's machine certificates", machine)]
        below += [(_name(i), c.subject) for i, c in enumerate(path[:index]) if c.subject != c.issuer]
        for who, subject in below:
            if subject.rdns and not _within(constraints, x509.DirectoryName, partial(_dn_in, subject)):
                raise FailedPrecondition(
                    f"{refused} exclude the subject of {who} ({subject.rfc4514_string()}): every "
                    "machine certificate would fail to verify",
                    reason=CA_NAME_CONSTRAINTS_EXCLUDE_POOL,
                )


def _within(
    constraints: x509.NameConstraints, kind: type[x509.GeneralName], matches: Callable[[Any], bool]
) -> bool:
    """Whether a name of `kind` that `matches` subtrees as given passes `constraints` (RFC 5280
    4.2.1.10): in no excluded subtree of its kind and, when there are permitted subtrees of its
    kind, in one of them."""
    excluded = [name.value for name in constraints.excluded_subtrees or () if isinstance(name, kind)]
    permitted = [name.value for name in constraints.permitted_subtrees or () if isinstance(name, kind)]
    if any(matches(base) for base in excluded):
        return False
    return not permitted or any(matches(base) for base in permitted)


def _host_in(host: str, base: str) -> bool:
    """A URI constraint names a host: `.example.org` any host below it, `example.org` that host."""
    host, base = host.lower(), base.lower()
    return host.endswith(base) if base.startswith(".") else host == base


def _dn_in(subject: x509.Name, base: x509.Name) -> bool:
    """A directoryName constraint is a prefix of the subject's RDNs, compared as verifiers compare
    them (case and runs of spaces ignored)."""

    def canonical(name: x509.Name) -> list[frozenset[tuple[str, str]]]:
        return [
            frozenset(
                (attribute.oid.dotted_string, " ".join(str(attribute.value).lower().split()))
                for attribute in rdn
            )
            for rdn in name.rdns
        ]

    prefix = canonical(base)
    return canonical(subject)[: len(prefix)] == prefix


def _issued_by(subject: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Named by `subject` as its issuer, and signed with `issuer`'s key."""
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm

    try:
        subject.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _self_signed(root: x509.Certificate) -> bool:
    """Issued by itself. A root's signature on itself is checked with its own key whatever its
    digest: cryptography's path checks refuse SHA-1, but verifiers never check a trust anchor's
    own signature, so a SHA-1 self-signed root is a root like any other."""
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if _issued_by(root, root):
        return True
    if root.issuer != root.subject:
        return False
    key = root.public_key()
    try:
        parameters = root.signature_algorithm_parameters
        digest = root.signature_hash_algorithm
        if isinstance(key, rsa.RSAPublicKey) and digest is not None:
            key.verify(root.signature, root.tbs_certificate_bytes, parameters, digest)  # type: ignore[arg-type]
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(root.signature, root.tbs_certificate_bytes, parameters)  # type: ignore[arg-type]
        else:
            return False
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _check_client_auth(certificate: x509.Certificate, name: str) -> None:
    # OpenSSL applies a CA's extendedKeyUsage to the certificates below it: one without clientAuth
    # makes every machine certificate fail `openssl verify -purpose sslclient`.
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    usages = _extension(certificate, x509.ExtendedKeyUsage)
    if usages is not None and not {
        ExtendedKeyUsageOID.CLIENT_AUTH,
        ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,
    } & set(usages):
        raise InvalidArgument(f"{name}'s extendedKeyUsage does not allow clientAuth")


def _check_validity(path: tuple[x509.Certificate, ...], now: datetime) -> datetime:
    from joinplane import ca, clock

    for index, certificate in enumerate(path):
        name = "certificate" if index == 0 else f"chain[{index - 1}]"
        if certificate.not_valid_before_utc > now + ca.CLOCK_SKEW:
            raise FailedPrecondition(
                f"{name} is not valid before {clock.rfc3339(certificate.not_valid_before_utc)}",
                reason=CA_CERTIFICATE_NOT_VALID,
            )
        if certificate.not_valid_after_utc <= now:
            raise FailedPrecondition(
                f"{name} expired at {clock.rfc3339(certificate.not_valid_after_utc)}",
                reason=CA_CERTIFICATE_NOT_VALID,
            )
    not_after = min(certificate.not_valid_after_utc for certificate in path)
    if not_after < now + timedelta(seconds=ca.MAX_LIFETIME_SECONDS):
        raise FailedPrecondition(
            f"the chain expires at {clock.rfc3339(not_after)}, sooner than a machine certificate "
            f"may live ({ca.MAX_LIFETIME_SECONDS // 86400} days): ask for a longer-lived intermediate",
            reason=CA_CERTIFICATE_NOT_VALID,
        )
    return not_after


def _extension(certificate: x509.Certificate, kind: type[_E]) -> _E | None:
    from cryptography import x509

    try:
        return certificate.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None

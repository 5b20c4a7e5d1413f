"""CSR checks: a machine's certificate signing request, reduced to the one thing it may propose.

The machine proposes only its public key. Everything else in its certificate (subject, SAN, key
usage, lifetime) is decided by joinplane.machine_certificates, so a CSR's requested extensions are
read by no one: what is kept of a CSR is its key, once its signature verified (proof of possession)
and the key is of an allowed type and size.

Certificate code: it imports `cryptography` at module level, and is itself imported only inside the
functions that take a CSR.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import PublicKeyAlgorithmOID

from joinplane import der
from joinplane.errors import InvalidArgument

MAX_CSR_CHARS = 16 * 1024
_PEM = re.compile(
    r"-----BEGIN (?P<label>(?:NEW )?CERTIFICATE REQUEST)-----\r?\n"
    r"(?P<body>[A-Za-z0-9+/=\s]*?)"
    r"-----END (?P=label)-----"
)
_ALLOWED_KEYS = "ECDSA P-256/P-384, Ed25519 or RSA 2048-4096"

MachinePublicKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | rsa.RSAPublicKey


@dataclass(frozen=True)
class Csr:
    """A CSR whose signature verified and whose key is allowed. Only the key is kept: nothing
    else the machine asked for reaches its certificate."""

    public_key: MachinePublicKey
    # Hex SHA-256 of the SubjectPublicKeyInfo DER: the machine's join identity.
    public_key_sha256: str
    key_type: str


def parse_csr(pem: str) -> Csr:
    if not isinstance(pem, str) or len(pem) > MAX_CSR_CHARS:
        raise InvalidArgument(f"csr must be PEM text of at most {MAX_CSR_CHARS} characters")
    match = _PEM.fullmatch(pem.strip())
    if match is None:
        raise InvalidArgument("csr is not a PEM certificate request")
    try:
        request = x509.load_der_x509_csr(base64.b64decode("".join(match["body"].split()), validate=True))
        spki = _subject_public_key_info(request.tbs_certrequest_bytes)
    except (ValueError, x509.InvalidVersion):
        raise InvalidArgument("csr is not a PEM certificate request") from None

    public_key, key_type = _allowed_public_key(request)
    # The identity must be the key the certificate will carry, byte for byte: a CSR that encodes its
    # key unusually (a compressed EC point) would otherwise be matched on bytes no certificate holds.
    canonical = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if spki != canonical:
        raise InvalidArgument(f"csr {key_type} public key is not DER-encoded as usual (compressed EC point?)")
    _check_signature(request)
    return Csr(public_key=public_key, public_key_sha256=hashlib.sha256(spki).hexdigest(), key_type=key_type)


def _allowed_public_key(request: x509.CertificateSigningRequest) -> tuple[MachinePublicKey, str]:
    # Present at runtime since cryptography 44; the CSR type stub has not caught up.
    algorithm = request.public_key_algorithm_oid  # type: ignore[attr-defined]
    if algorithm not in _ALLOWED_KEY_ALGORITHMS:
        name = _KEY_ALGORITHM_NAMES.get(algorithm, algorithm.dotted_string)
        raise InvalidArgument(f"csr key type {name} is not allowed; use {_ALLOWED_KEYS}")
    try:
        key = request.public_key()
    except (UnsupportedAlgorithm, ValueError):
        if algorithm == PublicKeyAlgorithmOID.EC_PUBLIC_KEY:
            raise InvalidArgument(
                f"csr key type ECDSA (unknown curve) is not allowed; use {_ALLOWED_KEYS}"
            ) from None
        raise InvalidArgument("csr public key is malformed") from None
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1 | ec.SECP384R1):
            raise InvalidArgument(f"csr key type ECDSA {key.curve.name} is not allowed; use {_ALLOWED_KEYS}")
        return key, f"ECDSA P-{key.curve.key_size}"
    if isinstance(key, rsa.RSAPublicKey):
        if not 2048 <= key.key_size <= 4096:
            raise InvalidArgument(f"RSA key of {key.key_size} bits is outside 2048-4096")
        exponent = key.public_numbers().e
        # Small or even exponents are the classic RSA foot-guns; the CA/Browser Forum rules agree.
        if exponent % 2 == 0 or not 65537 <= exponent < 2**256:
            raise InvalidArgument(f"RSA public exponent {exponent} is not allowed; use 65537")
        return key, f"RSA {key.key_size}"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key, "Ed25519"
    raise InvalidArgument(f"csr key type {type(key).__name__} is not allowed; use {_ALLOWED_KEYS}")


def _check_signature(request: x509.CertificateSigningRequest) -> None:
    try:
        digest = request.signature_hash_algorithm
    except UnsupportedAlgorithm:
        oid = request.signature_algorithm_oid.dotted_string
        raise InvalidArgument(f"csr signature algorithm {oid} is not supported") from None
    # Ed25519 signs the message itself: no separate digest (None).
    if digest is not None and not isinstance(digest, hashes.SHA256 | hashes.SHA384 | hashes.SHA512):
        raise InvalidArgument(f"csr is signed with {digest.name.upper()}; sign it with SHA-256 or stronger")
    try:
        verified = request.is_signature_valid
    except (UnsupportedAlgorithm, ValueError):
        verified = False
    if not verified:
        raise InvalidArgument("csr signature does not verify (proof of possession failed)")


_ALLOWED_KEY_ALGORITHMS = frozenset(
    {
        PublicKeyAlgorithmOID.EC_PUBLIC_KEY,
        PublicKeyAlgorithmOID.ED25519,
        PublicKeyAlgorithmOID.RSAES_PKCS1_v1_5,
    }
)
_KEY_ALGORITHM_NAMES = {
    PublicKeyAlgorithmOID.RSASSA_PSS: "RSA-PSS",
    PublicKeyAlgorithmOID.DSA: "DSA",
    PublicKeyAlgorithmOID.ED448: "Ed448",
    PublicKeyAlgorithmOID.X25519: "X25519",
    PublicKeyAlgorithmOID.X448: "X448",
}


def _subject_public_key_info(tbs: bytes) -> bytes:
    """The SPKI exactly as the CSR encodes it: the third element of CertificationRequestInfo
    (version, subject, subjectPKInfo, attributes)."""
    return der.sequence_element(tbs, 2)

"""Machine certificates: CSR checks, and one certificate authority per compute pool.

The machine proposes only its public key. Everything else in the certificate (subject, SAN, key
usage, lifetime) is decided here, so a CSR's requested extensions are read by no one.

Each pool's CA lives in AWS Secrets Manager, created on the first join that needs it. Creation is
CreateSecret, which fails when the name exists, so concurrent first joins converge on the one CA
that won: an overwrite (PutSecretValue) would let each racer sign with a CA that is then lost.

This is the only module of the package that imports `cryptography` at module level: functions that
never issue certificates do not pay for loading it at cold start.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, PublicKeyAlgorithmOID

from joinplane import aws, clock, container, der, spiffe
from joinplane.errors import POOL_CA_EXPIRED, FailedPrecondition, Internal, InvalidArgument, Unavailable
from joinplane.settings import settings

MAX_CSR_CHARS = 16 * 1024
MIN_LIFETIME_SECONDS = 5 * 60
MAX_LIFETIME_SECONDS = 30 * 24 * 3600
# Machines with a slightly slow clock must accept a certificate issued a moment ago.
CLOCK_SKEW = timedelta(minutes=5)
CA_VALIDITY = timedelta(days=3650)

_TENANT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_POOL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
# X.520's upper bound for a commonName; the machine id is the machine certificate's CN.
_MAX_COMMON_NAME = 64
# The machine id is also the last segment of the SPIFFE ID, as it is: no `:` (`mach_<ulid>` has none).
_MACHINE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
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


@dataclass(frozen=True)
class IssuedCertificate:
    certificate_pem: str
    ca_certificates_pem: str
    expires_at: datetime
    serial: str


@dataclass(frozen=True)
class _PoolCa:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    certificate_pem: str


_cache: dict[tuple[str, str], _PoolCa] = {}
container.on_reset(_cache.clear)


# --- CSR ------------------------------------------------------------------------------------------


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


# --- Machine certificates -------------------------------------------------------------------------


def spiffe_id(tenant_id: str, pool_id: str, machine_id: str) -> str:
    """`spiffe://<trust domain>/tenant/<tenant>/pool/<pool>/machine/<machineId>`, the trust domain
    from the deployment (SPIFFE_TRUST_DOMAIN) and the ids escaped as joinplane.spiffe says."""
    trust_domain = settings().spiffe_trust_domain
    try:
        spiffe.check_trust_domain(trust_domain)
    except ValueError as bad:
        raise Internal(f"the deployment's SPIFFE_TRUST_DOMAIN is unusable: {bad}") from None
    return spiffe.for_machine(trust_domain, tenant_id, pool_id, machine_id)


def issue_machine_certificate(
    *, tenant_id: str, pool_id: str, machine_id: str, csr: Csr, lifetime_seconds: int
) -> IssuedCertificate:
    _check_ids(tenant_id, pool_id)
    if not _MACHINE_ID.fullmatch(machine_id):
        raise InvalidArgument("machineId is not a valid machine id")
    # Before the pool CA: a deployment without a usable trust domain creates no CA either.
    uri = spiffe_id(tenant_id, pool_id, machine_id)
    pool_ca = _pool_ca(tenant_id, pool_id)

    # X.509 times have whole seconds; truncating here makes expires_at equal the certificate's.
    now = clock.now().replace(microsecond=0)
    lifetime = timedelta(seconds=min(max(int(lifetime_seconds), MIN_LIFETIME_SECONDS), MAX_LIFETIME_SECONDS))
    # A certificate outliving its CA would fail verification anyway; say so instead of lying.
    not_after = min(now + lifetime, pool_ca.certificate.not_valid_after_utc)
    if not_after - now < timedelta(seconds=MIN_LIFETIME_SECONDS):
        raise FailedPrecondition(
            f"the CA of pool {pool_id} expires at {clock.rfc3339(not_after)}", reason=POOL_CA_EXPIRED
        )

    key_usage_encipherment = isinstance(csr.public_key, rsa.RSAPublicKey)
    serial = _serial_number()
    ca_ski = pool_ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, machine_id)]))
        .issuer_name(pool_ca.certificate.subject)
        .public_key(csr.public_key)
        .serial_number(serial)
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=key_usage_encipherment,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri)]),
            # RFC 5280: the SAN is critical when the subject DN is empty; ours names the machine.
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(csr.public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(pool_ca.key, hashes.SHA256())
    )
    return IssuedCertificate(
        certificate_pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        ca_certificates_pem=pool_ca.certificate_pem,
        expires_at=not_after,
        serial=format(serial, "x"),
    )


def _serial_number() -> int:
    # Bit 158 always set: every serial is exactly 159 bits (20 DER bytes, positive) with 158 random.
    return secrets.randbits(158) | (1 << 158)


def _check_ids(tenant_id: str, pool_id: str) -> None:
    # These become a URI and a Secrets Manager name; the patterns keep '/', '?', '#' out of both.
    if not _TENANT_ID.fullmatch(tenant_id):
        raise InvalidArgument("tenantId is not a valid tenant id")
    if not _POOL_ID.fullmatch(pool_id):
        raise InvalidArgument("poolId is not a valid pool id")


# --- Pool CAs -------------------------------------------------------------------------------------


def pool_ca_certificate_pem(tenant_id: str, pool_id: str) -> str:
    _check_ids(tenant_id, pool_id)
    return _pool_ca(tenant_id, pool_id).certificate_pem


def _pool_ca(tenant_id: str, pool_id: str) -> _PoolCa:
    cached = _cache.get((tenant_id, pool_id))
    if cached is None:
        cached = _cache[(tenant_id, pool_id)] = _load_or_create_pool_ca(tenant_id, pool_id)
    return cached


def _load_or_create_pool_ca(tenant_id: str, pool_id: str) -> _PoolCa:
    name = f"{settings().ca_secret_prefix}/{tenant_id}/{pool_id}"
    stored = _read_ca_secret(name)
    if stored is not None:
        return _decode(name, stored)
    candidate = _new_pool_ca_secret(tenant_id, pool_id)
    if _create_ca_secret(name, candidate):
        return _decode(name, candidate)
    # Another container created the pool's CA between our read and our create: theirs is the one.
    # Secrets Manager is eventually consistent, so the winner's value may take a moment to be readable.
    for delay in (0.0, 0.1, 0.3, 0.9):
        time.sleep(delay)
        stored = _read_ca_secret(name)
        if stored is not None:
            return _decode(name, stored)
    raise Unavailable("the pool CA is being created, retry later")


def _new_pool_ca_secret(tenant_id: str, pool_id: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    now = clock.now().replace(microsecond=0)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _ca_common_name(tenant_id, pool_id))])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return json.dumps(
        {
            "keyPem": key_pem.decode(),
            "certificatePem": certificate.public_bytes(serialization.Encoding.PEM).decode(),
        }
    )


def _ca_common_name(tenant_id: str, pool_id: str) -> str:
    """`Joinplane pool CA <tenantId>/<poolId>`, shortened to X.520's 64 characters when the ids are long.
    The shortened form ends in `~` and a digest of the full ids: no id contains `~`, so it can never
    equal another pool's name, and verifiers that find issuers by name still find the right one."""
    label = f"{tenant_id}/{pool_id}"
    name = f"Joinplane pool CA {label}"
    if len(name) <= _MAX_COMMON_NAME:
        return name
    digest = hashlib.sha256(label.encode()).hexdigest()[:12]
    return (
        f"Joinplane pool CA {label[: _MAX_COMMON_NAME - len('Joinplane pool CA ~') - len(digest)]}~{digest}"
    )


def _decode(name: str, secret_string: str) -> _PoolCa:
    try:
        stored = json.loads(secret_string)
        key = serialization.load_pem_private_key(stored["keyPem"].encode(), password=None)
        certificate = x509.load_pem_x509_certificate(stored["certificatePem"].encode())
    except (ValueError, KeyError, TypeError, AttributeError, UnsupportedAlgorithm) as failure:
        raise Internal(f"the pool CA secret {name} is malformed") from failure
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != certificate.public_key():
        raise Internal(f"the pool CA secret {name} holds a key that does not match its certificate")
    return _PoolCa(key=key, certificate=certificate, certificate_pem=stored["certificatePem"])


# --- Secrets Manager: the only two calls this module makes ----------------------------------------


def _read_ca_secret(name: str) -> str | None:
    client = aws.client("secretsmanager")
    try:
        return str(client.get_secret_value(SecretId=name)["SecretString"])
    except client.exceptions.ResourceNotFoundException:
        return None
    except Exception as failure:
        _raise_if_unavailable(failure)
        raise


def _create_ca_secret(name: str, secret_string: str) -> bool:
    """False when the secret already exists: another caller's CA won the race."""
    client = aws.client("secretsmanager")
    try:
        client.create_secret(
            Name=name,
            SecretString=secret_string,
            Description="Joinplane pool CA (private key and certificate)",
        )
    except client.exceptions.ResourceExistsException:
        return False
    except Exception as failure:
        _raise_if_unavailable(failure)
        raise
    return True


_UNAVAILABLE_CODES = frozenset(
    {
        "InternalServiceError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
    }
)


def _raise_if_unavailable(failure: Exception) -> None:
    # botocore is loaded already by the client that raised; importing it here costs nothing.
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    if isinstance(failure, ConnectionError | HTTPClientError):
        raise Unavailable("the secret store is unavailable, retry later") from failure
    if isinstance(failure, ClientError):
        status = failure.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = failure.response.get("Error", {}).get("Code")
        if code in _UNAVAILABLE_CODES or status == 429 or status >= 500:
            raise Unavailable("the secret store is unavailable, retry later") from failure

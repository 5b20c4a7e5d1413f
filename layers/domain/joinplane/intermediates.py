"""The `intermediate` signing mode: a short-lived intermediate CA per container, whose key is in memory.

At its first issuance for a pool, a container makes a P-256 key in memory (never stored, never
logged), has the pool CA's KMS key sign an intermediate CA certificate for it (one kms:Sign), records
it in the table (joinplane.dal.intermediates) on the condition that the pool CA is still active, and
from then on signs that pool's machine certificates itself: no KMS call per certificate. It makes a
new intermediate after SIGNING_WINDOW, or as soon as the pool's active CA changes. The intermediate
is valid for INTERMEDIATE_VALIDITY (back-dated by the clock skew allowance, as every certificate
is), with pathLenConstraint 0 (it can sign no CA) and clientAuth as its only extended key usage
(verifiers apply a CA's EKU to what it signs), and a machine certificate never outlives it.
docs/pki.md compares this mode with KMS per certificate.

Certificate code: it imports `cryptography` at module level, and is imported only by the
certificate code.
"""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timedelta
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from joinplane import clock, container, ids
from joinplane.ca import CLOCK_SKEW, PoolCa, ca_key_usage, serial_number
from joinplane.ca_keys import sign_certificate
from joinplane.dal import intermediates as intermediates_db

# How long an intermediate is valid, and for how much of it a container signs with it: a machine
# certificate issued at the end of the window still gets an hour, and a key taken from a container's
# memory is worth nothing two hours after it was made.
INTERMEDIATE_VALIDITY = timedelta(hours=2)
SIGNING_WINDOW = timedelta(hours=1)


class Intermediate(NamedTuple):
    intermediate_id: str  # `int_<ulid>`: its record, and its CRL's path (`GET /crl/<intermediateId>`)
    ca_id: str  # the pool CA that signed it
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    pem: str
    not_after: datetime
    signs_until: datetime


class CaRotated(Exception):
    """The pool CA this container read is no longer active: read the pool's CAs again."""


_cache: dict[tuple[str, str, str], Intermediate] = {}
container.on_reset(_cache.clear)


def can_sign_below(pool_ca: PoolCa) -> bool:
    """Whether an intermediate below the pool's active CA verifies: a self-signed CA whose path length
    leaves room for it. A CA made in the `kms` mode has pathLenConstraint 0, and an upstream CA's
    path length is its organisation's to set: those keep signing each certificate in KMS."""
    if pool_ca.authorities.active.chain_pem:
        return False
    constraints = pool_ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    return constraints.ca and (constraints.path_length is None or constraints.path_length >= 1)


def current(pool_ca: PoolCa, crl_url: str) -> Intermediate:
    """This container's intermediate below the pool's active CA, made now if it has none that may
    still sign. `crl_url` is the pool CA's CRL (its distribution point; "" when not known).
    CaRotated when the pool CA was retired since this container read it."""
    active = pool_ca.authorities.active
    now = clock.now()
    slot = (active.tenant_id, active.pool_id, crl_url)
    cached = _cache.get(slot)
    if cached is not None and cached.ca_id == active.ca_id and now < cached.signs_until:
        return cached
    made = _make(pool_ca, crl_url, now.replace(microsecond=0))
    certificate = made.certificate
    try:
        intermediates_db.record(
            intermediates_db.IntermediateRecord(
                intermediate_id=made.intermediate_id,
                ca_id=active.ca_id,
                serial=format(certificate.serial_number, "x"),
                sha256=hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).hexdigest(),
                subject_key_id=certificate.extensions.get_extension_for_class(
                    x509.SubjectKeyIdentifier
                ).value.digest.hex(),
                not_before=int(certificate.not_valid_before_utc.timestamp()),
                not_after=int(certificate.not_valid_after_utc.timestamp()),
                created_at=clock.rfc3339(now),
                container=_container_name(),
                certificate_pem=made.pem,
                crl_der=_crl(made),
            )
        )
    except intermediates_db.CaNotActive:
        _cache.pop(slot, None)
        raise CaRotated() from None
    _cache[slot] = made
    return made


def _make(pool_ca: PoolCa, crl_url: str, now: datetime) -> Intermediate:
    active = pool_ca.authorities.active
    key = ec.generate_private_key(ec.SECP256R1())
    public_key = key.public_key()
    not_after = min(now + INTERMEDIATE_VALIDITY, pool_ca.not_after)
    serial = serial_number()
    ca_ski = pool_ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    intermediate_id = ids.new_id("int")
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "Joinplane intermediate"),
            # The pool CA's id and its own: verifiers find issuers (and CRLs) by name, and no two
            # intermediates, of one container or of two, may share one.
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, active.ca_id),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, intermediate_id),
        ]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(pool_ca.certificate.subject)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(ca_key_usage(), critical=True)
        # A key taken from memory can then mint client certificates only, never a server's.
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    )
    if crl_url:
        # Where a verifier checks whether the intermediate itself was revoked: the pool CA's CRL.
        builder = builder.add_extension(
            x509.CRLDistributionPoints(
                [
                    x509.DistributionPoint(
                        full_name=[x509.UniformResourceIdentifier(crl_url)],
                        relative_name=None,
                        reasons=None,
                        crl_issuer=None,
                    )
                ]
            ),
            critical=False,
        )
    certificate = sign_certificate(builder, active.key_id, pool_ca.public_key)
    return Intermediate(
        intermediate_id=intermediate_id,
        ca_id=active.ca_id,
        key=key,
        certificate=certificate,
        pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        not_after=not_after,
        signs_until=now + SIGNING_WINDOW,
    )


def _crl(intermediate: Intermediate) -> bytes:
    """The intermediate's CRL, signed now and valid until the intermediate expires: empty, since
    nobody will hold its key to list anything once its container is gone. A verifier that checks
    every CRL of a path (`openssl verify -crl_check_all`) needs one for each issuer; revoking the
    intermediate itself is the pool CA's CRL's job."""
    certificate = intermediate.certificate
    ski = certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    built = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(certificate.subject)
        .last_update(certificate.not_valid_before_utc)
        .next_update(intermediate.not_after)
        .add_extension(x509.CRLNumber(1), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(intermediate.key, hashes.SHA256())
    )
    return built.public_bytes(serialization.Encoding.DER)


def sign(intermediate: Intermediate, builder: x509.CertificateBuilder) -> x509.Certificate:
    """`builder`'s certificate signed in memory by the intermediate's key (no AWS call)."""
    return builder.sign(intermediate.key, hashes.SHA256())


def revoke_all_of(ca_id: str) -> int:
    """After an emergency rotation (a key is suspected, and a container's memory holds one): every
    intermediate the retired CA signed that has not expired goes on its CRL, re-signed now, so a key
    taken from a container's memory is refused by every verifier that checks the pool CA's CRL.
    None can be added after this: an intermediate is recorded only while its CA is active. Best
    effort, since the rotation has committed: a failure is logged as a warning (0), and what was not
    listed expires within INTERMEDIATE_VALIDITY. How many were listed."""
    from joinplane import crl, observe

    now = clock.now()
    try:
        listed = intermediates_db.revoke_unexpired(ca_id, clock.seconds(now), clock.rfc3339(now))
        if listed:
            crl.refresh(ca_id)
    except Exception as failure:
        observe.log(
            "WARNING",
            "the intermediates of a CA retired in an emergency could not all be revoked",
            caId=ca_id,
            error=type(failure).__name__,
        )
        return 0
    return listed


def _container_name() -> str:
    # Where the container's own logs are: the audit trail's way from an intermediate to what it did.
    function = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
    stream = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
    return f"{function}/{stream}" if stream else function

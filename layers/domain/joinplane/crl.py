"""Certificate revocation lists: one per CA, signed by that CA's KMS key (X.509 wants a CRL's issuer
to be the certificate's issuer), served at `GET /crl/<caId>` (no auth) and named by every machine
certificate's CRL distribution point.

A CRL lists the unexpired certificates of revoked machines (reason absent: unspecified) and those a
key-rotating renewal replaced (`superseded`): the entries of `joinplane.dal.revocations`, written
by the revoking or renewing transaction itself. Its nextUpdate is NEXT_UPDATE_SECONDS out and it
is rebuilt once REBUILD_AFTER_SECONDS old, or when an entry is missing from it (the revocation's own
refresh failed, or lost to a concurrent build): a GET reads the CRL item and the CA's entries (one
Query of a small partition) and signs only when needed. Each build is one kms:Sign; its crlNumber
is the stored one + 1, written only if the stored one is still what the build read, so the number
never goes backwards.

Unlike the certificate code the functions issue with (joinplane.ca and its siblings), it loads
`cryptography` (through joinplane.ca and joinplane.ca_keys) only when a CRL is checked or built.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import NamedTuple

from joinplane import clock, der, ids
from joinplane.dal import authorities as authorities_db
from joinplane.dal import intermediates as intermediates_db
from joinplane.dal import revocations as revocations_db
from joinplane.dal.authorities import CertificateAuthorityRecord
from joinplane.dal.revocations import CrlRecord, RevocationRecord
from joinplane.errors import Internal, NotFound, Unavailable

# RFC 5280 lets nextUpdate be anything; we promise operators at most 7 days. Three days, rebuilt after
# one: a verifier caching it until nextUpdate still sees a revocation within three days at worst,
# and a day of KMS or table trouble does not leave anyone with an expired CRL.
NEXT_UPDATE_SECONDS = 3 * 24 * 3600
REBUILD_AFTER_SECONDS = 24 * 3600
# How long HTTP caches may keep a CRL: short, so a revocation reaches verifiers that fetch through
# a cache within minutes (the answer is small and cheap to serve).
MAX_AGE_SECONDS = 300
CA_ID = re.compile(rf"ca_{ids.ULID_PATTERN}")
# A per-container intermediate (the `intermediate` signing mode): its CRL was signed when it was made.
INTERMEDIATE_ID = re.compile(rf"int_{ids.ULID_PATTERN}")


class Served(NamedTuple):
    der: bytes
    max_age: int  # seconds HTTP caches may keep it


def path(ca_id: str) -> str:
    return f"/crl/{ca_id}"


def served(ca_id: str) -> Served:
    """The CA's current CRL (built when missing, due, or missing an entry), or an unexpired
    intermediate's (as stored). NOT_FOUND for anything else: nothing is built or stored for it."""
    if isinstance(ca_id, str) and INTERMEDIATE_ID.fullmatch(ca_id):
        # Signed when the intermediate was made (joinplane.intermediates), served as stored; past
        # the intermediate's expiry nobody needs it.
        found = intermediates_db.get(ca_id)
        left = found.not_after - clock.seconds(clock.now()) if found is not None else 0
        if found is None or left <= 0:
            raise NotFound("no such certificate authority")
        return Served(found.crl_der, min(MAX_AGE_SECONDS, left))
    authority = _authority(ca_id)
    crl = _current(authority, force=False)
    now = clock.seconds(clock.now())
    due = crl.built_at + REBUILD_AFTER_SECONDS
    return Served(crl.der, max(0, min(MAX_AGE_SECONDS, due - now)))


def refresh(ca_id: str) -> CrlRecord:
    """The CA's CRL rebuilt now (after a revocation: one kms:Sign)."""
    return _current(_authority(ca_id), force=True)


def _authority(ca_id: str) -> CertificateAuthorityRecord:
    if not isinstance(ca_id, str) or not CA_ID.fullmatch(ca_id):
        raise NotFound("no such certificate authority")
    authority = authorities_db.get(ca_id)
    # A pending CA (its certificate not yet imported) has issued nothing; an expired CA's
    # certificates have all expired, so its CRL would be empty and nobody needs it.
    if authority is None or not authority.certificate_pem or authority.state not in ("active", "retired"):
        raise NotFound("no such certificate authority")
    return authority


def _current(authority: CertificateAuthorityRecord, *, force: bool) -> CrlRecord:
    for _ in range(3):
        now = clock.now()
        stored = revocations_db.get_crl(authority.ca_id)
        revoked = revocations_db.revoked_of(authority.ca_id, now)
        if not force and stored is not None and _fresh(stored, revoked, now):
            return stored
        built = _build(authority, revoked, now, (stored.crl_number + 1) if stored else 1)
        if revocations_db.put_crl(built, replacing=stored.crl_number if stored else None):
            return built
        # Another build stored its CRL meanwhile: use it if it lists everything, else build on it.
        force = False
    raise Unavailable("the CRL kept changing while it was built; retry")


def _fresh(stored: CrlRecord, revoked: list[RevocationRecord], now: datetime) -> bool:
    from cryptography import x509

    at = clock.seconds(now)
    if at - stored.built_at >= REBUILD_AFTER_SECONDS or at >= stored.next_update:
        return False
    listed = {entry.serial_number for entry in x509.load_der_x509_crl(stored.der)}
    return all(int(entry.serial, 16) in listed for entry in revoked)


def _build(
    authority: CertificateAuthorityRecord, revoked: list[RevocationRecord], now: datetime, number: int
) -> CrlRecord:
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes

    from joinplane import ca, ca_keys

    certificate = x509.load_pem_x509_certificate(authority.certificate_pem.encode())
    public_key = certificate.public_key()
    ski = certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    # Back-dated as certificates are: a verifier whose clock runs a little behind ours would find a
    # CRL dated "now" not yet valid, and openssl then rejects every certificate of the CA.
    built_at = clock.seconds(now)  # whole seconds, as the CRL and its record keep it
    this_update = clock.at_seconds(built_at) - ca.CLOCK_SKEW
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(certificate.subject)
        .last_update(this_update)
        .next_update(clock.at_seconds(built_at + NEXT_UPDATE_SECONDS))
        .add_extension(x509.CRLNumber(number), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    )
    for entry in sorted(revoked, key=lambda r: r.serial):
        revoked_certificate = (
            x509.RevokedCertificateBuilder()
            .serial_number(int(entry.serial, 16))
            .revocation_date(datetime.fromisoformat(entry.revoked_at).replace(microsecond=0))
        )
        # RFC 5280 5.3.1: the reason code `unspecified` is left out rather than stated.
        if entry.reason == "superseded":
            revoked_certificate = revoked_certificate.add_extension(
                x509.CRLReason(x509.ReasonFlags.superseded), critical=False
            )
        builder = builder.add_revoked_certificate(revoked_certificate.build())
    tbs = builder.sign(ca_keys.throwaway_key(), hashes.SHA256()).tbs_certlist_bytes
    signed = der.signed(tbs, der.ECDSA_WITH_SHA256, ca_keys.kms_sign_tbs(authority.key_id, tbs))
    try:
        crl = x509.load_der_x509_crl(signed)
        valid = crl.is_signature_valid(public_key)  # type: ignore[arg-type]
    except (ValueError, InvalidSignature):
        valid = False
    if not valid:
        raise Internal(f"the CRL KMS key {authority.key_id} signed does not verify")
    this_update_epoch = int(this_update.timestamp())
    return CrlRecord(
        authority.ca_id,
        signed,
        number,
        this_update_epoch,
        built_at + NEXT_UPDATE_SECONDS,
        built_at,
        len(revoked),
    )

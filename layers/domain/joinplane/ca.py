"""The certificate authorities of each compute pool: made, cached, rotated, activated, imported.

Each pool's CA key is a KMS key that never leaves KMS (joinplane.ca_keys: creating it, signing with
it, handing an unused one to the retention job), created on first use (a join, or
`certificateAuthorities/get`) or by a rotation. Machine certificates are issued from the pool's
active CA by joinplane.machine_certificates, from the key a CSR proposes (joinplane.csr_checks).
docs/pki.md says why the bundle is what it is.

The CA records and the pool's pointer are in the table (joinplane.dal.authorities): the first CA is
one transaction (CA + pointer, both absent), a rotation another (new CA, old CA retired, pointer at
the version read), so concurrent first joins or rotations converge on one active CA; a loser's KMS
key is scheduled for deletion. A container caches a pool's active CA and bundle for
CA_CACHE_SECONDS: a warm issuance makes one KMS call (Sign) and nothing else.

Certificate code, like the modules named above, and only they: it imports `cryptography` at module
level, so functions that never issue certificates do not pay for loading it at cold start.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from joinplane import ca_keys, clock, container, deadline, ids, spiffe
from joinplane.ca_keys import create_key, kms_public_key, schedule_key_deletion, sign_certificate
from joinplane.dal import authorities as authorities_db
from joinplane.dal.authorities import Authorities, CertificateAuthorityRecord
from joinplane.errors import (
    CA_ROTATION_PREPARED,
    NO_PENDING_CA,
    NO_PREPARED_CA,
    POOL_ARCHIVED,
    Aborted,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    InvalidState,
    Unavailable,
)
from joinplane.settings import settings

if TYPE_CHECKING:
    from joinplane import views

MIN_LIFETIME_SECONDS = 5 * 60
MAX_LIFETIME_SECONDS = 30 * 24 * 3600
# Machines with a slightly slow clock must accept a certificate issued a moment ago.
CLOCK_SKEW = timedelta(minutes=5)
CA_VALIDITY = timedelta(days=3650)
# How long a container trusts the active CA it read: a rotation reaches every container within this.
CA_CACHE_SECONDS = 60
# A retired CA issued nothing after it was retired (give or take a container's cache), and nothing
# it issued lives longer than MAX_LIFETIME_SECONDS: after this it can leave the bundle.
BUNDLE_GRACE_SECONDS = MAX_LIFETIME_SECONDS + int(CLOCK_SKEW.total_seconds()) + CA_CACHE_SECONDS
FIRST_CA_CREATOR = "join"
# Who activates a prepared CA whose propagation period has ended (its first use after it).
SCHEDULE = "schedule"

_TENANT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_POOL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
# X.520's upper bound for a commonName; the machine id is the machine certificate's CN.
_MAX_COMMON_NAME = 64


class PoolCa(NamedTuple):
    """A pool's CAs as one container uses them: the active CA parsed, and the bundle as PEM."""

    authorities: Authorities
    certificate: x509.Certificate
    public_key: ec.EllipticCurvePublicKey
    bundle_pem: str
    loaded_at: datetime
    # The earliest notAfter of the active CA and its chain: no machine certificate may outlive it.
    not_after: datetime


_cache: dict[tuple[str, str], PoolCa] = {}
container.on_reset(_cache.clear)


def spiffe_id(tenant_id: str, pool_id: str, machine_id: str) -> str:
    """`spiffe://<trust domain>/tenant/<tenant>/pool/<pool>/machine/<machineId>`, the trust domain
    from the deployment (SPIFFE_TRUST_DOMAIN) and the ids escaped as joinplane.spiffe says."""
    trust_domain = settings().spiffe_trust_domain
    try:
        spiffe.check_trust_domain(trust_domain)
    except ValueError as bad:
        raise Internal(f"the deployment's SPIFFE_TRUST_DOMAIN is unusable: {bad}") from None
    return spiffe.for_machine(trust_domain, tenant_id, pool_id, machine_id)


def ca_key_usage() -> x509.KeyUsage:
    """What a pool CA's key may do, in its own certificate and in the CSR for an upstream root:
    sign certificates and CRLs, nothing else."""
    return x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )


def serial_number() -> int:
    # Bit 158 always set: every serial is exactly 159 bits (20 DER bytes, positive) with 158 random.
    return secrets.randbits(158) | (1 << 158)


def check_ids(tenant_id: str, pool_id: str) -> None:
    # These become a URI and KMS tags; the patterns keep '/', '?', '#' out of both.
    if not _TENANT_ID.fullmatch(tenant_id):
        raise InvalidArgument("tenantId is not a valid tenant id")
    if not _POOL_ID.fullmatch(pool_id):
        raise InvalidArgument("poolId is not a valid pool id")


# --- Pool CAs -------------------------------------------------------------------------------------


def pool_authorities(
    tenant_id: str, site_id: str, pool_id: str, *, created_by: str = FIRST_CA_CREATOR
) -> PoolCa:
    """The pool's active CA and bundle, from this container's cache while fresh; the pool's first
    CA is made here when it has none (by `created_by`)."""
    check_ids(tenant_id, pool_id)
    cached = _cache.get((tenant_id, pool_id))
    now = clock.now()
    fresh = cached is not None and now - cached.loaded_at < timedelta(seconds=CA_CACHE_SECONDS)
    if cached is not None and fresh and not _due(cached.authorities, now):
        return cached
    stored = authorities_db.read(tenant_id, pool_id)
    if stored is None:
        stored = _create_first(tenant_id, site_id, pool_id, created_by)
    loaded = _cache[(tenant_id, pool_id)] = _loaded(activated_when_due(stored))
    return loaded


def forget(tenant_id: str, pool_id: str) -> None:
    """Drop this container's copy of the pool's CAs: the next use reads them again."""
    _cache.pop((tenant_id, pool_id), None)


def _due(stored: Authorities, now: datetime) -> bool:
    following = stored.next
    return (
        following is not None
        and following.activates_at is not None
        and following.activates_at <= clock.seconds(now)
    )


def activated_when_due(stored: Authorities) -> Authorities:
    """The pool's CAs, with its next CA activated first when its propagation period has ended: the
    first use after that moment activates it (`activatedBy: schedule`), whichever container it
    is in. Of many containers seeing it at once one transaction commits; the others read its result."""
    busy = Unavailable("the pool's CA kept changing; retry")
    for _ in deadline.attempts(4, exhausted=busy, backoff=(0.02, 0.2)):
        now = clock.now()
        if not _due(stored, now):
            return stored
        with contextlib.suppress(authorities_db.Contended):  # another container's activation won
            _activate(stored, by=SCHEDULE, now=now)
        fresh = authorities_db.read(stored.pointer.tenant_id, stored.pointer.pool_id)
        assert fresh is not None  # a pointer is never deleted
        stored = fresh
    raise AssertionError("unreachable: attempts() raises when exhausted")


def _activate(stored: Authorities, *, by: str, now: datetime) -> None:
    """The transaction of joinplane.dal.authorities.activate, with the retired CA's bundleUntil."""
    authorities_db.activate(
        stored,
        now=now,
        activated_by=by,
        bundle_until=now + timedelta(seconds=BUNDLE_GRACE_SECONDS),
        keep=[ca.ca_id for ca in bundle_of(stored, now) if ca.state == "retired"],
    )


def _loaded(stored: Authorities) -> PoolCa:
    try:
        certificate = x509.load_pem_x509_certificate(stored.active.certificate_pem.encode())
    except ValueError as failure:
        raise Internal(f"the certificate of CA {stored.active.ca_id} is malformed") from failure
    public_key = certificate.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        raise Internal(f"CA {stored.active.ca_id} does not hold an EC key")
    try:
        chain = [x509.load_pem_x509_certificate(pem.encode()) for pem in stored.active.chain_pem]
    except ValueError as failure:
        raise Internal(f"the chain of CA {stored.active.ca_id} is malformed") from failure
    not_after = min(c.not_valid_after_utc for c in (certificate, *chain))
    now = clock.now()
    return PoolCa(stored, certificate, public_key, bundle_pem(stored, now), now, not_after)


def bundle_pem(stored: Authorities, now: datetime) -> str:
    """Every CA whose certificates may still be valid, active first, each followed by its chain."""
    return "".join(_with_chain(ca) for ca in bundle_of(stored, now))


def bundle_of(stored: Authorities, now: datetime) -> list[CertificateAuthorityRecord]:
    """The active CA, the next (prepared) one, then every retired CA whose certificates may still be
    valid: everything a verifier must trust."""
    following = [stored.next] if stored.next is not None and stored.next.state == "prepared" else []
    return [
        stored.active,
        *following,
        *(
            ca
            for ca in stored.bundle
            if ca.ca_id != stored.active.ca_id
            and ca.state == "retired"
            and ca.bundle_until is not None
            and ca.bundle_until > clock.seconds(now)
        ),
    ]


def _with_chain(ca: CertificateAuthorityRecord) -> str:
    return "".join(_ending_in_newline(pem) for pem in (ca.certificate_pem, *ca.chain_pem))


def _ending_in_newline(pem: str) -> str:
    return pem if pem.endswith("\n") else pem + "\n"


def _create_first(tenant_id: str, site_id: str, pool_id: str, created_by: str) -> Authorities:
    candidate = _new_ca(tenant_id, site_id, pool_id, created_by=created_by, previous_ca_id=None)
    try:
        authorities_db.create_first(candidate)
    except authorities_db.Contended:
        # Another caller's first CA won (or is being written): ours is never used.
        schedule_key_deletion(candidate.key_id)
        busy = Unavailable("the pool CA is being created, retry later")
        for _ in deadline.attempts(4, exhausted=busy, backoff=(0.05, 0.5)):
            stored = authorities_db.read(tenant_id, pool_id)
            if stored is not None:
                return stored
        raise AssertionError("unreachable: attempts() raises when exhausted") from None
    except Exception:
        # Not recorded (a 503 the caller retries): the job deletes it only if no CA holds it.
        schedule_key_deletion(candidate.key_id)
        raise
    return Authorities(
        authorities_db.PointerRecord(tenant_id, pool_id, candidate.ca_id, (candidate.ca_id,), 1),
        candidate,
        (candidate,),
    )


def rotate(
    tenant_id: str, site_id: str, pool_id: str, *, by: str, propagation_seconds: int, emergency: bool = False
) -> Authorities:
    """A new key and CA for the pool. Normally it is **prepared**: it joins the bundle at once and
    signs nothing until `propagation_seconds` have passed (or `activate`), so every verifier that
    refreshes its bundle within that period trusts it before any certificate of it exists. An
    `emergency` rotation makes it active at once (verifiers holding an older bundle reject what it
    signs until they fetch the bundle again). Either way the CA it replaces is retired when the new
    one activates and stays in the bundle until its certificates have expired. INVALID_STATE when a
    CA is already prepared (CA_ROTATION_PREPARED) or the pool was archived; ABORTED when another
    rotation won meanwhile."""
    check_ids(tenant_id, pool_id)
    stored = authorities_db.read(tenant_id, pool_id)
    if stored is None:
        # A pool that never had a CA: its first CA is the new one (whoever made it).
        _cache.pop((tenant_id, pool_id), None)
        return _create_first(tenant_id, site_id, pool_id, by)
    stored = activated_when_due(stored)
    _refuse_if_prepared(stored, pool_id)
    replaced = stored.active.ca_id
    now = clock.now()
    candidate = _new_ca(
        tenant_id,
        site_id,
        pool_id,
        created_by=by,
        previous_ca_id=replaced,
        activates_at=None if emergency else now + timedelta(seconds=propagation_seconds),
    )
    busy = Unavailable("the pool's CA kept changing; retry")
    try:
        for _ in deadline.attempts(3, exhausted=busy, backoff=(0.02, 0.2)):
            if stored.active.ca_id != replaced or stored.next is not None:
                raise Aborted(f"the CA of pool {pool_id} was rotated meanwhile; read it again")
            now = clock.now()
            retired = [ca.ca_id for ca in bundle_of(stored, now) if ca.state == "retired"]
            try:
                if emergency:
                    authorities_db.rotate(
                        stored,
                        candidate,
                        now=now,
                        bundle_until=now + timedelta(seconds=BUNDLE_GRACE_SECONDS),
                        keep=retired,
                    )
                else:
                    authorities_db.prepare(stored, candidate, keep=retired)
            except authorities_db.Contended:
                fresh = authorities_db.read(tenant_id, pool_id)
                assert fresh is not None  # a pointer is never deleted
                stored = fresh
                continue
            _cache.pop((tenant_id, pool_id), None)
            fresh = authorities_db.read(tenant_id, pool_id)
            assert fresh is not None
            return fresh
    except authorities_db.PoolNotActive:
        schedule_key_deletion(candidate.key_id)
        raise InvalidState(
            "pool is archived; archived pools cannot be changed", reason=POOL_ARCHIVED
        ) from None
    except Exception:
        schedule_key_deletion(candidate.key_id)
        raise
    raise AssertionError("unreachable: attempts() raises when exhausted")


def activate(tenant_id: str, pool_id: str, *, by: str, ca_id: str | None = None) -> Authorities:
    """The pool's prepared CA signs from now on (`by` is recorded as its activator); the active CA is
    retired. `ca_id`, when given, must be the prepared CA: an operator activates what they saw.
    FAILED_PRECONDITION (NO_PREPARED_CA) when no CA is prepared, or `ca_id` is not it; a
    concurrent activation (another call, or the end of the propagation period) is not an error:
    the answer is the pool's CAs after it."""
    check_ids(tenant_id, pool_id)
    stored = authorities_db.read(tenant_id, pool_id)
    wanted = ca_id or (stored.next.ca_id if stored is not None and stored.next is not None else None)
    busy = Unavailable("the pool's CA kept changing; retry")
    for _ in deadline.attempts(3, exhausted=busy, backoff=(0.02, 0.2)):
        if (
            stored is not None
            and wanted is not None
            and stored.active.ca_id == wanted
            and (ca_id is None or stored.next is None)
        ):
            # Activated meanwhile, by another call or by its schedule. The active CA named while
            # another is prepared is not that: the operator would be told the pool moved on when
            # nothing changed.
            return stored
        if stored is None or stored.next is None or stored.next.ca_id != wanted:
            raise FailedPrecondition(
                f"pool {pool_id} has no prepared CA"
                + (f" {ca_id}" if ca_id else "")
                + ": prepare one with certificateAuthorities/rotate",
                reason=NO_PREPARED_CA,
            )
        with contextlib.suppress(authorities_db.Contended):  # read who won, below
            _activate(stored, by=by, now=clock.now())
        _cache.pop((tenant_id, pool_id), None)
        stored = authorities_db.read(tenant_id, pool_id)
    raise AssertionError("unreachable: attempts() raises when exhausted")


def _refuse_if_prepared(stored: Authorities, pool_id: str) -> None:
    following = stored.next
    if following is not None:
        raise InvalidState(
            f"CA {following.ca_id} of pool {pool_id} is prepared and signs from "
            f"{clock.rfc3339(following.activates_at or 0)}: activate it now with "
            "certificateAuthorities/activate, or rotate again once it is active",
            reason=CA_ROTATION_PREPARED,
        )


def _new_ca(
    tenant_id: str,
    site_id: str,
    pool_id: str,
    *,
    created_by: str,
    previous_ca_id: str | None,
    activates_at: datetime | None = None,
) -> CertificateAuthorityRecord:
    """A new KMS key and its self-signed CA certificate (not yet stored): active, or prepared until
    `activates_at` when given."""
    ca_id = ids.new_id("ca")
    # pathlen 0 unless the intermediate mode needs its one level (docs/pki.md, "Signing modes").
    path_length = 1 if ca_keys.intermediate_mode() else 0
    key_id = create_key(ca_id, tenant_id, pool_id)
    now = clock.now().replace(microsecond=0)
    name = _ca_name(tenant_id, pool_id, ca_id)
    try:
        public_key = kms_public_key(key_id)
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public_key)
            .serial_number(serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
            .add_extension(ca_key_usage(), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )
        certificate = sign_certificate(builder, key_id, public_key)
    except Exception:
        schedule_key_deletion(key_id)
        raise
    created_at = clock.rfc3339(now)
    return CertificateAuthorityRecord(
        ca_id=ca_id,
        tenant_id=tenant_id,
        site_id=site_id,
        pool_id=pool_id,
        key_id=key_id,
        certificate_pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        state="active" if activates_at is None else "prepared",
        created_at=created_at,
        created_by=created_by,
        activated_at=created_at if activates_at is None else None,
        previous_ca_id=previous_ca_id,
        activates_at=None if activates_at is None else clock.seconds(activates_at),
    )


def _ca_name(tenant_id: str, pool_id: str, ca_id: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, _ca_common_name(tenant_id, pool_id)),
            # Two CAs of one pool (before and after a rotation) must not share a name: verifiers
            # find a certificate's issuer by name first. (OU, not serialNumber: that is a
            # PrintableString, and a caId holds `_`.)
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ca_id),
        ]
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


# --- An upstream CA (bring your own root): a request, then its signed certificate ---------------------


def request_upstream(tenant_id: str, site_id: str, pool_id: str, *, by: str) -> CertificateAuthorityRecord:
    """A new KMS key and a CSR for it (joinplane.upstream), stored as the pool's pending CA: the
    organisation's CA signs the CSR, and `import_upstream` makes the result the pool's issuing CA.
    A request still pending is abandoned (its key scheduled for deletion): the latest CSR is the
    one an import must answer. ABORTED when another request or an import changed the pending one
    meanwhile; INVALID_STATE when the pool was archived."""
    from joinplane import upstream

    check_ids(tenant_id, pool_id)
    replacing = authorities_db.get_pending(tenant_id, pool_id)
    ca_id = ids.new_id("ca")
    key_id = create_key(ca_id, tenant_id, pool_id)
    try:
        csr = upstream.csr_for_key(key_id, _ca_name(tenant_id, pool_id, ca_id))
        pending = CertificateAuthorityRecord(
            ca_id=ca_id,
            tenant_id=tenant_id,
            site_id=site_id,
            pool_id=pool_id,
            key_id=key_id,
            certificate_pem="",
            state="pending",
            created_at=clock.rfc3339(clock.now()),
            created_by=by,
            csr_pem=csr,
        )
        authorities_db.put_pending(pending, replacing=replacing)
    except authorities_db.PendingChanged:
        schedule_key_deletion(key_id)
        raise Aborted(
            f"the pending certificate request of pool {pool_id} changed meanwhile; read it again"
        ) from None
    except authorities_db.PoolNotActive:
        schedule_key_deletion(key_id)
        raise InvalidState(
            "pool is archived; archived pools cannot be changed", reason=POOL_ARCHIVED
        ) from None
    except Exception:
        schedule_key_deletion(key_id)
        raise
    if replacing is not None:
        schedule_key_deletion(replacing.key_id)
    return pending


def import_upstream(
    tenant_id: str,
    pool_id: str,
    certificate_pem: str,
    chain_pems: list[str],
    *,
    by: str,
    propagation_seconds: int,
) -> Authorities:
    """The signed certificate of the pool's pending request becomes the pool's issuing CA, with its
    chain (issuer first, root last), once joinplane.upstream has checked it: for the pending key, a
    CA that may sign, linking to a self-signed root, valid long enough. Like a rotation's, it is
    prepared: in the bundle at once, signing from `propagation_seconds` on (or `activate`), when
    the CA it replaces is retired; a pool without a CA signs with it at once. INVALID_STATE
    (CA_ROTATION_PREPARED) while another CA is prepared. FAILED_PRECONDITION (NO_PENDING_CA)
    without a pending request; ABORTED when the request was replaced or imported meanwhile; the
    checks' own refusals otherwise. Nothing is written unless everything passed. `by` is recorded
    as the CA's importer (importedBy; activatedBy for a pool's first CA)."""
    from joinplane import upstream

    check_ids(tenant_id, pool_id)
    pending = authorities_db.get_pending(tenant_id, pool_id)
    if pending is None:
        raise FailedPrecondition(
            f"pool {pool_id} has no pending certificate request: "
            "make one with certificateAuthorities/createCsr",
            reason=NO_PENDING_CA,
        )
    checked = upstream.check_intermediate(
        certificate_pem,
        chain_pems,
        kms_public_key(pending.key_id),
        clock.now(),
        # Name constraints are judged on what a machine certificate of this pool would hold.
        spiffe_id=spiffe_id(tenant_id, pool_id, ids.new_id("mach")),
    )
    # Stored as re-encoded here: one certificate per PEM, no text around it, whatever was sent.
    certificate = checked.certificate.public_bytes(serialization.Encoding.PEM).decode()
    chain = [c.public_bytes(serialization.Encoding.PEM).decode() for c in checked.chain]
    stored = authorities_db.read(tenant_id, pool_id)
    if stored is not None:
        stored = activated_when_due(stored)
        _refuse_if_prepared(stored, pool_id)
    busy = Unavailable("the pool's CA kept changing; retry")
    for _ in deadline.attempts(3, exhausted=busy, backoff=(0.02, 0.2)):
        now = clock.now()
        try:
            authorities_db.activate_pending(
                stored,
                pending,
                certificate_pem=certificate,
                chain_pem=chain,
                now=now,
                activated_by=by,
                activates_at=now + timedelta(seconds=propagation_seconds),
                keep=[ca.ca_id for ca in bundle_of(stored, now) if ca.state == "retired"]
                if stored is not None
                else [],
            )
        except authorities_db.Contended:
            # A rotation, an expiry or a pool's first CA came between: prepare next to what is active now.
            stored = authorities_db.read(tenant_id, pool_id)
            if stored is not None:
                _refuse_if_prepared(stored, pool_id)
            continue
        except authorities_db.PendingChanged:
            raise Aborted(
                f"the pending certificate request of pool {pool_id} was replaced or imported meanwhile"
            ) from None
        except authorities_db.PoolNotActive:
            raise InvalidState(
                "pool is archived; archived pools cannot be changed", reason=POOL_ARCHIVED
            ) from None
        _cache.pop((tenant_id, pool_id), None)
        fresh = authorities_db.read(tenant_id, pool_id)
        assert fresh is not None
        return fresh
    raise AssertionError("unreachable: attempts() raises when exhausted")


def view_of(ca: CertificateAuthorityRecord) -> views.CertificateAuthority:
    """What `certificateAuthorities/get` shows of a CA (views.CertificateAuthority's keys)."""
    certificate = x509.load_pem_x509_certificate(ca.certificate_pem.encode())
    shown: views.CertificateAuthority = {
        "caId": ca.ca_id,
        "certificate": ca.certificate_pem,
        "notBefore": clock.rfc3339(certificate.not_valid_before_utc),
        "notAfter": clock.rfc3339(certificate.not_valid_after_utc),
        "state": "active" if ca.state == "active" else "prepared" if ca.state == "prepared" else "retired",
        "createdAt": ca.created_at,
        "upstream": bool(ca.chain_pem),
    }
    if ca.state == "prepared" and ca.activates_at is not None:
        shown["activatesAt"] = clock.rfc3339(ca.activates_at)
    if ca.state == "retired" and ca.bundle_until is not None:
        shown["bundleUntil"] = clock.rfc3339(ca.bundle_until)
    return shown

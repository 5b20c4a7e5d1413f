"""Pool certificate authorities, for operators: read a pool's CAs and bundle, rotate it in phases
(rotate prepares the next CA, which signs after the pool's propagation period or on activate), or
make it an intermediate of the organisation's own root (createCsr, then importCertificate, which
prepares it the same way); and for verifiers, the pool's bundle at a public URL.

`get` makes the pool's first CA when it has none, as the pool's first join would: a pool always
has a CA to show, and the answer never depends on whether a machine has joined yet. The CA code
(joinplane.ca, which loads `cryptography`) is imported when a request needs it, not at cold start.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from joinplane import clock, errors, ids, pools
from joinplane.dal import authorities as authorities_db
from joinplane.errors import InvalidState, NotFound
from joinplane.grants import Principal

if TYPE_CHECKING:
    from joinplane import views
    from joinplane.dal.authorities import Authorities, CertificateAuthorityRecord


class CertificateAuthorityRef(pools.PoolRef):
    """The pool whose certificate authorities are meant."""


class Rotate(CertificateAuthorityRef):
    """`emergency`: the new CA signs at once instead of after the pool's propagation period (a key
    suspected): verifiers holding an older bundle reject its certificates until they refresh."""

    emergency: bool = False


class Activate(CertificateAuthorityRef):
    """The prepared CA to activate now; when given, it must be the one prepared (what the operator saw)."""

    caId: str | None = Field(default=None, pattern=rf"^ca_{ids.ULID_PATTERN}$")


class ImportCertificate(CertificateAuthorityRef):
    """The organisation's signature on the pool's pending request, and the chain above it."""

    # Sizes as joinplane.upstream checks them; pydantic refuses an oversize body first.
    certificate: str = Field(min_length=1, max_length=16 * 1024)
    chain: list[Annotated[str, Field(min_length=1, max_length=16 * 1024)]] = Field(min_length=1, max_length=8)


def get(
    principal: Principal, request: CertificateAuthorityRef, base_url: str = ""
) -> views.CertificateAuthorities:
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.READ)
    if not pool.active and authorities_db.get_pointer(pool.tenant_id, pool.pool_id) is None:
        # An archived pool issues nothing: no key (and its monthly cost) is made just to be shown.
        raise InvalidState("pool is archived and never had a CA", reason=errors.POOL_ARCHIVED)
    # Read afresh, not from the container's cache: an operator sees a rotation a moment ago.
    stored = authorities_db.read(pool.tenant_id, pool.pool_id)
    if stored is None:
        loaded = ca.pool_authorities(pool.tenant_id, pool.site_id, pool.pool_id, created_by=principal.key_id)
        return _view(loaded.authorities, base_url)
    return _view(ca.activated_when_due(stored), base_url)


def rotate(principal: Principal, request: Rotate, base_url: str = "") -> views.CertificateAuthorities:
    """A new KMS key and CA, prepared: in the bundle at once, signing after the pool's propagation
    period (or activate); with `emergency`, active at once. The previous CA is retired when the new
    one activates and stays in the bundle while certificates it issued may be valid. ABORTED when
    another rotation of the pool won meanwhile; INVALID_STATE when a CA is prepared already."""
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.WRITE)
    if not pool.active:
        raise InvalidState("pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED)
    rotated = ca.rotate(
        pool.tenant_id,
        pool.site_id,
        pool.pool_id,
        by=principal.key_id,
        propagation_seconds=pool.ca_propagation_seconds,
        emergency=request.emergency,
    )
    answer = _view(rotated, base_url)
    if request.emergency and rotated.active.previous_ca_id:
        # A key is suspected, and a container's in-memory intermediate is a key: every intermediate
        # the retired CA signed goes on its CRL (docs/pki.md, "Signing modes").
        from joinplane import intermediates

        revoked = intermediates.revoke_all_of(rotated.active.previous_ca_id)
        answer["breaks"] = (
            f"CA {rotated.active.ca_id} signs from now on without having been published: a verifier "
            f"holding a bundle fetched before {rotated.active.created_at} rejects every certificate "
            "issued from now on (joins and renewals) until it fetches the bundle again. Certificates "
            f"of CA {rotated.active.previous_ca_id} still verify: it stays in the bundle until they "
            "expire; revoke the machines it should no longer vouch for."
        )
        if revoked:
            answer["breaks"] += (
                f" Its {revoked} unexpired intermediate(s) are listed on its CRL: certificates they "
                "signed (the last two hours') fail CRL checks until their machines renew."
            )
    return answer


def activate(principal: Principal, request: Activate, base_url: str = "") -> views.CertificateAuthorities:
    """The pool's prepared CA signs from now on, before its propagation period has ended."""
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.WRITE)
    if not pool.active:
        raise InvalidState("pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED)
    return _view(ca.activate(pool.tenant_id, pool.pool_id, by=principal.key_id, ca_id=request.caId), base_url)


def create_csr(principal: Principal, request: CertificateAuthorityRef) -> views.CertificateAuthorityRequest:
    """A new KMS key for the pool and a CSR for it, to be signed by the organisation's CA; the pool
    keeps issuing from its active CA until the signed certificate is imported. A newer CSR replaces
    a pending one (whose key is scheduled for deletion)."""
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.WRITE)
    if not pool.active:
        raise InvalidState("pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED)
    return _request_view(ca.request_upstream(pool.tenant_id, pool.site_id, pool.pool_id, by=principal.key_id))


def import_certificate(
    principal: Principal, request: ImportCertificate, base_url: str = ""
) -> views.CertificateAuthorities:
    """The signed certificate of the pool's pending request becomes its next CA, prepared as by a
    rotation (its issuing CA at once for a pool without one), after joinplane.upstream's checks; a
    refusal changes nothing."""
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.WRITE)
    if not pool.active:
        raise InvalidState("pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED)
    return _view(
        ca.import_upstream(
            pool.tenant_id,
            pool.pool_id,
            request.certificate,
            list(request.chain),
            by=principal.key_id,
            propagation_seconds=pool.ca_propagation_seconds,
        ),
        base_url,
    )


def _request_view(pending: CertificateAuthorityRecord) -> views.CertificateAuthorityRequest:
    return {"caId": pending.ca_id, "csr": pending.csr_pem or "", "createdAt": pending.created_at}


def served_bundle(ca_id: str) -> str:
    """The current bundle (PEM) of the pool CA `ca_id` belongs to, for verifiers, without credentials:
    any CA the pool has had names it (a CA item is never deleted), so the URL a verifier was given
    keeps working across rotations. NOT_FOUND for anything else, a request's CA (pending or
    abandoned) included: nothing is made or stored. CA ids carry 80 random bits: the URL reveals no
    tenant or pool and cannot be guessed from one."""
    from joinplane import ca

    if not isinstance(ca_id, str) or not _CA_ID.fullmatch(ca_id):
        raise NotFound("no such certificate authority")
    authority = authorities_db.get(ca_id)
    if authority is None or authority.state in ("pending", "abandoned"):
        raise NotFound("no such certificate authority")
    stored = authorities_db.read(authority.tenant_id, authority.pool_id)
    if stored is None:
        raise NotFound("no such certificate authority")
    # Never activates a due CA (an anonymous route writes nothing): the bundle holds the same CAs
    # before and after that activation.
    return ca.bundle_pem(stored, clock.now())


def bundle_path(ca_id: str) -> str:
    return f"/bundle/{ca_id}"


_CA_ID = re.compile(rf"ca_{ids.ULID_PATTERN}")
# How long HTTP caches may keep the public bundle: at most the shortest propagation period
# (pools.MIN_CA_PROPAGATION), so a verifier refreshing through a cache sees a prepared CA before
# it signs.
BUNDLE_MAX_AGE_SECONDS = 300


def _view(stored: Authorities, base_url: str = "") -> views.CertificateAuthorities:
    from joinplane import ca

    bundle = ca.bundle_of(stored, clock.now())
    answer: views.CertificateAuthorities = {
        "active": ca.view_of(stored.active),
        "bundle": [pem for authority in bundle for pem in (authority.certificate_pem, *authority.chain_pem)],
        "retired": [ca.view_of(authority) for authority in bundle if authority.state == "retired"],
    }
    if stored.next is not None:
        answer["next"] = ca.view_of(stored.next)
    if base_url:
        answer["bundleUrl"] = base_url.rstrip("/") + bundle_path(stored.pointer.public_bundle_id)
    pending = authorities_db.get_pending(stored.pointer.tenant_id, stored.pointer.pool_id)
    if pending is not None:
        answer["pending"] = _request_view(pending)
    return answer

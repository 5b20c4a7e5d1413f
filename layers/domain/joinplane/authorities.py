"""Pool certificate authorities, for operators: read a pool's active CA and bundle, rotate it, or
make it an intermediate of the organisation's own root (createCsr, then importCertificate).

`get` makes the pool's first CA when it has none, as the pool's first join would: a pool always
has a CA to show, and the answer never depends on whether a machine has joined yet. The CA code
(joinplane.ca, which loads `cryptography`) is imported when a request needs it, not at cold start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from joinplane import clock, errors, pools
from joinplane.dal import authorities as authorities_db
from joinplane.errors import InvalidState
from joinplane.grants import Principal

if TYPE_CHECKING:
    from joinplane import views
    from joinplane.dal.authorities import Authorities, CertificateAuthority


class CertificateAuthorityRef(pools.PoolRef):
    """The pool whose certificate authorities are meant."""


class ImportCertificate(CertificateAuthorityRef):
    """The organisation's signature on the pool's pending request, and the chain above it."""

    # Sizes as joinplane.upstream checks them; pydantic refuses an oversize body first.
    certificate: str = Field(min_length=1, max_length=16 * 1024)
    chain: list[Annotated[str, Field(min_length=1, max_length=16 * 1024)]] = Field(min_length=1, max_length=8)


def get(principal: Principal, request: CertificateAuthorityRef) -> views.CertificateAuthorities:
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.READ)
    if not pool.active and authorities_db.get_pointer(pool.tenant_id, pool.pool_id) is None:
        # An archived pool issues nothing: no key (and its monthly cost) is made just to be shown.
        raise InvalidState("pool is archived and never had a CA", reason=errors.POOL_ARCHIVED)
    loaded = ca.pool_authorities(pool.tenant_id, pool.site_id, pool.pool_id, created_by=principal.key_id)
    return _view(loaded.authorities)


def rotate(principal: Principal, request: CertificateAuthorityRef) -> views.CertificateAuthorities:
    """A new KMS key and CA; the previous CA is retired and stays in the bundle while certificates it
    issued may be valid. ABORTED when another rotation of the pool won meanwhile."""
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.WRITE)
    if not pool.active:
        raise InvalidState("pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED)
    return _view(ca.rotate(pool.tenant_id, pool.site_id, pool.pool_id, by=principal.key_id))


def create_csr(principal: Principal, request: CertificateAuthorityRef) -> views.CertificateAuthorityRequest:
    """A new KMS key for the pool and a CSR for it, to be signed by the organisation's CA; the pool
    keeps issuing from its active CA until the signed certificate is imported. A newer CSR replaces
    a pending one (whose key is scheduled for deletion)."""
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.WRITE)
    if not pool.active:
        raise InvalidState("pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED)
    return _request_view(ca.request_upstream(pool.tenant_id, pool.site_id, pool.pool_id, by=principal.key_id))


def import_certificate(principal: Principal, request: ImportCertificate) -> views.CertificateAuthorities:
    """The signed certificate of the pool's pending request becomes its issuing CA (the active one is
    retired, as by a rotation), after joinplane.upstream's checks; a refusal changes nothing."""
    from joinplane import ca

    pool = pools.load(principal, request.tenantId, request.poolId, pools.WRITE)
    if not pool.active:
        raise InvalidState("pool is archived; archived pools cannot be changed", reason=errors.POOL_ARCHIVED)
    return _view(
        ca.import_upstream(
            pool.tenant_id, pool.pool_id, request.certificate, list(request.chain), by=principal.key_id
        )
    )


def _request_view(pending: CertificateAuthority) -> views.CertificateAuthorityRequest:
    return {"caId": pending.ca_id, "csr": pending.csr_pem or "", "createdAt": pending.created_at}


def _view(stored: Authorities) -> views.CertificateAuthorities:
    from joinplane import ca

    bundle = ca.bundle_of(stored, int(clock.epoch()))
    answer: views.CertificateAuthorities = {
        "active": ca.view_of(stored.active),
        "bundle": [pem for authority in bundle for pem in (authority.certificate_pem, *authority.chain_pem)],
    }
    pending = authorities_db.get_pending(stored.pointer.tenant_id, stored.pointer.pool_id)
    if pending is not None:
        answer["pending"] = _request_view(pending)
    return answer

"""TPM manufacturers a site trusts, and the check of an EK certificate against them.

An operator lists a manufacturer's CA certificates at a site: its root, and the intermediates
that complete a chain to it. A token with `attestation.tpmTrust: manufacturer` then accepts any
activated EK whose certificate chains to a listed root (Teleport's `ekcert_allowed_cas`), besides
the EKs on the site's allow-list.

The chain is checked here, signature by signature and date by date, rather than by a general
X.509 path validator: EK certificates are issued for keys that never sign, with critical
extensions and subject-alternative-name forms (the TCG's TPM manufacturer, model and version as
a directoryName, an empty subject) that strict path validation refuses though the TCG's EK
Credential Profile requires them. What is checked: each certificate's signature by the next one's
key and the issuer name it claims, every certificate's validity period at the time of the join,
that each issuer is a CA (basicConstraints, where present), and that the chain ends at a listed
self-signed root. What is not: name constraints, policies and revocation.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import Field

from joinplane import clock, der, pools
from joinplane.dal import tpm_manufacturers as makers_db
from joinplane.dal.tpm_manufacturers import ManufacturerRecord
from joinplane.errors import AlreadyExists, InvalidArgument, NotFound
from joinplane.grants import Principal
from joinplane.pools import SiteRef
from joinplane.tpm_allow import MAX_PEM_CHARS, PEM_CERTIFICATE, READ, SHA256_HEX, WRITE
from joinplane.wire import TEXT

if TYPE_CHECKING:
    from cryptography import x509

    from joinplane import views

MAX_CHAIN = 4  # EK certificate, at most three intermediates... and the root


class AddManufacturer(SiteRef):
    certificatePem: str = Field(min_length=1, max_length=MAX_PEM_CHARS)
    description: str = Field(default="", max_length=256, pattern=TEXT)


class ListManufacturers(SiteRef):
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=SHA256_HEX)


class RemoveManufacturer(SiteRef):
    certificateSha256: str = Field(pattern=SHA256_HEX)


def _invalid(field: str, reason: str) -> InvalidArgument:
    return InvalidArgument(f"invalid request: {field}: {reason}", [{"field": field, "reason": reason}])


def load_pem(pem: str, field: str) -> x509.Certificate:
    """One PEM certificate, or a 400 naming `field`."""
    from cryptography import x509

    match = PEM_CERTIFICATE.fullmatch(pem.strip())
    if len(pem) > MAX_PEM_CHARS or match is None:
        raise _invalid(field, "is not one PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        return x509.load_der_x509_certificate(base64.b64decode("".join(match["body"].split()), validate=True))
    except (ValueError, binascii.Error, x509.InvalidVersion):
        raise _invalid(field, "is not a valid X.509 certificate") from None


def _is_ca(certificate: x509.Certificate) -> bool | None:
    """basicConstraints' cA, or None when the certificate has no such extension."""
    from cryptography import x509

    try:
        return bool(certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return None


def _signed_by(certificate: x509.Certificate, issuer: x509.Certificate) -> bool:
    from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm

    try:
        certificate.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def view(maker: ManufacturerRecord) -> views.TpmManufacturer:
    return {
        "tenantId": maker.tenant_id,
        "siteId": maker.site_id,
        "certificateSha256": maker.certificate_sha256,
        "subject": maker.subject,
        "issuer": maker.issuer,
        "root": maker.root,
        "notAfter": maker.not_after,
        "description": maker.description,
        "createdAt": maker.created_at,
        "createdBy": maker.created_by,
    }


def _site(principal: Principal, request: SiteRef, permission: str) -> None:
    pools.load_site(principal, request.tenantId, request.siteId, permission)


def add(principal: Principal, request: AddManufacturer) -> views.TpmManufacturer:
    from cryptography.hazmat.primitives import serialization

    certificate = load_pem(request.certificatePem, "certificatePem")
    if _is_ca(certificate) is False:
        raise _invalid("certificatePem", "is not a CA certificate (basicConstraints cA is false)")
    root = certificate.subject == certificate.issuer
    if root and not _signed_by(certificate, certificate):
        raise _invalid("certificatePem", "names itself as its issuer but its signature does not verify")
    now = clock.now()
    if certificate.not_valid_after_utc <= now:
        raise _invalid("certificatePem", "has expired")
    _site(principal, request, WRITE)
    encoded = certificate.public_bytes(serialization.Encoding.DER)
    maker = ManufacturerRecord(
        tenant_id=request.tenantId,
        site_id=request.siteId,
        certificate_sha256=hashlib.sha256(encoded).hexdigest(),
        certificate_pem=certificate.public_bytes(serialization.Encoding.PEM).decode(),
        subject=certificate.subject.rfc4514_string(),
        issuer=certificate.issuer.rfc4514_string(),
        root=root,
        not_after=clock.rfc3339(certificate.not_valid_after_utc),
        description=request.description,
        created_at=clock.rfc3339(now),
        created_by=principal.key_id,
    )
    try:
        makers_db.add(maker)
    except makers_db.Exists:
        raise AlreadyExists(
            f"this certificate is already listed at site {request.siteId!r}",
            [{"field": "certificatePem", "reason": "already listed"}],
        ) from None
    return view(maker)


def list_manufacturers(principal: Principal, request: ListManufacturers) -> views.TpmManufacturerList:
    _site(principal, request, READ)
    after = request.cursor.lower() if request.cursor else None
    page = makers_db.list_page(request.tenantId, request.siteId, after=after, limit=request.limit)
    listed = [view(m) for m in page.manufacturers]
    result: views.TpmManufacturerList = {"manufacturers": listed}
    if page.more and listed:
        result["nextCursor"] = listed[-1]["certificateSha256"]
    return result


def remove(principal: Principal, request: RemoveManufacturer) -> views.TpmManufacturer:
    _site(principal, request, WRITE)
    maker = makers_db.get(request.tenantId, request.siteId, request.certificateSha256.lower())
    if maker is None:
        raise NotFound("certificate not listed at this site")
    try:
        makers_db.remove(maker)
    except makers_db.Gone:
        raise NotFound("certificate not listed at this site") from None
    return view(maker)


# --- the join's check ----------------------------------------------------------------------------


class EkCertificate(NamedTuple):
    """What the join learnt of an EK certificate: who issued it, its serial, and whether it chains
    to a manufacturer the site lists (`manufacturer`: the root's subject; else `problem` says why
    not, in words the operator sees on the join request)."""

    issuer: str
    serial: str  # hex
    manufacturer: str = ""
    problem: str = ""


def _public_key_bits(spki: bytes) -> bytes:
    """The subjectPublicKey BIT STRING of a SubjectPublicKeyInfo: the key itself, whatever
    algorithm identifier names it (an RSA EK may be certified under id-RSAES-OAEP)."""
    return der.sequence_element(spki, 1)


def read_ek_certificate(pem: str, ek_spki: bytes) -> tuple[x509.Certificate, EkCertificate]:
    """The EK certificate of an activated EK: a 400 unless it certifies exactly that key."""
    from joinplane import tpm_allow

    certificate = load_pem(pem, "tpm.ekCertificatePem")
    certified = tpm_allow.certificate_spki(certificate.tbs_certificate_bytes)
    if _public_key_bits(certified) != _public_key_bits(ek_spki):
        raise _invalid("tpm.ekCertificatePem", "certifies another key than tpm.ekPublic")
    return certificate, EkCertificate(certificate.issuer.rfc4514_string(), f"{certificate.serial_number:x}")


def _when(moment: datetime) -> str:
    return clock.rfc3339(moment)


def _invalid_at(certificate: x509.Certificate, now: datetime, what: str) -> str:
    if now < certificate.not_valid_before_utc:
        return f"{what} is not valid before {_when(certificate.not_valid_before_utc)}"
    if now > certificate.not_valid_after_utc:
        return f"{what} expired at {_when(certificate.not_valid_after_utc)}"
    return ""


def chain(leaf: x509.Certificate, listed: list[ManufacturerRecord], now: datetime) -> tuple[str, str]:
    """(the listed root's subject, "") when `leaf` chains to a listed root at `now`; else ("",
    why not)."""
    from cryptography import x509

    problem = _invalid_at(leaf, now, "the EK certificate")
    if problem:
        return "", problem
    anchors = [(m, x509.load_pem_x509_certificate(m.certificate_pem.encode())) for m in listed]
    current = leaf
    for _ in range(MAX_CHAIN):
        issuer = next((c for _, c in anchors if c.subject == current.issuer and _signed_by(current, c)), None)
        if issuer is None:
            named = current.issuer.rfc4514_string() or "(empty)"
            return (
                "",
                f"no manufacturer certificate listed at this site signed the certificate issued by {named}",
            )
        subject = issuer.subject.rfc4514_string()
        problem = _invalid_at(issuer, now, f"the manufacturer certificate {subject}")
        if problem:
            return "", problem
        if _is_ca(issuer) is False:
            return "", f"the manufacturer certificate {subject} is not a CA certificate"
        if issuer.subject == issuer.issuer:
            return subject, ""
        current = issuer
    return "", "the chain to a listed root is longer than this server follows"


def check(tenant_id: str, site_id: str, certificate: Any, now: datetime) -> tuple[str, str]:
    """`chain` against the site's list (one Query)."""
    listed = makers_db.all_of(tenant_id, site_id)
    if not listed:
        return "", "this site lists no TPM manufacturer"
    return chain(certificate, listed, now)

"""The TPM allow-list: endorsement keys allowed at a site. The `tpm` attestor looks a joining
machine's EK up here (`is_listed`); an unlisted EK defers the join or, under `require`, denies it.

An EK is named by the lowercase hex SHA-256 of its SubjectPublicKeyInfo DER. Operators add either
that hash or the EK certificate (the hash is then taken from the certificate's SPKI exactly as the
TPM vendor encoded and signed it).

Stored one item per key, as `joinplane.dal.tpm_allow` describes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from joinplane import clock, der, pools
from joinplane.dal import tpm_allow as allow_db
from joinplane.dal.tpm_allow import AllowedKeyRecord
from joinplane.errors import AlreadyExists, InvalidArgument, NotFound
from joinplane.grants import Principal
from joinplane.pools import SiteRef
from joinplane.wire import TEXT

if TYPE_CHECKING:
    from joinplane import views

READ, WRITE = "compute:attestation:read", "compute:attestation:write"
# Either case is accepted (Windows tools print hashes uppercase); stored and shown lowercase.
SHA256_HEX = r"^[0-9a-fA-F]{64}$"
MAX_PEM_CHARS = 16 * 1024
PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----\r?\n(?P<body>[A-Za-z0-9+/=\s]*?)-----END CERTIFICATE-----"
)


class AddKey(SiteRef):
    """Exactly one of `ekPublicKeySha256` or `ekCertificatePem`."""

    ekPublicKeySha256: str | None = Field(default=None, pattern=SHA256_HEX)
    ekCertificatePem: str | None = Field(default=None, min_length=1, max_length=MAX_PEM_CHARS)
    description: str = Field(default="", max_length=256, pattern=TEXT)

    @field_validator("ekPublicKeySha256")
    @classmethod
    def _lowercase(cls, value: str | None) -> str | None:
        return value.lower() if value is not None else None

    @model_validator(mode="after")
    def _one_key(self) -> AddKey:
        if (self.ekPublicKeySha256 is None) == (self.ekCertificatePem is None):
            raise PydanticCustomError("one_key", "give exactly one of ekPublicKeySha256 or ekCertificatePem")
        return self


class ListKeys(SiteRef):
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, pattern=SHA256_HEX)


class RemoveKey(SiteRef):
    ekPublicKeySha256: str = Field(pattern=SHA256_HEX)


def spki_sha256(spki_der: bytes) -> str:
    """An EK's name: lowercase hex SHA-256 of its SubjectPublicKeyInfo DER."""
    return hashlib.sha256(spki_der).hexdigest()


class InvalidCertificate(InvalidArgument, ValueError):
    """Not one X.509 certificate in PEM. An InvalidArgument, so that any endpoint letting it
    through answers 400 naming the field, and a ValueError, which is what parsers raise."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"invalid request: ekCertificatePem: {reason}", [{"field": "ekCertificatePem", "reason": reason}]
        )


def ek_hash_from_certificate(pem: str) -> str:
    """The EK's name from its certificate (one PEM CERTIFICATE block). The SPKI is taken from the
    certificate's bytes rather than re-encoded from a parsed key: EK certificates carry keys that
    general-purpose libraries may not load (RSA under the id-RSAES-OAEP identifier), and the name
    must be the bytes the TPM vendor signed. InvalidCertificate when this is not one certificate."""
    # cryptography costs tens of milliseconds to import: only the calls that parse certificates pay.
    from cryptography import x509

    if len(pem) > MAX_PEM_CHARS:
        raise InvalidCertificate(f"is over {MAX_PEM_CHARS} characters")
    match = PEM_CERTIFICATE.fullmatch(pem.strip())
    if match is None:
        raise InvalidCertificate("is not one PEM certificate (-----BEGIN CERTIFICATE-----)")
    try:
        encoded = base64.b64decode("".join(match["body"].split()), validate=True)
        certificate = x509.load_der_x509_certificate(encoded)
    except (ValueError, binascii.Error, x509.InvalidVersion):
        raise InvalidCertificate("is not a valid X.509 certificate") from None
    return spki_sha256(certificate_spki(certificate.tbs_certificate_bytes))


def certificate_spki(tbs: bytes) -> bytes:
    """TBSCertificate's SPKI, as encoded: after serialNumber, signature, issuer, validity and
    subject, and an explicit [0] version before those unless it is absent (v1)."""
    first = der.header(tbs, 0)[1]
    return der.sequence_element(tbs, 6 if tbs[first] == 0xA0 else 5)


def view(key: AllowedKeyRecord) -> views.AllowedKey:
    return {
        "tenantId": key.tenant_id,
        "siteId": key.site_id,
        "ekPublicKeySha256": key.ek_sha256,
        "addedFrom": key.added_from,
        "description": key.description,
        "createdAt": key.created_at,
        "createdBy": key.created_by,
    }


def _site(principal: Principal, request: SiteRef, permission: str) -> None:
    pools.load_site(principal, request.tenantId, request.siteId, permission)


def add(principal: Principal, request: AddKey) -> views.AllowedKey:
    # The certificate is part of the request's shape: a bad one is refused before any lookup.
    added_from: Literal["hash", "certificate"]
    if request.ekCertificatePem is not None:
        ek_sha256, added_from = ek_hash_from_certificate(request.ekCertificatePem), "certificate"
    else:
        assert request.ekPublicKeySha256 is not None
        ek_sha256, added_from = request.ekPublicKeySha256, "hash"
    _site(principal, request, WRITE)
    key = AllowedKeyRecord(
        tenant_id=request.tenantId,
        site_id=request.siteId,
        ek_sha256=ek_sha256,
        added_from=added_from,
        description=request.description,
        created_at=clock.rfc3339(clock.now()),
        created_by=principal.key_id,
    )
    try:
        allow_db.add(key)
    except allow_db.KeyExists:
        raise AlreadyExists(
            f"endorsement key {ek_sha256} is already on the allow-list of site {request.siteId!r}",
            [{"field": "ekPublicKeySha256", "reason": "already listed"}],
        ) from None
    return view(key)


def list_keys(principal: Principal, request: ListKeys) -> views.AllowedKeyList:
    _site(principal, request, READ)
    after = request.cursor.lower() if request.cursor else None
    page = allow_db.list_keys(request.tenantId, request.siteId, after=after, limit=request.limit)
    keys = [view(key) for key in page.keys]
    result: views.AllowedKeyList = {"keys": keys}
    if page.more and keys:
        result["nextCursor"] = keys[-1]["ekPublicKeySha256"]
    return result


def remove(principal: Principal, request: RemoveKey) -> views.AllowedKey:
    _site(principal, request, WRITE)
    key = allow_db.get(request.tenantId, request.siteId, request.ekPublicKeySha256.lower())
    if key is None:
        raise NotFound("endorsement key not on this site's allow-list")
    try:
        allow_db.remove(key, by=principal.key_id, now=clock.now())
    except allow_db.KeyGone:
        raise NotFound("endorsement key not on this site's allow-list") from None
    return view(key)


def is_listed(tenant_id: str, site_id: str, ek_sha256: str) -> bool:
    """Is this EK (hex SHA-256 of its SPKI DER) allowed at the site? One GetItem."""
    if not re.fullmatch(SHA256_HEX, ek_sha256):
        return False  # could never have been added; also keeps junk out of the key
    return allow_db.is_listed(tenant_id, site_id, ek_sha256.lower())

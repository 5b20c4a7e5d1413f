"""TPM manufacturers a site trusts: `SITE#<tenantId>#<siteId>#TPMCA` / `CA#<sha256 of the DER>`, one
item per CA certificate (a root, or an intermediate that completes a chain to one). The partition
holds nothing else, so the join reads a site's whole list in one Query (`all_of`)."""

from __future__ import annotations

from typing import NamedTuple

from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item

# A site lists a few manufacturers, each with a root and an intermediate or two: one Query page.
MAX_PER_SITE = 100


class ManufacturerRecord(NamedTuple):
    tenant_id: str
    site_id: str
    certificate_sha256: str  # lowercase hex SHA-256 of the certificate's DER
    certificate_pem: str
    subject: str  # RFC 4514
    issuer: str
    root: bool  # self-issued and self-signed: a chain ends here
    not_after: str
    description: str
    created_at: str
    created_by: str | None

    @classmethod
    def from_item(cls, item: Item) -> ManufacturerRecord:
        return cls(
            tenant_id=item["tenantId"],
            site_id=item["siteId"],
            certificate_sha256=item["certificateSha256"],
            certificate_pem=item["certificatePem"],
            subject=item["subject"],
            issuer=item["issuer"],
            root=bool(item["root"]),
            not_after=item["notAfter"],
            description=item.get("description", ""),
            created_at=item["createdAt"],
            created_by=item.get("createdBy"),
        )

    def to_item(self) -> Item:
        pk, sk = key_of(self.tenant_id, self.site_id, self.certificate_sha256)
        return {
            "pk": pk,
            "sk": sk,
            "tenantId": self.tenant_id,
            "siteId": self.site_id,
            "certificateSha256": self.certificate_sha256,
            "certificatePem": self.certificate_pem,
            "subject": self.subject,
            "issuer": self.issuer,
            "root": self.root,
            "notAfter": self.not_after,
            "description": self.description,
            "createdAt": self.created_at,
            "createdBy": self.created_by,
        }


def partition(tenant_id: str, site_id: str) -> str:
    return f"SITE#{tenant_id}#{site_id}#TPMCA"


def key_of(tenant_id: str, site_id: str, certificate_sha256: str) -> tuple[str, str]:
    return partition(tenant_id, site_id), f"CA#{certificate_sha256}"


class Exists(Exception):
    pass


class Gone(Exception):
    pass


def add(manufacturer: ManufacturerRecord) -> None:
    """Exists when the site lists this certificate already."""
    try:
        dynamo.put(manufacturer.to_item(), condition="attribute_not_exists(pk)")
    except dynamo.ConditionFailed:
        raise Exists(manufacturer.certificate_sha256) from None


def get(tenant_id: str, site_id: str, certificate_sha256: str) -> ManufacturerRecord | None:
    item = dynamo.get(*key_of(tenant_id, site_id, certificate_sha256))
    return ManufacturerRecord.from_item(item) if item else None


def remove(manufacturer: ManufacturerRecord) -> None:
    """Gone when a concurrent remove got there first (or it was removed and listed again)."""
    try:
        dynamo.delete(
            *key_of(manufacturer.tenant_id, manufacturer.site_id, manufacturer.certificate_sha256),
            condition="createdAt = :added",
            values={":added": manufacturer.created_at},
        )
    except dynamo.ConditionFailed:
        raise Gone(manufacturer.certificate_sha256) from None


class ManufacturerPage(NamedTuple):
    manufacturers: list[ManufacturerRecord]
    more: bool


def list_page(tenant_id: str, site_id: str, *, after: str | None, limit: int) -> ManufacturerPage:
    pk = partition(tenant_id, site_id)
    if after:
        page = dynamo.query(pk=pk, sk_after=f"CA#{after}", limit=limit, consistent=True)
    else:
        page = dynamo.query(pk=pk, sk_prefix="CA#", limit=limit, consistent=True)
    return ManufacturerPage([ManufacturerRecord.from_item(i) for i in page.items], page.last_key is not None)


def all_of(tenant_id: str, site_id: str) -> list[ManufacturerRecord]:
    """Every certificate the site lists (one Query: a site lists at most MAX_PER_SITE)."""
    return list_page(tenant_id, site_id, after=None, limit=MAX_PER_SITE).manufacturers


def count(tenant_id: str, site_id: str) -> int:
    return len(all_of(tenant_id, site_id))

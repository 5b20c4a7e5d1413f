"""Revoked certificates and each CA's certificate revocation list, in the table.

- revoked  `REVOKEDCERT#<caId>` / `<serial hex>`: serial, caId, revokedAt (RFC 3339), reason
           (`unspecified` for a revoked machine, `superseded` for the certificate a key-rotating
           renewal replaced), expiresAt (epoch seconds: the certificate's notAfter), ttl (a day
           later: DynamoDB's TTL deletes it once no verifier could accept the certificate anyway).
           Written by the same transaction as the revocation or renewal (`revoked_write`), so a
           revoked machine's certificate is never missing from the next CRL.
- CRL      `CRL#<caId>` / `CRL`: der (the signed CRL, binary), crlNumber, thisUpdate, nextUpdate
           (epoch seconds), builtAt (epoch seconds) and revokedCount. `CRL#`, not `CA#`: the
           event stream reads `CA#` items as CA changes, and a CRL refresh is not one.

One partition per CA holds its revoked certificates: a CA's CRL is built from one Query of it.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from joinplane import clock
from joinplane.dal import dynamo
from joinplane.dal.dynamo import Item

PREFIX = "REVOKEDCERT#"
CRL_PREFIX = "CRL#"
# How long a revoked entry outlives its certificate before TTL deletes it: TTL deletion is late
# by up to a few days anyway; the CRL also filters by expiresAt, so this is only housekeeping.
TTL_GRACE_SECONDS = 24 * 3600


class RevocationRecord(NamedTuple):
    ca_id: str
    serial: str  # lower-case hex, as the machine record holds it
    revoked_at: str
    reason: str  # "unspecified" | "superseded"
    expires_at: int

    @classmethod
    def from_item(cls, item: Item) -> RevocationRecord:
        return cls(
            ca_id=item["caId"],
            serial=item["serial"],
            revoked_at=item["revokedAt"],
            reason=item.get("reason") or "unspecified",
            expires_at=int(item["expiresAt"]),
        )

    def to_item(self) -> Item:
        return {
            "pk": PREFIX + self.ca_id,
            "sk": self.serial,
            "caId": self.ca_id,
            "serial": self.serial,
            "revokedAt": self.revoked_at,
            "reason": self.reason,
            "expiresAt": self.expires_at,
            "ttl": self.expires_at + TTL_GRACE_SECONDS,
        }


class CrlRecord(NamedTuple):
    ca_id: str
    der: bytes
    crl_number: int
    this_update: int
    next_update: int
    built_at: int
    revoked_count: int

    @classmethod
    def from_item(cls, item: Item) -> CrlRecord:
        return cls(
            ca_id=item["caId"],
            der=bytes(item["der"]),
            crl_number=int(item["crlNumber"]),
            this_update=int(item["thisUpdate"]),
            next_update=int(item["nextUpdate"]),
            built_at=int(item["builtAt"]),
            revoked_count=int(item.get("revokedCount") or 0),
        )

    def to_item(self) -> Item:
        return {
            "pk": CRL_PREFIX + self.ca_id,
            "sk": "CRL",
            "caId": self.ca_id,
            "der": self.der,
            "crlNumber": self.crl_number,
            "thisUpdate": self.this_update,
            "nextUpdate": self.next_update,
            "builtAt": self.built_at,
            "revokedCount": self.revoked_count,
        }


def revoked_write(revoked: RevocationRecord) -> dynamo.Write:
    """The transaction action that lists a certificate as revoked. A serial is listed once: a
    second revocation of it (never expected: serials are 158 random bits) keeps the first."""
    return dynamo.Write("Put", item=revoked.to_item(), name="revoked-certificate")


def revoked_of(ca_id: str, now: datetime) -> list[RevocationRecord]:
    """The CA's revoked certificates that have not expired (consistent: a revocation that just
    committed is in the CRL built after it)."""
    found: list[RevocationRecord] = []
    start: Item | None = None
    while True:
        page = dynamo.query(pk=PREFIX + ca_id, consistent=True, start_after=start)
        found.extend(RevocationRecord.from_item(item) for item in page.items)
        if page.last_key is None:
            return [revoked for revoked in found if revoked.expires_at > clock.seconds(now)]
        start = page.last_key


def get_crl(ca_id: str) -> CrlRecord | None:
    item = dynamo.get(CRL_PREFIX + ca_id, "CRL")
    return CrlRecord.from_item(item) if item else None


def put_crl(crl: CrlRecord, *, replacing: int | None) -> bool:
    """Store `crl` if the stored CRL's number is still `replacing` (None: there is none), so two
    concurrent builds never leave a lower crlNumber behind. False when another build won."""
    if replacing is None:
        condition, values = "attribute_not_exists(pk)", {}
    else:
        condition, values = "crlNumber = :previous", {":previous": replacing}
    try:
        dynamo.put(crl.to_item(), condition=condition, values=values or None)
    except dynamo.ConditionFailed:
        return False
    return True

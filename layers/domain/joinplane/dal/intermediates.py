"""The intermediate CAs Lambda containers made in the `intermediate` signing mode, in the table.

- intermediate  `INTERMEDIATE#<intermediateId>` / `INTERMEDIATE`: the pool CA that signed it, its
                serial, the SHA-256 of its certificate (DER), its subject key identifier (hex: what
                every certificate it signed names as its authority key identifier), notBefore and
                notAfter (epoch seconds), createdAt, the container that holds its key (the Lambda
                log stream: where to look for what it did), the certificate (PEM), its CRL (DER,
                signed once when it was made, valid until it expires: `GET /crl/<intermediateId>`),
                and ttl (a day after notAfter).
- per CA        `CAINTERMEDIATES#<caId>` / `<intermediateId>`: serial and notAfter, so an emergency
                rotation finds every intermediate of the CA it retires with one Query and puts the
                unexpired ones on that CA's CRL (joinplane.dal.revocations).

Both are written with a check that the pool CA is still active, in one transaction, before the
intermediate signs anything: no intermediate of a retired CA can appear after such a sweep.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

from joinplane.dal import dynamo
from joinplane.dal.authorities import ca_key
from joinplane.dal.dynamo import Item

PREFIX = "INTERMEDIATE#"
PER_CA_PREFIX = "CAINTERMEDIATES#"
# DynamoDB's TTL deletes the records once nothing the intermediate signed can still verify, give or
# take a day.
TTL_GRACE_SECONDS = 24 * 3600


class CaNotActive(Exception):
    """The pool CA that signed the intermediate is no longer active (rotated meanwhile)."""


class IntermediateRecord(NamedTuple):
    intermediate_id: str
    ca_id: str
    serial: str  # lower-case hex
    sha256: str  # of the certificate's DER, lower-case hex
    subject_key_id: str  # hex
    not_before: int
    not_after: int
    created_at: str
    container: str
    certificate_pem: str
    crl_der: bytes

    @classmethod
    def from_item(cls, item: Item) -> IntermediateRecord:
        return cls(
            intermediate_id=item["intermediateId"],
            ca_id=item["caId"],
            serial=item["serial"],
            sha256=item["sha256"],
            subject_key_id=item["subjectKeyId"],
            not_before=int(item["notBefore"]),
            not_after=int(item["notAfter"]),
            created_at=item["createdAt"],
            container=item.get("container") or "",
            certificate_pem=item["certificatePem"],
            crl_der=bytes(item["crl"]),
        )

    def to_item(self) -> Item:
        return {
            "pk": PREFIX + self.intermediate_id,
            "sk": "INTERMEDIATE",
            "intermediateId": self.intermediate_id,
            "caId": self.ca_id,
            "serial": self.serial,
            "sha256": self.sha256,
            "subjectKeyId": self.subject_key_id,
            "notBefore": self.not_before,
            "notAfter": self.not_after,
            "createdAt": self.created_at,
            "container": self.container,
            "certificatePem": self.certificate_pem,
            "crl": self.crl_der,
            "ttl": self.not_after + TTL_GRACE_SECONDS,
        }


class Listed(NamedTuple):
    """An intermediate as its CA's partition lists it."""

    intermediate_id: str
    serial: str
    not_after: int


def record(intermediate: IntermediateRecord) -> None:
    """One transaction: the intermediate's record and its CA's listing of it (both new), and a check
    that its pool CA is still active. CaNotActive when a rotation retired the CA meanwhile: the
    intermediate must not be used."""
    listing = {
        "pk": PER_CA_PREFIX + intermediate.ca_id,
        "sk": intermediate.intermediate_id,
        "serial": intermediate.serial,
        "notAfter": intermediate.not_after,
        "ttl": intermediate.not_after + TTL_GRACE_SECONDS,
    }
    try:
        dynamo.transact(
            [
                dynamo.Write(
                    "Put",
                    item=intermediate.to_item(),
                    condition="attribute_not_exists(pk)",
                    name="intermediate",
                ),
                dynamo.Write("Put", item=listing, condition="attribute_not_exists(pk)", name="listing"),
                dynamo.Write(
                    "ConditionCheck",
                    *ca_key(intermediate.ca_id),
                    condition="#state = :active",
                    names={"#state": "state"},
                    values={":active": "active"},
                    name="ca",
                ),
            ]
        )
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.lost("ca"):
            raise CaNotActive() from None
        raise


def get(intermediate_id: str) -> IntermediateRecord | None:
    item = dynamo.get(PREFIX + intermediate_id, "INTERMEDIATE", consistent=False)
    return IntermediateRecord.from_item(item) if item else None


def of_ca(ca_id: str) -> list[Listed]:
    """Every intermediate the pool CA signed that TTL has not deleted yet (consistent)."""
    found: list[Listed] = []
    start: Item | None = None
    while True:
        page = dynamo.query(pk=PER_CA_PREFIX + ca_id, consistent=True, start_after=start)
        found.extend(Listed(item["sk"], item["serial"], int(item["notAfter"])) for item in page.items)
        if page.last_key is None:
            return found
        start = page.last_key


def revoke_unexpired(ca_id: str, now: int, revoked_at: str) -> int:
    """Every intermediate of the CA that has not expired at `now` (epoch seconds) listed as revoked
    on the CA's CRL (joinplane.dal.revocations' entries, one put each: listing a serial twice keeps
    the first). How many were listed."""
    from joinplane.dal.revocations import RevocationRecord

    listed = 0
    for intermediate in of_ca(ca_id):
        if intermediate.not_after <= now:
            continue
        entry = RevocationRecord(
            ca_id, intermediate.serial, revoked_at, "unspecified", intermediate.not_after
        )
        with contextlib.suppress(dynamo.ConditionFailed):
            dynamo.put(entry.to_item(), condition="attribute_not_exists(pk)")
        listed += 1
    return listed

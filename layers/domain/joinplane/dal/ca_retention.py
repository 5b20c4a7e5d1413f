"""What the retention job reads and writes beside the CA records: retired CAs whose certificates
have all expired (found, then dropped from their pool's bundle), and KMS keys no CA will use.

Apart from joinplane.dal.authorities because nothing that issues or rotates reads them: the job
(joinplane.expiry) is their reader, and a function's only write here is recording a key it
abandoned.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from joinplane import clock
from joinplane.dal import dynamo
from joinplane.dal.authorities import (
    RETIRED_PARTITION,
    CertificateAuthorityRecord,
    Contended,
    PointerRecord,
    ca_key,
    pointer_key,
)
from joinplane.dal.dynamo import Item


class DuePage(NamedTuple):
    authorities: list[CertificateAuthorityRecord]
    next: Item | None


def retired_due(now: datetime, *, limit: int = 100, start: Item | None = None) -> DuePage:
    """Retired CAs whose bundleUntil has passed (gsi2: eventually consistent; `expire` checks)."""
    page = dynamo.query(
        pk=RETIRED_PARTITION,
        index="gsi2",
        sk_below=f"{clock.seconds(now) + 1:012d}",
        limit=limit,
        start_after=start,
    )
    # The index projects no CA's fields (template.yaml): each due CA is read whole, a few a year.
    found = (dynamo.get(entry["pk"], entry["sk"]) for entry in page.items)
    return DuePage([CertificateAuthorityRecord.from_item(item) for item in found if item], page.last_key)


def expire(pointer: PointerRecord, ca: CertificateAuthorityRecord, at: datetime) -> None:
    """A retired CA whose certificates have all expired leaves the bundle: retired -> expired and the
    pointer's bundle without it, at the version read. Contended when either changed meanwhile."""
    try:
        dynamo.transact(
            [
                dynamo.Write(
                    "Update",
                    *ca_key(ca.ca_id),
                    update="SET #state = :expired, expiredAt = :at REMOVE gsi2pk, gsi2sk",
                    condition="#state = :retired",
                    names={"#state": "state"},
                    values={":expired": "expired", ":retired": "retired", ":at": clock.rfc3339(at)},
                    name="ca",
                ),
                dynamo.Write(
                    "Update",
                    *pointer_key(pointer.tenant_id, pointer.pool_id),
                    update="SET bundle = :bundle, version = :next",
                    condition="version = :version",
                    values={
                        ":bundle": [ca_id for ca_id in pointer.bundle if ca_id != ca.ca_id],
                        ":next": pointer.version + 1,
                        ":version": pointer.version,
                    },
                    name="pointer",
                ),
            ],
            conflict_retries=0,
        )
    except dynamo.TransactionCanceled:
        raise Contended() from None


# --- Keys no CA uses, for the retention job to delete ---------------------------------------------
#
# `ABANDONEDKEY#<keyId>` / `KEY`: keyId, abandonedAt (epoch seconds); gsi2
# `ABANDONEDKEYS` / `<abandonedAt>#<keyId>`. A function that made a KMS key no CA will use (a lost
# first-CA race, a failed rotation, a CSR replaced by a newer one) records it here rather than
# deleting it: kms:ScheduleKeyDeletion belongs to the retention job alone, never to a function
# reachable without an API key. The record is only a request: the job deletes a key only if its
# tags say it is this stack's and names a CA that is absent or abandoned (docs/pki.md), so a forged
# record can delete no key in use. Not a stream prefix (no security event): the job logs each deletion.
ABANDONED_KEY_PREFIX = "ABANDONEDKEY#"
ABANDONED_PARTITION = "ABANDONEDKEYS"


def abandoned_key_key(key_id: str) -> tuple[str, str]:
    return f"{ABANDONED_KEY_PREFIX}{key_id}", "KEY"


def abandon_key(key_id: str, *, at: datetime) -> None:
    """Record a key no CA will use (idempotent: a second record of one key replaces the first)."""
    pk, sk = abandoned_key_key(key_id)
    at_epoch = clock.seconds(at)
    dynamo.put(
        {
            "pk": pk,
            "sk": sk,
            "keyId": key_id,
            "abandonedAt": at_epoch,
            "gsi2pk": ABANDONED_PARTITION,
            "gsi2sk": f"{at_epoch:012d}#{key_id}",
        }
    )


class AbandonedPage(NamedTuple):
    key_ids: list[str]
    next: Item | None


def abandoned_keys(*, before: datetime, limit: int = 100, start: Item | None = None) -> AbandonedPage:
    """Keys recorded as abandoned at or before `before`, oldest first (gsi2: eventually consistent)."""
    page = dynamo.query(
        pk=ABANDONED_PARTITION,
        index="gsi2",
        sk_below=f"{clock.seconds(before) + 1:012d}",
        limit=limit,
        start_after=start,
    )
    return AbandonedPage([str(item["keyId"]) for item in page.items], page.last_key)


def forget_abandoned_key(key_id: str) -> None:
    dynamo.transact([dynamo.Write("Delete", *abandoned_key_key(key_id), name="abandoned")])

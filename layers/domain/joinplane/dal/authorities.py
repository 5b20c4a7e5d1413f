"""Pool certificate authorities in the table: one item per CA, and one pointer per pool naming the
active CA and the bundle.

- CA       `CA#<caId>` / `CA`: caId, tenantId, siteId, poolId, keyId (the KMS key's id),
           certificatePem, chainPem (the PEMs above it for an upstream CA; [] when self-signed),
           csrPem (an upstream CA's request), state (`pending` | `active` | `retired` | `expired`,
           or `abandoned`: a request replaced by a newer one before it was imported), createdAt,
           createdBy (the acting API key, or `join` for a pool's first CA made by a join),
           activatedAt, previousCaId
           (the CA it replaced), activatedBy (who imported an upstream CA), and once retired
           retiredAt and bundleUntil (epoch seconds: when it leaves the bundle), once expired
           expiredAt. gsi1 `TENANT#<t>#POOL#<p>#CAS` / `<createdAt>#<caId>` lists a pool's CAs. Its
           stream INSERT as `active` (or an upstream CA's pending -> active) is the
           `security.certificate-authority.created` (first) or `.rotated` event; its INSERT as
           `pending` is `.requested`.
- pointer  `CAPOOL#<tenantId>#<poolId>` / `ACTIVE`: activeCaId, bundle (the caIds of every CA
           whose certificates may still be valid, active first), version (bumped by every write).
           `CAPOOL#`, not `CA#`: a pool's ids could otherwise be read as a caId's.
- pending  `CAPOOL#<tenantId>#<poolId>` / `PENDING`: pendingCaId, the CA whose CSR awaits the
           organisation's signature (createCsr). At most one per pool: a new CSR abandons the
           previous one (pending -> abandoned, its key scheduled for deletion) in the same
           transaction; an import activates it and deletes the slot in one transaction.

Why the pointer holds the bundle: a join reads the pointer (consistent) and the bundle's items in
one BatchGetItem (consistent), so a rotation a moment ago is seen whole; a GSI query would be
eventually consistent and could miss the CA just retired.

Every change is one transaction conditioned on what was read: the first CA (CA item + pointer, both
absent), a rotation (new CA + old CA active -> retired + pointer at the version read), an import
(pending -> active + the slot deleted + the old CA retired and the pointer at the version read, or
the pointer created), an expiry (retired -> expired + pointer at the version read, dropping the CA
from the bundle).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from joinplane.dal import dynamo, items
from joinplane.dal.dynamo import Item

PREFIX = "CA#"
POINTER_PREFIX = "CAPOOL#"
# gsi2, sparse: the retired CAs by when they leave their bundle, for the retention job. One
# partition: a deployment retires a handful of CAs a month, not thousands a second.
RETIRED_PARTITION = "RETIREDCA"
# How long a CA key scheduled for deletion waits (KMS's minimum): one scheduled by mistake can still be
# cancelled for a week. Here, beside the CA records, for the issuing code and the retention job alike.
KEY_DELETION_DAYS = 7


class Contended(Exception):
    """The pool's CAs changed since they were read (or a transaction was in flight): read again."""


ATTRIBUTES = {
    "ca_id": "caId",
    "tenant_id": "tenantId",
    "site_id": "siteId",
    "pool_id": "poolId",
    "key_id": "keyId",
    "certificate_pem": "certificatePem",
    "chain_pem": "chainPem",
    "state": "state",
    "created_at": "createdAt",
    "created_by": "createdBy",
    "activated_at": "activatedAt",
    "previous_ca_id": "previousCaId",
    "retired_at": "retiredAt",
    "bundle_until": "bundleUntil",
    "expired_at": "expiredAt",
    "csr_pem": "csrPem",
    "activated_by": "activatedBy",
}


class CertificateAuthority(NamedTuple):
    ca_id: str
    tenant_id: str
    site_id: str
    pool_id: str
    key_id: str
    certificate_pem: str  # "" while pending (a CSR awaits the organisation's signature)
    state: str  # "pending" | "active" | "retired" | "expired" | "abandoned"
    created_at: str
    created_by: str
    chain_pem: tuple[str, ...] = ()
    activated_at: str | None = None
    previous_ca_id: str | None = None
    retired_at: str | None = None
    bundle_until: int | None = None
    expired_at: str | None = None
    csr_pem: str | None = None
    activated_by: str | None = None  # who imported an upstream CA (createdBy made its request)

    @classmethod
    def from_item(cls, item: Item) -> CertificateAuthority:
        stored = items.read(item, ATTRIBUTES, ("ca_id", "tenant_id", "pool_id", "key_id", "state"))
        return cls(
            **stored
            | {
                "site_id": stored["site_id"] or "",
                "certificate_pem": stored["certificate_pem"] or "",
                "chain_pem": tuple(stored["chain_pem"] or ()),
                "created_at": stored["created_at"] or "",
                "created_by": stored["created_by"] or "",
                "bundle_until": int(stored["bundle_until"]) if stored["bundle_until"] is not None else None,
            }
        )

    def to_item(self) -> Item:
        item = {
            "pk": PREFIX + self.ca_id,
            "sk": "CA",
            "gsi1pk": pool_partition(self.tenant_id, self.pool_id),
            "gsi1sk": f"{self.created_at}#{self.ca_id}",
            **items.write(ATTRIBUTES, self._asdict() | {"chain_pem": list(self.chain_pem)}),
        }
        return {name: value for name, value in item.items() if value is not None}


class Pointer(NamedTuple):
    tenant_id: str
    pool_id: str
    active_ca_id: str
    bundle: tuple[str, ...]  # caIds, the active one first
    version: int

    @classmethod
    def from_item(cls, item: Item) -> Pointer:
        return cls(
            tenant_id=item["tenantId"],
            pool_id=item["poolId"],
            active_ca_id=item["activeCaId"],
            bundle=tuple(item.get("bundle") or ()),
            version=int(item["version"]),
        )

    def to_item(self) -> Item:
        pk, sk = pointer_key(self.tenant_id, self.pool_id)
        return {
            "pk": pk,
            "sk": sk,
            "tenantId": self.tenant_id,
            "poolId": self.pool_id,
            "activeCaId": self.active_ca_id,
            "bundle": list(self.bundle),
            "version": self.version,
        }


class Authorities(NamedTuple):
    """A pool's active CA and its bundle as read together: `bundle` is active first."""

    pointer: Pointer
    active: CertificateAuthority
    bundle: tuple[CertificateAuthority, ...]


def pool_partition(tenant_id: str, pool_id: str) -> str:
    return f"TENANT#{tenant_id}#POOL#{pool_id}#CAS"


def ca_key(ca_id: str) -> tuple[str, str]:
    return PREFIX + ca_id, "CA"


def pointer_key(tenant_id: str, pool_id: str) -> tuple[str, str]:
    return f"{POINTER_PREFIX}{tenant_id}#{pool_id}", "ACTIVE"


def pending_key(tenant_id: str, pool_id: str) -> tuple[str, str]:
    return f"{POINTER_PREFIX}{tenant_id}#{pool_id}", "PENDING"


def get(ca_id: str) -> CertificateAuthority | None:
    item = dynamo.get(*ca_key(ca_id))
    return CertificateAuthority.from_item(item) if item else None


def read(tenant_id: str, pool_id: str) -> Authorities | None:
    """The pool's pointer, its active CA and the bundle's CAs (two consistent reads); None when the
    pool has no CA yet."""
    pointer = get_pointer(tenant_id, pool_id)
    if pointer is None:
        return None
    wanted = dict.fromkeys((pointer.active_ca_id, *pointer.bundle))
    found = dynamo.batch_get(ca_key(ca_id) for ca_id in wanted)
    cas = {
        ca_id: CertificateAuthority.from_item(found[ca_key(ca_id)])
        for ca_id in wanted
        if ca_key(ca_id) in found
    }
    active = cas.get(pointer.active_ca_id)
    if active is None:
        raise LookupError(f"the pool's pointer names CA {pointer.active_ca_id}, which is not stored")
    bundle = tuple(cas[ca_id] for ca_id in wanted if ca_id in cas)
    return Authorities(pointer, active, bundle)


def _due_key(bundle_until: int, ca_id: str) -> str:
    return f"{bundle_until:012d}#{ca_id}"


class DuePage(NamedTuple):
    authorities: list[CertificateAuthority]
    next: Item | None


def retired_due(now_epoch: int, *, limit: int = 100, start: Item | None = None) -> DuePage:
    """Retired CAs whose bundleUntil has passed (gsi2: eventually consistent; `expire` checks)."""
    page = dynamo.query(
        pk=RETIRED_PARTITION, index="gsi2", sk_below=f"{now_epoch + 1:012d}", limit=limit, start_after=start
    )
    return DuePage([CertificateAuthority.from_item(item) for item in page.items], page.last_key)


def get_pointer(tenant_id: str, pool_id: str) -> Pointer | None:
    item = dynamo.get(*pointer_key(tenant_id, pool_id))
    return Pointer.from_item(item) if item else None


def list_pool(tenant_id: str, pool_id: str) -> list[CertificateAuthority]:
    """Every CA the pool has had, oldest first (gsi1: eventually consistent)."""
    found: list[CertificateAuthority] = []
    start: Item | None = None
    while True:
        page = dynamo.query(pk=pool_partition(tenant_id, pool_id), index="gsi1", start_after=start)
        found.extend(CertificateAuthority.from_item(item) for item in page.items)
        if page.last_key is None:
            return found
        start = page.last_key


def create_first(ca: CertificateAuthority) -> None:
    """The pool's first CA and its pointer, both new; Contended when another caller's first CA won."""
    pointer = Pointer(ca.tenant_id, ca.pool_id, ca.ca_id, (ca.ca_id,), 1)
    try:
        dynamo.transact(
            [
                dynamo.Write("Put", item=ca.to_item(), condition="attribute_not_exists(pk)", name="ca"),
                dynamo.Write(
                    "Put", item=pointer.to_item(), condition="attribute_not_exists(pk)", name="pointer"
                ),
            ],
            conflict_retries=0,
        )
    except dynamo.TransactionCanceled:
        raise Contended() from None


def rotate(
    read_as: Authorities,
    new: CertificateAuthority,
    *,
    retired_at: str,
    bundle_until: int,
    keep: Sequence[str],
) -> None:
    """One transaction: `new` becomes the active CA (put), the CA the pointer named is retired
    (active -> retired, with when it leaves the bundle) and the pointer names `new`, with the
    bundle `new` + the retired CA + `keep` (CAs still in the bundle), conditioned on the version
    read: two concurrent rotations cannot both win, so a pool never has two active CAs. The pool
    must still be active (PoolNotActive); Contended otherwise."""
    writes = [
        dynamo.Write("Put", item=new.to_item(), condition="attribute_not_exists(pk)", name="ca"),
        *_replacing(read_as, new.ca_id, retired_at=retired_at, bundle_until=bundle_until, keep=keep),
        _pool_is_active(new.tenant_id, new.pool_id),
    ]
    _commit(writes)


def _replacing(
    read_as: Authorities, new_ca_id: str, *, retired_at: str, bundle_until: int, keep: Sequence[str]
) -> list[dynamo.Write]:
    """The writes that retire the active CA read and point the pool at `new_ca_id`, at the version read."""
    old = read_as.active
    pointer = read_as.pointer
    bundle = list(dict.fromkeys((new_ca_id, old.ca_id, *keep)))
    return [
        dynamo.Write(
            "Update",
            *ca_key(old.ca_id),
            update="SET #state = :retired, retiredAt = :at, bundleUntil = :until, "
            "gsi2pk = :due, gsi2sk = :when",
            condition="#state = :active",
            names={"#state": "state"},
            values={
                ":retired": "retired",
                ":active": "active",
                ":at": retired_at,
                ":until": bundle_until,
                ":due": RETIRED_PARTITION,
                ":when": _due_key(bundle_until, old.ca_id),
            },
            name="previous",
        ),
        dynamo.Write(
            "Update",
            *pointer_key(pointer.tenant_id, pointer.pool_id),
            update="SET activeCaId = :new, bundle = :bundle, version = :next",
            condition="activeCaId = :old AND version = :version",
            values={
                ":new": new_ca_id,
                ":bundle": bundle,
                ":next": pointer.version + 1,
                ":old": old.ca_id,
                ":version": pointer.version,
            },
            name="pointer",
        ),
    ]


def _pool_is_active(tenant_id: str, pool_id: str) -> dynamo.Write:
    from joinplane.dal.pools import pool_key

    return dynamo.Write(
        "ConditionCheck",
        *pool_key(tenant_id, pool_id),
        condition="#state = :active",
        names={"#state": "state"},
        values={":active": "active"},
        name="pool",
    )


def _commit(writes: list[dynamo.Write]) -> None:
    try:
        dynamo.transact(writes, conflict_retries=0)
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.lost("pool"):
            raise PoolNotActive() from None
        if cancelled.lost("pending"):
            raise PendingChanged() from None
        raise Contended() from None


# --- An upstream CA: a pending request, then its import ----------------------------------------------


class PendingChanged(Exception):
    """The pool's pending request is not the one read: another request replaced it, or it was imported."""


def get_pending(tenant_id: str, pool_id: str) -> CertificateAuthority | None:
    """The CA whose request awaits its signed certificate (two consistent reads), or None."""
    slot = dynamo.get(*pending_key(tenant_id, pool_id))
    if not slot:
        return None
    found = get(slot["pendingCaId"])
    return found if found is not None and found.state == "pending" else None


def put_pending(ca: CertificateAuthority, *, replacing: CertificateAuthority | None) -> None:
    """One transaction: `ca` (state pending) becomes the pool's pending request; the request it
    replaces, if any, is abandoned (still pending, and still the slot's: PendingChanged otherwise).
    The pool must be active (PoolNotActive)."""
    pk, sk = pending_key(ca.tenant_id, ca.pool_id)
    slot = {"pk": pk, "sk": sk, "tenantId": ca.tenant_id, "poolId": ca.pool_id, "pendingCaId": ca.ca_id}
    writes = [dynamo.Write("Put", item=ca.to_item(), condition="attribute_not_exists(pk)", name="ca")]
    if replacing is None:
        writes.append(dynamo.Write("Put", item=slot, condition="attribute_not_exists(pk)", name="pending"))
    else:
        writes += [
            dynamo.Write(
                "Put",
                item=slot,
                condition="pendingCaId = :replaced",
                values={":replaced": replacing.ca_id},
                name="pending",
            ),
            dynamo.Write(
                "Update",
                *ca_key(replacing.ca_id),
                update="SET #state = :abandoned",
                condition="#state = :pending",
                names={"#state": "state"},
                values={":abandoned": "abandoned", ":pending": "pending"},
                name="pending",
            ),
        ]
    writes.append(_pool_is_active(ca.tenant_id, ca.pool_id))
    _commit(writes)


def activate_pending(
    read_as: Authorities | None,
    pending: CertificateAuthority,
    *,
    certificate_pem: str,
    chain_pem: Sequence[str],
    activated_at: str,
    activated_by: str,
    retired_at: str,
    bundle_until: int,
    keep: Sequence[str],
) -> None:
    """One transaction: the pending CA becomes the pool's active CA with its signed certificate and
    chain (pending -> active, the slot deleted, both as read: PendingChanged otherwise); the CA
    `read_as` named is retired and the pointer moved at the version read, or, for a pool that had no
    CA (`read_as` None), the pointer is created (Contended when a first CA won meanwhile)."""
    values = {
        ":active": "active",
        ":pending": "pending",
        ":certificate": certificate_pem,
        ":chain": list(chain_pem),
        ":at": activated_at,
        ":by": activated_by,
    }
    update = (
        "SET #state = :active, certificatePem = :certificate, chainPem = :chain, activatedAt = :at, "
        "activatedBy = :by"
    )
    if read_as is not None:
        update += ", previousCaId = :previous"
        values[":previous"] = read_as.active.ca_id
    writes = [
        dynamo.Write(
            "Update",
            *ca_key(pending.ca_id),
            update=update,
            condition="#state = :pending",
            names={"#state": "state"},
            values=values,
            name="pending",
        ),
        dynamo.Write(
            "Delete",
            *pending_key(pending.tenant_id, pending.pool_id),
            condition="pendingCaId = :ca",
            values={":ca": pending.ca_id},
            name="pending",
        ),
    ]
    if read_as is None:
        pointer = Pointer(pending.tenant_id, pending.pool_id, pending.ca_id, (pending.ca_id,), 1)
        writes.append(
            dynamo.Write("Put", item=pointer.to_item(), condition="attribute_not_exists(pk)", name="pointer")
        )
    else:
        writes += _replacing(
            read_as, pending.ca_id, retired_at=retired_at, bundle_until=bundle_until, keep=keep
        )
    writes.append(_pool_is_active(pending.tenant_id, pending.pool_id))
    _commit(writes)


class PoolNotActive(Exception):
    """The pool was archived (or removed): its CA is not rotated."""


def expire(pointer: Pointer, ca: CertificateAuthority, at: str) -> None:
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
                    values={":expired": "expired", ":retired": "retired", ":at": at},
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


def abandon_key(key_id: str, *, at_epoch: int) -> None:
    """Record a key no CA will use (idempotent: a second record of one key replaces the first)."""
    pk, sk = abandoned_key_key(key_id)
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


def abandoned_keys(*, before_epoch: int, limit: int = 100, start: Item | None = None) -> AbandonedPage:
    """Keys recorded as abandoned at or before `before_epoch`, oldest first (gsi2: eventually consistent)."""
    page = dynamo.query(
        pk=ABANDONED_PARTITION,
        index="gsi2",
        sk_below=f"{before_epoch + 1:012d}",
        limit=limit,
        start_after=start,
    )
    return AbandonedPage([str(item["keyId"]) for item in page.items], page.last_key)


def forget_abandoned_key(key_id: str) -> None:
    dynamo.transact([dynamo.Write("Delete", *abandoned_key_key(key_id), name="abandoned")])

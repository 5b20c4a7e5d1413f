"""Pool certificate authorities in the table: one item per CA, and one pointer per pool naming the
active CA and the bundle.

- CA       `CA#<caId>` / `CA`: caId, tenantId, siteId, poolId, keyId (the KMS key's id),
           certificatePem, chainPem (the PEMs above it for an upstream CA; [] when self-signed),
           csrPem (an upstream CA's request), state (`pending` | `prepared` | `active` | `retired` |
           `expired`, or `abandoned`: a request replaced by a newer one before it was imported;
           `prepared`: the pool's next CA, in the bundle, signing nothing until activatesAt (epoch
           seconds) or an explicit activation), createdAt,
           createdBy (the acting API key, or `join` for a pool's first CA made by a join),
           activatedAt, previousCaId
           (the CA it replaced), activatedBy (who imported an upstream CA into a pool without a CA, or
           activated a prepared CA: an API key or `schedule`), importedBy and importedAt (who
           imported an upstream CA that was then prepared, and when), activatesAt (a prepared CA),
           and once retired retiredAt and bundleUntil (epoch seconds: when it leaves the bundle), once expired
           expiredAt. gsi1 `TENANT#<t>#POOL#<p>#CAS` / `<createdAt>#<caId>` lists a pool's CAs. Its
           stream INSERT as `active` (or an upstream CA's pending -> active) is the
           `security.certificate-authority.created` (first) or `.rotated` event (an emergency
           rotation); its INSERT as `pending` is `.requested`; its INSERT as `prepared` (or an
           upstream CA's pending -> prepared) is `.prepared`, and prepared -> active `.activated`.
- pointer  `CAPOOL#<tenantId>#<poolId>` / `ACTIVE`: activeCaId, nextCaId (the prepared CA, if
           any), bundle (the caIds of every CA a verifier must trust: active first, then the next,
           then the retired ones), bundleId (the pool's first CA: its public bundle's stable name),
           version (bumped by every write).
           `CAPOOL#`, not `CA#`: a pool's ids could otherwise be read as a caId's.
- pending  `CAPOOL#<tenantId>#<poolId>` / `PENDING`: pendingCaId, the CA whose CSR awaits the
           organisation's signature (createCsr). At most one per pool: a new CSR abandons the
           previous one (pending -> abandoned, its key scheduled for deletion) in the same
           transaction; an import prepares it (or, for a pool without a CA, activates it) and
           deletes the slot in one transaction.

Why the pointer holds the bundle: a join reads the pointer (consistent) and the bundle's items in
one BatchGetItem (consistent), so a rotation a moment ago is seen whole; a GSI query would be
eventually consistent and could miss the CA just retired.

Every change is one transaction conditioned on what was read: the first CA (CA item + pointer, both
absent), a preparation (new CA as prepared + the pointer naming it next, at the version read, with
no next CA), an activation (prepared -> active + old CA active -> retired + the pointer without a
next CA, at the version read and still naming that next CA), an emergency rotation (new CA + old CA
active -> retired + pointer at the version read, with no next CA), an import
(pending -> prepared + the slot deleted + the pointer naming it next at the version read, with no
next CA; or pending -> active + the pointer created), an expiry (retired -> expired + pointer at
the version read, dropping the CA from the bundle: joinplane.dal.ca_retention, with the keys no CA
uses).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from joinplane import clock
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
    "activates_at": "activatesAt",
    "imported_by": "importedBy",
    "imported_at": "importedAt",
}


class CertificateAuthorityRecord(NamedTuple):
    ca_id: str
    tenant_id: str
    site_id: str
    pool_id: str
    key_id: str
    certificate_pem: str  # "" while pending (a CSR awaits the organisation's signature)
    state: str  # "pending" | "prepared" | "active" | "retired" | "expired" | "abandoned"
    created_at: str
    created_by: str
    chain_pem: tuple[str, ...] = ()
    activated_at: str | None = None
    previous_ca_id: str | None = None
    retired_at: str | None = None
    bundle_until: int | None = None
    expired_at: str | None = None
    csr_pem: str | None = None
    # Who imported an upstream CA (createdBy made its request), or activated a prepared CA: an API
    # key, or `schedule` when its propagation period ended.
    activated_by: str | None = None
    activates_at: int | None = None  # a prepared CA: when it signs at the latest (epoch seconds)
    imported_by: str | None = None  # who imported an upstream CA's certificate (then prepared), and when
    imported_at: str | None = None

    @classmethod
    def from_item(cls, item: Item) -> CertificateAuthorityRecord:
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
                "activates_at": int(stored["activates_at"]) if stored["activates_at"] is not None else None,
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


class PointerRecord(NamedTuple):
    tenant_id: str
    pool_id: str
    active_ca_id: str
    bundle: tuple[str, ...]  # caIds, the active one first
    version: int
    next_ca_id: str | None = None
    # The pool's first CA: its id names the pool's public bundle for good. A pointer written before
    # it was recorded gets it from its active CA at its next write (if_not_exists).
    bundle_id: str = ""

    @property
    def public_bundle_id(self) -> str:
        """The caId that names the pool's public bundle (a pointer made just now: its first CA)."""
        return self.bundle_id or self.active_ca_id

    @classmethod
    def from_item(cls, item: Item) -> PointerRecord:
        return cls(
            tenant_id=item["tenantId"],
            pool_id=item["poolId"],
            active_ca_id=item["activeCaId"],
            bundle=tuple(item.get("bundle") or ()),
            version=int(item["version"]),
            next_ca_id=item.get("nextCaId"),
            bundle_id=item.get("bundleId") or item["activeCaId"],
        )

    def to_item(self) -> Item:
        pk, sk = pointer_key(self.tenant_id, self.pool_id)
        item = {
            "pk": pk,
            "sk": sk,
            "tenantId": self.tenant_id,
            "poolId": self.pool_id,
            "activeCaId": self.active_ca_id,
            "bundle": list(self.bundle),
            "version": self.version,
            "bundleId": self.public_bundle_id,
        }
        if self.next_ca_id is not None:
            item["nextCaId"] = self.next_ca_id
        return item


class Authorities(NamedTuple):
    """A pool's active CA, its next (prepared) CA and its bundle as read together: `bundle` is
    active first."""

    pointer: PointerRecord
    active: CertificateAuthorityRecord
    bundle: tuple[CertificateAuthorityRecord, ...]
    next: CertificateAuthorityRecord | None = None


def pool_partition(tenant_id: str, pool_id: str) -> str:
    return f"TENANT#{tenant_id}#POOL#{pool_id}#CAS"


def ca_key(ca_id: str) -> tuple[str, str]:
    return PREFIX + ca_id, "CA"


def pointer_key(tenant_id: str, pool_id: str) -> tuple[str, str]:
    return f"{POINTER_PREFIX}{tenant_id}#{pool_id}", "ACTIVE"


def pending_key(tenant_id: str, pool_id: str) -> tuple[str, str]:
    return f"{POINTER_PREFIX}{tenant_id}#{pool_id}", "PENDING"


def get(ca_id: str) -> CertificateAuthorityRecord | None:
    item = dynamo.get(*ca_key(ca_id))
    return CertificateAuthorityRecord.from_item(item) if item else None


def read(tenant_id: str, pool_id: str) -> Authorities | None:
    """The pool's pointer, its active CA and the bundle's CAs (two consistent reads); None when the
    pool has no CA yet."""
    pointer = get_pointer(tenant_id, pool_id)
    if pointer is None:
        return None
    wanted = dict.fromkeys(
        (pointer.active_ca_id, *((pointer.next_ca_id,) if pointer.next_ca_id else ()), *pointer.bundle)
    )
    found = dynamo.batch_get(ca_key(ca_id) for ca_id in wanted)
    cas = {
        ca_id: CertificateAuthorityRecord.from_item(found[ca_key(ca_id)])
        for ca_id in wanted
        if ca_key(ca_id) in found
    }
    active = cas.get(pointer.active_ca_id)
    if active is None:
        raise LookupError(f"the pool's pointer names CA {pointer.active_ca_id}, which is not stored")
    bundle = tuple(cas[ca_id] for ca_id in wanted if ca_id in cas)
    following = cas.get(pointer.next_ca_id) if pointer.next_ca_id else None
    if pointer.next_ca_id and following is None:
        raise LookupError(f"the pool's pointer names CA {pointer.next_ca_id} next, which is not stored")
    return Authorities(pointer, active, bundle, following)


def _due_key(bundle_until: int, ca_id: str) -> str:
    return f"{bundle_until:012d}#{ca_id}"


def get_pointer(tenant_id: str, pool_id: str) -> PointerRecord | None:
    item = dynamo.get(*pointer_key(tenant_id, pool_id))
    return PointerRecord.from_item(item) if item else None


def list_pool(tenant_id: str, pool_id: str) -> list[CertificateAuthorityRecord]:
    """Every CA the pool has had, oldest first (gsi1: eventually consistent)."""
    found: list[CertificateAuthorityRecord] = []
    start: Item | None = None
    while True:
        page = dynamo.query(pk=pool_partition(tenant_id, pool_id), index="gsi1", start_after=start)
        found.extend(CertificateAuthorityRecord.from_item(item) for item in page.items)
        if page.last_key is None:
            return found
        start = page.last_key


def create_first(ca: CertificateAuthorityRecord) -> None:
    """The pool's first CA and its pointer, both new; Contended when another caller's first CA won."""
    pointer = PointerRecord(ca.tenant_id, ca.pool_id, ca.ca_id, (ca.ca_id,), 1)
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
    new: CertificateAuthorityRecord,
    *,
    now: datetime,
    bundle_until: datetime,
    keep: Sequence[str],
) -> None:
    """An emergency rotation, one transaction: `new` becomes the active CA (put), the CA the pointer
    named is retired (active -> retired, with when it leaves the bundle) and the pointer names `new`,
    with the bundle `new` + the retired CA + `keep` (CAs still in the bundle), conditioned on the
    version read, which had no next CA: two concurrent rotations cannot both win, so a pool never
    has two active CAs. The pool must still be active (PoolNotActive); Contended otherwise."""
    writes = [
        dynamo.Write("Put", item=new.to_item(), condition="attribute_not_exists(pk)", name="ca"),
        _retiring(read_as.active, now=now, bundle_until=bundle_until),
        _repointing(read_as, active=new.ca_id, bundle=(new.ca_id, read_as.active.ca_id, *keep)),
        _pool_is_active(new.tenant_id, new.pool_id),
    ]
    _commit(writes)


def prepare(read_as: Authorities, new: CertificateAuthorityRecord, *, keep: Sequence[str]) -> None:
    """One transaction: `new` (state prepared, with its activatesAt) becomes the pool's next CA: put,
    and the pointer names it next with the bundle active + `new` + `keep`, conditioned on the version
    read, which had no next CA. Nothing signs with it yet, and the active CA is untouched. Of
    concurrent preparations one wins; the others are Contended (PoolNotActive for an archived pool)."""
    active = read_as.active.ca_id
    writes = [
        dynamo.Write("Put", item=new.to_item(), condition="attribute_not_exists(pk)", name="ca"),
        _repointing(read_as, active=active, bundle=(active, new.ca_id, *keep), next_ca_id=new.ca_id),
        _pool_is_active(new.tenant_id, new.pool_id),
    ]
    _commit(writes)


def activate(
    read_as: Authorities,
    *,
    now: datetime,
    activated_by: str,
    bundle_until: datetime,
    keep: Sequence[str],
) -> None:
    """One transaction: the pool's next CA as read becomes its active CA (prepared -> active, with who
    activated it), the CA that was active is retired (with when it leaves the bundle), and the pointer
    names the new CA active and none next, with the bundle new + retired + `keep`, conditioned on
    the version read and on still naming that next CA. Of concurrent activations (the end of the
    propagation period seen by many containers at once, an explicit call) exactly one commits; the
    others are Contended and read the outcome."""
    following = read_as.next
    if following is None:
        raise ValueError("the pool has no prepared CA to activate")
    old = read_as.active
    writes = [
        dynamo.Write(
            "Update",
            *ca_key(following.ca_id),
            update="SET #state = :active, activatedAt = :at, activatedBy = :by, previousCaId = :previous",
            condition="#state = :prepared",
            names={"#state": "state"},
            values={
                ":active": "active",
                ":prepared": "prepared",
                ":at": clock.rfc3339(now),
                ":by": activated_by,
                ":previous": old.ca_id,
            },
            name="next",
        ),
        _retiring(old, now=now, bundle_until=bundle_until),
        _repointing(read_as, active=following.ca_id, bundle=(following.ca_id, old.ca_id, *keep)),
    ]
    _commit(writes)


def _retiring(old: CertificateAuthorityRecord, *, now: datetime, bundle_until: datetime) -> dynamo.Write:
    """The active CA read becomes retired, leaving the bundle at `bundle_until`."""
    until = clock.seconds(bundle_until)
    return dynamo.Write(
        "Update",
        *ca_key(old.ca_id),
        update="SET #state = :retired, retiredAt = :at, bundleUntil = :until, gsi2pk = :due, gsi2sk = :when",
        condition="#state = :active",
        names={"#state": "state"},
        values={
            ":retired": "retired",
            ":active": "active",
            ":at": clock.rfc3339(now),
            ":until": until,
            ":due": RETIRED_PARTITION,
            ":when": _due_key(until, old.ca_id),
        },
        name="previous",
    )


def _repointing(
    read_as: Authorities, *, active: str, bundle: Sequence[str], next_ca_id: str | None = None
) -> dynamo.Write:
    """The pointer as read (its version, active CA and next CA) moved to `active`, `bundle` and
    `next_ca_id` (None: no next CA)."""
    pointer = read_as.pointer
    values: dict[str, object] = {
        ":new": active,
        ":bundle": list(dict.fromkeys(bundle)),
        ":next": pointer.version + 1,
        ":old": pointer.active_ca_id,
        ":version": pointer.version,
        ":first": pointer.public_bundle_id,
    }
    update = (
        "SET activeCaId = :new, bundle = :bundle, version = :next, bundleId = if_not_exists(bundleId, :first)"
    )
    if next_ca_id is not None:
        update += ", nextCaId = :following"
        values[":following"] = next_ca_id
    else:
        update += " REMOVE nextCaId"
    condition = "activeCaId = :old AND version = :version"
    if pointer.next_ca_id is None:
        condition += " AND attribute_not_exists(nextCaId)"
    else:
        condition += " AND nextCaId = :was"
        values[":was"] = pointer.next_ca_id
    return dynamo.Write(
        "Update",
        *pointer_key(pointer.tenant_id, pointer.pool_id),
        update=update,
        condition=condition,
        values=values,
        name="pointer",
    )


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


def get_pending(tenant_id: str, pool_id: str) -> CertificateAuthorityRecord | None:
    """The CA whose request awaits its signed certificate (two consistent reads), or None."""
    slot = dynamo.get(*pending_key(tenant_id, pool_id))
    if not slot:
        return None
    found = get(slot["pendingCaId"])
    return found if found is not None and found.state == "pending" else None


def put_pending(ca: CertificateAuthorityRecord, *, replacing: CertificateAuthorityRecord | None) -> None:
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
    pending: CertificateAuthorityRecord,
    *,
    certificate_pem: str,
    chain_pem: Sequence[str],
    now: datetime,
    activated_by: str,
    activates_at: datetime,
    keep: Sequence[str],
) -> None:
    """One transaction: the pending CA receives its signed certificate and chain (pending ->, the slot
    deleted, both as read: PendingChanged otherwise). For a pool that had no CA (`read_as` None) it
    becomes the active CA at once and the pointer is created (Contended when a first CA won
    meanwhile): there is no verifier to break. Otherwise it becomes the pool's next CA, prepared
    until `activates_at`, as a rotation's is: the pointer names it next with the bundle active + it +
    `keep`, at the version read, which had no next CA (Contended otherwise)."""
    values: dict[str, object] = {
        ":pending": "pending",
        ":certificate": certificate_pem,
        ":chain": list(chain_pem),
        ":at": clock.rfc3339(now),
        ":by": activated_by,
    }
    if read_as is None:
        update = (
            "SET #state = :state, certificatePem = :certificate, chainPem = :chain, activatedAt = :at, "
            "activatedBy = :by"
        )
        values[":state"] = "active"
    else:
        update = (
            "SET #state = :state, certificatePem = :certificate, chainPem = :chain, activatesAt = :when, "
            "importedBy = :by, importedAt = :at, previousCaId = :previous"
        )
        values |= {
            ":state": "prepared",
            ":when": clock.seconds(activates_at),
            ":previous": read_as.active.ca_id,
        }
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
        pointer = PointerRecord(pending.tenant_id, pending.pool_id, pending.ca_id, (pending.ca_id,), 1)
        writes.append(
            dynamo.Write("Put", item=pointer.to_item(), condition="attribute_not_exists(pk)", name="pointer")
        )
    else:
        active = read_as.active.ca_id
        writes.append(
            _repointing(
                read_as, active=active, bundle=(active, pending.ca_id, *keep), next_ca_id=pending.ca_id
            )
        )
    writes.append(_pool_is_active(pending.tenant_id, pending.pool_id))
    _commit(writes)


class PoolNotActive(Exception):
    """The pool was archived (or removed): its CA is not rotated."""

"""Pool certificate authorities in the table: one item per CA, and one pointer per pool naming the
active CA and the bundle.

- CA       `CA#<caId>` / `CA`: caId, tenantId, siteId, poolId, keyId (the KMS key's id),
           certificatePem, chainPem (the PEMs above it for an upstream CA; [] when self-signed),
           state (`pending` | `active` | `retired` | `expired`), createdAt, createdBy (the acting
           API key, or `join` for a pool's first CA made by a join), activatedAt, previousCaId
           (the CA it replaced), and once retired retiredAt and bundleUntil (epoch seconds: when
           it leaves the bundle), once expired expiredAt. gsi1 `TENANT#<t>#POOL#<p>#CAS` /
           `<createdAt>#<caId>` lists a pool's CAs. Its stream INSERT as `active` is the
           `security.certificate-authority.created` (first) or `.rotated` event.
- pointer  `CAPOOL#<tenantId>#<poolId>` / `ACTIVE`: activeCaId, bundle (the caIds of every CA
           whose certificates may still be valid, active first), version (bumped by every write).
           `CAPOOL#`, not `CA#`: a pool's ids could otherwise be read as a caId's.

Why the pointer holds the bundle: a join reads the pointer (consistent) and the bundle's items in
one BatchGetItem (consistent), so a rotation a moment ago is seen whole; a GSI query would be
eventually consistent and could miss the CA just retired.

Every change is one transaction conditioned on what was read: the first CA (CA item + pointer, both
absent), a rotation (new CA + old CA active -> retired + pointer at the version read), an expiry
(retired -> expired + pointer at the version read, dropping the CA from the bundle).
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
}


class CertificateAuthority(NamedTuple):
    ca_id: str
    tenant_id: str
    site_id: str
    pool_id: str
    key_id: str
    certificate_pem: str  # "" while pending (item 3: a CSR awaits its signed certificate)
    state: str  # "pending" | "active" | "retired" | "expired"
    created_at: str
    created_by: str
    chain_pem: tuple[str, ...] = ()
    activated_at: str | None = None
    previous_ca_id: str | None = None
    retired_at: str | None = None
    bundle_until: int | None = None
    expired_at: str | None = None

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
    from joinplane.dal.pools import pool_key

    old = read_as.active
    pointer = read_as.pointer
    bundle = list(dict.fromkeys((new.ca_id, old.ca_id, *keep)))
    writes = [
        dynamo.Write("Put", item=new.to_item(), condition="attribute_not_exists(pk)", name="ca"),
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
                ":new": new.ca_id,
                ":bundle": bundle,
                ":next": pointer.version + 1,
                ":old": old.ca_id,
                ":version": pointer.version,
            },
            name="pointer",
        ),
    ]
    writes.append(
        dynamo.Write(
            "ConditionCheck",
            *pool_key(pointer.tenant_id, pointer.pool_id),
            condition="#state = :active",
            names={"#state": "state"},
            values={":active": "active"},
            name="pool",
        )
    )
    try:
        dynamo.transact(writes, conflict_retries=0)
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.lost("pool"):
            raise PoolNotActive() from None
        raise Contended() from None


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

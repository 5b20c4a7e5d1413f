"""Machines, join identities and hardware claims in the table.

- Machine: `MACHINE#<machineId>` / `MACHINE`, listed per pool through gsi1
  (`MACHINES#<tenant>#<pool>`, sorted by machineId).
- Identity: `JOINID#<tenant>#<identity>` / `JOINID`: the join identity (SHA-256 of the CSR's public
  key, or `fp-` + SHA-256 of the fingerprint without a CSR) → its latest request and its machine.
  A retry or re-join finds its history here; `version` makes every change to it a compare-and-set,
  `proofAt` is the newest accepted proof of possession (joinplane.proof).
- HardwareClaim: `HWCLAIM#<tenant>#<kind>#<value>` / `HWCLAIM`: a serial number or system UUID held
  by an active machine, so a cloned image (same serial, new key) is noticed in the same transaction
  that admits.

The transactions that create and change these during joins live in `joinplane.dal.joins`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from joinplane import clock
from joinplane.dal import dynamo, items, revocations
from joinplane.dal.dynamo import Item

# A machine's facts are joinplane.dal.machine_facts' records, re-exported here for their readers.
from joinplane.dal.machine_facts import AwsFactsRecord as AwsFactsRecord
from joinplane.dal.machine_facts import HardwareFactsRecord as HardwareFactsRecord
from joinplane.dal.machine_facts import MachineFactsRecord as MachineFactsRecord
from joinplane.dal.machine_facts import PreflightCheckRecord as PreflightCheckRecord
from joinplane.dal.machine_facts import TpmFactsRecord as TpmFactsRecord

# The attribute of the identity record that holds the newest accepted proof's `t` (ms).
PROOF_MARK = "proofAt"

Claim = tuple[str, str]  # (kind, value): ("serial", "ABC123") or ("uuid", "…")


def machine_key(machine_id: str) -> tuple[str, str]:
    return f"MACHINE#{machine_id}", "MACHINE"


def identity_key(tenant_id: str, identity: str) -> tuple[str, str]:
    return f"JOINID#{tenant_id}#{identity}", "JOINID"


def claim_key(tenant_id: str, kind: str, value: str) -> tuple[str, str]:
    return f"HWCLAIM#{tenant_id}#{kind}#{value}", "HWCLAIM"


def pool_partition(tenant_id: str, pool_id: str) -> str:
    return f"MACHINES#{tenant_id}#{pool_id}"


# Each Machine field's stored attribute (dal.items); dal.stream's MachineImage reads the same.
ATTRIBUTES = {
    "machine_id": "machineId",
    "tenant_id": "tenantId",
    "site_id": "siteId",
    "pool_id": "poolId",
    "identity": "identity",
    "token_id": "tokenId",
    "request_id": "requestId",
    "state": "state",
    "machine_token_sha256": "machineTokenSha256",
    "token_generation": "tokenGeneration",
    "schedulable": "schedulable",
    "facts": "facts",
    "worker_image_baseline": "workerImageBaseline",
    "claims": "claims",
    "certificate_serial": "certificateSerial",
    "certificate_expires_at": "certificateExpiresAt",
    "certificate_ca_id": "certificateCaId",
    "earlier_certificates": "earlierCertificates",
    "joined_at": "joinedAt",
    "rejoined_at": "rejoinedAt",
    "last_renewed_at": "lastRenewedAt",
    "revoked_at": "revokedAt",
    "revoked_by": "revokedBy",
    "revoke_reason": "revokeReason",
    "policy_rule": "policyRule",
}
REQUIRED = (
    "machine_id",
    "tenant_id",
    "site_id",
    "pool_id",
    "identity",
    "state",
    "machine_token_sha256",
    "joined_at",
)


# A machine renews at about two thirds of its certificate's lifetime, so it holds one or two
# unexpired certificates at a time. A machine that asks for more than this many within one lifetime
# is refused until the oldest expires: every certificate that still verifies stays listable on the
# CRL, and a revocation stays one transaction.
MAX_VALID_CERTIFICATES = 16


class IssuedCertificateRecord(NamedTuple):
    """A machine certificate as its CRL needs it: serial (lower-case hex), issuing CA, expiry."""

    serial: str
    ca_id: str
    expires_at: str  # RFC 3339

    @classmethod
    def from_item(cls, item: Item) -> IssuedCertificateRecord:
        return cls(str(item["serial"]), str(item["caId"]), str(item["expiresAt"]))

    def to_item(self) -> Item:
        return {"serial": self.serial, "caId": self.ca_id, "expiresAt": self.expires_at}

    def expires_epoch(self) -> int:
        from datetime import datetime

        return int(datetime.fromisoformat(self.expires_at).timestamp())


def public_key_sha256(identity: str | None) -> str | None:
    """The machine's key as its identity names it (the hex SHA-256 of the key's
    SubjectPublicKeyInfo), or None when the identity is no key's (a fingerprint's `fp-...`)."""
    if identity is None or len(identity) != 64 or identity.strip("0123456789abcdef"):
        return None
    return identity


def certificate_as_read(machine: MachineRecord) -> tuple[str, dict[str, Any]]:
    """A condition (and its values) that the machine's current certificate is still the one read:
    a renewal, re-join or revocation that lists or replaces certificates must not miss one a
    concurrent call issued. No certificate reads as absent or NULL (a fingerprint-only re-join
    stores NULL)."""
    if machine.certificate_serial is None:
        return (
            "(attribute_not_exists(certificateSerial) OR attribute_type(certificateSerial, :nullType))",
            {":nullType": "NULL"},
        )
    return "certificateSerial = :readSerial", {":readSerial": machine.certificate_serial}


class MachineRecord(NamedTuple):
    machine_id: str
    tenant_id: str
    site_id: str
    pool_id: str
    identity: str
    token_id: str | None
    state: str  # "active" | "revoked"
    machine_token_sha256: str
    token_generation: int
    schedulable: bool
    facts: MachineFactsRecord
    joined_at: str
    request_id: str | None = None
    worker_image_baseline: str | None = None
    claims: tuple[Claim, ...] = ()
    certificate_serial: str | None = None
    certificate_expires_at: str | None = None
    certificate_ca_id: str | None = None  # the CA that signed the current certificate (its CRL)
    # Certificates of this key that a renewal or re-join replaced and that have not expired: they
    # still verify, so a revocation lists them too (see `still_valid_certificates`).
    earlier_certificates: tuple[IssuedCertificateRecord, ...] = ()
    rejoined_at: str | None = None
    # The last renewal's time: a routine renewal (same key) is no event, so the machine says it.
    last_renewed_at: str | None = None
    revoked_at: str | None = None
    revoked_by: str | None = None
    revoke_reason: str | None = None
    # The pool's join policy rule that approved this machine's deferred join at once; None: the
    # attestors admitted it, or an operator approved its request.
    policy_rule: str | None = None

    @property
    def active(self) -> bool:
        return self.state == "active"

    def still_valid_certificates(self, now: datetime) -> list[IssuedCertificateRecord]:
        """Every certificate issued to the machine that has not expired: the earlier ones, then the
        current one."""
        current = (
            [
                IssuedCertificateRecord(
                    self.certificate_serial, self.certificate_ca_id, self.certificate_expires_at
                )
            ]
            if self.certificate_serial and self.certificate_ca_id and self.certificate_expires_at
            else []
        )
        return [c for c in (*self.earlier_certificates, *current) if c.expires_epoch() > clock.seconds(now)]

    @classmethod
    def from_item(cls, item: Item) -> MachineRecord:
        stored = items.read(item, ATTRIBUTES, REQUIRED)
        generation, schedulable = stored["token_generation"], stored["schedulable"]
        return cls(
            **stored
            | {
                "token_generation": int(generation) if generation is not None else 1,
                "schedulable": bool(schedulable) if schedulable is not None else True,
                "facts": MachineFactsRecord.from_item(stored["facts"] or {}),
                "claims": tuple((str(k), str(v)) for k, v in stored["claims"] or []),
                "earlier_certificates": tuple(
                    IssuedCertificateRecord.from_item(entry) for entry in stored["earlier_certificates"] or []
                ),
            }
        )

    def to_item(self) -> Item:
        pk, sk = machine_key(self.machine_id)
        return {
            "pk": pk,
            "sk": sk,
            "gsi1pk": pool_partition(self.tenant_id, self.pool_id),
            "gsi1sk": self.machine_id,
            **items.write(
                ATTRIBUTES,
                self._asdict()
                | {
                    "facts": self.facts.to_item(),
                    "claims": [list(c) for c in self.claims],
                    "earlier_certificates": [c.to_item() for c in self.earlier_certificates] or None,
                },
            ),
        }


class IdentityRecord(NamedTuple):
    """A join identity's history: the token and place it first joined through, its pending request
    (`request_id`) or its machine (`machine_id`), and whether a renewal retired its key."""

    tenant_id: str
    identity: str
    token_id: str | None
    site_id: str
    version: int
    created_at: str
    updated_at: str
    pool_id: str | None = None
    machine_id: str | None = None
    request_id: str | None = None
    proof_at: int | None = None
    retired: bool = False
    retired_at: str | None = None

    @classmethod
    def new(
        cls,
        *,
        tenant_id: str,
        identity: str,
        token_id: str | None,
        site_id: str,
        now: datetime,
        pool_id: str | None = None,
        machine_id: str | None = None,
        request_id: str | None = None,
        proof_at: int | None = None,
    ) -> IdentityRecord:
        """A first record for a key: a fresh join (with its machine or its request) or the new key
        of a renewal that rotates (with the machine it moves to)."""
        return cls(
            tenant_id=tenant_id,
            identity=identity,
            token_id=token_id,
            site_id=site_id,
            version=1,
            created_at=clock.rfc3339(now),
            updated_at=clock.rfc3339(now),
            pool_id=pool_id,
            machine_id=machine_id,
            request_id=request_id,
            proof_at=proof_at,
        )

    def holds_proof_at_or_after(self, timestamp_ms: int) -> bool:
        """Whether this record already accepted a proof at least as new: that proof is a replay."""
        return self.proof_at is not None and self.proof_at >= timestamp_ms

    @classmethod
    def from_item(cls, item: Item) -> IdentityRecord:
        proof_at = item.get(PROOF_MARK)
        return cls(
            tenant_id=item["tenantId"],
            identity=item["identity"],
            token_id=item.get("tokenId"),
            site_id=item["siteId"],
            version=int(item.get("version", 1)),
            created_at=item.get("createdAt", ""),
            updated_at=item.get("updatedAt", ""),
            pool_id=item.get("poolId"),
            machine_id=item.get("machineId"),
            request_id=item.get("requestId"),
            proof_at=int(proof_at) if proof_at is not None else None,
            retired=bool(item.get("retired", False)),
            retired_at=item.get("retiredAt"),
        )

    def to_item(self) -> Item:
        pk, sk = identity_key(self.tenant_id, self.identity)
        return {
            "pk": pk,
            "sk": sk,
            "tenantId": self.tenant_id,
            "identity": self.identity,
            "tokenId": self.token_id,
            "siteId": self.site_id,
            "poolId": self.pool_id,
            "machineId": self.machine_id,
            "requestId": self.request_id,
            "version": self.version,
            PROOF_MARK: self.proof_at,
            "retired": self.retired or None,
            "retiredAt": self.retired_at,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }


class HardwareClaimRecord(NamedTuple):
    tenant_id: str
    kind: str  # "serial" | "uuid"
    value: str
    machine_id: str

    @classmethod
    def from_item(cls, item: Item) -> HardwareClaimRecord:
        return cls(
            tenant_id=item["pk"].split("#", 2)[1],
            kind=item["kind"],
            value=item["value"],
            machine_id=item["machineId"],
        )

    def to_item(self) -> Item:
        pk, sk = claim_key(self.tenant_id, self.kind, self.value)
        return {"pk": pk, "sk": sk, "machineId": self.machine_id, "kind": self.kind, "value": self.value}


# --- reads -------------------------------------------------------------------------------------


def get(machine_id: str) -> MachineRecord | None:
    item = dynamo.get(*machine_key(machine_id))
    return MachineRecord.from_item(item) if item else None


def get_identity(tenant_id: str, identity: str) -> IdentityRecord | None:
    item = dynamo.get(*identity_key(tenant_id, identity))
    return IdentityRecord.from_item(item) if item else None


class MachinePage(NamedTuple):
    machines: list[MachineRecord]  # the page as read, before any filter
    more: bool  # a page may follow the last machine read


def list_in_pool(tenant_id: str, pool_id: str, *, after: str | None, limit: int) -> MachinePage:
    """One page of the pool's machines in machineId order, after the machine `after`."""
    page = dynamo.query(pk=pool_partition(tenant_id, pool_id), index="gsi1", limit=limit, sk_after=after)
    return MachinePage([MachineRecord.from_item(item) for item in page.items], page.last_key is not None)


# --- writes ------------------------------------------------------------------------------------


def revoke(
    machine: MachineRecord,
    *,
    by: str,
    reason: str,
    now: datetime,
    certificates: Sequence[revocations.RevocationRecord] = (),
) -> bool:
    """Revoke an active machine and release its hardware claims, in one transaction, which also
    lists its `certificates` (every one that still verifies) as revoked for their CAs' CRLs. The
    machine's certificate must still be the one read, so none is missed. False when it was
    revoked or renewed concurrently (the caller reads what won)."""
    as_read, read_values = certificate_as_read(machine)
    writes = [
        dynamo.Write(
            "Update",
            *machine_key(machine.machine_id),
            update="SET #state = :revoked, revokedAt = :now, revokedBy = :by, revokeReason = :why REMOVE #q",
            condition="#state = :active AND " + as_read,
            names={"#state": "state", "#q": items.NO_EVENT},
            values={
                ":revoked": "revoked",
                ":active": "active",
                ":now": clock.rfc3339(now),
                ":by": by,
                ":why": reason,
                **read_values,
            },
            name="machine",
        ),
        *(
            dynamo.Write(
                "Delete",
                *claim_key(machine.tenant_id, kind, value),
                condition="machineId = :me",
                values={":me": machine.machine_id},
                name="release",
                subject=(kind, value),
            )
            for kind, value in machine.claims
        ),
        *(revocations.revoked_write(certificate) for certificate in certificates),
    ]
    with contextlib.suppress(dynamo.TransactionCanceled):
        dynamo.transact(writes)
        return True
    return False


def claim(tenant_id: str, machine_id: str, claims: list[Claim]) -> list[dynamo.Write]:
    """Transaction actions that claim hardware ids for a machine: each holds unless another machine
    holds it (a cancellation names it `claim`, subject `(kind, value)`)."""
    return [
        dynamo.Write(
            "Put",
            item=HardwareClaimRecord(tenant_id, kind, value, machine_id).to_item(),
            condition="attribute_not_exists(pk) OR machineId = :me",
            values={":me": machine_id},
            name="claim",
            subject=(kind, value),
        )
        for kind, value in claims
    ]


def release(tenant_id: str, machine_id: str, claims: list[Claim]) -> list[dynamo.Write]:
    """Transaction actions that release hardware ids a machine no longer reports (never another's)."""
    return [
        dynamo.Write(
            "Delete",
            *claim_key(tenant_id, kind, value),
            condition="attribute_not_exists(pk) OR machineId = :me",
            values={":me": machine_id},
            name="release",
            subject=(kind, value),
        )
        for kind, value in claims
    ]

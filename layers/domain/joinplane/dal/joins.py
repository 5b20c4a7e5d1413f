"""The transactions that make a join's (or a renewal's) decision stick, one per outcome.

Each is all or nothing and returns what happened: `Committed`, or the named condition that did not
hold, with the item as it is now where the caller decides on it (`IdentityTaken`,
`IdentityMoved`, `ClaimsHeld`...). A cancellation that names no condition (throughput, a
conflict that outlasted its retries) raises `NotRecorded`.

Every identity-record write that acts on a proof of possession also moves the record's mark
(`proofAt`), on the condition that the proof is newer than every one accepted before
(joinplane.proof): a proof is accepted once, and an older one never after a newer one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from joinplane import clock
from joinplane.dal import dynamo, items, revocations
from joinplane.dal import machines as machines_db
from joinplane.dal import pools as pools_db
from joinplane.dal import requests as requests_db
from joinplane.dal import tokens as tokens_db
from joinplane.dal.machines import (
    PROOF_MARK,
    Claim,
    IdentityRecord,
    IssuedCertificateRecord,
    MachineRecord,
    identity_key,
    machine_key,
)
from joinplane.dal.pools import PoolRecord
from joinplane.dal.requests import JoinRequestRecord
from joinplane.dal.tokens import JoinTokenRecord

_NEWER_THAN_MARK = f"(attribute_not_exists({PROOF_MARK}) OR {PROOF_MARK} < :proofAt)"


class Committed(NamedTuple):
    pass


class IdentityTaken(NamedTuple):
    """A fresh join's key already has a record: the join is a retry or a re-join of `current`."""

    current: IdentityRecord


class TokenSpent(NamedTuple):
    """The token was used up, expired or revoked since it was read."""


class PoolChanged(NamedTuple):
    """The pool is no longer the version read (changed, archived or deleted)."""


class ClaimsHeld(NamedTuple):
    """Hardware ids another machine holds."""

    claims: tuple[Claim, ...]


class IdentityMoved(NamedTuple):
    """The identity record's condition failed: `current` as it is now (None: absent)."""

    current: IdentityRecord | None


class MachineChanged(NamedTuple):
    """The machine is no longer active as read (revoked, re-joined or its token replaced)."""


class RequestChanged(NamedTuple):
    """The approved request is no longer approved and unexpired."""


class KeyTaken(NamedTuple):
    """A renewal's new key already has an identity record."""


class NotRecorded(Exception):
    """The transaction was cancelled for no condition of its own: nothing was written; retry."""


FreshOutcome = Committed | IdentityTaken | TokenSpent | PoolChanged | ClaimsHeld
ConsumeOutcome = Committed | RequestChanged | IdentityMoved | PoolChanged | ClaimsHeld
RejoinOutcome = Committed | MachineChanged | IdentityMoved | PoolChanged | ClaimsHeld


class CertificateChanged(NamedTuple):
    """A renewal: the machine is as read but its certificate is not (a concurrent renewal won)."""


RenewOutcome = Committed | MachineChanged | CertificateChanged | IdentityMoved | KeyTaken | PoolChanged


def _marked(write: dynamo.Write, proof_ms: int | None) -> dynamo.Write:
    """An identity record's Update that also accepts a proof (see the module's docstring)."""
    if proof_ms is None:
        return write
    return write._replace(
        update=f"{write.update}, {PROOF_MARK} = :proofAt",
        condition=f"({write.condition}) AND {_NEWER_THAN_MARK}",
        values={**write.values, ":proofAt": proof_ms},
    )


def _put_identity(identity: IdentityRecord) -> dynamo.Write:
    return dynamo.Write("Put", item=identity.to_item(), condition="attribute_not_exists(pk)", name="identity")


def _put_machine(machine: MachineRecord) -> dynamo.Write:
    return dynamo.Write("Put", item=machine.to_item(), condition="attribute_not_exists(pk)", name="machine")


def _identity(cancelled: dynamo.TransactionCanceled) -> IdentityRecord | None:
    current = cancelled.current_of("identity")
    return IdentityRecord.from_item(current) if current else None


def _claims_held(cancelled: dynamo.TransactionCanceled) -> ClaimsHeld:
    held = tuple(sorted(cancelled.subjects("claim")))
    if not held:
        raise NotRecorded("the transaction was cancelled by no condition of its own") from None
    return ClaimsHeld(held)


# --- fresh joins -------------------------------------------------------------------------------


def admit(
    token: JoinTokenRecord,
    *,
    now: datetime,
    pool: PoolRecord,
    identity: IdentityRecord,
    machine: MachineRecord,
    request: JoinRequestRecord | None = None,
) -> FreshOutcome:
    """A key seen for the first time becomes a machine: one use of the token, the identity record,
    the machine and its hardware claims, while the pool is the version read; with `request`, the
    record of a deferral the pool's policy approved at once (stored consumed), in the same
    transaction."""
    return _fresh(
        token,
        now,
        pool,
        identity,
        [
            _put_machine(machine),
            *machines_db.claim(machine.tenant_id, machine.machine_id, list(machine.claims)),
            *([requests_db.put_new(request)] if request is not None else []),
        ],
    )


def defer(
    token: JoinTokenRecord,
    *,
    now: datetime,
    pool: PoolRecord | None,
    identity: IdentityRecord,
    request: JoinRequestRecord,
) -> FreshOutcome:
    """A key seen for the first time waits for an operator: one use of the token, the identity
    record and the join request (a site token has no pool to check)."""
    return _fresh(token, now, pool, identity, [requests_db.put_new(request)])


def _fresh(
    token: JoinTokenRecord,
    now: datetime,
    pool: PoolRecord | None,
    identity: IdentityRecord,
    rest: list[dynamo.Write],
) -> FreshOutcome:
    writes = [tokens_db.spend_use(token, now=now)]
    if pool is not None:
        writes.append(pools_db.is_current(pool))
    writes += [_put_identity(identity), *rest]
    try:
        dynamo.transact(writes)
    except dynamo.TransactionCanceled as cancelled:
        taken = _identity(cancelled)
        if taken is not None:
            return IdentityTaken(taken)
        if cancelled.lost("token"):
            return TokenSpent()
        if cancelled.lost("pool"):
            return PoolChanged()
        return _claims_held(cancelled)
    return Committed()


# --- a known identity --------------------------------------------------------------------------


def accept_proof(tenant_id: str, identity: str, proof_ms: int) -> bool:
    """Move a pending identity's proof mark (one UpdateItem); False: the proof is not newer than
    one already accepted (a replay)."""
    try:
        dynamo.update(
            *identity_key(tenant_id, identity),
            update=f"SET {PROOF_MARK} = :proofAt",
            condition=f"attribute_exists(pk) AND {_NEWER_THAN_MARK}",
            values={":proofAt": proof_ms},
        )
    except dynamo.ConditionFailed:
        return False
    return True


def consume(
    request: JoinRequestRecord,
    *,
    record: IdentityRecord,
    proof_ms: int | None,
    machine: MachineRecord,
    pool: PoolRecord,
    now: datetime,
) -> ConsumeOutcome:
    """An approved request admits exactly one join: the request `approved → consumed`, the identity
    record moved on from the version read (to the machine), the machine and its claims, while the
    pool is the version read."""
    writes = [
        requests_db.consume(request, machine_id=machine.machine_id, now=now),
        _marked(
            dynamo.Write(
                "Update",
                *identity_key(record.tenant_id, record.identity),
                update="SET machineId = :machine, poolId = :pool, version = version + :one, updatedAt = :now",
                condition="version = :version",
                values={
                    ":machine": machine.machine_id,
                    ":pool": pool.pool_id,
                    ":one": 1,
                    ":now": clock.rfc3339(now),
                    ":version": record.version,
                },
                name="identity",
            ),
            proof_ms,
        ),
        _put_machine(machine),
        pools_db.is_current(pool),
        *machines_db.claim(machine.tenant_id, machine.machine_id, list(machine.claims)),
    ]
    try:
        dynamo.transact(writes)
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.lost("request"):
            return RequestChanged()
        if cancelled.lost("identity"):
            return IdentityMoved(_identity(cancelled))
        if cancelled.lost("pool"):
            return PoolChanged()
        return _claims_held(cancelled)
    return Committed()


def rejoin(
    before: MachineRecord,
    after: MachineRecord,
    *,
    record: IdentityRecord,
    proof_ms: int | None,
    pool: PoolRecord,
    now: datetime,
) -> RejoinOutcome:
    """The machine as read (`before`) gets new credentials (`after`: token digest, certificate,
    facts, claims): the machine while active at the generation read, the identity record moved on
    from the version read, hardware ids it now reports claimed and those it no longer reports
    released, while the pool is the version read."""
    as_read, read_values = machines_db.certificate_as_read(before)
    writes = [
        dynamo.Write(
            "Update",
            *machine_key(before.machine_id),
            update=(
                "SET machineTokenSha256 = :digest, tokenGeneration = tokenGeneration + :one, "
                "certificateSerial = :serial, certificateExpiresAt = :expires, certificateCaId = :ca, "
                "earlierCertificates = :earlier, rejoinedAt = :now, "
                "facts = :facts, schedulable = :schedulable, workerImageBaseline = :baseline, "
                f"claims = :claims REMOVE {items.NO_EVENT}"
            ),
            # The certificate and key as read too: a renewal changes neither the token nor its
            # generation, and a re-join committed over it would drop its certificate from the
            # machine's record (never listed on revocation) or re-admit the key it retired.
            condition="#state = :active AND tokenGeneration = :generation AND #identity = :identity AND "
            + as_read,
            names={"#state": "state", "#identity": "identity"},
            values={
                ":digest": after.machine_token_sha256,
                ":one": 1,
                ":serial": after.certificate_serial,
                ":expires": after.certificate_expires_at,
                ":ca": after.certificate_ca_id,
                ":earlier": [c.to_item() for c in after.earlier_certificates],
                ":now": clock.rfc3339(now),
                ":facts": after.facts.to_item(),
                ":schedulable": after.schedulable,
                ":baseline": after.worker_image_baseline,
                ":active": "active",
                ":generation": before.token_generation,
                ":identity": before.identity,
                ":claims": [list(c) for c in after.claims],
                **read_values,
            },
            name="machine",
        ),
        _marked(
            dynamo.Write(
                "Update",
                *identity_key(record.tenant_id, record.identity),
                update="SET version = version + :one, updatedAt = :now",
                condition="version = :version",
                values={":one": 1, ":now": clock.rfc3339(now), ":version": record.version},
                name="identity",
            ),
            proof_ms,
        ),
        pools_db.is_current(pool),
        *machines_db.claim(
            before.tenant_id, before.machine_id, [c for c in after.claims if c not in before.claims]
        ),
        *machines_db.release(
            before.tenant_id, before.machine_id, [c for c in before.claims if c not in after.claims]
        ),
    ]
    try:
        dynamo.transact(writes)
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.lost("machine"):
            return MachineChanged()
        if cancelled.lost("identity"):
            return IdentityMoved(_identity(cancelled))
        if cancelled.lost("pool"):
            return PoolChanged()
        return _claims_held(cancelled)
    return Committed()


# --- renewals ----------------------------------------------------------------------------------


def renew(
    machine: MachineRecord,
    *,
    identity: str,
    certificate_serial: str,
    certificate_expires_at: str,
    certificate_ca_id: str,
    new_identity: IdentityRecord | None,
    earlier: Sequence[IssuedCertificateRecord] = (),
    superseded: Sequence[revocations.RevocationRecord] = (),
    proof_ms: int,
    pool: PoolRecord,
    now: datetime,
) -> RenewOutcome:
    """A machine's new certificate, for its key `identity`: the machine while active with the token
    read, the pool as read (the certificate's lifetime is the pool's), the current key's record's
    proof mark moved. The machine's current certificate must still be the one read
    (CertificateChanged: a concurrent renewal won, read again), so `earlier` (the certificates of
    this key that still verify, the replaced one included) never misses one. When the key changes
    (`new_identity`), the current key's record is retired so it can never join again, and the new
    key's record is created in the same transaction, which also lists the certificates it replaces
    (`superseded`) on their CAs' CRLs."""
    rotating = new_identity is not None
    values = {
        ":serial": certificate_serial,
        ":expires": certificate_expires_at,
        ":ca": certificate_ca_id,
        ":identity": identity,
        ":earlier": [c.to_item() for c in earlier],
        ":now": clock.rfc3339(now),
        ":active": "active",
        ":digest": machine.machine_token_sha256,
        **({} if rotating else {":yes": True}),
    }
    as_read, read_values = machines_db.certificate_as_read(machine)
    condition = "#state = :active AND machineTokenSha256 = :digest AND " + as_read
    values |= read_values
    writes = [
        dynamo.Write(
            "Update",
            *machine_key(machine.machine_id),
            # When it renewed, in the same write: a renewal that keeps the key is no event, so the
            # machine's record is where an operator sees it (free: the write is made anyway).
            # A renewal that keeps the key publishes nothing: it marks its write so, and the stream
            # mapping's filter drops the record before it invokes the publisher (template.yaml).
            # Every other update of a machine removes the mark (`items.NO_EVENT`).
            update="SET certificateSerial = :serial, certificateExpiresAt = :expires, "
            "certificateCaId = :ca, #identity = :identity, earlierCertificates = :earlier, "
            "lastRenewedAt = :now"
            + (f" REMOVE {items.NO_EVENT}" if rotating else f", {items.NO_EVENT} = :yes"),
            condition=condition,
            names={"#state": "state", "#identity": "identity"},
            values=values,
            name="machine",
        ),
        pools_db.is_current(pool),
        _marked(
            dynamo.Write(
                "Update",
                *identity_key(machine.tenant_id, machine.identity),
                update="SET updatedAt = :now" + (", retired = :yes, retiredAt = :now" if rotating else ""),
                condition="machineId = :me",
                values={
                    ":now": clock.rfc3339(now),
                    ":me": machine.machine_id,
                    **({":yes": True} if rotating else {}),
                },
                name="identity",
            ),
            proof_ms,
        ),
    ]
    if new_identity is not None:
        writes.append(
            dynamo.Write(
                "Put", item=new_identity.to_item(), condition="attribute_not_exists(pk)", name="new-identity"
            )
        )
    writes += [revocations.revoked_write(certificate) for certificate in superseded]
    try:
        dynamo.transact(writes)
    except dynamo.TransactionCanceled as cancelled:
        if cancelled.lost("machine"):
            now_item = cancelled.current_of("machine")
            if (
                now_item is not None
                and now_item.get("state") == "active"
                and now_item.get("machineTokenSha256") == machine.machine_token_sha256
            ):
                return CertificateChanged()
            return MachineChanged()
        if cancelled.lost("identity"):
            return IdentityMoved(_identity(cancelled))
        if cancelled.lost("new-identity"):
            return KeyTaken()
        if cancelled.lost("pool"):
            return PoolChanged()
        raise NotRecorded("the renewal was cancelled by no condition of its own") from None
    return Committed()

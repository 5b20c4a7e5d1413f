"""Join requests in the table.

- Request: `JREQ#<requestId>` / `JREQ`.
- Listing (gsi1): `JREQS#<tenant>#POOL#<poolId>#<stored state>` for a pool's requests and
  `JREQS#<tenant>#SITE#<siteId>#<stored state>` for a site's unclaimed ones, sorted by requestId.
  Every transition moves the item between partitions in the same write. Keeping the state in the
  partition key makes a page of one state cost the same however many requests of other states or
  pools exist.
- Open requests (gsi2, sparse: only while pending or approved): `OPENJREQ#<shard>` /
  `<expiresAtEpoch, 12 digits>#<requestId>`, read by the retention job up to now.
- The tenant's queue (gsi3, sparse: only while pending): `JREQQ#<tenant>` / `<requestId>`, so
  a page of a tenant's pending requests across every pool is one Query however many pools it has
  (docs/queue.md). It projects only the owner and the expiry (`QueueEntry`): what picks a key's
  requests, which are then read by key. Only `pending`: the queue is what an operator watches,
  and keeping the decided states out makes every later transition one index delete at most.
- `ttl`: DynamoDB TTL deletes a request `RETENTION_SECONDS` after its expiry.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, Literal, NamedTuple

from joinplane import clock
from joinplane.dal import dynamo, items
from joinplane.dal.dynamo import Item
from joinplane.dal.machines import MachineFactsRecord

RETENTION_SECONDS = 30 * 86_400
OPEN_SHARDS = 4  # the open-requests index is spread over a few partitions to keep writes cool
OPEN_STATES = ("pending", "approved")

RequestState = Literal["pending", "approved", "rejected", "expired", "consumed"]


class VoteReasonRecord(NamedTuple):
    """An attestor's vote that deferred a join, as stored on its request (`reasons`)."""

    attestor: str
    code: str
    message: str

    @classmethod
    def from_item(cls, item: Item) -> VoteReasonRecord:
        return cls(item.get("attestor", ""), item.get("code", ""), item.get("message", ""))

    def to_item(self) -> Item:
        return {"attestor": self.attestor, "code": self.code, "message": self.message}


class VerdictRecord(NamedTuple):
    """One attestor's verdict on the join that made a request (`admit`, `defer` or `deny`)."""

    attestor: str
    verdict: str

    @classmethod
    def from_item(cls, item: Item) -> VerdictRecord:
        return cls(item.get("attestor", ""), item.get("verdict", ""))

    def to_item(self) -> Item:
        return {"attestor": self.attestor, "verdict": self.verdict}


class ApprovalRecord(NamedTuple):
    """One key's approval of a request, as stored under its approver in the request's `approvals` map
    (the key is the map's: one entry per approver, so the same key twice is one approval)."""

    by: str  # the approving API key's id, or `policy:<rule>` for a join policy's rule
    at: str
    reason: str | None = None
    # Its place among the request's approvals, from 1: written as the count it made, which the
    # approval's condition makes unique, so approvals within one second still read in order.
    seq: int = 0

    @classmethod
    def from_entry(cls, by: str, entry: Item) -> ApprovalRecord:
        return cls(by, entry.get("at", ""), entry.get("reason"), int(entry.get("seq", 0)))

    def to_entry(self) -> Item:
        entry: Item = {"at": self.at, **({"reason": self.reason} if self.reason else {})}
        return entry | ({"seq": self.seq} if self.seq else {})


def approvals_of(stored: Item | None) -> tuple[ApprovalRecord, ...]:
    """A stored `approvals` map as records, in the order they were given (the map keeps none)."""
    found = [ApprovalRecord.from_entry(by, entry or {}) for by, entry in (stored or {}).items()]
    return tuple(sorted(found, key=lambda a: (a.seq, a.at, a.by)))


# Each JoinRequest field's stored attribute (dal.items); dal.stream's RequestImage reads the same.
ATTRIBUTES = {
    "request_id": "requestId",
    "tenant_id": "tenantId",
    "site_id": "siteId",
    "pool_id": "poolId",
    "token_id": "tokenId",
    "identity": "identity",
    "state": "state",
    "reasons": "reasons",
    "machine": "machine",
    "csr_public_key_sha256": "csrPublicKeySha256",
    "created_at": "createdAt",
    "expires_at": "expiresAt",
    "expires_at_epoch": "expiresAtEpoch",
    "decided_at": "decidedAt",
    "decided_by": "decidedBy",
    "reason": "reason",
    "consumed_at": "consumedAt",
    "machine_id": "machineId",
    "expired_at": "expiredAt",
    "token_description": "tokenDescription",
    "source_ip": "sourceIp",
    "verdicts": "verdicts",
    "approvals": "approvals",
    "approvals_required": "approvalsRequired",
    "policy_rule": "policyRule",
}
REQUIRED = (
    "request_id",
    "tenant_id",
    "site_id",
    "token_id",
    "identity",
    "state",
    "created_at",
    "expires_at",
    "expires_at_epoch",
)


class JoinRequestRecord(NamedTuple):
    request_id: str
    tenant_id: str
    site_id: str
    pool_id: str | None  # None: a site's request no pool has claimed yet
    token_id: str
    identity: str
    state: RequestState  # as stored; see `state_at` for the state as read
    reasons: tuple[VoteReasonRecord, ...]  # the attestors' votes that deferred it
    machine: MachineFactsRecord  # as it sent them
    csr_public_key_sha256: str | None
    created_at: str
    expires_at: str
    expires_at_epoch: int
    decided_at: str | None = None
    decided_by: str | None = None
    reason: str | None = None  # the operator's, on approval or rejection
    consumed_at: str | None = None
    machine_id: str | None = None
    expired_at: str | None = None
    # What tells one pending request from another in an operator's queue, recorded by the join from
    # what it already holds (the token it read, the API Gateway request): absent on older requests.
    token_description: str | None = None
    source_ip: str | None = None
    verdicts: tuple[VerdictRecord, ...] = ()  # every attestor's verdict, admits included
    # Who approved so far (one per approver, oldest first) and how many approvals the pool required
    # when the last of them was recorded: absent on requests no one has approved yet.
    approvals: tuple[ApprovalRecord, ...] = ()
    approvals_required: int | None = None

    def approved_by(self, approver: str) -> bool:
        return any(approval.by == approver for approval in self.approvals)

    # The pool's join policy rule that decided the join: approved it at once (the request is then
    # stored consumed, `decidedBy: policy`) or deferred it (its vote is among `reasons`).
    policy_rule: str | None = None

    @property
    def ttl(self) -> int:
        return self.expires_at_epoch + RETENTION_SECONDS

    def state_at(self, now: datetime) -> RequestState:
        """The state as read at `now`: an open request past its expiry reads `expired` whatever is
        stored, so no job has to run for expiry to hold."""
        if self.state in OPEN_STATES and self.expires_at_epoch <= clock.seconds(now):
            return "expired"
        return self.state

    @classmethod
    def from_item(cls, item: Item) -> JoinRequestRecord:
        stored = items.read(item, ATTRIBUTES, REQUIRED)
        return cls(
            **stored
            | {
                "reasons": tuple(VoteReasonRecord.from_item(reason) for reason in stored["reasons"] or []),
                "machine": MachineFactsRecord.from_item(stored["machine"] or {}),
                "expires_at_epoch": int(stored["expires_at_epoch"]),
                "verdicts": tuple(VerdictRecord.from_item(v) for v in stored["verdicts"] or []),
                "approvals": approvals_of(stored["approvals"]),
                "approvals_required": (
                    int(stored["approvals_required"]) if stored["approvals_required"] is not None else None
                ),
            }
        )

    def to_item(self) -> Item:
        pk, sk = request_key(self.request_id)
        item: Item = {
            "pk": pk,
            "sk": sk,
            "gsi1pk": list_partition(self.tenant_id, self.site_id, self.pool_id, self.state),
            "gsi1sk": self.request_id,
            **items.write(
                ATTRIBUTES,
                self._asdict()
                | {
                    "reasons": [reason.to_item() for reason in self.reasons],
                    "machine": self.machine.to_item(),
                    "verdicts": [verdict.to_item() for verdict in self.verdicts],
                    # Absent until the first approval: the approval's condition counts on it.
                    "approvals": {a.by: a.to_entry() for a in self.approvals} or None,
                },
            ),
            "ttl": self.ttl,
        }
        if self.state in OPEN_STATES:
            item.update(open_index(self.request_id, self.expires_at_epoch))
        if self.state == "pending":
            item.update(queue_index(self.tenant_id, self.request_id))
        return item


def request_key(request_id: str) -> tuple[str, str]:
    return f"JREQ#{request_id}", "JREQ"


def list_partition(tenant_id: str, site_id: str, pool_id: str | None, state: str) -> str:
    owner = f"POOL#{pool_id}" if pool_id else f"SITE#{site_id}"
    return f"JREQS#{tenant_id}#{owner}#{state}"


def open_index(request_id: str, expires_epoch: int) -> dict[str, str]:
    """gsi2 keys while a request is open: by expiry, for the retention job."""
    shard = int(hashlib.sha256(request_id.encode()).hexdigest(), 16) % OPEN_SHARDS
    return {"gsi2pk": f"OPENJREQ#{shard}", "gsi2sk": f"{expires_epoch:012d}#{request_id}"}


def queue_partition(tenant_id: str) -> str:
    return f"JREQQ#{tenant_id}"


def queue_index(tenant_id: str, request_id: str) -> dict[str, str]:
    """gsi3 keys while a request is pending: the tenant's queue, by requestId."""
    return {"gsi3pk": queue_partition(tenant_id), "gsi3sk": request_id}


# Leaving `pending` takes a request out of its tenant's queue in the same write.
_LEAVE_QUEUE = "gsi3pk, gsi3sk"


class RequestLost(Exception):
    """A conditional change did not hold: `current` is the request as it is now (None: absent)."""

    def __init__(self, current: JoinRequestRecord | None) -> None:
        super().__init__("join request changed")
        self.current = current


def _lost(failure: dynamo.ConditionFailed) -> RequestLost:
    return RequestLost(JoinRequestRecord.from_item(failure.current) if failure.current else None)


def get(request_id: str) -> JoinRequestRecord | None:
    item = dynamo.get(*request_key(request_id))
    return JoinRequestRecord.from_item(item) if item else None


# --- transitions ---------------------------------------------------------------------------------


def put_new(request: JoinRequestRecord, *, name: str = "request") -> dynamo.Write:
    """A transaction action storing a new request (it holds only if the id is free)."""
    return dynamo.Write("Put", item=request.to_item(), condition="attribute_not_exists(pk)", name=name)


def approve(
    request: JoinRequestRecord,
    *,
    pool_id: str,
    approval: ApprovalRecord,
    new: bool,
    approvals_required: int,
    completes: bool,
    expires_at: datetime,
    now: datetime,
) -> JoinRequestRecord:
    """One approval of a pending request for the pool `pool_id` (claiming a site's request), in one
    conditional write: `approval` recorded under its approver when `new` (else it is the one
    already there), and, when it `completes` the count the pool requires, pending → approved with a
    new expiry, decided by the approval's approver.

    Holds only while the request is pending, unexpired at `now`, unclaimed or already this pool's,
    and holds exactly the approvals read (their number, and the approver's absence or presence):
    two approvals racing cannot both count themselves the last, nor overwrite each other, and the
    same key racing itself is recorded once. RequestLost otherwise, with the request as it is now."""
    read = len(request.approvals)
    values: dict[str, Any] = {
        ":pending": "pending",
        ":pool": pool_id,
        ":now": clock.seconds(now),
        ":required": approvals_required,
    }
    names = {"#state": "state", "#by": approval.by}
    sets = ["poolId = :pool", "approvalsRequired = :required"]
    conditions = [
        "#state = :pending",
        "expiresAtEpoch > :now",
        "(attribute_not_exists(poolId) OR poolId = :pool)",
    ]
    if read == 0:
        conditions.append("attribute_not_exists(approvals)")
    else:
        conditions.append("size(approvals) = :read")
        values[":read"] = read
    if not new:
        conditions.append("attribute_exists(approvals.#by)")
    elif read == 0:
        sets.append("approvals = :approvals")
        values[":approvals"] = {approval.by: approval._replace(seq=1).to_entry()}
        names.pop("#by")  # DynamoDB refuses a name the expressions do not use
    else:
        sets.append("approvals.#by = :approval")
        values[":approval"] = approval._replace(seq=read + 1).to_entry()
        conditions.append("attribute_not_exists(approvals.#by)")
    if completes:
        expires_at_epoch = clock.seconds(expires_at)
        names["#ttl"] = "ttl"
        values |= {
            ":approved": "approved",
            ":expiresAt": clock.rfc3339(expires_at),
            ":expiresAtEpoch": expires_at_epoch,
            ":decidedAt": clock.rfc3339(now),
            ":by": approval.by,
            ":partition": list_partition(request.tenant_id, request.site_id, pool_id, "approved"),
            ":ttl": expires_at_epoch + RETENTION_SECONDS,
            ":open": open_index(request.request_id, expires_at_epoch)["gsi2sk"],
        }
        sets += [
            "#state = :approved",
            "expiresAt = :expiresAt",
            "expiresAtEpoch = :expiresAtEpoch",
            "decidedAt = :decidedAt",
            "decidedBy = :by",
            "gsi1pk = :partition",
            "#ttl = :ttl",
            "gsi2sk = :open",
        ]
        if approval.reason:
            sets.append("reason = :reason")
            values[":reason"] = approval.reason
    else:
        # Still pending (and in its tenant's queue), now in the claiming pool's listing.
        sets.append("gsi1pk = :partition")
        values[":partition"] = list_partition(request.tenant_id, request.site_id, pool_id, "pending")
    try:
        item = dynamo.update(
            *request_key(request.request_id),
            update="SET " + ", ".join(sets) + (f" REMOVE {_LEAVE_QUEUE}" if completes else ""),
            condition=" AND ".join(conditions),
            names=names,
            values=values,
        )
    except dynamo.ConditionFailed as failure:
        raise _lost(failure) from None
    return JoinRequestRecord.from_item(item)


def reject(
    request: JoinRequestRecord, *, decided_by: str, reason: str | None, now: datetime
) -> JoinRequestRecord:
    """pending or approved → rejected, for the request as read. The write holds only while its owner
    is still the one read (the listing partition is chosen for that owner, so a pool claiming the
    request meanwhile makes it fail rather than land in the wrong partition); RequestLost otherwise."""
    values: dict[str, Any] = {
        ":rejected": "rejected",
        ":pending": "pending",
        ":approved": "approved",
        ":now": clock.seconds(now),
        ":decidedAt": clock.rfc3339(now),
        ":by": decided_by,
        ":partition": list_partition(request.tenant_id, request.site_id, request.pool_id, "rejected"),
    }
    update = "SET #state = :rejected, decidedAt = :decidedAt, decidedBy = :by, gsi1pk = :partition"
    removes = ["gsi2pk", "gsi2sk", _LEAVE_QUEUE]
    if reason:
        update += ", reason = :reason"
        values[":reason"] = reason
    else:
        removes.append("reason")  # an approval's reason must not read as the rejection's
    update += " REMOVE " + ", ".join(removes)
    if request.pool_id is None:
        owner = "attribute_not_exists(poolId)"
    else:
        owner = "poolId = :owner"
        values[":owner"] = request.pool_id
    try:
        item = dynamo.update(
            *request_key(request.request_id),
            update=update,
            condition=f"(#state = :pending OR #state = :approved) AND expiresAtEpoch > :now AND {owner}",
            names={"#state": "state"},
            values=values,
        )
    except dynamo.ConditionFailed as failure:
        raise _lost(failure) from None
    return JoinRequestRecord.from_item(item)


def consume(
    request: JoinRequestRecord, *, machine_id: str, now: datetime, name: str = "request"
) -> dynamo.Write:
    """A transaction action: approved → consumed by the machine `machine_id`; holds only while the
    request is approved and unexpired at `now`."""
    pk, sk = request_key(request.request_id)
    return dynamo.Write(
        "Update",
        pk=pk,
        sk=sk,
        update=(
            "SET #state = :consumed, consumedAt = :now, machineId = :machine, "
            "gsi1pk = :partition REMOVE gsi2pk, gsi2sk"
        ),
        condition="#state = :approved AND expiresAtEpoch > :epoch",
        names={"#state": "state"},
        values={
            ":consumed": "consumed",
            ":approved": "approved",
            ":now": clock.rfc3339(now),
            ":machine": machine_id,
            ":epoch": clock.seconds(now),
            ":partition": list_partition(request.tenant_id, request.site_id, request.pool_id, "consumed"),
        },
        name=name,
    )


class DueRequest(NamedTuple):
    """An open request as the open-requests index (gsi2) projects it: what marking it expired needs."""

    request_id: str
    tenant_id: str
    site_id: str
    pool_id: str | None


def mark_expired(request: JoinRequestRecord | DueRequest, *, now: datetime) -> bool:
    """pending or approved, past its expiry at `now` → expired. False when the request was
    decided, consumed or marked since it was read (nothing is written then)."""
    try:
        dynamo.update(
            *request_key(request.request_id),
            update=(
                "SET #state = :expired, expiredAt = expiresAt, gsi1pk = :partition "
                f"REMOVE gsi2pk, gsi2sk, {_LEAVE_QUEUE}"
            ),
            condition="(#state = :pending OR #state = :approved) AND expiresAtEpoch <= :now",
            names={"#state": "state"},
            values={
                ":expired": "expired",
                ":pending": "pending",
                ":approved": "approved",
                ":now": clock.seconds(now),
                ":partition": list_partition(request.tenant_id, request.site_id, request.pool_id, "expired"),
            },
        )
    except dynamo.ConditionFailed:
        return False
    return True


# --- reads ---------------------------------------------------------------------------------------


class RequestPage(NamedTuple):
    requests: list[JoinRequestRecord]
    complete: bool  # the partition holds nothing after the last request


def list_partition_page(
    tenant_id: str, site_id: str, pool_id: str | None, state: str, *, after: str | None, limit: int
) -> RequestPage:
    """One page of the requests stored as `state` of a pool (or, `pool_id` None, of a site's
    unclaimed ones) in requestId order, after `after`."""
    page = dynamo.query(
        pk=list_partition(tenant_id, site_id, pool_id, state), index="gsi1", sk_after=after, limit=limit
    )
    return RequestPage([JoinRequestRecord.from_item(item) for item in page.items], page.last_key is None)


class QueueEntry(NamedTuple):
    """A request as the tenant's queue holds it (gsi3 projects only this): enough to pick a key's
    requests, which are then read whole (`get_many`)."""

    request_id: str
    site_id: str
    pool_id: str | None
    expires_at_epoch: int

    def pending_at(self, now: datetime) -> bool:
        """Still pending as read at `now` (the index holds only stored `pending`)."""
        return self.expires_at_epoch > clock.seconds(now)


class QueuePage(NamedTuple):
    entries: list[QueueEntry]
    complete: bool  # the queue holds nothing after the last entry


def queue_page(tenant_id: str, *, after: str | None, limit: int) -> QueuePage:
    """One page of the tenant's pending requests, every pool and site, in requestId order, after
    `after` (gsi3: eventually consistent, like gsi1)."""
    page = dynamo.query(pk=queue_partition(tenant_id), index="gsi3", sk_after=after, limit=limit)
    entries = [
        QueueEntry(
            str(item["gsi3sk"]),
            str(item["siteId"]),
            item.get("poolId"),
            int(item["expiresAtEpoch"]),
        )
        for item in page.items
    ]
    return QueuePage(entries, page.last_key is None)


def get_many(request_ids: list[str]) -> dict[str, JoinRequestRecord]:
    """The requests of `request_ids` found, by id: one BatchGetItem per 100, eventually consistent
    (read after an index that is too; the caller checks each as read)."""
    found: dict[str, JoinRequestRecord] = {}
    for start in range(0, len(request_ids), 100):
        keys = [request_key(request_id) for request_id in request_ids[start : start + 100]]
        for item in dynamo.batch_get(keys, consistent=False).values():
            record = JoinRequestRecord.from_item(item)
            found[record.request_id] = record
    return found


class DuePage(NamedTuple):
    requests: list[DueRequest]
    next: Item | None  # where the next page of this shard starts; None: the shard is done


def open_due(shard: int, *, now: datetime, limit: int, start: Item | None = None) -> DuePage:
    """One page of a shard's open requests whose expiry is at or before `now` (gsi2)."""
    page = dynamo.query(
        pk=f"OPENJREQ#{shard}",
        index="gsi2",
        sk_below=f"{clock.seconds(now):012d}#~",
        limit=limit,
        start_after=start,
    )
    due = [
        DueRequest(item["requestId"], item["tenantId"], item["siteId"], item.get("poolId"))
        for item in page.items
    ]
    return DuePage(due, page.last_key)

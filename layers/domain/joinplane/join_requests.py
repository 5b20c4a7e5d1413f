"""Join requests: deferred joins waiting for an operator.

Stored as `joinplane.dal.requests.JoinRequest`. States `pending → approved → consumed`,
`pending|approved → rejected`, `pending|approved → expired`. A pending or approved request past its
`expiresAt` *reads* as expired everywhere (`state_now`), whatever the stored state says: no job has
to run for expiry to hold.

Listed per pool (and per site, for the unclaimed ones) by stored state, so a page of one state
costs the same however many requests of other states or pools exist. Without a `poolId`, a listing
merges the partitions of every pool the key may read (and of those pools' sites), and `get`,
`approve` and `reject` find the request by its id and check the key against the request's own pool
(docs/queue.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

from pydantic import BaseModel, Field

from joinplane import clock, deadline, errors, ids, observe, pools
from joinplane.dal import pools as pools_db
from joinplane.dal import requests as requests_db
from joinplane.dal.pools import PoolRecord
from joinplane.dal.requests import ApprovalRecord, JoinRequestRecord
from joinplane.errors import Aborted, InvalidArgument, InvalidState, NotFound, PermissionDenied
from joinplane.grants import Principal
from joinplane.wire import POOL_ID, STRICT, TENANT_ID

if TYPE_CHECKING:
    from joinplane import views

ID_PREFIX = "jreq"


def state_now(request: JoinRequestRecord) -> views.JoinRequestState:
    return request.state_at(clock.now())


def view(request: JoinRequestRecord, pool_required: int | None) -> views.JoinRequest:
    """A join request as every API returns it; `state` is the state as read now. `pool_required`:
    the approvals its pool requires now (None: an unclaimed request read through no pool)."""
    # Imported here: the expiry job (RetentionFunction) never shows a request, and machines brings
    # its operator models.
    from joinplane import machines

    return {
        "requestId": request.request_id,
        "tenantId": request.tenant_id,
        "siteId": request.site_id,
        "poolId": request.pool_id,
        "state": state_now(request),
        "reasons": [
            {"attestor": reason.attestor, "code": reason.code, "message": reason.message}
            for reason in request.reasons
        ],
        "machine": {"fingerprint": request.machine.fingerprint, **machines.facts_view(request.machine)},
        "csrPublicKeySha256": request.csr_public_key_sha256,
        "createdAt": request.created_at,
        "expiresAt": request.expires_at,
        "decidedAt": request.decided_at,
        "decidedBy": request.decided_by,
        "reason": request.reason,
        "consumedAt": request.consumed_at,
        "machineId": request.machine_id,
        "tokenId": request.token_id,
        "tokenDescription": request.token_description,
        "sourceIp": request.source_ip,
        "verdicts": [
            # Stored as attestors.verdict() answered it: one of its three values.
            {"attestor": v.attestor, "verdict": v.verdict}  # type: ignore[typeddict-item]
            for v in request.verdicts
        ],
        "approvals": [{"by": a.by, "at": a.at, "reason": a.reason} for a in request.approvals],
        "approvalsRequired": _required(request, pool_required),
    }


def _required(request: JoinRequestRecord, pool_required: int | None) -> int | None:
    """While pending, what the pool requires now (the next approval is judged against it); once
    decided, what the last approval was judged against, as recorded with it."""
    if state_now(request) == "pending" or request.approvals_required is None:
        return pool_required
    return request.approvals_required


def _required_of(pool: PoolRecord | None) -> int | None:
    return pool.approvals_required if pool is not None else None


# --- the joinRequests API: the approval queue --------------------------------------------------

REQUEST_ID = ids.REQUEST_ID
REASON = r"^[^\u0000-\u001f\u007f]*$"
DECIDE = "compute:join-tokens:create"
READ = "compute:join-tokens:read"


# `poolId` is the joinRequests API's required field; Joinplane also takes a request without it (or null): the
# request is then found by its id and decided against its own pool (see `_resolve`).
OPTIONAL_POOL_ID = Field(default=None, max_length=128, pattern=POOL_ID)


class GetJoinRequest(BaseModel):
    model_config = STRICT
    tenantId: str = Field(max_length=128, pattern=TENANT_ID)
    poolId: str | None = OPTIONAL_POOL_ID
    requestId: str = Field(max_length=64, pattern=REQUEST_ID)


class DecideJoinRequest(GetJoinRequest):
    reason: str | None = Field(default=None, max_length=256, pattern=REASON)


class ApproveJoinRequest(DecideJoinRequest):
    ttlSeconds: int = Field(default=3600, ge=60, le=86_400)


def _acts_for_site(pool: PoolRecord) -> bool:
    """Does the pool see and decide its site's unclaimed requests? Only while it is active: an
    archived pool takes no joins and can claim nothing, so it is no longer a window onto its site's
    queue (its own requests stay visible to it)."""
    return pool.active


def _visible(pool: PoolRecord, request_id: str) -> JoinRequestRecord:
    """A request the pool can decide: its own, or (while active) an unclaimed one of its site;
    else NOT_FOUND."""
    found = requests_db.get(request_id)
    if found is None or found.tenant_id != pool.tenant_id:
        raise NotFound("join request not found")
    if found.pool_id not in (None, pool.pool_id) or found.site_id != pool.site_id:
        raise NotFound("join request not found")
    if found.pool_id is None and not _acts_for_site(pool):
        raise NotFound("join request not found")
    return found


# Pools read a Query: DynamoDB's 1 MB a Query ends a page first for pools of over 1 KB each.
POOLS_A_QUERY = 1000


def _tenant_pools(tenant_id: str) -> list[PoolRecord]:
    """Every pool of the tenant, in poolId order: the tenant's pool listing, one Query for the
    pools of most tenants (POOLS_A_QUERY, or 1 MB)."""
    found: list[PoolRecord] = []
    after: str | None = None
    while True:
        page = pools_db.list_pools(tenant_id, after=after, limit=POOLS_A_QUERY)
        found += page.pools
        if page.complete or not page.pools:
            return found
        after = page.pools[-1].pool_id


class Reached(NamedTuple):
    """A join request found for a key, and the pool it is acted on through."""

    request: JoinRequestRecord
    pool: PoolRecord | None  # None: a site's unclaimed request, named without a poolId
    through: tuple[
        PoolRecord, ...
    ]  # the pools the key may act through (one, unless the request is unclaimed)


def _reach(
    principal: Principal, tenant_id: str, request_id: str, pool_id: str | None, permission: str
) -> Reached:
    """The request and the pool(s) the key acts on it through, with `permission`.

    With a `poolId`, as the joinRequests API has it: the pool is loaded with `permission` and the request must
    be one it can decide (`_visible`). Without one, the request is found by its id: a claimed request is
    checked against its own pool exactly as `pools.load` checks a pool (NOT_FOUND out of the key's sight,
    PERMISSION_DENIED when seen without `permission`); an unclaimed one against the active pools of its site,
    the windows onto its site's queue (`_acts_for_site`): NOT_FOUND when the key sees none, PERMISSION_DENIED
    when it holds `permission` on none."""
    if pool_id is not None:
        pool = pools.load(principal, tenant_id, pool_id, permission)
        return Reached(_visible(pool, request_id), pool, (pool,))
    principal.check_tenant(tenant_id)
    found = requests_db.get(request_id)
    if found is None or found.tenant_id != tenant_id:
        raise NotFound("join request not found")
    if found.pool_id is not None:
        owner = pools_db.get(tenant_id, found.pool_id)
        candidates = [owner] if owner is not None else []
    else:
        candidates = [p for p in _tenant_pools(tenant_id) if p.site_id == found.site_id and _acts_for_site(p)]
    seen = [p for p in candidates if principal.sees(pools.resource_of(p))]
    if not seen:
        raise NotFound("join request not found")
    through = tuple(p for p in seen if principal.can(permission, pools.resource_of(p)))
    if not through:
        raise PermissionDenied(f"this API key lacks {permission} for this join request's pool")
    return Reached(found, through[0] if found.pool_id is not None else None, through)


def get(principal: Principal, request: GetJoinRequest) -> views.JoinRequest:
    """One request, by its id: through the named pool, or (no `poolId`) through its own pool or, while
    unclaimed, an active pool of its site that the key may read."""
    found, pool, _ = _reach(principal, request.tenantId, request.requestId, request.poolId, READ)
    return view(found, _required_of(pool))


def approve(principal: Principal, request: ApproveJoinRequest) -> views.JoinRequest:
    """One approval by this key, claiming a site request for this pool, in one conditional write:
    the request stays pending until as many distinct keys approved as the pool requires at the
    moment of an approval, and the approval reaching that count approves it (docs/queue.md, "Two
    approvals"). The same key again adds nothing and is answered with the request unchanged; so is
    an approval already made for this pool. Either publishes nothing."""
    found, pool, through = _reach(principal, request.tenantId, request.requestId, request.poolId, DECIDE)
    if pool is None:
        # Approving claims a site's request for one pool: which one is the operator's choice, never
        # a guess (a pool added later must not change what the same call does).
        names = [p.pool_id for p in through]
        raise InvalidArgument(
            "invalid request: poolId: this join request is its site's and no pool has claimed it; "
            f"approving claims it for a pool, so name one: {', '.join(names)}",
            [{"field": "poolId", "reason": "required to approve a site's unclaimed request", "pools": names}],
        )
    approver = principal.key_id
    # Each lost write means another approval, a rejection or an expiry landed; a request takes at
    # most MAX_APPROVALS approvals before it is decided, so a few attempts always suffice.
    changing = Aborted("the join request kept changing while being approved; retry")
    for _ in deadline.attempts(2 + pools.MAX_APPROVALS, exhausted=changing):
        state = state_now(found)
        if state == "approved" and found.pool_id == pool.pool_id:
            return view(found, pool.approvals_required)
        if found.pool_id not in (None, pool.pool_id):
            raise NotFound("join request not found")  # claimed by another pool meanwhile
        if state != "pending":
            raise InvalidState(
                f"join request is {state}; only a pending request can be approved",
                reason=errors.JOIN_REQUEST_NOT_PENDING,
            )
        if not pool.active:
            raise InvalidState("pool is archived", reason=errors.POOL_ARCHIVED)
        mine = next((a for a in found.approvals if a.by == approver), None)
        count = len(found.approvals) + (0 if mine else 1)
        completes = count >= pool.approvals_required
        if mine is not None and not completes:
            return view(found, pool.approvals_required)  # this key approved already: still one approval
        now = clock.now()
        try:
            written = requests_db.approve(
                found,
                pool_id=pool.pool_id,
                approval=mine or ApprovalRecord(approver, clock.rfc3339(now), request.reason),
                new=mine is None,
                approvals_required=pool.approvals_required,
                completes=completes,
                expires_at=now + timedelta(seconds=request.ttlSeconds),
                now=now,
            )
        except requests_db.RequestLost as lost:
            if lost.current is None:
                raise InvalidState(
                    "join request is expired; only a pending request can be approved",
                    reason=errors.JOIN_REQUEST_NOT_PENDING,
                ) from None
            found = lost.current  # decide again on what is there now
            continue
        observe.decision(
            "join request approved" if completes else "join request approval recorded",
            "RequestDecisions",
            "approved" if completes else "approval-recorded",
            tenantId=pool.tenant_id,
            poolId=pool.pool_id,
            requestId=request.requestId,
            approvals=len(written.approvals),
            approvalsRequired=pool.approvals_required,
        )
        return view(written, pool.approvals_required)
    raise AssertionError("unreachable: attempts() raises when exhausted")


def reject(principal: Principal, request: DecideJoinRequest) -> views.JoinRequest:
    """pending or approved-but-unused → rejected. Already rejected: unchanged. The machine's later
    retry with that CSR is refused (7)."""
    changing = Aborted("the join request kept changing while being rejected; retry")
    for _ in deadline.attempts(3, exhausted=changing):
        found, pool, _ = _reach(principal, request.tenantId, request.requestId, request.poolId, DECIDE)
        state = state_now(found)
        if state == "rejected":
            return view(found, _required_of(pool))
        if state not in ("pending", "approved"):
            raise InvalidState(
                f"join request is {state}; it can no longer be rejected",
                reason=errors.JOIN_REQUEST_NOT_PENDING,
            )
        now = clock.now()
        try:
            # Conditioned on the owner as read (see requests_db.reject): a pool claiming the request
            # meanwhile makes this write fail rather than land in the wrong listing.
            written = requests_db.reject(
                found,
                decided_by=principal.key_id,
                reason=request.reason,
                now=now,
            )
        except requests_db.RequestLost as lost:
            current = lost.current
            if pool is None and current is not None and current.pool_id != found.pool_id:
                continue  # claimed meanwhile: decide again, against the pool that claimed it
            if pool is not None and current is not None and current.pool_id not in (None, pool.pool_id):
                raise NotFound("join request not found") from None  # claimed by another pool meanwhile
            if current is not None and current.state == "rejected":
                return view(current, _required_of(pool))
            if current is not None and current.pool_id != found.pool_id:
                continue  # this pool claimed it meanwhile: decide again
            state = state_now(current) if current else "expired"
            raise InvalidState(
                f"join request is {state}; it can no longer be rejected",
                reason=errors.JOIN_REQUEST_NOT_PENDING,
            ) from None
        observe.decision(
            "join request rejected",
            "RequestDecisions",
            "rejected",
            tenantId=found.tenant_id,
            poolId=pool.pool_id if pool is not None else written.pool_id,
            siteId=written.site_id,
            requestId=request.requestId,
        )
        return view(written, _required_of(pool))
    raise AssertionError("unreachable: attempts() raises when exhausted")


class ListJoinRequests(BaseModel):
    model_config = STRICT
    tenantId: str = Field(max_length=128, pattern=TENANT_ID)
    poolId: str | None = OPTIONAL_POOL_ID
    state: str = Field(default="pending", pattern="^(pending|approved|rejected|expired|consumed|all)$")
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, max_length=64, pattern=REQUEST_ID)


# Stored states whose partitions can hold a request that *reads* as the wanted state now.
_SOURCES = {
    "pending": ("pending",),
    "approved": ("approved",),
    "rejected": ("rejected",),
    "consumed": ("consumed",),
    "expired": ("expired", "pending", "approved"),
    "all": ("pending", "approved", "rejected", "consumed", "expired"),
}
# Rounds one page may spend: each round is one Query per open source partition (owners x the stored
# states in _SOURCES; a pool's listing has 2 owners, the pool and its site), so a pool's page costs
# at most 3 x 2 x |sources| Queries: 6 for one state, 18 for `expired`, 30 for `all`; a listing
# across pools multiplies by the owners it reads instead of 2. A page comes back short only when the
# rounds run out, and then carries a nextCursor (the last request examined) so the caller goes on
# where it stopped.
MAX_ROUNDS = 3

# Who a listing partition belongs to: (siteId, poolId), poolId None for the site's unclaimed requests.
Owner = tuple[str, str | None]


# Across pools (no `poolId`), a page reads at most QUERY_BUDGET request Queries after the tenant's pool
# listing (one Query per 200 pools): the partitions themselves when the key reads so few that one
# Query each fits, the tenant's queue (gsi3, pending only) otherwise. Other states keep the
# partitions and MAX_ROUNDS (docs/queue.md says what each costs).
QUERY_BUDGET = 2
# The most the tenant's queue is read at once for a narrow key (its pools' share of the queue is
# read for, up to this): about what one Query returns in its 1 MB anyway.
QUEUE_READ_MAX = 500


class Owners(NamedTuple):
    """What a listing reads: the tenant, the partitions' owners the key may see, and (across pools)
    how many pools the tenant has, against which the key's share is measured."""

    tenant_id: str
    owners: list[Owner]
    tenant_pools: int | None  # None: a listing through one pool
    # The approvals each pool requires, by poolId; under None, the named pool's, which its site's
    # unclaimed requests would need from it (none across pools: the pool that claims one decides).
    required: dict[str | None, int]


def _owners(principal: Principal, request: ListJoinRequests) -> Owners:
    """The tenant and the partitions' owners a listing reads. A pool: itself and, while active, its
    site. No pool: every pool of the tenant the key may read, and the sites of the active ones."""
    if request.poolId is not None:
        pool = pools.load(principal, request.tenantId, request.poolId, READ)
        owners: list[Owner] = [(pool.site_id, pool.pool_id)]
        if _acts_for_site(pool):
            owners.append((pool.site_id, None))
        return Owners(
            pool.tenant_id,
            owners,
            None,
            {pool.pool_id: pool.approvals_required, None: pool.approvals_required},
        )
    principal.check_tenant(request.tenantId)
    every = _tenant_pools(request.tenantId)
    readable = [p for p in every if principal.can(READ, pools.resource_of(p))]
    sites = sorted({p.site_id for p in readable if _acts_for_site(p)})
    return Owners(
        request.tenantId,
        [(p.site_id, p.pool_id) for p in readable] + [(site, None) for site in sites],
        len(every),
        {p.pool_id: p.approvals_required for p in readable},
    )


class Examined(NamedTuple):
    """A page's requests that match, up to limit + 1, and where reading stopped: `cursor` is the
    last request examined when more may follow (None: every source is read to its end)."""

    matching: list[JoinRequestRecord]
    cursor: str | None


def _matches(request: ListJoinRequests, shown_owners: set[Owner], candidate: JoinRequestRecord) -> bool:
    if (candidate.site_id, candidate.pool_id) not in shown_owners:
        return False  # another owner's request (a partition never holds one; the tenant's queue does)
    return request.state == "all" or state_now(candidate) == request.state


def _from_queue(request: ListJoinRequests, listed: Owners) -> Examined:
    """Pending requests from the tenant's queue: each Query reads the key's share of a page (a key
    of 5 pools in 200 reads 40 times the page, up to QUEUE_READ_MAX), for QUERY_BUDGET Queries;
    the entries the key may see are then read whole by key and checked again as read."""
    shown_owners = set(listed.owners)
    seen_pools = sum(1 for _, pool_id in listed.owners if pool_id is not None)
    share = max(1, listed.tenant_pools or 1) / max(1, seen_pools)
    read = min(QUEUE_READ_MAX, max(request.limit + 1, int((request.limit + 1) * share)))
    now = clock.now()
    cursor = request.cursor
    picked: list[str] = []
    named: str | None = None  # the last entry examined that the key may see
    more = True
    for _ in range(QUERY_BUDGET):
        page = requests_db.queue_page(listed.tenant_id, after=cursor, limit=read)
        for entry in page.entries:
            cursor = entry.request_id
            if (entry.site_id, entry.pool_id) not in shown_owners:
                continue
            named = entry.request_id
            if entry.pending_at(now):
                picked.append(entry.request_id)
                if len(picked) > request.limit:
                    break
        if len(picked) > request.limit:
            break
        if page.complete:
            more = False
            break
    if len(picked) > request.limit:
        # One over the page says more follow; the page itself ends at its last request.
        picked = picked[: request.limit]
        cursor = picked[-1]
    elif more and cursor is not None and cursor != named:
        cursor = _past_unseen(cursor, named, request.cursor)
    found = requests_db.get_many(picked)
    # Read after the index: a request decided meanwhile is no longer pending and is left out.
    matching = [found[i] for i in picked if i in found and _matches(request, shown_owners, found[i])]
    return Examined(matching, cursor if more else None)


def _past_unseen(examined: str, named: str | None, start: str | None) -> str:
    """Where a page that stopped on another pool's request goes on, without naming it: the end of
    the millisecond before it (a ULID's first 10 characters are its time), or the last request the
    key may see, if later. The requests after that (none of them the key's) are examined again by
    the next page. Only when that would not move past `start` (2 Queries' worth of requests in one
    millisecond) is the millisecond skipped whole."""
    stamp = examined[len(ID_PREFIX) + 1 : len(ID_PREFIX) + 11]
    millis = 0
    for char in stamp:
        millis = millis * 32 + ids.ALPHABET.index(char)
    cursor = f"{ID_PREFIX}_{ids.encode_base32(max(0, millis - 1), 10)}{ids.ALPHABET[-1] * 16}"
    if named is not None:
        cursor = max(cursor, named)
    if start is not None and cursor <= start:
        cursor = f"{ID_PREFIX}_{stamp}{ids.ALPHABET[-1] * 16}"
    return cursor


def _from_partitions(request: ListJoinRequests, listed: Owners, rounds: int) -> Examined:
    """Every source partition (owner x stored state) read after the cursor, merged by requestId up
    to the point every partition is known complete, for at most `rounds` rounds."""
    shown_owners = set(listed.owners)
    open_sources = [(owner, state) for owner in listed.owners for state in _SOURCES[request.state]]
    cursor = request.cursor
    matching: list[JoinRequestRecord] = []
    for _ in range(rounds):
        found: dict[str, JoinRequestRecord] = {}  # by id: a request moving partitions mid-round shows once
        bound: str | None = None  # every source still open is complete up to here
        for (site_id, pool_id), state in list(open_sources):
            page = requests_db.list_partition_page(
                listed.tenant_id, site_id, pool_id, state, after=cursor, limit=request.limit + 1
            )
            for listed_request in page.requests:
                found.setdefault(listed_request.request_id, listed_request)
            if page.complete:
                open_sources.remove(((site_id, pool_id), state))
            elif page.requests:
                last = page.requests[-1].request_id
                bound = last if bound is None else min(bound, last)
        for request_id in sorted(found):
            if bound is not None and request_id > bound:
                break
            if _matches(request, shown_owners, found[request_id]):
                matching.append(found[request_id])
                if len(matching) > request.limit:
                    break
        if len(matching) > request.limit or not open_sources or bound is None:
            break
        cursor = bound
    return Examined(matching, cursor if open_sources and cursor else None)


def list_requests(principal: Principal, request: ListJoinRequests) -> views.JoinRequestList:
    """A pool's own requests and its site's unclaimed ones, or (no `poolId`) those of every pool the
    key may read, oldest first, by state as read now, each once.

    Through a pool, every source partition is read (`_from_partitions`), so a page of 100 costs the
    same however many requests other pools and other states hold. Across pools, the pending queue
    is read from the tenant's queue unless the key's partitions fit the Query budget one Query
    each (docs/queue.md). Stored `pending` and `approved` are filtered on read (a request past its
    expiry reads `expired`)."""
    listed = _owners(principal, request)
    partitions = len(listed.owners) * len(_SOURCES[request.state])
    if listed.tenant_pools is None:
        examined = _from_partitions(request, listed, MAX_ROUNDS)
    elif request.state == "pending" and partitions > QUERY_BUDGET:
        examined = _from_queue(request, listed)
    elif partitions <= QUERY_BUDGET:
        examined = _from_partitions(request, listed, max(1, QUERY_BUDGET // max(1, partitions)))
    else:
        examined = _from_partitions(request, listed, MAX_ROUNDS)
    matching = examined.matching
    shown = matching[: request.limit]
    result: views.JoinRequestList = {"requests": [view(r, listed.required.get(r.pool_id)) for r in shown]}
    if len(matching) > request.limit:
        result["nextCursor"] = shown[-1].request_id
    elif examined.cursor:
        result["nextCursor"] = examined.cursor
    return result

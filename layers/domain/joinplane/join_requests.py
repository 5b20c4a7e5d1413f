"""Join requests: deferred joins waiting for an operator.

Stored as `joinplane.dal.requests.JoinRequest`. States `pending → approved → consumed`,
`pending|approved → rejected`, `pending|approved → expired`. A pending or approved request past its
`expiresAt` *reads* as expired everywhere (`state_now`), whatever the stored state says: no job has
to run for expiry to hold.

Listed per pool (and per site, for the unclaimed ones) by stored state, so a page of one state
costs the same however many requests of other states or pools exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from joinplane import clock, deadline, errors, ids, observe, pools
from joinplane.dal import requests as requests_db
from joinplane.dal.pools import Pool
from joinplane.dal.requests import JoinRequest
from joinplane.errors import Aborted, InvalidState, NotFound
from joinplane.grants import Principal
from joinplane.wire import POOL_ID, STRICT, TENANT_ID

if TYPE_CHECKING:
    from joinplane import views

ID_PREFIX = "jreq"


def state_now(request: JoinRequest) -> views.JoinRequestState:
    return request.state_at(clock.epoch())


def view(request: JoinRequest) -> views.JoinRequest:
    """A join request as every API returns it; `state` is the state as read now."""
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
    }


# --- seed 001: the approval queue -----------------------------------------------------------

# Seed 001 allows up to 52 characters after the prefix; ours are ULIDs (26).
REQUEST_ID = rf"^jreq_{ids.BASE32}{{26,52}}$"
REASON = r"^[^\u0000-\u001f\u007f]*$"
DECIDE = "compute:join-tokens:create"
READ = "compute:join-tokens:read"


class DecideJoinRequest(BaseModel):
    model_config = STRICT
    tenantId: str = Field(max_length=128, pattern=TENANT_ID)
    poolId: str = Field(max_length=128, pattern=POOL_ID)
    requestId: str = Field(max_length=64, pattern=REQUEST_ID)
    reason: str | None = Field(default=None, max_length=256, pattern=REASON)


class ApproveJoinRequest(DecideJoinRequest):
    ttlSeconds: int = Field(default=3600, ge=60, le=86_400)


def _acts_for_site(pool: Pool) -> bool:
    """Does the pool see and decide its site's unclaimed requests? Only while it is active: an
    archived pool takes no joins and can claim nothing, so it is no longer a window onto its site's
    queue (its own requests stay visible to it)."""
    return pool.active


def _visible(pool: Pool, request_id: str) -> JoinRequest:
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


def approve(principal: Principal, request: ApproveJoinRequest) -> views.JoinRequest:
    """pending → approved, claiming a site request for this pool, in one conditional write. An
    approval already made for this pool is returned unchanged (and publishes nothing)."""
    pool = pools.load(principal, request.tenantId, request.poolId, DECIDE)
    found = _visible(pool, request.requestId)
    state = state_now(found)
    if state == "approved" and found.pool_id == pool.pool_id:
        return view(found)
    if state != "pending":
        raise InvalidState(
            f"join request is {state}; only a pending request can be approved",
            reason=errors.JOIN_REQUEST_NOT_PENDING,
        )
    if not pool.active:
        raise InvalidState("pool is archived", reason=errors.POOL_ARCHIVED)
    now = clock.epoch()
    expires = int(now) + request.ttlSeconds
    try:
        written = requests_db.approve(
            request.requestId,
            tenant_id=pool.tenant_id,
            site_id=pool.site_id,
            pool_id=pool.pool_id,
            expires_at=clock.rfc3339(expires),
            expires_at_epoch=expires,
            decided_at=clock.rfc3339(now),
            decided_by=principal.key_id,
            reason=request.reason,
            now_epoch=int(now),
        )
    except requests_db.RequestLost as lost:
        current = lost.current
        if current is not None and state_now(current) == "approved" and current.pool_id == pool.pool_id:
            return view(current)  # a concurrent approval for this pool won: report what it wrote
        if current is not None and current.pool_id not in (None, pool.pool_id):
            raise NotFound("join request not found") from None
        state = state_now(current) if current else "expired"
        raise InvalidState(
            f"join request is {state}; only a pending request can be approved",
            reason=errors.JOIN_REQUEST_NOT_PENDING,
        ) from None
    observe.decision(
        "join request approved",
        "RequestDecisions",
        "approved",
        tenantId=pool.tenant_id,
        poolId=pool.pool_id,
        requestId=request.requestId,
    )
    return view(written)


def reject(principal: Principal, request: DecideJoinRequest) -> views.JoinRequest:
    """pending or approved-but-unused → rejected. Already rejected: unchanged. The machine's later
    retry with that CSR is refused (7)."""
    changing = Aborted("the join request kept changing while being rejected; retry")
    for _ in deadline.attempts(3, exhausted=changing):
        pool = pools.load(principal, request.tenantId, request.poolId, DECIDE)
        found = _visible(pool, request.requestId)
        state = state_now(found)
        if state == "rejected":
            return view(found)
        if state not in ("pending", "approved"):
            raise InvalidState(
                f"join request is {state}; it can no longer be rejected",
                reason=errors.JOIN_REQUEST_NOT_PENDING,
            )
        now = clock.epoch()
        try:
            # Conditioned on the owner as read (see requests_db.reject): a pool claiming the request
            # meanwhile makes this write fail rather than land in the wrong listing.
            written = requests_db.reject(
                found,
                decided_at=clock.rfc3339(now),
                decided_by=principal.key_id,
                reason=request.reason,
                now_epoch=int(now),
            )
        except requests_db.RequestLost as lost:
            current = lost.current
            if current is not None and current.pool_id not in (None, pool.pool_id):
                raise NotFound("join request not found") from None  # claimed by another pool meanwhile
            if current is not None and current.state == "rejected":
                return view(current)
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
            tenantId=pool.tenant_id,
            poolId=pool.pool_id,
            requestId=request.requestId,
        )
        return view(written)
    raise AssertionError("unreachable: attempts() raises when exhausted")


class ListJoinRequests(BaseModel):
    model_config = STRICT
    tenantId: str = Field(max_length=128, pattern=TENANT_ID)
    poolId: str = Field(max_length=128, pattern=POOL_ID)
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
# Rounds one page may spend: each round is one Query per source partition (2 owners x the stored
# states in _SOURCES), so a page costs at most 3 x 2 x |sources| Queries: 6 for one state, 18 for
# `expired`, 30 for `all`. A page comes back short only when the rounds run out, and then carries a
# nextCursor (the last request examined) so the caller goes on where it stopped.
MAX_ROUNDS = 3


def list_requests(principal: Principal, request: ListJoinRequests) -> views.JoinRequestList:
    """The pool's own requests and its site's unclaimed ones, oldest first, by state as read now.

    Every source partition (pool or site x stored state) is read after the cursor and the results
    merged by requestId up to the point every partition is known complete, so a page of 100 costs
    the same however many requests other pools and other states hold. Stored `pending` and
    `approved` partitions are filtered on read (a request past its expiry reads `expired`)."""
    pool = pools.load(principal, request.tenantId, request.poolId, READ)
    owners = (pool.pool_id, None) if _acts_for_site(pool) else (pool.pool_id,)
    open_sources = [(pool_id, state) for pool_id in owners for state in _SOURCES[request.state]]
    cursor = request.cursor
    matching: list[JoinRequest] = []
    for _ in range(MAX_ROUNDS):
        found: list[JoinRequest] = []
        bound: str | None = None  # every source still open is complete up to here
        for pool_id, state in list(open_sources):
            page = requests_db.list_partition_page(
                pool.tenant_id, pool.site_id, pool_id, state, after=cursor, limit=request.limit + 1
            )
            found += page.requests
            if page.complete:
                open_sources.remove((pool_id, state))
            elif page.requests:
                last = page.requests[-1].request_id
                bound = last if bound is None else min(bound, last)
        found.sort(key=lambda r: r.request_id)
        for candidate in found:
            if bound is not None and candidate.request_id > bound:
                break
            if candidate.pool_id not in (None, pool.pool_id):
                continue  # a listing partition never holds another pool's request; never show one
            if request.state == "all" or state_now(candidate) == request.state:
                matching.append(candidate)
                if len(matching) > request.limit:
                    break
        if len(matching) > request.limit or not open_sources or bound is None:
            break
        cursor = bound
    shown = matching[: request.limit]
    result: views.JoinRequestList = {"requests": [view(r) for r in shown]}
    if len(matching) > request.limit:
        result["nextCursor"] = shown[-1].request_id
    elif open_sources and cursor:
        result["nextCursor"] = cursor
    return result

"""Join requests: deferred joins waiting for an operator.

Stored item: `JREQ#<requestId>` / `JREQ`. States `pending → approved → consumed`,
`pending|approved → rejected`, `pending|approved → expired`. A pending or approved request past its
`expiresAt` *reads* as expired everywhere (`state_now`), whatever the stored state says: no job has
to run for expiry to hold.

Listing index (gsi1): `JREQS#<tenant>#POOL#<poolId>#<stored state>` for a pool's requests and
`JREQS#<tenant>#SITE#<siteId>#<stored state>` for a site's unclaimed ones, sorted by requestId; a
transition moves the item between partitions in the same write. Keeping the state in the partition
key makes a page of one state cost the same however many requests of other states or pools exist.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, Field

from joinplane import clock, errors, pools, store
from joinplane.errors import InvalidState, NotFound
from joinplane.grants import Principal
from joinplane.wire import POOL_ID, STRICT, TENANT_ID

if TYPE_CHECKING:
    from joinplane import views

ID_PREFIX = "jreq"
RETENTION_SECONDS = 30 * 86_400  # DynamoDB TTL deletes a request this long after its expiry


def request_key(request_id: str) -> tuple[str, str]:
    return f"JREQ#{request_id}", "JREQ"


def list_partition(tenant_id: str, site_id: str, pool_id: str | None, state: str) -> str:
    owner = f"POOL#{pool_id}" if pool_id else f"SITE#{site_id}"
    return f"JREQS#{tenant_id}#{owner}#{state}"


OPEN_SHARDS = 4  # the open-requests index is spread over a few partitions to keep writes cool


def open_index(request_id: str, expires_epoch: int) -> dict[str, str]:
    """gsi2 keys while a request is open: by expiry, for the retention job."""
    shard = int(hashlib.sha256(request_id.encode()).hexdigest(), 16) % OPEN_SHARDS
    return {"gsi2pk": f"OPENJREQ#{shard}", "gsi2sk": f"{expires_epoch:012d}#{request_id}"}


def state_now(item: dict[str, Any]) -> views.JoinRequestState:
    if item["state"] in ("pending", "approved") and item["expiresAtEpoch"] <= clock.epoch():
        return "expired"
    return cast("views.JoinRequestState", item["state"])


def new_item(
    *,
    request_id: str,
    tenant_id: str,
    site_id: str,
    pool_id: str | None,
    token_id: str,
    identity: str,
    csr_public_key_sha256: str | None,
    reasons: list[dict[str, str]],
    machine: dict[str, Any],
    ttl_seconds: int,
) -> dict[str, Any]:
    now = clock.epoch()
    expires = int(now) + ttl_seconds
    pk, sk = request_key(request_id)
    return {
        "pk": pk,
        "sk": sk,
        "gsi1pk": list_partition(tenant_id, site_id, pool_id, "pending"),
        "gsi1sk": request_id,
        "requestId": request_id,
        "tenantId": tenant_id,
        "siteId": site_id,
        "poolId": pool_id,
        "tokenId": token_id,
        "identity": identity,
        "state": "pending",
        "reasons": reasons,
        "machine": machine,
        "csrPublicKeySha256": csr_public_key_sha256,
        "createdAt": clock.rfc3339(now),
        "expiresAt": clock.rfc3339(expires),
        "expiresAtEpoch": expires,
        "ttl": expires + RETENTION_SECONDS,
        **open_index(request_id, expires),
    }


def view(item: dict[str, Any]) -> views.JoinRequest:
    """A join request as every API returns it; `state` is the state as read now."""
    machine = item.get("machine") or {}
    return {
        "requestId": item["requestId"],
        "tenantId": item["tenantId"],
        "siteId": item["siteId"],
        "poolId": item.get("poolId"),
        "state": state_now(item),
        "reasons": item.get("reasons", []),
        "machine": {
            "fingerprint": machine.get("fingerprint", ""),
            "hostname": machine.get("hostname", ""),
            "os": machine.get("os", ""),
            "arch": machine.get("arch", ""),
            "cpuCount": machine.get("cpuCount", 0),
            "memoryMb": machine.get("memoryMb", 0),
            "gpuCount": machine.get("gpuCount", 0),
            "hardware": machine.get("hardware", {}),
            "tpm": machine.get("tpm", {}),
        },
        "csrPublicKeySha256": item.get("csrPublicKeySha256"),
        "createdAt": item["createdAt"],
        "expiresAt": item["expiresAt"],
        "decidedAt": item.get("decidedAt"),
        "decidedBy": item.get("decidedBy"),
        "reason": item.get("reason"),
        "consumedAt": item.get("consumedAt"),
        "machineId": item.get("machineId"),
    }


# --- seed 001: the approval queue -----------------------------------------------------------

REQUEST_ID = r"^jreq_[0-9a-hjkmnp-tv-z]{26,52}$"
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


def _acts_for_site(pool: dict[str, Any]) -> bool:
    """Does the pool see and decide its site's unclaimed requests? Only while it is active: an
    archived pool takes no joins and can claim nothing, so it is no longer a window onto its site's
    queue (its own requests stay visible to it)."""
    return bool(pool["state"] == "active")


def _visible(pool: dict[str, Any], request_id: str) -> dict[str, Any]:
    """A request the pool can decide: its own, or (while active) an unclaimed one of its site;
    else NOT_FOUND."""
    item = store.get(*request_key(request_id))
    if item is None or item["tenantId"] != pool["tenantId"]:
        raise NotFound("join request not found")
    if item.get("poolId") not in (None, pool["poolId"]) or item["siteId"] != pool["siteId"]:
        raise NotFound("join request not found")
    if item.get("poolId") is None and not _acts_for_site(pool):
        raise NotFound("join request not found")
    return item


def approve(principal: Principal, request: ApproveJoinRequest) -> views.JoinRequest:
    """pending → approved, claiming a site request for this pool, in one conditional write. An
    approval already made for this pool is returned unchanged (and publishes nothing)."""
    pool = pools.load(principal, request.tenantId, request.poolId, DECIDE)
    item = _visible(pool, request.requestId)
    state = state_now(item)
    if state == "approved" and item.get("poolId") == pool["poolId"]:
        return view(item)
    if state != "pending":
        raise InvalidState(
            f"join request is {state}; only a pending request can be approved",
            reason=errors.JOIN_REQUEST_NOT_PENDING,
        )
    if pool["state"] != "active":
        raise InvalidState("pool is archived", reason=errors.POOL_ARCHIVED)
    now = clock.epoch()
    expires = int(now) + request.ttlSeconds
    values: dict[str, Any] = {
        ":approved": "approved",
        ":pending": "pending",
        ":pool": pool["poolId"],
        ":now": int(now),
        ":expiresAt": clock.rfc3339(expires),
        ":expiresAtEpoch": expires,
        ":decidedAt": clock.rfc3339(now),
        ":by": principal.key_id,
        ":partition": list_partition(pool["tenantId"], pool["siteId"], pool["poolId"], "approved"),
        ":ttl": expires + RETENTION_SECONDS,
        ":open": open_index(request.requestId, expires)["gsi2sk"],
    }
    update = (
        "SET #state = :approved, poolId = :pool, expiresAt = :expiresAt, expiresAtEpoch = :expiresAtEpoch, "
        "decidedAt = :decidedAt, decidedBy = :by, gsi1pk = :partition, #ttl = :ttl, gsi2sk = :open"
    )
    if request.reason:
        update += ", reason = :reason"
        values[":reason"] = request.reason
    try:
        written = store.update(
            *request_key(request.requestId),
            update=update,
            condition=(
                "#state = :pending AND expiresAtEpoch > :now "
                "AND (attribute_not_exists(poolId) OR poolId = :pool)"
            ),
            names={"#state": "state", "#ttl": "ttl"},
            values=values,
        )
    except store.ConditionFailed as lost:
        current = lost.current
        if (
            current is not None
            and state_now(current) == "approved"
            and current.get("poolId") == pool["poolId"]
        ):
            return view(current)  # a concurrent approval for this pool won: report what it wrote
        if current is not None and current.get("poolId") not in (None, pool["poolId"]):
            raise NotFound("join request not found") from None
        state = state_now(current) if current else "expired"
        raise InvalidState(
            f"join request is {state}; only a pending request can be approved",
            reason=errors.JOIN_REQUEST_NOT_PENDING,
        ) from None
    return view(written)


def reject(principal: Principal, request: DecideJoinRequest) -> views.JoinRequest:
    """pending or approved-but-unused → rejected. Already rejected: unchanged. The machine's later
    retry with that CSR is refused (7)."""
    pool = pools.load(principal, request.tenantId, request.poolId, DECIDE)
    item = _visible(pool, request.requestId)
    state = state_now(item)
    if state == "rejected":
        return view(item)
    if state not in ("pending", "approved"):
        raise InvalidState(
            f"join request is {state}; it can no longer be rejected", reason=errors.JOIN_REQUEST_NOT_PENDING
        )
    now = clock.epoch()
    values: dict[str, Any] = {
        ":rejected": "rejected",
        ":pending": "pending",
        ":approved": "approved",
        ":now": int(now),
        ":decidedAt": clock.rfc3339(now),
        ":by": principal.key_id,
        ":partition": list_partition(item["tenantId"], item["siteId"], item.get("poolId"), "rejected"),
    }
    update = "SET #state = :rejected, decidedAt = :decidedAt, decidedBy = :by, gsi1pk = :partition"
    removes = ["gsi2pk", "gsi2sk"]
    if request.reason:
        update += ", reason = :reason"
        values[":reason"] = request.reason
    else:
        removes.append("reason")  # an approval's reason must not read as the rejection's
    update += " REMOVE " + ", ".join(removes)
    # The owner as read: the listing partition above was chosen for it, so a pool claiming the
    # request meanwhile must make this write fail rather than land in the wrong partition.
    if item.get("poolId") is None:
        owner = "attribute_not_exists(poolId)"
    else:
        owner = "poolId = :owner"
        values[":owner"] = item["poolId"]
    try:
        written = store.update(
            *request_key(request.requestId),
            update=update,
            condition=f"(#state = :pending OR #state = :approved) AND expiresAtEpoch > :now AND {owner}",
            names={"#state": "state"},
            values=values,
        )
    except store.ConditionFailed as lost:
        current = lost.current
        if current is not None and current.get("poolId") not in (None, pool["poolId"]):
            raise NotFound("join request not found") from None  # claimed by another pool meanwhile
        if current is not None and current["state"] == "rejected":
            return view(current)
        if current is not None and current.get("poolId") != item.get("poolId"):
            return reject(principal, request)  # this pool claimed it meanwhile: decide again
        state = state_now(current) if current else "expired"
        raise InvalidState(
            f"join request is {state}; it can no longer be rejected", reason=errors.JOIN_REQUEST_NOT_PENDING
        ) from None
    return view(written)


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
    owners = (pool["poolId"], None) if _acts_for_site(pool) else (pool["poolId"],)
    open_partitions = [
        list_partition(pool["tenantId"], pool["siteId"], pool_id, state)
        for pool_id in owners
        for state in _SOURCES[request.state]
    ]
    cursor = request.cursor
    matching: list[dict[str, Any]] = []
    for _ in range(MAX_ROUNDS):
        items: list[dict[str, Any]] = []
        bound: str | None = None  # every partition still open is complete up to here
        for partition in list(open_partitions):
            page = store.query(pk=partition, index="gsi1", sk_after=cursor, limit=request.limit + 1)
            items += page.items
            if page.last_key is None:
                open_partitions.remove(partition)
            elif page.items:
                last = page.items[-1]["requestId"]
                bound = last if bound is None else min(bound, last)
        items.sort(key=lambda item: item["requestId"])
        for item in items:
            if bound is not None and item["requestId"] > bound:
                break
            if item.get("poolId") not in (None, pool["poolId"]):
                continue  # a listing partition never holds another pool's request; never show one
            if request.state == "all" or state_now(item) == request.state:
                matching.append(item)
                if len(matching) > request.limit:
                    break
        if len(matching) > request.limit or not open_partitions or bound is None:
            break
        cursor = bound
    page_items = matching[: request.limit]
    result: views.JoinRequestList = {"requests": [view(item) for item in page_items]}
    if len(matching) > request.limit:
        result["nextCursor"] = page_items[-1]["requestId"]
    elif open_partitions and cursor:
        result["nextCursor"] = cursor
    return result


def expire_due(max_items: int = 1000) -> int:
    """Mark open requests past their expiry `expired` (the retention job). Correctness never
    waits for this: such requests already read as expired. Marking them makes the transition a
    stored fact, so the stream publishes `security.join-request.expired` and the listing partitions
    stay tidy. Reads only the sparse open-requests index up to now; one conditional write each, so
    a request decided or consumed meanwhile is left alone."""
    now = int(clock.epoch())
    marked = 0
    for shard in range(OPEN_SHARDS):
        start: dict[str, Any] | None = None
        while marked < max_items:
            page = store.query(
                pk=f"OPENJREQ#{shard}",
                index="gsi2",
                sk_below=f"{now:012d}#~",
                limit=min(100, max_items - marked),
                start_after=start,
            )
            for item in page.items:
                try:
                    store.update(
                        *request_key(item["requestId"]),
                        update="SET #state = :expired, expiredAt = expiresAt, gsi1pk = :partition "
                        "REMOVE gsi2pk, gsi2sk",
                        condition="(#state = :pending OR #state = :approved) AND expiresAtEpoch <= :now",
                        names={"#state": "state"},
                        values={
                            ":expired": "expired",
                            ":pending": "pending",
                            ":approved": "approved",
                            ":now": now,
                            ":partition": list_partition(
                                item["tenantId"], item["siteId"], item.get("poolId"), "expired"
                            ),
                        },
                    )
                    marked += 1
                except store.ConditionFailed:
                    continue  # decided, consumed or already marked since the index was read
            if page.last_key is None:
                break
            start = page.last_key
    return marked

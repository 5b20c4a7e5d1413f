"""The audit trail: every security event, stored once, listed newest first.

Stored item: `AUDIT#<tenantId>` / `<occurredAt>#<eventId>`, and through gsi1 per pool
(`AUDIT#<tenantId>#POOL#<poolId>`). The sort key is deterministic for an event (its id and its
occurredAt both derive from the transition), so a redelivered event meets its own item and the
conditional put refuses it: the consumer is idempotent on `eventId` with no extra table or read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from joinplane import clock, pools, store
from joinplane.grants import Principal, Resource
from joinplane.wire import POOL_ID, STRICT, TENANT_ID

if TYPE_CHECKING:
    from joinplane import views

READ = "audit:events:read"
RETENTION_SECONDS = 90 * 86_400
CURSOR = r"^[0-9TZ:.-]{10,40}#[0-9]#evt_[0-9a-f]{32}$"
# Timestamps are whole seconds, and one transaction can make two events (a request consumed and
# its machine joined). Within one second, events sort in causal order by this rank.
RANK = {
    "security.join-request.created": 1,
    "security.join-request.approved": 2,
    "security.join-request.rejected": 2,
    "security.join-request.consumed": 3,
    "security.machine.joined": 4,
    "security.join-request.expired": 5,
    "security.machine.revoked": 6,
    "security.cluster.node-joined": 4,
}
DETAIL_TYPE = r"^security\.[a-z-]+\.[a-z-]+$"


class ListAuditEvents(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    poolId: str | None = Field(default=None, pattern=POOL_ID)
    detailType: str | None = Field(default=None, max_length=64, pattern=DETAIL_TYPE)
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, max_length=80, pattern=CURSOR)


def record(event: dict[str, Any]) -> bool:
    """Store one EventBridge event; False when it was already stored (a redelivery)."""
    detail = event["detail"]
    tenant, pool = detail["tenantId"], detail.get("poolId")
    sort_key = f"{detail['occurredAt']}#{RANK.get(event['detail-type'], 9)}#{detail['eventId']}"
    item = {
        "pk": f"AUDIT#{tenant}",
        "sk": sort_key,
        "gsi1pk": f"AUDIT#{tenant}#POOL#{pool}" if pool else None,
        "gsi1sk": sort_key if pool else None,
        "eventId": detail["eventId"],
        "detailType": event["detail-type"],
        "occurredAt": detail["occurredAt"],
        "tenantId": tenant,
        "siteId": detail.get("siteId"),
        "poolId": pool,
        "detail": detail,
        "ttl": int(clock.epoch()) + RETENTION_SECONDS,
    }
    try:
        store.put(item, condition="attribute_not_exists(pk)")
    except store.ConditionFailed:
        return False
    return True


def view(item: dict[str, Any]) -> views.AuditEvent:
    return {
        "eventId": item["eventId"],
        "detailType": item["detailType"],
        "occurredAt": item["occurredAt"],
        "tenantId": item["tenantId"],
        "siteId": item.get("siteId"),
        "poolId": item.get("poolId"),
        "detail": item["detail"],
    }


def list_events(principal: Principal, request: ListAuditEvents) -> views.AuditEventList:
    """Newest first. With poolId, the pool's events (a pool-scoped key suffices); without, the
    tenant's (a tenant-wide grant is needed)."""
    if request.poolId is not None:
        pools.load(principal, request.tenantId, request.poolId, READ)
        pk, index = f"AUDIT#{request.tenantId}#POOL#{request.poolId}", "gsi1"
    else:
        principal.authorize(READ, Resource(request.tenantId, kind="tenant"))
        pk, index = f"AUDIT#{request.tenantId}", None
    events: list[views.AuditEvent] = []
    cursor, last_key = request.cursor, None
    # A detailType filter is applied by DynamoDB after reading; a few reads fill a page.
    for _ in range(5):
        page = store.query(
            pk=pk,
            index=index,
            ascending=False,
            limit=request.limit,
            sk_below=cursor if last_key is None else None,
            start_after=last_key,
            filter="detailType = :type" if request.detailType else None,
            filter_values={":type": request.detailType} if request.detailType else None,
        )
        events += [view(item) for item in page.items]
        last_key = page.last_key
        if last_key is None or len(events) >= request.limit:
            break
    events = events[: request.limit]
    result: views.AuditEventList = {"events": events}
    if events and (last_key is not None or len(events) == request.limit):
        last = events[-1]
        result["nextCursor"] = f"{last['occurredAt']}#{RANK.get(last['detailType'], 9)}#{last['eventId']}"
    return result

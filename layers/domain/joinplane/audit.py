"""The audit trail as operators read it: every security event, newest first.

The consumer's side, storing each event once, is `joinplane.audit_trail` (no pydantic, no pools:
the consumer's cold start pays for neither).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from joinplane import pools
from joinplane.dal import audit as audit_db
from joinplane.dal.audit import AuditEventRecord
from joinplane.grants import Principal, Resource
from joinplane.wire import DETAIL_TYPE, POOL_ID, STRICT, TENANT_ID

if TYPE_CHECKING:
    from joinplane import views

READ = "audit:events:read"
# An event's sort key (`AuditEventRecord.cursor`): occurredAt, rank, eventId.
CURSOR = r"^[0-9TZ:.-]{10,40}#[0-9]#evt_[0-9a-f]{32}$"


class ListAuditEvents(BaseModel):
    model_config = STRICT
    tenantId: str = Field(pattern=TENANT_ID)
    poolId: str | None = Field(default=None, pattern=POOL_ID)
    detailType: str | None = Field(default=None, max_length=64, pattern=DETAIL_TYPE)
    limit: int = Field(default=100, ge=1, le=200)
    cursor: str | None = Field(default=None, max_length=80, pattern=CURSOR)


def view(event: AuditEventRecord) -> views.AuditEvent:
    return {
        "eventId": event.event_id,
        "detailType": event.detail_type,
        "occurredAt": event.occurred_at,
        "tenantId": event.tenant_id,
        "siteId": event.site_id,
        "poolId": event.pool_id,
        "detail": event.detail,
    }


def list_events(principal: Principal, request: ListAuditEvents) -> views.AuditEventList:
    """Newest first. With poolId, the pool's events (a pool-scoped key suffices); without, the
    tenant's (a tenant-wide grant is needed)."""
    if request.poolId is not None:
        pools.load(principal, request.tenantId, request.poolId, READ)
    else:
        principal.authorize(READ, Resource(request.tenantId, kind="tenant"))
    page = audit_db.list_events(
        request.tenantId,
        pool_id=request.poolId,
        detail_type=request.detailType,
        before=request.cursor,
        limit=request.limit,
    )
    result: views.AuditEventList = {"events": [view(event) for event in page.events]}
    if page.events and page.more:
        result["nextCursor"] = page.events[-1].cursor
    return result

"""The audit trail's writer: every security event, stored once.

Apart from `joinplane.audit` (the operator listing) so that the consumer, which only records, loads
neither pydantic nor the pools module on its cold start. Stored as `joinplane.dal.audit`
describes: once per event, so a redelivery stores nothing twice.
"""

from __future__ import annotations

from typing import Any

from joinplane import clock
from joinplane.dal import audit as audit_db
from joinplane.dal.audit import AuditEventRecord
from joinplane.settings import settings


def record(event: dict[str, Any]) -> bool:
    """Store one EventBridge event; False when it was already stored (a redelivery)."""
    detail = event["detail"]
    return audit_db.record(
        AuditEventRecord(
            event_id=detail["eventId"],
            detail_type=event["detail-type"],
            occurred_at=detail["occurredAt"],
            tenant_id=detail["tenantId"],
            site_id=detail.get("siteId"),
            pool_id=detail.get("poolId"),
            detail=detail,
            ttl=clock.seconds(clock.now()) + settings().audit_retention_days * 86_400,
        )
    )

"""POST /api/compute/auditEvents/list"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import audit, operator_api
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("AuditEventsFunction")


@routes.operation("auditEvents.list")
def list_events(request: HttpRequest) -> views.AuditEventList:
    return audit.list_events(*operator_api.parse(request, audit.ListAuditEvents))


lambda_handler = routes.handle

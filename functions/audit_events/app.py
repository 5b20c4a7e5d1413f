"""POST /api/compute/auditEvents/list"""

from typing import Any

from joinplane import audit, operator_api
from joinplane.http import HttpRequest

routes = operator_api.router("AuditEventsFunction")


@routes.operation("auditEvents.list")
def list_events(request: HttpRequest) -> dict[str, Any]:
    return audit.list_events(*operator_api.parse(request, audit.ListAuditEvents))


lambda_handler = routes.handle

"""POST /api/compute/joinRequests/{list,get,approve,reject} (the joinRequests API, plus get)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import join_requests, operator_api
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("JoinRequestsFunction")


@routes.operation("joinRequests.list")
def list_requests(request: HttpRequest) -> views.JoinRequestList:
    return join_requests.list_requests(*operator_api.parse(request, join_requests.ListJoinRequests))


@routes.operation("joinRequests.get")
def get(request: HttpRequest) -> views.JoinRequest:
    return join_requests.get(*operator_api.parse(request, join_requests.GetJoinRequest))


@routes.operation("joinRequests.approve")
def approve(request: HttpRequest) -> views.JoinRequest:
    return join_requests.approve(*operator_api.parse(request, join_requests.ApproveJoinRequest))


@routes.operation("joinRequests.reject")
def reject(request: HttpRequest) -> views.JoinRequest:
    return join_requests.reject(*operator_api.parse(request, join_requests.DecideJoinRequest))


lambda_handler = routes.handle

"""POST /api/compute/discovery/{register,list,remove}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import discovery, operator_api
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("DiscoveryFunction")


@routes.operation("discovery.register")
def register(request: HttpRequest) -> views.DiscoveryEntry:
    return discovery.register(*operator_api.parse(request, discovery.RegisterEntry))


@routes.operation("discovery.list")
def list_entries(request: HttpRequest) -> views.DiscoveryList:
    return discovery.list_entries(*operator_api.parse(request, discovery.ListEntries))


@routes.operation("discovery.remove")
def remove(request: HttpRequest) -> views.DiscoveryEntry:
    return discovery.remove(*operator_api.parse(request, discovery.RemoveEntry))


lambda_handler = routes.handle

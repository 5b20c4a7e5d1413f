"""POST /api/compute/discovery/{register,list,remove}"""

from typing import Any

from joinplane import discovery, operator_api
from joinplane.http import HttpRequest

routes = operator_api.router("DiscoveryFunction")


@routes.operation("discovery.register")
def register(request: HttpRequest) -> dict[str, Any]:
    return discovery.register(*operator_api.parse(request, discovery.RegisterEntry))


@routes.operation("discovery.list")
def list_entries(request: HttpRequest) -> dict[str, Any]:
    return discovery.list_entries(*operator_api.parse(request, discovery.ListEntries))


@routes.operation("discovery.remove")
def remove(request: HttpRequest) -> dict[str, Any]:
    return discovery.remove(*operator_api.parse(request, discovery.RemoveEntry))


lambda_handler = routes.handle

"""POST /api/compute/discovery/{register,list,remove}"""

from typing import Any

from joinplane import discovery, operator_api
from joinplane.http import HttpRequest

routes = operator_api.router()


@routes.post("/api/compute/discovery/register")
def register(request: HttpRequest) -> dict[str, Any]:
    return discovery.register(*operator_api.parse(request, discovery.RegisterEntry))


@routes.post("/api/compute/discovery/list")
def list_entries(request: HttpRequest) -> dict[str, Any]:
    return discovery.list_entries(*operator_api.parse(request, discovery.ListEntries))


@routes.post("/api/compute/discovery/remove")
def remove(request: HttpRequest) -> dict[str, Any]:
    return discovery.remove(*operator_api.parse(request, discovery.RemoveEntry))


lambda_handler = routes.handle

"""POST /api/compute/pools/{create,get,list,update,archive}"""

from typing import Any

from joinplane import operator_api, pools
from joinplane.http import HttpRequest

routes = operator_api.router("PoolsFunction")


@routes.operation("pools.create")
def create(request: HttpRequest) -> dict[str, Any]:
    return pools.create(*operator_api.parse(request, pools.CreatePool))


@routes.operation("pools.get")
def get(request: HttpRequest) -> dict[str, Any]:
    return pools.get(*operator_api.parse(request, pools.PoolRef))


@routes.operation("pools.list")
def list_pools(request: HttpRequest) -> dict[str, Any]:
    return pools.list_pools(*operator_api.parse(request, pools.ListPools))


@routes.operation("pools.update")
def update(request: HttpRequest) -> dict[str, Any]:
    return pools.update(*operator_api.parse(request, pools.UpdatePool))


@routes.operation("pools.archive")
def archive(request: HttpRequest) -> dict[str, Any]:
    return pools.archive(*operator_api.parse(request, pools.PoolRef))


lambda_handler = routes.handle

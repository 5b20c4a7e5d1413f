"""POST /api/compute/pools/{create,get,list,update,archive}"""

from typing import Any

from joinplane import operator_api, pools
from joinplane.http import HttpRequest

routes = operator_api.router()


@routes.post("/api/compute/pools/create")
def create(request: HttpRequest) -> dict[str, Any]:
    return pools.create(*operator_api.parse(request, pools.CreatePool))


@routes.post("/api/compute/pools/get")
def get(request: HttpRequest) -> dict[str, Any]:
    return pools.get(*operator_api.parse(request, pools.PoolRef))


@routes.post("/api/compute/pools/list")
def list_pools(request: HttpRequest) -> dict[str, Any]:
    return pools.list_pools(*operator_api.parse(request, pools.ListPools))


@routes.post("/api/compute/pools/update")
def update(request: HttpRequest) -> dict[str, Any]:
    return pools.update(*operator_api.parse(request, pools.UpdatePool))


@routes.post("/api/compute/pools/archive")
def archive(request: HttpRequest) -> dict[str, Any]:
    return pools.archive(*operator_api.parse(request, pools.PoolRef))


lambda_handler = routes.handle

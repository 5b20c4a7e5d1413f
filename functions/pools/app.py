"""POST /api/compute/pools/{create,get,list,update,archive}"""

from typing import Any

from joinplane import operator_api, pools

app = operator_api.resolver()


@app.post("/api/compute/pools/create")
def create() -> dict[str, Any]:
    return pools.create(*operator_api.parse(app, pools.CreatePool))


@app.post("/api/compute/pools/get")
def get() -> dict[str, Any]:
    return pools.get(*operator_api.parse(app, pools.PoolRef))


@app.post("/api/compute/pools/list")
def list_pools() -> dict[str, Any]:
    return pools.list_pools(*operator_api.parse(app, pools.ListPools))


@app.post("/api/compute/pools/update")
def update() -> dict[str, Any]:
    return pools.update(*operator_api.parse(app, pools.UpdatePool))


@app.post("/api/compute/pools/archive")
def archive() -> dict[str, Any]:
    return pools.archive(*operator_api.parse(app, pools.PoolRef))


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)

"""POST /api/compute/pools/{create,get,list,update,archive,simulatePolicy}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import operator_api, pools
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("PoolsFunction")


@routes.operation("pools.create")
def create(request: HttpRequest) -> views.Pool:
    return pools.create(*operator_api.parse(request, pools.CreatePool))


@routes.operation("pools.get")
def get(request: HttpRequest) -> views.Pool:
    return pools.get(*operator_api.parse(request, pools.PoolRef))


@routes.operation("pools.list")
def list_pools(request: HttpRequest) -> views.PoolList:
    return pools.list_pools(*operator_api.parse(request, pools.ListPools))


@routes.operation("pools.update")
def update(request: HttpRequest) -> views.Pool:
    return pools.update(*operator_api.parse(request, pools.UpdatePool))


@routes.operation("pools.archive")
def archive(request: HttpRequest) -> views.Pool:
    return pools.archive(*operator_api.parse(request, pools.PoolRef))


@routes.operation("pools.simulatePolicy")
def simulate_policy(request: HttpRequest) -> views.PolicySimulation:
    # Imported here: the policy engine and the reads of joins cost the other pool routes nothing.
    from joinplane import policy_simulation

    return policy_simulation.simulate(*operator_api.parse(request, policy_simulation.SimulatePolicy))


lambda_handler = routes.handle

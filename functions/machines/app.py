"""POST /api/compute/machines/{list,get,revoke}"""

from typing import Any

from joinplane import machines, operator_api
from joinplane.http import HttpRequest

routes = operator_api.router("MachinesFunction")


@routes.operation("machines.list")
def list_machines(request: HttpRequest) -> dict[str, Any]:
    return machines.list_machines(*operator_api.parse(request, machines.ListMachines))


@routes.operation("machines.get")
def get(request: HttpRequest) -> dict[str, Any]:
    return machines.get(*operator_api.parse(request, machines.MachineRef))


@routes.operation("machines.revoke")
def revoke(request: HttpRequest) -> dict[str, Any]:
    return machines.revoke(*operator_api.parse(request, machines.RevokeMachine))


lambda_handler = routes.handle

"""POST /api/compute/machines/{list,get,revoke}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import machines, operator_api
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("MachinesFunction")


@routes.operation("machines.list")
def list_machines(request: HttpRequest) -> views.MachineList:
    return machines.list_machines(*operator_api.parse(request, machines.ListMachines))


@routes.operation("machines.get")
def get(request: HttpRequest) -> views.Machine:
    return machines.get(*operator_api.parse(request, machines.MachineRef))


@routes.operation("machines.revoke")
def revoke(request: HttpRequest) -> views.Machine:
    return machines.revoke(*operator_api.parse(request, machines.RevokeMachine))


lambda_handler = routes.handle

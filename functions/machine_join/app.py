"""POST /machines/join and POST /machines/renew: levers9 JoinMachine's dialect (grpc-gateway JSON,
rpcStatus)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import join, join_wire, proof
from joinplane.errors import PayloadTooLarge
from joinplane.http import HttpRequest, Router

if TYPE_CHECKING:
    from joinplane import join_views

routes = Router("MachineJoinFunction", join_wire.render_error)


def _body(request: HttpRequest) -> bytes:
    if request.body_size() > join_wire.MAX_BODY_BYTES:
        raise PayloadTooLarge(f"request body is over the {join_wire.MAX_BODY_BYTES}-byte limit")
    return request.body()


@routes.operation("ControlPlaneService_JoinMachine")
def join_machine(request: HttpRequest) -> tuple[int, join_views.JoinMachineResponse]:
    return join.join_machine(
        _body(request),
        request.headers.get("authorization", ""),
        request.headers.get(proof.HEADER, ""),
        base_url=request.base_url,
        source_ip=request.source_ip,
    )


@routes.operation("Joinplane_RenewMachine")
def renew(request: HttpRequest) -> tuple[int, join_views.RenewMachineResponse]:
    # Loaded by the first renewal, not by every container's cold start: a join never needs it.
    from joinplane import renewal

    return renewal.renew(_body(request), request.headers.get(proof.HEADER, ""), base_url=request.base_url)


lambda_handler = routes.handle

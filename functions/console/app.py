"""GET /console and GET /console/{path+}: the operator console's page and assets (no auth: the page
has no privileges, every API call it makes carries the operator's key)"""

from __future__ import annotations

from joinplane import console
from joinplane.http import BinaryResponse, HttpRequest, Router

routes = Router("ConsoleFunction", console.render_error)


def _binary(served: console.Served) -> BinaryResponse:
    return BinaryResponse(served.status, served.content_type, served.body, served.headers)


@routes.operation("console.page")
def page(request: HttpRequest) -> BinaryResponse:
    return _binary(console.page(request.headers.get("if-none-match")))


@routes.operation("console.asset")
def asset(request: HttpRequest) -> BinaryResponse:
    path = request.path_parameters.get("path", "")
    return _binary(console.asset(path, request.headers.get("if-none-match")))


lambda_handler = routes.handle

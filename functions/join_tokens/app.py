"""POST /api/compute/joinTokens/{create,list,revoke}"""

from typing import Any

from joinplane import operator_api, tokens
from joinplane.http import HttpRequest

routes = operator_api.router("JoinTokensFunction")


@routes.operation("joinTokens.create")
def create(request: HttpRequest) -> dict[str, Any]:
    return tokens.create(*operator_api.parse(request, tokens.CreateJoinToken))


@routes.operation("joinTokens.list")
def list_tokens(request: HttpRequest) -> dict[str, Any]:
    return tokens.list_tokens(*operator_api.parse(request, tokens.ListJoinTokens))


@routes.operation("joinTokens.revoke")
def revoke(request: HttpRequest) -> dict[str, Any]:
    return tokens.revoke(*operator_api.parse(request, tokens.RevokeJoinToken))


lambda_handler = routes.handle

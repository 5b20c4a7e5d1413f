"""POST /api/compute/joinTokens/{create,list,revoke}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import operator_api, tokens
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("JoinTokensFunction")


@routes.operation("joinTokens.create")
def create(request: HttpRequest) -> views.JoinTokenCreated:
    return tokens.create(*operator_api.parse(request, tokens.CreateJoinToken))


@routes.operation("joinTokens.list")
def list_tokens(request: HttpRequest) -> views.JoinTokenList:
    return tokens.list_tokens(*operator_api.parse(request, tokens.ListJoinTokens))


@routes.operation("joinTokens.revoke")
def revoke(request: HttpRequest) -> views.JoinToken:
    return tokens.revoke(*operator_api.parse(request, tokens.RevokeJoinToken))


lambda_handler = routes.handle

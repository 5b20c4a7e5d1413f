"""POST /api/compute/apiKeys/{create,list,revoke,whoami}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import apikeys, operator_api
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("ApiKeysFunction")


@routes.operation("apiKeys.create")
def create(request: HttpRequest) -> views.ApiKeyCreated:
    return apikeys.create(*operator_api.parse(request, apikeys.CreateApiKey))


@routes.operation("apiKeys.list")
def list_keys(request: HttpRequest) -> views.ApiKeyList:
    return apikeys.list_keys(*operator_api.parse(request, apikeys.ListApiKeys))


@routes.operation("apiKeys.revoke")
def revoke(request: HttpRequest) -> views.ApiKey:
    return apikeys.revoke(*operator_api.parse(request, apikeys.RevokeApiKey))


@routes.operation("apiKeys.whoami")
def whoami(request: HttpRequest) -> views.ApiKey:
    return apikeys.whoami(*operator_api.parse(request, apikeys.WhoAmI))


lambda_handler = routes.handle

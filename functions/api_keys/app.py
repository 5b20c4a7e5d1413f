"""POST /api/compute/apiKeys/{create,list,revoke}"""

from typing import Any

from joinplane import apikeys, operator_api
from joinplane.http import HttpRequest

routes = operator_api.router("ApiKeysFunction")


@routes.operation("apiKeys.create")
def create(request: HttpRequest) -> dict[str, Any]:
    return apikeys.create(*operator_api.parse(request, apikeys.CreateApiKey))


@routes.operation("apiKeys.list")
def list_keys(request: HttpRequest) -> dict[str, Any]:
    return apikeys.list_keys(*operator_api.parse(request, apikeys.ListApiKeys))


@routes.operation("apiKeys.revoke")
def revoke(request: HttpRequest) -> dict[str, Any]:
    return apikeys.revoke(*operator_api.parse(request, apikeys.RevokeApiKey))


lambda_handler = routes.handle

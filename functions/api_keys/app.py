"""POST /api/compute/apiKeys/{create,list,revoke}"""

from typing import Any

from joinplane import apikeys, operator_api

app = operator_api.resolver()


@app.post("/api/compute/apiKeys/create")
def create() -> dict[str, Any]:
    return apikeys.create(*operator_api.parse(app, apikeys.CreateApiKey))


@app.post("/api/compute/apiKeys/list")
def list_keys() -> dict[str, Any]:
    return apikeys.list_keys(*operator_api.parse(app, apikeys.ListApiKeys))


@app.post("/api/compute/apiKeys/revoke")
def revoke() -> dict[str, Any]:
    return apikeys.revoke(*operator_api.parse(app, apikeys.RevokeApiKey))


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)

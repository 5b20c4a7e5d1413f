"""POST /api/compute/joinTokens/{create,list,revoke}"""

from typing import Any

from joinplane import operator_api, tokens

app = operator_api.resolver()


@app.post("/api/compute/joinTokens/create")
def create() -> dict[str, Any]:
    return tokens.create(*operator_api.parse(app, tokens.CreateJoinToken))


@app.post("/api/compute/joinTokens/list")
def list_tokens() -> dict[str, Any]:
    return tokens.list_tokens(*operator_api.parse(app, tokens.ListJoinTokens))


@app.post("/api/compute/joinTokens/revoke")
def revoke() -> dict[str, Any]:
    return tokens.revoke(*operator_api.parse(app, tokens.RevokeJoinToken))


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)

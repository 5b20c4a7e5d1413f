"""HTTP API Lambda authorizer (payload 2.0, simple responses) for the operator routes.

Every request is let through to its function, with the resolved key in the context when the key is
valid and an empty context when it is not: the function then answers 401 in the operator error
envelope, which API Gateway's own 403 body could not carry. Results are cached by API Gateway per
Authorization header for ReauthorizeEvery (300 s), so a revoked key stops working within 5 minutes.
"""

from typing import Any

from joinplane import credentials, keyauth


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    principal = keyauth.verify(credentials.bearer((event.get("headers") or {}).get("authorization", "")))
    return {"isAuthorized": True, "context": keyauth.authorizer_context(principal)}

"""HTTP API Lambda authorizer (payload 2.0, simple responses) for the operator routes.

Every request is let through to its function, with the resolved key in the context when the key is
valid and an empty context when it is not: the function then answers 401 in the operator error
envelope, which API Gateway's own 403 body could not carry. Results are cached by API Gateway per
Authorization header for ReauthorizeEvery (300 s), so a revoked key stops working within 5 minutes.
A refusal is logged and counted (AuthorizerRefusals by why), never with the presented secret.
"""

from typing import Any

from joinplane import credentials, keyauth, observe


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request_context = event.get("requestContext") or {}
    with observe.bound(correlationId=request_context.get("requestId"), route=request_context.get("routeKey")):
        resolved = keyauth.resolve(credentials.bearer((event.get("headers") or {}).get("authorization", "")))
        if resolved.principal is None:
            # The id the bearer claims, never verified: not logged as keyId, which names callers.
            observe.decision(
                "api key refused", "AuthorizerRefusals", resolved.refusal, presentedKeyId=resolved.key_id
            )
        return {"isAuthorized": True, "context": keyauth.authorizer_context(resolved.principal)}

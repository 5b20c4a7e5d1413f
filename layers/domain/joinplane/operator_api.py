"""The operator API's HTTP dialect, in one place: how a request becomes a (principal, model) pair
and how every domain error becomes `{"error": {"code", "message", "details"}}` with its status.

Handlers stay thin: `app = operator_api.resolver()`, then per route
`principal, request = operator_api.parse(app, Model)` and a call into the domain.
"""

from __future__ import annotations

import base64
import json
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from pydantic import BaseModel, ValidationError

from joinplane import apikeys
from joinplane.errors import InvalidArgument, JoinplaneError, PayloadTooLarge, Unauthenticated
from joinplane.grants import Principal

MAX_BODY_BYTES = 64 * 1024

STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "INVALID_STATE": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}

logger = Logger()
Model = TypeVar("Model", bound=BaseModel)


def error_response(code: str, message: str, details: list[dict[str, Any]] | None = None) -> Response[str]:
    body = {"error": {"code": code, "message": message, "details": details or []}}
    return Response(status_code=STATUS.get(code, 500), content_type="application/json", body=json.dumps(body))


def resolver() -> APIGatewayHttpResolver:
    app = APIGatewayHttpResolver()

    @app.exception_handler(JoinplaneError)
    def domain_error(error: JoinplaneError) -> Response[str]:
        logger.info("request refused", extra={"code": error.code, "reason": error.message})
        return error_response(error.code, error.message, error.details)

    @app.exception_handler(Exception)
    def unexpected(error: Exception) -> Response[str]:
        logger.exception("unhandled error")
        return error_response("INTERNAL", "internal error")

    @app.not_found
    def no_route(_: Exception) -> Response[str]:
        return error_response("NOT_FOUND", "no such route")

    return app


def principal(app: APIGatewayHttpResolver) -> Principal:
    """The API key the authorizer resolved; the authorizer lets unknown keys through with an
    empty context so that they get this envelope (API Gateway's own 403 body would not)."""
    context = app.current_event.request_context.authorizer.get_lambda or {}
    resolved = apikeys.principal_from_context(context)
    if resolved is None:
        raise Unauthenticated("a valid API key is required: Authorization: Bearer jpk_...")
    return resolved


def body_bytes(event: Any) -> bytes:
    raw = event.body or ""
    data = base64.b64decode(raw) if event.is_base64_encoded else raw.encode()
    if len(data) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"request body is {len(data)} bytes; the limit is {MAX_BODY_BYTES}")
    return data


def validate(model: type[Model], data: bytes) -> Model:
    """Strict JSON → model. Every failure names its field; nothing has been touched yet."""
    try:
        return model.model_validate_json(data or b"{}")
    except ValidationError as invalid:
        details = [
            {"field": ".".join(str(part) for part in error["loc"]) or "(body)", "reason": error["msg"]}
            for error in invalid.errors(include_url=False, include_input=False)
        ]
        first = details[0]
        raise InvalidArgument(f"invalid request: {first['field']}: {first['reason']}", details) from None


def parse(app: APIGatewayHttpResolver, model: type[Model]) -> tuple[Principal, Model]:
    caller = principal(app)
    return caller, validate(model, body_bytes(app.current_event))

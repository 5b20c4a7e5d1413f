"""The operator API's HTTP dialect, in one place: how a request becomes a (principal, model) pair
and how every domain error becomes `{"error": {"code", "reason", "message", "details"}}` with its status
(`reason`: joinplane.errors' catalogue, what a client switches on).

A handler file is `routes = operator_api.router("PoolsFunction")`, one function per route bound
with `@routes.operation("pools.create")` (joinplane.routes) calling `operator_api.parse(request,
Model)` and the domain, and `lambda_handler = routes.handle`.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from joinplane import keyauth
from joinplane.errors import InvalidArgument, JoinplaneError, PayloadTooLarge, RetryLater, Unauthenticated
from joinplane.grants import Principal
from joinplane.http import HttpRequest, Router, json_response, retry_headers

MAX_BODY_BYTES = 64 * 1024

# Every code of joinplane.errors has a status here (tests/api walks the catalogue): a refusal is a
# 4xx, a store too busy or an invocation out of time a 503, and only a bug is a 500, so the API's
# 5xx alarm never fires on an ordinary lost race (ABORTED, which the caller retries as is).
STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "INVALID_STATE": 409,
    "ABORTED": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
}

Model = TypeVar("Model", bound=BaseModel)


def render_error(error: JoinplaneError) -> dict[str, Any]:
    """A RetryLater (UNAVAILABLE, 503) also says when to retry: `Retry-After` and a detail
    `{"reason": "out_of_time" (or "unavailable": a dependency throttled), "retryAfterSeconds": n}`."""
    details = error.details
    if isinstance(error, RetryLater):
        details = [*details, {"reason": error.reason.lower(), "retryAfterSeconds": error.retry_after_seconds}]
    body = {
        "error": {"code": error.code, "reason": error.reason, "message": error.message, "details": details}
    }
    return json_response(STATUS.get(error.code, 500), body, retry_headers(error))


def router(function: str) -> Router:
    """`function`'s routes (its logical id in template.yaml), in the operator dialect."""
    return Router(function, render_error)


def principal(request: HttpRequest) -> Principal:
    """The API key the authorizer resolved. The authorizer lets unknown keys through with an empty
    context so that they get this envelope (API Gateway's own 403 body could not carry it)."""
    resolved = keyauth.principal_from_context(request.authorizer)
    if resolved is None:
        raise Unauthenticated("a valid API key is required: Authorization: Bearer jpk_...")
    return resolved


def _whole(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


def _integers_as_integers(data: bytes) -> bytes:
    """JSON has one number type: `75.0` is the integer 75 (JSON Schema says so, and so does the
    join dialect's protojson). Strict models still refuse `"75"` and `75.5`. Only bodies with a
    fraction or exponent pay for the second parse."""
    if not re.search(rb"[0-9][.eE]", data):
        return data
    try:
        return json.dumps(json.loads(data, parse_float=_whole)).encode()
    except (ValueError, RecursionError):
        return data  # not JSON: the model's own parser says why


def validate(model: type[Model], data: bytes) -> Model:
    """Strict JSON → model. Every failure names its field; nothing has been touched yet."""
    try:
        return model.model_validate_json(_integers_as_integers(data) or b"{}")
    except ValidationError as invalid:
        details = [
            {"field": ".".join(str(part) for part in error["loc"]) or "(body)", "reason": error["msg"]}
            for error in invalid.errors(include_url=False, include_input=False)
        ]
        first = details[0]
        raise InvalidArgument(f"invalid request: {first['field']}: {first['reason']}", details) from None


def parse(request: HttpRequest, model: type[Model]) -> tuple[Principal, Model]:
    """Authenticate, refuse oversize bodies before reading them, then validate."""
    caller = principal(request)
    if request.body_size() > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"request body is over the {MAX_BODY_BYTES}-byte limit")
    return caller, validate(model, request.body())

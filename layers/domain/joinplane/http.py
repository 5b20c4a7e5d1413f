"""A minimal router for API Gateway HTTP API events (payload format 2.0).

Why not powertools' APIGatewayHttpResolver: importing it costs ~90 ms of cold start (its package
initialiser loads every resolver, asyncio and its logger), and our budget for a whole function is
1.3x a bare boto3 client. This keeps its shape (decorated routes, one place that turns domain
errors into responses) and passes the request to each route explicitly, so one module-level router
is safe under the concurrent in-process invocations of the local runtime.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from joinplane import deadline
from joinplane.errors import Internal, JoinplaneError, NotFound, OutOfTime

logger = logging.getLogger("joinplane")


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    raw_body: str
    base64_encoded: bool
    authorizer: dict[str, Any]

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> HttpRequest:
        http = event.get("requestContext", {}).get("http", {})
        authorizer = (event.get("requestContext", {}).get("authorizer") or {}).get("lambda") or {}
        return cls(
            method=str(http.get("method", "")).upper(),
            path=str(event.get("rawPath") or http.get("path", "")),
            headers={str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()},
            raw_body=event.get("body") or "",
            base64_encoded=bool(event.get("isBase64Encoded")),
            authorizer=authorizer,
        )

    def body_size(self) -> int:
        """The body's size in bytes, without decoding it. A base64 body (API Gateway's form of a
        body that is not UTF-8) of n characters and p padding characters holds (n - p) * 3 // 4
        bytes exactly; an unpadded one ("QQ") counts the same way. Malformed base64 may count
        more than it decodes to, never less."""
        if self.base64_encoded:
            raw = self.raw_body
            padding = len(raw) - len(raw.rstrip("="))
            return (len(raw) - min(padding, 2)) * 3 // 4
        return len(self.raw_body.encode())

    def body(self) -> bytes:
        return base64.b64decode(self.raw_body) if self.base64_encoded else self.raw_body.encode()


Route = Callable[[HttpRequest], tuple[int, Any] | dict[str, Any]]
ErrorRenderer = Callable[[JoinplaneError], dict[str, Any]]


def retry_headers(error: JoinplaneError) -> dict[str, str]:
    """`Retry-After` for an error that says when to retry (OutOfTime), else nothing."""
    if isinstance(error, OutOfTime):
        return {"retry-after": str(error.retry_after_seconds)}
    return {}


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json", **(headers or {})},
        "body": json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        "isBase64Encoded": False,
    }


class Router:
    def __init__(self, render_error: ErrorRenderer) -> None:
        self._routes: dict[tuple[str, str], Route] = {}
        self._render_error = render_error

    def post(self, path: str) -> Callable[[Route], Route]:
        def register(route: Route) -> Route:
            self._routes[("POST", path)] = route
            return route

        return register

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        deadline.begin(context)
        try:
            return self._handle(event)
        finally:
            deadline.end()

    def _handle(self, event: dict[str, Any]) -> dict[str, Any]:
        request = HttpRequest.from_event(event)
        try:
            route = self._routes.get((request.method, request.path))
            if route is None:
                raise NotFound("no such route")
            result = route(request)
            if isinstance(result, tuple):
                return json_response(*result)
            return json_response(200, result)
        except JoinplaneError as refused:
            logger.info("request refused: %s %s", refused.code, refused.message)
            return self._render_error(refused)
        except Exception:
            logger.exception("unhandled error on %s %s", request.method, request.path)
            return self._render_error(Internal("internal error"))

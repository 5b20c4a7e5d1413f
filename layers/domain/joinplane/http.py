"""A minimal router for API Gateway HTTP API events (payload format 2.0).

Why not powertools' APIGatewayHttpResolver: importing it costs ~90 ms of cold start (its package
initialiser loads every resolver, asyncio and its logger), and our budget for a whole function,
import and first client, is 1.4x a bare boto3 client. This keeps its shape (decorated handlers,
one place that turns domain errors into responses) and passes the request to each route
explicitly, so one module-level router is safe under the concurrent in-process invocations of the
local runtime.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from joinplane import deadline, observe, routes
from joinplane.errors import Internal, JoinplaneError, NotFound, RetryLater


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    raw_body: str
    base64_encoded: bool
    authorizer: dict[str, Any]
    # `{caId}` of a route `/crl/{caId}`: API Gateway's pathParameters.
    path_parameters: dict[str, str] = field(default_factory=dict)
    # `https://<the domain the caller used>`: where this API is reachable, for URLs it hands out.
    base_url: str = ""
    # The caller's address as API Gateway saw it (requestContext.http.sourceIp).
    source_ip: str | None = None

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> HttpRequest:
        http = event.get("requestContext", {}).get("http", {})
        authorizer = (event.get("requestContext", {}).get("authorizer") or {}).get("lambda") or {}
        domain = str(event.get("requestContext", {}).get("domainName") or "")
        headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
        # API Gateway says https; the local runtime's gateway says http.
        scheme = "http" if headers.get("x-forwarded-proto") == "http" else "https"
        return cls(
            method=str(http.get("method", "")).upper(),
            path=str(event.get("rawPath") or http.get("path", "")),
            headers=headers,
            raw_body=event.get("body") or "",
            base64_encoded=bool(event.get("isBase64Encoded")),
            authorizer=authorizer,
            path_parameters={str(k): str(v) for k, v in (event.get("pathParameters") or {}).items()},
            base_url=f"{scheme}://{domain}" if domain else "",
            source_ip=str(http["sourceIp"]) if http.get("sourceIp") else None,
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


Handler = Callable[[HttpRequest], Any]
ErrorRenderer = Callable[[JoinplaneError], dict[str, Any]]
Renderer = Callable[[Any], dict[str, Any]]


def retry_headers(error: JoinplaneError) -> dict[str, str]:
    """`Retry-After` for an error that says when to retry (RetryLater), else nothing."""
    if isinstance(error, RetryLater):
        return {"retry-after": str(error.retry_after_seconds)}
    return {}


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json", **(headers or {})},
        "body": json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        "isBase64Encoded": False,
    }


@dataclass(frozen=True)
class BinaryResponse:
    """A handler's answer that is not JSON: passed through every dialect's renderer as it is."""

    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    def lambda_response(self) -> dict[str, Any]:
        return {
            "statusCode": self.status,
            "headers": {"content-type": self.content_type, **self.headers},
            "body": base64.b64encode(self.body).decode(),
            "isBase64Encoded": True,
        }


def json_result(result: tuple[int, Any] | dict[str, Any]) -> dict[str, Any]:
    """A handler's `(status, body)`, or a body that is a 200."""
    if isinstance(result, tuple):
        return json_response(*result)
    return json_response(200, result)


class Router:
    """One function's routes, bound from the route table (joinplane.routes): `operation(name)`
    takes the method and path from the table and refuses, at import, a name the table does not
    give this function. `unbound()` lists the table's routes no handler took (a test asks it of
    every function).

    A dialect is its two renderers: `render` turns what a handler returns into the response
    (JSON by default), `render_error` every refusal."""

    def __init__(self, function: str, render_error: ErrorRenderer, render: Renderer = json_result) -> None:
        self.function = function
        self._table = {route.operation: route for route in routes.of_function(function)}
        if not self._table:
            raise LookupError(f"{function} has no routes in joinplane.routes")
        self._handlers: dict[tuple[str, str], Handler] = {}
        self._render = render
        self._render_error = render_error

    def operation(self, *names: str) -> Callable[[Handler], Handler]:
        """Bind the decorated handler to the table's routes `names` (several: one endpoint
        served at more than one path)."""
        unknown = [name for name in names if name not in self._table]
        if not names or unknown:
            raise LookupError(f"{self.function} has no route {unknown or names} in joinplane.routes")

        def register(handler: Handler) -> Handler:
            for name in names:
                route = self._table[name]
                self._handlers[(route.method, route.path)] = handler
            return handler

        return register

    def unbound(self) -> list[str]:
        return [name for name, r in self._table.items() if (r.method, r.path) not in self._handlers]

    def handler(self, operation: str) -> Handler | None:
        route = self._table[operation]
        return self._handlers.get((route.method, route.path))

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        deadline.begin(context)
        request_context = event.get("requestContext") or {}
        principal = (request_context.get("authorizer") or {}).get("lambda") or {}
        try:
            # Every line of this invocation names the request (API Gateway's id, as in the access
            # log), its route, and for operator routes the calling key.
            with observe.bound(
                correlationId=request_context.get("requestId"),
                route=request_context.get("routeKey"),
                keyId=principal.get("keyId"),
                # The caller's tenant; a decision names the tenant it acted in as tenantId.
                keyTenantId=principal.get("tenantId"),
            ):
                return self._handle(event)
        finally:
            deadline.end()

    def _handle(self, event: dict[str, Any]) -> dict[str, Any]:
        request = HttpRequest.from_event(event)
        try:
            handler = self._handlers.get((request.method, request.path))
            if handler is None and request.path_parameters:
                # A route with path parameters: API Gateway names the route it matched.
                method, _, template = str(event.get("routeKey") or "").partition(" ")
                handler = self._handlers.get((method, template))
            if handler is None:
                raise NotFound("no such route")
            result = handler(request)
            if isinstance(result, BinaryResponse):
                return result.lambda_response()
            return self._render(result)
        except JoinplaneError as refused:
            if not observe.decided() and not _logged_by_authorizer(event, request, refused):
                observe.log(
                    "INFO",
                    "request refused",
                    code=refused.code,
                    reason=refused.reason,
                    detail=refused.message,
                )
            return self._render_error(refused)
        except Exception:
            # Answered (500), so Lambda's Errors metric never sees it: counted for its own alarm.
            observe.exception("unhandled error", method=request.method, path=request.path)
            observe.count("UnhandledErrors", outcome="internal")
            return self._render_error(Internal("internal error"))


def _logged_by_authorizer(event: dict[str, Any], request: HttpRequest, refused: JoinplaneError) -> bool:
    """A request the authorizer resolved no key for, refused for that: the authorizer logged and
    counted the refusal under the same correlationId (AuthorizerRefusals, with why). A second line
    here would add nothing but about a quarter of what junk credentials cost in log ingestion."""
    return (
        refused.code == "UNAUTHENTICATED"
        and "authorizer" in (event.get("requestContext") or {})
        and not request.authorizer
    )

"""The template's HTTP API on a local port, in the spirit of `sam local start-api`.

Everything API Gateway does between the client and the function happens here, because the
functions are written against it: route selection, the payload format 2.0 event, the Lambda
REQUEST authorizer with its identity-source check and result cache, the response mapping, and
API Gateway's own error bodies (`{"message": "Not Found"}` and friends). Which route takes a
request is `api_routes`'; reading requests off the wire and writing answers is `http_server`'s.

Overload is answered, never dropped: the listen backlog holds a burst of connections, and a
function (the authorizer included) already running its concurrency limit of invocations gets a 429
`{"message":"Too Many Requests"}` with `Retry-After`, before anything of the request ran. That is
API Gateway's throttle answer; the deployed stage sends it without `Retry-After` (docs/operating.md
says what a deployed stack answers where).

Not emulated: CORS preflight answers (the template configures none), payload format 1.0, JWT and
IAM authorizers, IAM-policy authorizer responses, stage variables, mutual TLS, the stage's and
routes' request-rate throttles, and Lambda's own 6 MB invocation payload limit (API Gateway's
10 MB request limit is kept).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import sys
import threading
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any, TextIO
from urllib.parse import parse_qsl

from joinplane import clock

from .api_routes import Authorizer, Route, routes_from_template, select_route
from .functions import FunctionError, Functions, Throttled, report_failure
from .http_server import (
    MAX_BODY_BYTES,
    READ_TIMEOUT_SECONDS,
    LocalHandler,
    Request,
    Response,
    Server,
    gateway_answer,
    handler_class,
)
from .template import Template

# What a throttled client is told to wait.
RETRY_AFTER_SECONDS = 1
# The order of the fields in API Gateway's own events.
_EVENT_ORDER = (
    "version",
    "routeKey",
    "rawPath",
    "rawQueryString",
    "cookies",
    "headers",
    "queryStringParameters",
    "requestContext",
    "body",
    "pathParameters",
    "isBase64Encoded",
)
# Hop-by-hop headers end at API Gateway, as at any proxy.
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"})
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _throttled(function: str) -> Response:
    """A function at its concurrency limit: API Gateway's throttle answer, plus a `Retry-After`
    the deployed stage does not send (an invocation frees its slot within a second or so)."""
    response = gateway_answer(429, "Too Many Requests", function)
    response.headers.append(("retry-after", str(RETRY_AFTER_SECONDS)))
    return response


class Gateway:
    """Routes requests to the template's functions as API Gateway would.

    `handle()` is the whole behaviour and needs no socket; `start()` serves it over HTTP.
    """

    def __init__(
        self,
        template: Template,
        functions: Functions,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_id: str = "1234567890",
        log: TextIO | None = None,
        read_timeout: float = READ_TIMEOUT_SECONDS,
    ) -> None:
        self.template = template
        self.functions = functions
        self.routes = routes_from_template(template, functions)
        self.host = host
        self.port = port
        self.api_id = api_id
        self.log = log or sys.stderr
        # Seconds a connection may send nothing (read when a connection opens).
        self.read_timeout = read_timeout
        self._local: list[tuple[str, re.Pattern[str], LocalHandler]] = []
        # Called with each request and its response: `make cost` counts what API Gateway bills.
        self.request_hooks: list[Callable[[Request, Response], None]] = []
        self._cache: dict[tuple[str, tuple[str, ...]], tuple[float, Any]] = {}
        self._cache_lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.local_route("GET", r"/_local/clock", self._clock)
        self.local_route("POST", r"/_local/clock", self._clock)

    # --- lifecycle ---

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the gateway is not started")
        return f"http://{self.host}:{self.port_number}"

    def bind(self) -> str:
        """Take the port, so the URL is known, without accepting connections yet: until
        `start()`, a client's connect is refused (it can retry) rather than served by a system
        that is not ready (and whose refusals the authorizer cache would keep)."""
        if self._server is None:
            server = Server((self.host, self.port), handler_class(self), bind_and_activate=False)
            server.log = self.log
            try:
                server.server_bind()
            except BaseException:
                server.server_close()
                raise
            self._server = server
        return self.url

    def start(self) -> str:
        """Listen and serve (binding first if `bind()` was not called)."""
        self.bind()
        server = self._server
        assert server is not None
        if self._thread is None:
            server.server_activate()
            self._thread = threading.Thread(
                target=server.serve_forever, name="joinplane-gateway", daemon=True
            )
            self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()  # waits for serve_forever, so only once it runs
        if self._server is not None:
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def local_route(self, method: str, path_pattern: str, handler: LocalHandler) -> None:
        """Serve a runtime-only route (`/_local/...`), matched before the template's routes."""
        self._local.append((method.upper(), re.compile(path_pattern + r"\Z"), handler))

    def clear_authorizer_cache(self) -> None:
        with self._cache_lock:
            self._cache.clear()

    # --- one request ---

    def handle(self, request: Request) -> Response:
        request_id = base64.b64encode(os.urandom(11)).decode()
        try:
            response = self._dispatch(request, request_id)
        except Exception:
            traceback.print_exc(file=self.log)
            response = gateway_answer(500, "Internal Server Error")
        response.headers.append(("apigw-requestid", request_id))
        for hook in self.request_hooks:
            hook(request, response)
        return response

    def _dispatch(self, request: Request, request_id: str) -> Response:
        for method, pattern, handler in self._local:
            found = pattern.match(request.raw_path)
            if found and method == request.method:
                return handler(request, found)
        if len(request.body) > MAX_BODY_BYTES:
            return gateway_answer(413, "Request Entity Too Large")
        selected = select_route(self.routes, request.method, request.raw_path)
        if selected is None:
            return gateway_answer(404, "Not Found")
        route, params = selected
        now = clock.epoch()
        event = self._base_event(route, params, request, request_id, now)
        if route.authorizer is not None:
            denied, authorizer_context = self._authorize(route.authorizer, event, request)
            if denied is not None:
                return denied
            event["requestContext"]["authorizer"] = authorizer_context
        if request.body:
            try:
                event["body"] = request.body.decode("utf-8")
                event["isBase64Encoded"] = False
            except UnicodeDecodeError:
                event["body"] = base64.b64encode(request.body).decode()
                event["isBase64Encoded"] = True
        event = {key: event[key] for key in _EVENT_ORDER if key in event}
        try:
            result = self.functions.invoke(route.function, event)
        except Throttled:
            return _throttled(route.function)
        except FunctionError as error:
            report_failure(route.function, error, self.log)
            response = gateway_answer(500, "Internal Server Error")
        else:
            response = self._convert(route.function, result)
        response.function = route.function
        response.route_key = route.route_key
        return response

    def _base_event(
        self, route: Route, params: dict[str, str], request: Request, request_id: str, now: float
    ) -> dict[str, Any]:
        """The fields a route event and an authorizer event share, in API Gateway's order."""
        headers: dict[str, str] = {}
        cookies: list[str] = []
        for name, value in request.headers:
            key = name.lower()
            if key == "cookie":
                cookies += [c.strip() for c in value.split(";") if c.strip()]
            elif key in _HOP_BY_HOP:
                continue
            else:
                headers[key] = f"{headers[key]},{value}" if key in headers else value
        # API Gateway adds the forwarding headers; X-Forwarded-For gets the caller appended.
        forwarded = headers.get("x-forwarded-for")
        headers["x-forwarded-for"] = f"{forwarded}, {request.source_ip}" if forwarded else request.source_ip
        headers.setdefault("x-forwarded-port", str(self.port_number))
        headers.setdefault("x-forwarded-proto", "http")
        headers.setdefault("x-amzn-trace-id", f"Root=1-{int(now):08x}-{uuid.uuid4().hex[:24]}")
        query: dict[str, str] = {}
        for key, value in parse_qsl(request.raw_query, keep_blank_values=True):
            query[key] = f"{query[key]},{value}" if key in query else value
        domain = headers.get("host", f"{self.host}:{self.port_number}")
        stamp = datetime.fromtimestamp(now, UTC)
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": route.route_key,
            "rawPath": request.raw_path,
            "rawQueryString": request.raw_query,
        }
        if cookies:
            event["cookies"] = cookies
        event["headers"] = headers
        if query:
            event["queryStringParameters"] = query
        event["requestContext"] = {
            "accountId": self.template.names.account,
            "apiId": self.api_id,
            "domainName": domain,
            "domainPrefix": domain.split(".", 1)[0].split(":", 1)[0],
            "http": {
                "method": request.method,
                "path": request.raw_path,
                "protocol": request.protocol,
                "sourceIp": request.source_ip,
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": request_id,
            "routeKey": route.route_key,
            "stage": "$default",
            "time": f"{stamp:%d}/{_MONTHS[stamp.month - 1]}/{stamp:%Y:%H:%M:%S} +0000",
            "timeEpoch": int(now * 1000),
        }
        if params:
            event["pathParameters"] = params
        event["isBase64Encoded"] = False
        return event

    @property
    def port_number(self) -> int:
        return int(self._server.server_address[1]) if self._server is not None else self.port

    def _identity(self, source: str, request: Request, event: dict[str, Any]) -> str | None:
        kind, _, name = source.partition(".")
        if source.startswith("$request.header."):
            return request.header(source.removeprefix("$request.header."))
        if source.startswith("$request.querystring."):
            query: dict[str, str] = event.get("queryStringParameters", {})
            return query.get(source.removeprefix("$request.querystring."))
        if kind == "$context":
            value: Any = event["requestContext"]
            for part in name.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            return None if value is None else str(value)
        return None  # no stage variables locally

    def _authorize(
        self, authorizer: Authorizer, event: dict[str, Any], request: Request
    ) -> tuple[Response | None, Any]:
        values = [self._identity(s, request, event) for s in authorizer.identity_sources]
        present = [v for v in values if v]
        if len(present) != len(values):
            # API Gateway answers this itself, without invoking the authorizer.
            return gateway_answer(401, "Unauthorized"), None
        key = (authorizer.name, tuple(present))
        now = clock.epoch()
        with self._cache_lock:
            cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            result = cached[1]
        else:
            authorizer_event = {
                "version": "2.0",
                "type": "REQUEST",
                "routeArn": (
                    f"arn:aws:execute-api:{self.template.names.region}:{self.template.names.account}:"
                    f"{self.api_id}/$default/{request.method}{request.raw_path}"
                ),
                "identitySource": present,
                **{k: v for k, v in event.items() if k not in ("version", "isBase64Encoded")},
            }
            try:
                result = self.functions.invoke(authorizer.function, authorizer_event)
            except Throttled:
                return _throttled(authorizer.function), None  # never cached: nothing was decided
            except FunctionError as error:
                report_failure(authorizer.function, error, self.log)
                return gateway_answer(500, "Internal Server Error", authorizer.function), None
            if authorizer.ttl_seconds > 0:
                with self._cache_lock:
                    self._cache[key] = (now + authorizer.ttl_seconds, result)
        if not isinstance(result, dict) or not isinstance(result.get("isAuthorized"), bool):
            print(
                f"[ERROR] {authorizer.function}: a simple authorizer response needs a boolean isAuthorized",
                file=self.log,
            )
            return gateway_answer(500, "Internal Server Error", authorizer.function), None
        if not result["isAuthorized"]:
            return gateway_answer(403, "Forbidden", authorizer.function), None
        return None, {"lambda": result.get("context")}

    def _convert(self, function: str, result: Any) -> Response:
        """The function's result as HTTP, by the payload format 2.0 response rules."""
        if not (isinstance(result, dict) and "statusCode" in result):
            # No statusCode: API Gateway infers 200 and a JSON body of the whole result.
            return Response.json(200, result)
        status = result["statusCode"]
        headers = result.get("headers") or {}
        cookies = result.get("cookies") or []
        body = result.get("body")
        problem = None
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
            problem = "statusCode must be an integer HTTP status"
        elif not isinstance(headers, dict) or not isinstance(cookies, list):
            problem = "headers must be an object and cookies a list"
        elif body is not None and not isinstance(body, str):
            problem = "body must be a string"
        if problem is not None:
            print(f"[ERROR] {function}: malformed Lambda proxy response: {problem}", file=self.log)
            return gateway_answer(500, "Internal Server Error")
        payload = (body or "").encode()
        if result.get("isBase64Encoded") and body:
            try:
                payload = base64.b64decode(body, validate=True)
            except ValueError:
                print(f"[ERROR] {function}: isBase64Encoded body is not base64", file=self.log)
                return gateway_answer(500, "Internal Server Error")
        pairs = [(str(k).lower(), _header_value(v)) for k, v in headers.items()]
        if not any(k == "content-type" for k, _ in pairs):
            pairs.append(("content-type", "text/plain; charset=utf-8"))
        pairs += [("set-cookie", str(c)) for c in cookies]
        return Response(status, pairs, payload)

    # --- local-only routes ---

    def _clock(self, request: Request, _: re.Match[str]) -> Response:
        if request.method == "POST":
            try:
                document = json.loads(request.body or b"null")
            except ValueError:
                document = None
            if isinstance(document, dict) and document.keys() == {"reset"} and document["reset"] is True:
                clock.reset()
                # Authorizer verdicts cached while the clock ran ahead would otherwise outlive
                # their TTL by the whole offset.
                self.clear_authorizer_cache()
                return Response.json(200, {"now": clock.rfc3339(clock.epoch()), "offsetSeconds": 0})
            seconds = document.get("advanceSeconds") if isinstance(document, dict) else None
            if (
                not isinstance(seconds, int | float)
                or isinstance(seconds, bool)
                or not math.isfinite(seconds)
                or seconds <= 0
                or document.keys() != {"advanceSeconds"}
            ):
                return gateway_answer(
                    400,
                    'body must be {"advanceSeconds": N} with N a positive number, '
                    'or {"reset": true} to go back to the real time',
                )
            clock.advance(seconds)
        offset = clock.advance(0)
        return Response.json(200, {"now": clock.rfc3339(clock.epoch()), "offsetSeconds": offset})


def _header_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

"""The template's HTTP API on a local port, in the spirit of `sam local start-api`.

Everything API Gateway does between the client and the function happens here, because the
functions are written against it: route selection, the payload format 2.0 event, the Lambda
REQUEST authorizer with its identity-source check and result cache, the response mapping, and
API Gateway's own error bodies (`{"message": "Not Found"}` and friends).

Overload is answered, never dropped: the listen backlog holds a burst of connections, and a
function (the authorizer included) already running its concurrency limit of invocations gets a 429
`{"message":"Too Many Requests"}` with `Retry-After`, before anything of the request ran. That is
API Gateway's throttle answer; the deployed stage sends it without `Retry-After` (docs/operating.md
says what a deployed stack answers where).

Not emulated: CORS preflight answers (the template configures none), payload format 1.0, JWT and
IAM authorizers, IAM-policy authorizer responses, stage variables, mutual TLS, the stage's and
routes' request-rate throttles, and Lambda's own 6 MB invocation payload limit (API Gateway's
10 MB request limit is kept).

Request framing is read strictly, since a body whose end is guessed lets the next request hide in
it: Content-Length is plain digits, chunk sizes plain hex on a bounded line, trailers bounded, and
both headers together refused. Malformed framing is a 400, a body over the limit a 413 before it is
read, a stalled body a 408; each closes the connection, and none is logged as more than its line.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import re
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO
from urllib.parse import parse_qsl, unquote

from joinplane import clock

from .functions import FunctionError, Functions, Throttled, report_failure
from .template import Template, referenced_logical_id

# API Gateway's request payload quota for HTTP APIs.
MAX_BODY_BYTES = 10 * 1024 * 1024
# Request framing (RFC 9112 §6-7), read strictly: a request whose body cannot be delimited
# exactly is refused and its connection closed, because whatever follows on the connection can
# no longer be told apart from the body (request smuggling).
_DIGITS = re.compile(rb"[0-9]+")
# chunk-size [ chunk-ext ] CRLF: hex digits only (no sign, no 0x, no underscores), extensions
# ignored, CRLF required.
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]+)[ \t]*(?:;[^\r\n]*)?\r\n")
# A chunk-size line, extensions included, and the whole trailer section are bounded; neither
# counts towards the body, and neither is buffered past its bound.
MAX_CHUNK_LINE_BYTES = 4096
MAX_TRAILER_BYTES = 16 * 1024
# A connection that sends nothing for this long is closed; a body stalled mid-way gets a 408.
READ_TIMEOUT_SECONDS = 30.0
# After refusing a request mid-body, the rest of what the client sends is read and thrown away
# for up to this long, so that it reads the answer instead of a connection reset.
_LINGER_SECONDS = 2.0
# What a throttled client is told to wait.
RETRY_AFTER_SECONDS = 1
# Connections the kernel queues until the server accepts them: socketserver's default of 5 reset
# most of a burst of 20 clients. The kernel caps it at net.core.somaxconn (4096 since Linux 5.4).
LISTEN_BACKLOG = 1024
IMPLICIT_API = "ServerlessHttpApi"
# Route selection order (most specific first), after which a specific method beats ANY.
_EXACT, _PARAMS, _GREEDY, _DEFAULT = range(4)
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


def _message(status: int, message: str, function: str | None = None) -> Response:
    """One of API Gateway's own answers, byte for byte (compact JSON)."""
    body = json.dumps({"message": message}, separators=(",", ":")).encode()
    return Response(status, [("content-type", "application/json")], body, function)


def _throttled(function: str) -> Response:
    """A function at its concurrency limit: API Gateway's throttle answer, plus a `Retry-After`
    the deployed stage does not send (an invocation frees its slot within a second or so)."""
    response = _message(429, "Too Many Requests", function)
    response.headers.append(("retry-after", str(RETRY_AFTER_SECONDS)))
    return response


@dataclass(frozen=True)
class Authorizer:
    name: str
    function: str
    identity_sources: tuple[str, ...]
    ttl_seconds: int


@dataclass(frozen=True)
class Route:
    api: str
    method: str  # upper case; ANY matches every method
    path: str  # as in the template, or "$default"
    function: str
    authorizer: Authorizer | None = None
    _segments: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def create(cls, api: str, method: str, path: str, function: str, authorizer: Authorizer | None) -> Route:
        segments = () if path == "$default" else tuple(path.strip("/").split("/"))
        return cls(api, method.upper(), path, function, authorizer, segments)

    @property
    def route_key(self) -> str:
        return "$default" if self.path == "$default" else f"{self.method} {self.path}"

    @property
    def rank(self) -> tuple[int, int, int]:
        if self.path == "$default":
            kind = _DEFAULT
        elif self._segments and self._segments[-1].endswith("+}"):
            kind = _GREEDY
        elif any(s.startswith("{") for s in self._segments):
            kind = _PARAMS
        else:
            kind = _EXACT
        literals = sum(not s.startswith("{") for s in self._segments)
        return (kind, -literals, 1 if self.method == "ANY" else 0)

    def match(self, method: str, segments: list[str]) -> dict[str, str] | None:
        """Path parameters when this route takes the request, else None."""
        if self.method not in ("ANY", method):
            return None
        if self.path == "$default":
            return {}
        params: dict[str, str] = {}
        for index, pattern in enumerate(self._segments):
            if pattern.startswith("{") and pattern.endswith("+}"):
                rest = segments[index:]
                if not rest or rest == [""]:
                    return None
                params[pattern[1:-2]] = unquote("/".join(rest))
                return params
            if index >= len(segments):
                return None
            if pattern.startswith("{") and pattern.endswith("}"):
                if segments[index] == "":
                    return None
                params[pattern[1:-1]] = unquote(segments[index])
            elif unquote(segments[index]) != pattern:
                return None
        return params if len(segments) == len(self._segments) else None


@dataclass
class Request:
    method: str
    raw_path: str
    raw_query: str
    headers: list[tuple[str, str]]
    body: bytes
    source_ip: str = "127.0.0.1"
    protocol: str = "HTTP/1.1"

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name.lower()]
        return ",".join(values) if values else None


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    function: str | None = None  # for the request log line
    route_key: str | None = None  # the template route that answered (API Gateway's routeKey)

    @classmethod
    def json(cls, status: int, document: Any) -> Response:
        return cls(status, [("content-type", "application/json")], json.dumps(document).encode())


LocalHandler = Callable[[Request, "re.Match[str]"], Response]


# --- the template's routes ---------------------------------------------------------------


def _api_properties(template: Template, api: str) -> dict[str, Any]:
    merged = dict(template.document.get("Globals", {}).get("HttpApi", {}))
    merged.update(template.resources.get(api, {}).get("Properties", {}))
    return merged


def _identity_sources(identity: dict[str, Any]) -> tuple[str, ...]:
    sources = [f"$request.header.{h}" for h in identity.get("Headers", [])]
    sources += [f"$request.querystring.{q}" for q in identity.get("QueryStrings", [])]
    sources += [f"$context.{c}" for c in identity.get("Context", [])]
    sources += [f"$stageVariables.{s}" for s in identity.get("StageVariables", [])]
    return tuple(sources)


def _authorizer(template: Template, api: str, name: str) -> Authorizer:
    definitions = _api_properties(template, api).get("Auth", {}).get("Authorizers", {})
    if name not in definitions:
        raise ValueError(f"{api}: route authorizer {name!r} is not in Auth.Authorizers")
    definition = definitions[name]
    if "JwtConfiguration" in definition or "FunctionArn" not in definition:
        raise ValueError(f"{api}.{name}: only Lambda authorizers are emulated")
    if str(definition.get("AuthorizerPayloadFormatVersion", "2.0")) != "2.0":
        raise ValueError(f"{api}.{name}: only AuthorizerPayloadFormatVersion 2.0 is emulated")
    if not definition.get("EnableSimpleResponses", False):
        raise ValueError(f"{api}.{name}: only EnableSimpleResponses: true is emulated")
    function = referenced_logical_id(definition["FunctionArn"], "Arn")
    if function is None:
        raise ValueError(f"{api}.{name}: FunctionArn must be !GetAtt <Function>.Arn of this template")
    # SAM's defaults: the Authorization header, results cached for 300 s.
    identity = definition.get("Identity", {"Headers": ["Authorization"]})
    ttl = int(template.resolve(identity.get("ReauthorizeEvery", 300)))
    return Authorizer(name, function, _identity_sources(identity), ttl)


def routes_from_template(template: Template, functions: Functions) -> list[Route]:
    routes: list[Route] = []
    for logical_id, spec in functions.specs.items():
        for event_name, event in spec.events.items():
            if event.get("Type") != "HttpApi":
                continue
            props = event.get("Properties") or {}
            api = IMPLICIT_API
            if "ApiId" in props:
                api = referenced_logical_id(props["ApiId"], "ApiId") or str(props["ApiId"])
            if str(props.get("PayloadFormatVersion", "2.0")) != "2.0":
                raise ValueError(f"{logical_id}.{event_name}: only PayloadFormatVersion 2.0 is emulated")
            path = str(template.resolve(props.get("Path", "$default")))
            method = str(template.resolve(props.get("Method", "ANY")))
            auth_name = (props.get("Auth") or {}).get("Authorizer") or (
                _api_properties(template, api).get("Auth", {}).get("DefaultAuthorizer")
            )
            authorizer = None if auth_name in (None, "NONE") else _authorizer(template, api, auth_name)
            if authorizer is not None and authorizer.function not in functions.specs:
                raise ValueError(f"{logical_id}.{event_name}: no function {authorizer.function}")
            routes.append(Route.create(api, method, path, logical_id, authorizer))
    return sorted(routes, key=lambda r: (r.path, r.method))


def select_route(routes: list[Route], method: str, raw_path: str) -> tuple[Route, dict[str, str]] | None:
    segments = raw_path.strip("/").split("/") if raw_path.strip("/") else []
    matches = [(r, p) for r in routes if (p := r.match(method, segments)) is not None]
    if not matches:
        return None
    return min(matches, key=lambda m: m[0].rank)


# --- the gateway -------------------------------------------------------------------------


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
            server = _Server((self.host, self.port), _handler_class(self), bind_and_activate=False)
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
            response = _message(500, "Internal Server Error")
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
            return _message(413, "Request Entity Too Large")
        selected = select_route(self.routes, request.method, request.raw_path)
        if selected is None:
            return _message(404, "Not Found")
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
            response = _message(500, "Internal Server Error")
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
            return _message(401, "Unauthorized"), None
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
                return _message(500, "Internal Server Error", authorizer.function), None
            if authorizer.ttl_seconds > 0:
                with self._cache_lock:
                    self._cache[key] = (now + authorizer.ttl_seconds, result)
        if not isinstance(result, dict) or not isinstance(result.get("isAuthorized"), bool):
            print(
                f"[ERROR] {authorizer.function}: a simple authorizer response needs a boolean isAuthorized",
                file=self.log,
            )
            return _message(500, "Internal Server Error", authorizer.function), None
        if not result["isAuthorized"]:
            return _message(403, "Forbidden", authorizer.function), None
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
            return _message(500, "Internal Server Error")
        payload = (body or "").encode()
        if result.get("isBase64Encoded") and body:
            try:
                payload = base64.b64decode(body, validate=True)
            except ValueError:
                print(f"[ERROR] {function}: isBase64Encoded body is not base64", file=self.log)
                return _message(500, "Internal Server Error")
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
                return _message(
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


# --- HTTP plumbing -----------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG
    # Idle keep-alive connections must not hold up shutdown.
    block_on_close = False
    allow_reuse_address = True
    log: TextIO = sys.stderr

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away mid-request is not an error of ours; anything else is a bug
        # worth its traceback, in the runtime's log rather than on bare stderr.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        print(f"[ERROR] serving a request from {client_address[0]}:", file=self.log)
        traceback.print_exc(file=self.log)


class _Refused(Exception):
    """The request cannot be read: answer this and close the connection."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _bad_request() -> _Refused:
    return _Refused(_message(400, "Bad Request"))


def _too_large() -> _Refused:
    return _Refused(_message(413, "Request Entity Too Large"))


@dataclass(frozen=True)
class _Framing:
    chunked: bool
    length: int = 0


def request_framing(content_length: list[str], transfer_encoding: list[str], cap: int) -> _Framing:
    """How the body is delimited, from every Content-Length and Transfer-Encoding header value.

    Raises `_Refused`: 400 for framing that is malformed or ambiguous (both headers, a length
    that is not digits, lengths that disagree, chunked not the last coding), 501 for a transfer
    coding other than chunked, 413 for a declared length over `cap`.
    """
    if transfer_encoding:
        if content_length:
            # RFC 9112 §6.3 lets a server reject this rather than guess; a proxy that guessed
            # the other way is how requests get smuggled.
            raise _bad_request()
        codings = [c.strip().lower() for value in transfer_encoding for c in value.split(",")]
        if codings == ["chunked"]:
            return _Framing(chunked=True)
        if codings[-1] != "chunked":
            raise _bad_request()  # the body's end cannot be found
        raise _Refused(_message(501, "Not Implemented"))
    if not content_length:
        return _Framing(chunked=False)
    values = {v.strip() for value in content_length for v in value.split(",")}
    if not all(_DIGITS.fullmatch(v.encode()) for v in values):
        raise _bad_request()  # a sign, spaces, underscores, other digits than 0-9, or nothing
    lengths = {v.lstrip("0") or "0" for v in values}
    if len(lengths) != 1:
        raise _bad_request()
    (digits,) = lengths
    # Compared as digit strings first: int() refuses strings of more than 4300 digits.
    if len(digits) > len(str(cap)) or int(digits) > cap:
        raise _too_large()
    return _Framing(chunked=False, length=int(digits))


def _read_exactly(rfile: io.BufferedIOBase, size: int) -> bytes:
    data = rfile.read(size)
    if len(data) != size:
        raise _bad_request()  # the client ended the body early
    return data


def read_chunked(rfile: io.BufferedIOBase, cap: int) -> bytes:
    """A chunked body of at most `cap` bytes, read strictly; raises `_Refused`."""
    chunks: list[bytes] = []
    total = 0
    while True:
        line = rfile.readline(MAX_CHUNK_LINE_BYTES + 1)
        found = _CHUNK_SIZE.fullmatch(line)
        if found is None:
            raise _bad_request()  # not hex, too long, a bare LF, or the connection ended
        digits = found[1].lstrip(b"0") or b"0"
        # Refused before any of the chunk is read; int() of a short hex string is cheap.
        if len(digits) > 16 or total + int(digits, 16) > cap:
            raise _too_large()
        size = int(digits, 16)
        if size == 0:
            break
        chunks.append(_read_exactly(rfile, size))
        total += size
        if _read_exactly(rfile, 2) != b"\r\n":
            raise _bad_request()
    budget = MAX_TRAILER_BYTES
    while True:  # trailer fields: bounded, read and dropped
        line = rfile.readline(budget + 1)
        budget -= len(line)
        if line == b"\r\n":
            return b"".join(chunks)
        if budget < 0 or not line.endswith(b"\r\n") or b":" not in line or line[:1] in b" \t":
            raise _bad_request()


def _handler_class(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        _linger = False

        def setup(self) -> None:
            super().setup()
            self.connection.settimeout(gateway.read_timeout)

        def finish(self) -> None:
            try:
                super().finish()
            finally:
                if self._linger:
                    _drain(self.connection)

        def parse_request(self) -> bool:
            # `GET /path` alone is HTTP/0.9 (no headers, no status line): refused at once, not
            # after waiting for headers that such a client never sends.
            words = bytes(getattr(self, "raw_requestline", b"")).split()
            if len(words) == 2 and words[0] == b"GET":
                self.command = "GET"
                self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED)
                return False
            return super().parse_request()

        def _framing(self) -> _Framing:
            return request_framing(
                self.headers.get_all("Content-Length") or [],
                self.headers.get_all("Transfer-Encoding") or [],
                MAX_BODY_BYTES,
            )

        def handle_expect_100(self) -> bool:
            # Refuse an oversized or malformed body before the client sends it.
            try:
                self._framing()
            except _Refused as refused:
                self._reply(refused.response, time.monotonic(), close=True)
                return False
            return super().handle_expect_100()

        def _read_body(self) -> bytes:
            framing = self._framing()
            if framing.chunked:
                return read_chunked(self.rfile, MAX_BODY_BYTES)
            return _read_exactly(self.rfile, framing.length) if framing.length else b""

        def _serve(self) -> None:
            started = time.monotonic()
            try:
                body = self._read_body()
            except _Refused as refused:
                self._linger = True
                self._reply(refused.response, started, close=True)
                return
            except TimeoutError:
                self._linger = True
                self._reply(_message(408, "Request Timeout"), started, close=True)
                return
            path, _, query = self.path.partition("?")
            request = Request(
                method=self.command,
                raw_path=path,
                raw_query=query,
                headers=list(self.headers.items()),
                body=body,
                source_ip=self.client_address[0],
                protocol=self.request_version,
            )
            self._reply(gateway.handle(request), started)

        def _reply(self, response: Response, started: float, close: bool = False) -> None:
            self.send_response_only(response.status)
            # The local clock's time, as API Gateway's Date is its own: a client correcting its
            # skew must see the clock the functions judge by. A function's own Date is dropped.
            self.send_header("Date", self.date_time_string(clock.epoch()))
            for name, value in response.headers:
                if name not in ("content-length", "connection", "transfer-encoding", "date"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            if close:
                self.close_connection = True
                self.send_header("Connection", "close")
            # Logged before anything goes out, so the line exists once the client has its answer.
            elapsed = (time.monotonic() - started) * 1000
            via = f" ({response.function})" if response.function else ""
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            path = getattr(self, "path", "").partition("?")[0]
            line = f"{stamp} {self.command} {path} {response.status} {elapsed:.1f} ms{via}"
            print(line, file=gateway.log, flush=True)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        # Every method reaches routing, so one no route has is API Gateway's 404, never a 501.
        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve
        do_TRACE = do_CONNECT = do_QUERY = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per request comes from _reply

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            # Malformed requests get API Gateway's JSON error shape rather than http.server's HTML.
            try:
                phrase = HTTPStatus(code).phrase
            except ValueError:
                phrase = "Error"
            # An unparseable request line leaves http.server assuming HTTP/0.9, which would send
            # the body alone, without a status line.
            self.request_version = self.protocol_version
            self._reply(_message(code, phrase), time.monotonic(), close=True)

    return Handler


def _drain(connection: socket.socket) -> None:
    """Close our side, then read and drop what the client still sends, for a bounded time."""
    deadline = time.monotonic() + _LINGER_SECONDS
    try:
        connection.shutdown(socket.SHUT_WR)
        while (remaining := deadline - time.monotonic()) > 0:
            connection.settimeout(remaining)
            if not connection.recv(65536):
                return
    except OSError:  # reset, timed out, already closed: nothing more to do
        pass

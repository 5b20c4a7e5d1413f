"""The gateway's HTTP/1.1 server: one request in, one answer out, on a thread per connection.

Request framing is read strictly, since a body whose end is guessed lets the next request hide in
it: Content-Length is plain digits, chunk sizes plain hex on a bounded line, trailers bounded, and
both headers together refused. Malformed framing is a 400, a body over the limit a 413 before it is
read, a stalled body a 408; each closes the connection, and none is logged as more than its line.
What a request means is the gateway's (`gateway.Gateway.handle`); this module only reads it and
writes the answer.
"""

from __future__ import annotations

import io
import json
import re
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, TextIO

from joinplane import clock

if TYPE_CHECKING:
    from .gateway import Gateway

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
# Connections the kernel queues until the server accepts them: socketserver's default of 5 reset
# most of a burst of 20 clients. The kernel caps it at net.core.somaxconn (4096 since Linux 5.4).
LISTEN_BACKLOG = 1024


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


def gateway_answer(status: int, text: str, function: str | None = None) -> Response:
    """One of API Gateway's own answers, byte for byte (compact JSON)."""
    body = json.dumps({"message": text}, separators=(",", ":")).encode()
    return Response(status, [("content-type", "application/json")], body, function)


class Server(ThreadingHTTPServer):
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
    return _Refused(gateway_answer(400, "Bad Request"))


def _too_large() -> _Refused:
    return _Refused(gateway_answer(413, "Request Entity Too Large"))


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
        raise _Refused(gateway_answer(501, "Not Implemented"))
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


def handler_class(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
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
                self._reply(gateway_answer(408, "Request Timeout"), started, close=True)
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

        def logmessage(self, format: str, *args: Any) -> None:
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
            self._reply(gateway_answer(code, phrase), time.monotonic(), close=True)

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

"""Request framing read strictly over raw sockets: chunked bodies, Content-Length, the body cap.

A request whose body cannot be delimited exactly gets a 400 (413 over the cap, 408 when it stalls)
and its connection is closed: nothing after it on that connection is served, the function is
never invoked, no read buffers past the cap, and no traceback reaches the log.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from joinplane_local.http_server import MAX_BODY_BYTES
from tests.support.runtime import Local

BAD_REQUEST = (400, {"message": "Bad Request"})
TOO_LARGE = (413, {"message": "Request Entity Too Large"})


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Exchange:
    answers: list[Answer]
    closed: bool  # the server closed the connection after its answers
    seconds: float


def _parse(data: bytes) -> list[Answer]:
    answers = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = int(headers["content-length"])
        answers.append(Answer(int(status_line.split()[1]), headers, rest[:length]))
        data = rest[length:]
    return answers


def exchange(
    served: Served, data: bytes, *, half_close: bool = False, then: bytes = b"", timeout: float = 10
) -> Exchange:
    """Send `data` (and `then`), read until the server closes or goes quiet for `timeout`."""
    host, port = served.local.runtime.url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=timeout) as connection:
        connection.sendall(data)
        if then:
            connection.sendall(then)
        if half_close:
            connection.shutdown(socket.SHUT_WR)
        received = b""
        closed = False
        try:
            while chunk := connection.recv(65536):
                received += chunk
            closed = True
        except TimeoutError:
            pass
        except ConnectionResetError:
            closed = True
    return Exchange(_parse(received), closed, time.monotonic() - started)


def post(headers: str, body: bytes = b"", path: str = "/items") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: local\r\n{headers}\r\n".encode() + body


def chunked(body: bytes) -> bytes:
    return post("Transfer-Encoding: chunked\r\n", body)


@dataclass
class Served:
    """The package runtime, and what it logged during this test."""

    local: Local
    start: int

    def log(self) -> str:
        return self.local.log.text()[self.start :]


@pytest.fixture
def served(fresh: Local) -> Iterator[Served]:
    watched = Served(fresh, len(fresh.log.text()))
    yield watched
    # Then, for every test here: bad framing never logs a traceback
    assert "Traceback" not in watched.log()
    assert "Exception occurred" not in watched.log()


def _refused(result: Exchange, expected: tuple[int, object] = BAD_REQUEST) -> None:
    (answer,) = result.answers
    assert (answer.status, answer.json()) == expected
    assert answer.headers["connection"] == "close"
    assert result.closed


def test_a_chunk_size_that_is_not_hex_is_a_400_without_a_traceback(served: Served) -> None:
    # When: the issue's own request
    result = exchange(served, chunked(b"zz\r\nabc\r\n0\r\n\r\n"))

    # Then
    _refused(result)
    assert "POST /items 400 " in served.log()


def test_a_negative_chunk_size_is_a_400_at_once_not_a_read_until_the_client_closes(served: Served) -> None:
    # When: the client sends -1 and keeps its side open
    result = exchange(served, chunked(b"-1\r\nabc"), timeout=10)

    # Then: answered and closed without waiting for the client
    _refused(result)
    assert result.seconds < 5


@pytest.mark.parametrize(
    "framing",
    [
        pytest.param(b"+3\r\nabc\r\n0\r\n\r\n", id="sign"),
        pytest.param(b"0x3\r\nabc\r\n0\r\n\r\n", id="0x"),
        pytest.param(b"0_3\r\nabc\r\n0\r\n\r\n", id="underscore"),
        pytest.param(b" 3\r\nabc\r\n0\r\n\r\n", id="leading-space"),
        pytest.param(b"\r\nabc\r\n0\r\n\r\n", id="empty-size"),
        pytest.param(b"3\nabc\r\n0\r\n\r\n", id="bare-LF"),
        pytest.param(b"3\r\nabcX\r\n0\r\n\r\n", id="data-longer-than-its-size"),
        pytest.param(b"3" + b";x" * 4000 + b"\r\nabc\r\n0\r\n\r\n", id="size-line-over-4-KiB"),
        pytest.param(b"3\r\nabc\r\n0\r\nno-colon\r\n\r\n", id="malformed-trailer"),
        pytest.param(
            b"3\r\nabc\r\n0\r\n" + b"X-T: v\r\n" * (16 * 1024 // 8 + 1) + b"\r\n",
            id="trailers-over-16-KiB",
        ),
    ],
)
def test_malformed_chunked_framing_is_a_400_and_nothing_after_it_is_served(
    served: Served, framing: bytes
) -> None:
    # Given: a well-formed request pipelined after the malformed one
    smuggled = b"GET /items/smuggled HTTP/1.1\r\nHost: local\r\n\r\n"

    # When
    result = exchange(served, chunked(framing), then=smuggled)

    # Then: one 400, and the pipelined request never reached a function
    _refused(result)
    assert "/items/smuggled" not in served.log()


def test_a_well_formed_chunked_body_with_extensions_and_trailers_is_delivered_whole(served: Served) -> None:
    # Given: three chunks (hex sizes, a leading zero, an extension) and a trailer, then a pipelined request
    body = b'6;name=value\r\n{"a": \r\nA\r\n1234567890\r\n01\r\n}\r\n0\r\nX-Checksum: 1\r\n\r\n'
    following = b"GET /items/next HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n"

    # When
    result = exchange(served, chunked(body), then=following)

    # Then: the body is exactly the chunks' data, and the connection's framing held for the next one
    first, second = result.answers
    assert first.status == 200
    assert first.json()["event"]["body"] == '{"a": 1234567890}'
    assert second.status == 200
    assert second.json()["event"]["pathParameters"] == {"id": "next"}


def test_a_chunk_that_would_pass_the_cap_is_refused_before_it_is_read(served: Served) -> None:
    # When: a chunk announced one byte over the cap, whose data never comes
    over = f"{MAX_BODY_BYTES + 1:x}\r\n".encode()
    result = exchange(served, chunked(over), timeout=10)

    # Then: 413 at once: the server did not wait for (or buffer) the chunk
    _refused(result, TOO_LARGE)
    assert result.seconds < 5


def test_chunks_that_add_up_past_the_cap_are_refused(served: Served) -> None:
    # Given: the cap's worth in 1 MiB chunks, then one byte more
    mib = 1024 * 1024
    piece = f"{mib:x}\r\n".encode() + b"a" * mib + b"\r\n"
    body = piece * (MAX_BODY_BYTES // mib) + b"1\r\nb\r\n0\r\n\r\n"

    # When
    result = exchange(served, chunked(body), timeout=20)

    # Then
    _refused(result, TOO_LARGE)


def test_a_huge_chunk_size_is_a_413_not_a_giant_number(served: Served) -> None:
    # When: 4,000 hex digits (the size line's bound is 4 KiB)
    result = exchange(served, chunked(b"f" * 4000 + b"\r\n"))

    # Then
    _refused(result, TOO_LARGE)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("-1", id="negative"),
        pytest.param("+3", id="sign"),
        pytest.param("1_0", id="underscore"),
        pytest.param("3 3", id="two-numbers"),
        pytest.param("", id="empty"),
        pytest.param("0x3", id="hex"),
    ],
)
def test_a_content_length_that_is_not_plain_digits_is_a_400(served: Served, value: str) -> None:
    # Given: what would follow a body of that length, if it were believed
    smuggled = b"GET /items/smuggled HTTP/1.1\r\nHost: local\r\n\r\n"

    # When
    result = exchange(served, post(f"Content-Length: {value}\r\n", b"abc"), then=smuggled)

    # Then
    _refused(result)
    assert "/items/smuggled" not in served.log()


def test_content_lengths_that_disagree_are_a_400_and_ones_that_agree_are_one(served: Served) -> None:
    # When
    disagree = exchange(served, post("Content-Length: 3\r\nContent-Length: 4\r\n", b"abcd"))
    agree = exchange(served, post("Content-Length: 3\r\nContent-Length: 03\r\nConnection: close\r\n", b"abc"))

    # Then
    _refused(disagree)
    (answer,) = agree.answers
    assert answer.status == 200
    assert answer.json()["event"]["body"] == "abc"


@pytest.mark.parametrize("value", [str(10**30), "9" * 5000, str(MAX_BODY_BYTES + 1)])
def test_a_content_length_over_the_cap_is_a_413_before_any_of_it_is_read(served: Served, value: str) -> None:
    # When: only the headers are sent
    result = exchange(served, post(f"Content-Length: {value}\r\n"), timeout=10)

    # Then
    _refused(result, TOO_LARGE)
    assert result.seconds < 5


def test_content_length_and_transfer_encoding_together_are_a_400(served: Served) -> None:
    # When
    result = exchange(
        served, post("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", b"3\r\nabc\r\n0\r\n\r\n")
    )

    # Then
    _refused(result)


def test_transfer_codings_other_than_chunked_are_refused(served: Served) -> None:
    # When
    gzip_chunked = exchange(served, post("Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"))
    chunked_gzip = exchange(served, post("Transfer-Encoding: chunked, gzip\r\n", b"0\r\n\r\n"))
    identity = exchange(served, post("Transfer-Encoding: identity\r\n", b""))

    # Then: an unknown coding is 501; a body whose end cannot be found is 400
    _refused(gzip_chunked, (501, {"message": "Not Implemented"}))
    _refused(chunked_gzip)
    _refused(identity)


def test_a_body_shorter_than_its_content_length_is_a_400_when_the_client_stops_sending(
    served: Served,
) -> None:
    # When: 3 of 100 bytes, then the client's side ends
    result = exchange(served, post("Content-Length: 100\r\n", b"abc"), half_close=True)

    # Then: the function never saw a truncated body
    _refused(result)
    assert "POST /items 400 " in served.log()
    assert "POST /items 200 " not in served.log()


def test_a_body_that_stalls_is_a_408_after_the_read_timeout(served: Served) -> None:
    # Given: a short read timeout for this test
    gateway = served.local.runtime.gateway
    saved = gateway.read_timeout
    gateway.read_timeout = 0.5
    try:
        # When: 3 of 100 bytes, then silence with the connection open
        result = exchange(served, post("Content-Length: 100\r\n", b"abc"), timeout=10)
        chunked_stall = exchange(served, chunked(b"5\r\nab"), timeout=10)
    finally:
        gateway.read_timeout = saved

    # Then
    _refused(result, (408, {"message": "Request Timeout"}))
    _refused(chunked_stall, (408, {"message": "Request Timeout"}))
    assert result.seconds < 5


def test_expect_100_continue_with_bad_framing_is_refused_before_the_body_is_sent(served: Served) -> None:
    # When: the client waits for 100 Continue before sending its body
    result = exchange(served, post("Expect: 100-continue\r\nContent-Length: -5\r\n"), timeout=10)

    # Then: a final 400, never an invitation to send
    _refused(result)


def test_an_unparseable_request_line_gets_a_status_line_not_a_bare_body(served: Served) -> None:
    # When: a line that is no request line, and an HTTP/0.9 one (no version, no headers)
    garbage = exchange(served, b"Host: local\r\n\r\n")
    ancient = exchange(served, b"GET /items/x\r\n")

    # Then: both are answered as HTTP/1.1, in API Gateway's JSON shape
    _refused(garbage)
    _refused(ancient, (505, {"message": "HTTP Version Not Supported"}))
    assert "GET /items/x 200" not in served.log()

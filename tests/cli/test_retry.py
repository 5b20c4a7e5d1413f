"""The HTTP client's retries: a throttle (API Gateway's bare 429, or the local runtime's with
Retry-After) and a 503 are asked again, after pauses spread at random and never shorter than the
server asked; other transient answers a few times; a refusal never."""

from __future__ import annotations

import email.utils
import http.server
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from joinplane_cli import api, main
from tests.support.servers import serving

THROTTLED = (429, b'{"message":"Too Many Requests"}', {})  # API Gateway's own, no Retry-After
OK = (200, b'{"ok": true}', {})


@dataclass
class Scripted:
    """Answers in order, the last one repeated; counts the requests."""

    answers: list[tuple[int, bytes, dict[str, str]]] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> tuple[int, bytes, dict[str, str]]:
        with self.lock:
            self.requests += 1
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.fixture
def scripted() -> Iterator[tuple[Scripted, str]]:
    script = Scripted()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            status, body, headers = script.next()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield script, url


def recording_retry(**options: float) -> tuple[api.Retry, list[float]]:
    pauses: list[float] = []
    return api.Retry(sleep=pauses.append, **options), pauses  # type: ignore[arg-type]


def test_api_gateways_bare_429_is_retried_with_jittered_backoff(scripted: tuple[Scripted, str]) -> None:
    # Given a server that throttles three times, as API Gateway does (no Retry-After), then answers
    script, url = scripted
    script.answers = [THROTTLED, THROTTLED, THROTTLED, OK]
    retry, pauses = recording_retry()

    # When the client posts with retries
    response = api.Client(url).post("/machines/join", {}, retry=retry)

    # Then it got the answer on the fourth request, after pauses below a doubling ceiling
    assert response.body == {"ok": True}
    assert script.requests == 4
    assert len(pauses) == 3
    assert all(0 <= pause <= ceiling for pause, ceiling in zip(pauses, [1, 2, 4], strict=True)), pauses


def test_the_local_runtimes_retry_after_is_waited_at_least(scripted: tuple[Scripted, str]) -> None:
    # Given a throttle that says when to come back, in seconds and as an HTTP date
    script, url = scripted
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    script.answers = [
        (429, b'{"message":"Too Many Requests"}', {"Retry-After": "2"}),
        (503, b'{"error": {"code": "UNAVAILABLE", "message": "busy"}}', {"Retry-After": later}),
        OK,
    ]
    retry, pauses = recording_retry()

    # When
    api.Client(url).post("/api/compute/pools/list", {}, retry=retry)

    # Then each pause is what the server asked plus a spread
    assert 2 <= pauses[0] <= 2 + 1
    assert 28 <= pauses[1] <= 30 + 2


def test_a_throttle_is_retried_more_often_than_other_transient_answers(
    scripted: tuple[Scripted, str],
) -> None:
    # Given a server that only ever throttles
    script, url = scripted
    script.answers = [THROTTLED]
    retry, _ = recording_retry(throttled_attempts=5, attempts=2)

    # When / Then it gives up after its throttle attempts, with API Gateway's answer read as a code
    with pytest.raises(api.ApiError) as raised:
        api.Client(url).post("/machines/join", {}, retry=retry)
    assert (raised.value.status, raised.value.code) == (429, "RESOURCE_EXHAUSTED")
    assert script.requests == 5

    # And a lost race (ABORTED) is asked again only its fewer times
    script.answers = [(409, json.dumps({"code": 10, "message": "lost"}).encode(), {})]
    script.requests = 0
    with pytest.raises(api.ApiError):
        api.Client(url).post("/machines/join", {}, retry=retry)
    assert script.requests == 2


@pytest.mark.parametrize(
    "answer",
    [
        (401, b'{"code": 16, "message": "join token invalid"}', {}),
        (500, b'{"message":"Internal Server Error"}', {}),
        (400, b'{"code": 3, "message": "bad csr"}', {}),
    ],
)
def test_a_refusal_or_a_bug_is_not_retried(scripted: tuple[Scripted, str], answer: tuple) -> None:
    # Given a server that refuses, or fails in a way that may have done something
    script, url = scripted
    script.answers = [answer]
    retry, pauses = recording_retry()
    # When / Then the answer is the caller's after one request, with no pause
    with pytest.raises(api.ApiError):
        api.Client(url).post("/machines/join", {}, retry=retry)
    assert (script.requests, pauses) == (1, [])


def test_without_a_retry_policy_a_throttle_is_raised_at_once(scripted: tuple[Scripted, str]) -> None:
    # Given a throttled operator command (no retry policy)
    script, url = scripted
    script.answers = [(429, b'{"message":"Too Many Requests"}', {"Retry-After": "1"})]
    # When / Then the 429 is the caller's, with when to retry
    with pytest.raises(api.ApiError) as raised:
        api.Client(url).post("/api/compute/pools/list", {})
    assert (script.requests, raised.value.code, raised.value.retry_after) == (1, "RESOURCE_EXHAUSTED", 1.0)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        ("99999999999999999999", api.RETRY_AFTER_MAX),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("", None),
        ("-1", None),
        ("1.5", None),
        ("\u00b2", None),
        ("soon", None),
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date_and_bounded(
    header: str, seconds: float | None
) -> None:
    # Given a Retry-After header value, When it is read, Then it is seconds within 0 to 60, or nothing
    assert api.retry_after(header) == seconds


def test_an_operator_command_retries_a_throttle_as_the_aws_cli_does(
    scripted: tuple[Scripted, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a server that throttles an operator command once, saying to come back at once
    script, url = scripted
    script.answers = [
        (429, b'{"message":"Too Many Requests"}', {"Retry-After": "0"}),
        (200, b'{"pools": []}', {}),
    ]

    # When the operator lists pools
    code = main.main(["pools", "list", "--url", url, "--api-key", "jpk_x", "--tenant", "t", "-o", "json"])

    # Then the command succeeded on its second request
    assert (code, script.requests) == (0, 2), capsys.readouterr().err

    # And a server that keeps throttling is reported after 3 attempts, as RESOURCE_EXHAUSTED
    script.answers = [(429, b'{"message":"Too Many Requests"}', {"Retry-After": "0"})]
    script.requests = 0
    capsys.readouterr()
    code = main.main(["pools", "list", "--url", url, "--api-key", "jpk_x", "--tenant", "t"])
    assert code != 0 and script.requests == api.OPERATOR_RETRY.throttled_attempts == 3
    assert "RESOURCE_EXHAUSTED: Too Many Requests" in capsys.readouterr().err

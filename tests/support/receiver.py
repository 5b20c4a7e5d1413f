"""A stand-in webhook receiver (a chat's incoming webhook): it records every request it gets and
answers 200, or the statuses it was told to answer first."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .servers import serving


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    answered: int

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self) -> None:
        self.url = ""
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._answers: list[int] = []

    def answer_first(self, *statuses: int) -> None:
        """Answer the next requests with these statuses, in order; 200 after them."""
        with self._lock:
            self._answers = list(statuses)

    def reset(self) -> None:
        with self._lock:
            self._received.clear()
            self._answers.clear()

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def delivered(self) -> list[Received]:
        return [r for r in self.received if 200 <= r.answered < 300]

    def _take(self, method: str, path: str, headers: dict[str, str], body: bytes) -> int:
        with self._lock:
            status = self._answers.pop(0) if self._answers else 200
            self._received.append(Received(method, path, headers, body, status))
            return status


@contextmanager
def receiving() -> Iterator[Receiver]:
    """A receiver on a free port of 127.0.0.1; `receiver.url` is its base URL."""
    receiver = Receiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            headers = {name.lower(): value for name, value in self.headers.items()}
            status = receiver._take(self.command, self.path, headers, body)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_POST = do_PUT = do_GET = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with serving(Handler) as url:
        receiver.url = url
        yield receiver

"""One local runtime over the fixture template for the whole `tests/local` package.

The fixture functions keep what they receive in module-level lists; `fresh` empties them, the
authorizer cache and the clock before every test, so tests do not see each other's traffic.
"""

from __future__ import annotations

import http.client
import io
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from joinplane import clock
from joinplane_local.runtime import Runtime, start_runtime

FIXTURE_TEMPLATE = Path(__file__).parent / "fixtures" / "template.yaml"


class Tee(io.TextIOBase):
    """The runtime's log: kept for assertions and still shown on stderr."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._parts.append(text)
        sys.stderr.write(text)
        return len(text)

    def text(self) -> str:
        with self._lock:
            return "".join(self._parts)


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name.lower()]
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Local:
    runtime: Runtime
    log: Tee

    def call(
        self,
        method: str,
        path: str,
        body: bytes | str | dict[str, Any] | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> Reply:
        """One request over a real socket; repeated headers stay repeated (urllib merges them)."""
        host, port = self.runtime.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=15)
        try:
            payload = json.dumps(body).encode() if isinstance(body, dict) else body
            payload = payload.encode() if isinstance(payload, str) else payload
            connection.putrequest(method, path)
            for name, value in headers or []:
                connection.putheader(name, value)
            if payload is not None:
                connection.putheader("Content-Length", str(len(payload)))
            connection.endheaders(payload)
            response = connection.getresponse()
            return Reply(response.status, response.getheaders(), response.read())
        finally:
            connection.close()

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.runtime.endpoint_url, region_name="us-east-1")

    def module(self, logical_id: str) -> Any:
        return self.runtime.functions.module(logical_id)


def eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy; its last value on success."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not true within {timeout} s: {check}")
        time.sleep(interval)


@pytest.fixture(scope="package")
def local() -> Iterator[Local]:
    log = Tee()
    runtime = start_runtime(port=0, template_path=FIXTURE_TEMPLATE, seed=False, log=log)
    try:
        yield Local(runtime, log)
    finally:
        runtime.stop()


_STATE = {
    "Gatekeeper": ("CALLS",),
    "StreamConsumer": ("BATCHES", "PROCESSED"),
    "RuleConsumer": ("RECEIVED", "ATTEMPTS"),
    "Ticker": ("RUNS",),
}


@pytest.fixture
def fresh(local: Local) -> Iterator[Local]:
    assert local.runtime.drain(10), "the previous test left deliveries behind"
    clock.reset()
    local.runtime.gateway.clear_authorizer_cache()
    for logical_id, names in _STATE.items():
        module = local.module(logical_id)
        for name in names:
            getattr(module, name).clear()
    yield local
    clock.reset()

"""The local runtime in tests: the one way to start `joinplane_local` (`local_runtime`), and the
clients tests speak to a running one with: over a raw socket (`Local`), as an HTTP API client
(`Http`), and as a user at a terminal running the `joinplane` CLI (`Cli`)."""

from __future__ import annotations

import http.client
import io
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import boto3

from joinplane_local.runtime import Runtime, start_runtime
from joinplane_local.template import TEMPLATE

# The template tests/local runs: small functions that show the runtime's behaviour, not the product's.
FIXTURE_TEMPLATE = Path(__file__).resolve().parents[1] / "local" / "fixtures" / "template.yaml"


@contextmanager
def local_runtime(
    *,
    template_path: Path = TEMPLATE,
    seed: bool = True,
    log: TextIO | None = None,
    parameters: dict[str, str] | None = None,
) -> Iterator[Runtime]:
    """`make run`'s runtime (the project's template, seeded with the dev tenant's admin key) unless
    told otherwise, on a free port; stopped, and its tables deleted, when the block ends.
    `parameters` set template parameters, as `make run`'s options do (e.g. `WebhookUrl`)."""
    with start_runtime(
        port=0, template_path=template_path, seed=seed, log=log or io.StringIO(), parameters=parameters
    ) as running:
        yield running


# --- over a raw socket ---------------------------------------------------------------------------


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
class WireReply:
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
    ) -> WireReply:
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
            return WireReply(response.status, response.getheaders(), response.read())
        finally:
            connection.close()

    def client(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.runtime.endpoint_url, region_name="us-east-1")

    def module(self, logical_id: str) -> Any:
        return self.runtime.functions.module(logical_id)


# --- as an HTTP API client ---------------------------------------------------------------------


@dataclass
class Http:
    runtime: Runtime

    @property
    def admin(self) -> str:
        assert self.runtime.admin_key
        return self.runtime.admin_key

    def post(
        self,
        path: str,
        body: Any,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, Any]:
        all_headers = {"content-type": "application/json", **(headers or {})}
        if key is not None:
            all_headers["authorization"] = f"Bearer {key}"
        data = raw if raw is not None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.runtime.url + path, data=data, method="POST", headers=all_headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def advance(self, seconds: float) -> None:
        assert self.post("/_local/clock", {"advanceSeconds": seconds})[0] == 200

    def run_schedule(self, function: str) -> Any:
        status, body = self.post(f"/_local/schedules/{function}/run", {})
        assert status == 200, body
        return body


# --- as a user running the joinplane CLI --------------------------------------------------------


SCRIPT = Path(sys.executable).parent / "joinplane"


def command() -> list[str]:
    """The console script `make test`'s set-up installs; the module when it is missing."""
    return [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "joinplane_cli.main"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Cli:
    runtime: Runtime
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 60, env: dict[str, str] | None = None) -> Result:
        done = subprocess.run(
            [*command(), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def ok(self, *args: str) -> Result:
        result = self.run(*args)
        assert result.code == 0, f"joinplane {' '.join(args)} exited {result.code}: {result.err}{result.out}"
        return result

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*command(), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            stdin=subprocess.DEVNULL,
        )

    def new_pool(self, **options: str) -> str:
        pool = f"p-{uuid.uuid4().hex[:10]}"
        extra = [item for name, value in options.items() for item in (f"--{name.replace('_', '-')}", value)]
        self.ok("pools", "create", pool, "--site", "site-cli", *extra)
        return pool

    def new_token(self, pool: str, *extra: str) -> str:
        return str(self.ok("tokens", "create", "--pool", pool, *extra, "-o", "json").json()["token"])

"""One local runtime (`make run`'s, in-process) for the end-to-end tests, spoken to over HTTP."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from joinplane_local.runtime import Runtime, start_runtime
from tests.support import openssl_csr


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


@pytest.fixture(scope="session")
def http() -> Iterator[Http]:
    runtime = start_runtime(port=0, log=io.StringIO())
    try:
        yield Http(runtime)
    finally:
        runtime.stop()


def new_csr(directory: Path) -> str:
    return openssl_csr(directory, "/CN=e2e")

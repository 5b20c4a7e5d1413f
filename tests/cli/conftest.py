"""A local runtime for the CLI's end-to-end tests, and a way to run `joinplane` against it as a user
would: the installed console script in a subprocess, configured through its environment."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from joinplane import clock
from joinplane_local.runtime import Runtime, start_runtime

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


@pytest.fixture(scope="package")
def runtime() -> Iterator[Runtime]:
    with start_runtime(port=0, log=io.StringIO()) as running:
        yield running


@pytest.fixture
def cli(runtime: Runtime) -> Iterator[Cli]:
    assert runtime.admin_key is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOINPLANE_")}
    env.update(
        JOINPLANE_URL=runtime.url,
        JOINPLANE_API_KEY=runtime.admin_key,
        JOINPLANE_TENANT="dev",
        PYTHONUNBUFFERED="1",
    )
    yield Cli(runtime, env)
    clock.reset()  # a test that moved the server's clock must not move the next one's

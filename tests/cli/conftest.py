"""A local runtime for the CLI's end-to-end tests, and a way to run `joinplane` against it as a user
would: the installed console script in a subprocess, configured through its environment
(tests/support/runtime.py's `Cli`)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from joinplane import container
from joinplane_local.runtime import Runtime
from tests.support.runtime import Cli, local_runtime

# No test reads the config file of whoever runs the tests.
NO_CONFIG = "/nonexistent/joinplane/config.toml"


@pytest.fixture(autouse=True)
def _no_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOINPLANE_CONFIG", NO_CONFIG)


@pytest.fixture(scope="package")
def runtime() -> Iterator[Runtime]:
    with local_runtime() as running:
        yield running


@pytest.fixture
def cli(runtime: Runtime) -> Iterator[Cli]:
    assert runtime.admin_key is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOINPLANE_")}
    env.update(
        JOINPLANE_URL=runtime.url,
        JOINPLANE_API_KEY=runtime.admin_key,
        JOINPLANE_TENANT="dev",
        JOINPLANE_CONFIG=NO_CONFIG,
        PYTHONUNBUFFERED="1",
    )
    yield Cli(runtime, env)
    container.reset(keep_clients=True)  # a test that moved the server's clock must not move the next one's

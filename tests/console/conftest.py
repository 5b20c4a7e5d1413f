"""One local runtime (`make run`'s) and one headless Chromium for the console's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from joinplane import container
from tests.support.console import browser
from tests.support.runtime import Http, local_runtime


@pytest.fixture(scope="package")
def http() -> Iterator[Http]:
    with local_runtime() as runtime:
        yield Http(runtime)
    container.reset(keep_clients=True)


@pytest.fixture(scope="package")
def chromium() -> Iterator[Any]:
    with browser() as running:
        yield running

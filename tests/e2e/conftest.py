"""One local runtime (`make run`'s, in-process) for the end-to-end tests, spoken to over HTTP
(tests/support/runtime.py's `Http`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from joinplane import container
from tests.support.runtime import Http, local_runtime


@pytest.fixture(scope="package")  # gone before another package seeds a runtime of its own
def http() -> Iterator[Http]:
    with local_runtime() as runtime:
        yield Http(runtime)
    # The tests moved the server's clock (it is this process's): later packages start at now
    container.reset(keep_clients=True)

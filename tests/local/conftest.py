"""One local runtime over the fixture template for the whole `tests/local` package.

The fixture functions keep what they receive in module-level lists; `fresh` empties them, the
authorizer cache and the clock before every test, so tests do not see each other's traffic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from joinplane import container
from tests.support.runtime import FIXTURE_TEMPLATE, Local, Tee, local_runtime


@pytest.fixture(scope="package")
def local() -> Iterator[Local]:
    log = Tee()
    with local_runtime(template_path=FIXTURE_TEMPLATE, seed=False, log=log) as runtime:
        yield Local(runtime, log)


_STATE = {
    "Gatekeeper": ("CALLS",),
    "StreamConsumer": ("BATCHES", "PROCESSED"),
    "RuleConsumer": ("RECEIVED", "ATTEMPTS"),
    "Ticker": ("RUNS",),
}


@pytest.fixture
def fresh(local: Local) -> Iterator[Local]:
    assert local.runtime.drain(10), "the previous test left deliveries behind"
    container.reset(keep_clients=True)
    local.runtime.gateway.clear_authorizer_cache()
    for logical_id, names in _STATE.items():
        module = local.module(logical_id)
        for name in names:
            getattr(module, name).clear()
    yield local
    container.reset(keep_clients=True)

"""start_runtime's modes and its care for the process environment."""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.request

import pytest

from joinplane_local import runtime as runtime_module
from joinplane_local.runtime import start_runtime
from tests.support.runtime import FIXTURE_TEMPLATE, Local


def test_endpoint_mode_serves_over_an_emulator_it_did_not_start(fresh: Local) -> None:
    # Given: an emulator already running (the package runtime's), and the environment it set
    endpoint = fresh.runtime.endpoint_url
    assert endpoint is not None
    environment = dict(os.environ)

    # When
    with start_runtime(
        mode="endpoint", endpoint_url=endpoint, seed=False, workers=False, template_path=FIXTURE_TEMPLATE
    ) as second:
        with urllib.request.urlopen(second.url + "/items/second", timeout=10) as response:
            event = json.loads(response.read())["event"]
        served_endpoint = os.environ["AWS_ENDPOINT_URL"]

    # Then: it served over that endpoint, and left the environment as it found it
    assert second.endpoint_url == endpoint == served_endpoint
    assert second.mode == "endpoint"
    assert event["pathParameters"] == {"id": "second"}
    assert dict(os.environ) == environment
    assert fresh.call("GET", "/items/first").status == 200  # the first runtime is unharmed


def test_the_embedded_runtime_never_hands_real_credentials_to_the_emulator(fresh: Local) -> None:
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"
    assert os.environ["AWS_ENDPOINT_URL"] == fresh.runtime.endpoint_url
    assert "AWS_SESSION_TOKEN" not in os.environ
    assert os.environ["TABLE_NAME"] == "joinplane-local-fixture-table"


def test_a_seed_that_fails_stops_the_start_and_frees_the_port_it_had_bound(
    fresh: Local, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: a seed that fails after the port is bound (and before it listens)
    bound: list[str] = []

    def failing_seed(log: object, url: str) -> None:
        bound.append(url)
        raise RuntimeError("seed failed")

    monkeypatch.setattr(runtime_module, "_seed", failing_seed)
    endpoint = fresh.runtime.endpoint_url
    environment = dict(os.environ)
    outcome: list[BaseException] = []

    def start() -> None:
        try:
            start_runtime(
                mode="endpoint",
                endpoint_url=endpoint,
                seed=True,
                workers=False,
                template_path=FIXTURE_TEMPLATE,
            ).stop()
        except BaseException as error:
            outcome.append(error)

    # When
    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    thread.join(timeout=30)

    # Then: the start failed promptly with the seeding's error (no hang waiting on a server that
    # never served), the port is free again, and the environment is as it was
    assert not thread.is_alive(), "start_runtime hung after a failed seed"
    assert [str(e) for e in outcome] == ["seed failed"]
    host, port = bound[0].removeprefix("http://").split(":")
    with socket.socket() as again:
        again.bind((host, int(port)))
    assert dict(os.environ) == environment

"""`make run` accepts connections only once it is ready: the dev admin key exists before the port
listens, so the very first request with that key is authorized (and no refusal is ever cached by
the authorizer emulation for ReauthorizeEvery seconds)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from joinplane import credentials, ids

# `python -m joinplane_local`, with a seed that takes a second (as against a slow --endpoint-url),
# which widens the window a runtime listening too early would serve in.
SLOW_SEED_RUN = """
import sys, time
from joinplane_local import seed
original = seed.install_admin_key
def slow(*args, **kwargs):
    time.sleep(float(sys.argv[2]))
    return original(*args, **kwargs)
seed.install_admin_key = slow
from joinplane_local.__main__ import main
sys.exit(main(["--port", sys.argv[1]]))
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _list_pools(connection: socket.socket, key: str) -> tuple[int, Any]:
    body = json.dumps({"tenantId": "dev"}).encode()
    connection.sendall(
        b"POST /api/compute/pools/list HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n".encode()
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    response = http.client.HTTPResponse(connection)
    response.begin()
    return response.status, json.loads(response.read())


def test_the_first_request_that_connects_during_startup_is_served_with_the_dev_key_authorized(
    tmp_path: Path,
) -> None:
    # Given: a fixed dev admin key, and a runtime starting on a known port
    key = credentials.mint("jpk", ids.new_ulid())
    port = _free_port()
    environment = {**os.environ, "JOINPLANE_DEV_ADMIN_KEY": key}
    environment.pop("PORT", None)
    log = (tmp_path / "runtime.log").open("w+")
    runtime = subprocess.Popen(
        [sys.executable, "-c", SLOW_SEED_RUN, str(port), "1.0"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=environment,
    )
    try:
        # When: a client connects as early as it can, and sends at once on the first connection
        refused = 0
        deadline = time.monotonic() + 120
        while True:
            assert runtime.poll() is None, Path(log.name).read_text()
            assert time.monotonic() < deadline, "the runtime never listened"
            try:
                connection = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except ConnectionRefusedError:
                refused += 1
                time.sleep(0.002)
        with connection:
            first = _list_pools(connection, key)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as again:
            second = _list_pools(again, key)

        # Then: the port refused until the runtime was ready; then the key was authorized at
        # once, and no refusal was cached to be served afterwards
        assert refused > 0
        assert first[0] == 200, first
        assert [p["poolId"] for p in first[1]["pools"]] == ["dev-pool"]
        assert second[0] == 200, second
    finally:
        runtime.send_signal(signal.SIGTERM)
        try:
            runtime.wait(timeout=30)
        except subprocess.TimeoutExpired:
            runtime.kill()
            runtime.wait()
        log.close()

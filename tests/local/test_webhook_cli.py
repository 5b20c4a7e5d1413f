"""`make run` with the webhook, as an operator starts it: the URL as an option, the header's secret
in the environment. What the process prints is what an operator's terminal shows."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.support import openssl_csr, wait_until
from tests.support.receiver import receiving


def post(url: str, body: Any, key: str | None = None) -> tuple[int, Any]:
    headers = {"content-type": "application/json"} | ({"authorization": f"Bearer {key}"} if key else {})
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_make_run_posts_a_pending_request_and_prints_the_decision_but_never_the_secret(
    tmp_path: Path,
) -> None:
    secret = f"Bearer whsec-{uuid.uuid4().hex}"
    hook_path = f"/hooks/T000/{uuid.uuid4().hex}"
    with receiving() as receiver:
        # Given `make run` with the webhook's URL as an option and its secret in the environment
        command = [
            sys.executable,
            "-m",
            "joinplane_local",
            "--port",
            "0",
            "--webhook-url",
            receiver.url + hook_path,
        ]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "JOINPLANE_WEBHOOK_AUTH_HEADER_VALUE": secret},
        )
        out: list[str] = []
        err: list[str] = []
        readers = [
            threading.Thread(target=lambda s=stream, k=sink: k.extend(iter(s.readline, "")), daemon=True)
            for stream, sink in ((process.stdout, out), (process.stderr, err))
        ]
        for reader in readers:
            reader.start()
        try:
            banner = wait_until(lambda: "Ctrl-C to stop." in "".join(out) and "".join(out), 60)
            url = re.search(r"Serving on (\S+)", banner).group(1)  # type: ignore[union-attr]
            key = re.search(r"Admin API key: (\S+)", banner).group(1)  # type: ignore[union-attr]
            assert f"→ API destination POST {receiver.url}/… (Authorization header)" in banner

            # When a machine is deferred in a new pool
            pool = f"wh-{uuid.uuid4().hex[:10]}"
            pool_body = {
                "tenantId": "dev",
                "poolId": pool,
                "siteId": "dev-site",
                "name": pool,
                "workspaceId": "w",
            }
            assert post(url + "/api/compute/pools/create", pool_body, key)[0] == 200
            token = {"tenantId": "dev", "poolId": pool, "requireApproval": True}
            _, created = post(url + "/api/compute/joinTokens/create", token, key)
            status, joined = post(
                url + "/machines/join", {"joinToken": created["token"], "csr": openssl_csr(tmp_path)}
            )
            assert status == 202, joined

            # Then the receiver gets the request with the secret header
            (received,) = wait_until(lambda: receiver.received, 20)
            assert received.headers["authorization"] == secret
            assert received.json()["requestId"] == joined["joinRequest"]["requestId"]
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
        for reader in readers:
            reader.join(timeout=10)  # the last lines, up to the end of each stream
        stdout, stderr = "".join(out), "".join(err)

    # And the function's decision line went to the runtime's stdout, as CloudWatch would get it
    decisions = [
        json.loads(line) for line in stdout.splitlines() if line.startswith("{") and '"outcome"' in line
    ]
    assert any(d.get("outcome") == "deferred" and d.get("poolId") == pool for d in decisions), stdout
    # And nothing printed holds the secret or the hook's path
    assert process.returncode == 0, stderr
    for text in (stdout, stderr):
        assert secret not in text and hook_path not in text

"""The embedded AWS emulation: a moto server on loopback that every function reaches through
`AWS_ENDPOINT_URL`, exactly as it would reach the real services. Where moto departs from AWS in a
way the functions or tests would rely on, `moto_patches` corrects it, for the one moto version it
was written for.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from . import moto_patches

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class Emulator:
    endpoint_url: str
    _server: Any

    def stop(self) -> None:
        self._server.stop()

    def reset(self) -> None:
        """Forget every resource (moto's reset API), for a clean slate between tests."""
        import urllib.request

        url = f"{self.endpoint_url}/moto-api/reset"
        request = urllib.request.Request(url, method="POST")  # noqa: S310 - loopback URL we built
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass


def start(port: int = 0) -> Emulator:
    """Start moto on 127.0.0.1 (port 0: any free port) in this process."""
    from moto.server import ThreadedMotoServer

    moto_patches.apply()
    # Werkzeug logs every request at INFO; the local runtime polls many times a second.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, bound = server.get_host_and_port()
    return Emulator(endpoint_url=f"http://{host}:{bound}", _server=server)


def use_fake_credentials() -> None:
    """moto needs some credentials and a region; never real ones."""
    for name, value in FAKE_CREDENTIALS.items():
        os.environ.setdefault(name, value)

"""Stand-in HTTP servers the CLI talks to (a server that answers garbage, a capturing proxy)."""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# How often serve_forever looks for a shutdown request. The standard library's 0.5 s made every
# test's teardown wait half a second: about 37 s over the CLI's tests against a stand-in server.
SHUTDOWN_POLL_SECONDS = 0.01


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on a free port of 127.0.0.1 answering with `handler`: its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class Recorder:
    """A listening socket that only counts the connections made to it (`address`: host:port)."""

    def __init__(self, server: socketserver.ThreadingTCPServer) -> None:
        self.address = f"127.0.0.1:{server.server_address[1]}"
        self.connections = 0


@contextmanager
def recording() -> Iterator[Recorder]:
    """A server on a free port of 127.0.0.1 that records every connection and answers nothing:
    a host that must never be contacted."""
    recorder: Recorder

    class Count(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            recorder.connections += 1

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Count)
    recorder = Recorder(server)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS}, daemon=True
    )
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

"""Driving a long-running `joinplane agent`: a server address that answers only once told to (`Later`),
and the agent's output followed line by line as it runs (`Lines`)."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO


class Later:
    """A port of 127.0.0.1 where nothing listens (connections are refused, as to a server that is
    down) until `up()`; from then on every connection is relayed to `target`."""

    def __init__(self, target: str) -> None:
        parsed = urllib.parse.urlsplit(target)
        self._target = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        with socket.socket() as probe:  # a free port, closed again so it refuses until up()
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._closed = threading.Event()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                client.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


@contextmanager
def down_until_up(target: str) -> Iterator[Later]:
    later = Later(target)
    try:
        yield later
    finally:
        later.close()


class Lines:
    """Everything a process writes to one stream, kept as it arrives, so a test can wait for a line."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self._lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def text(self) -> str:
        with self._changed:
            return "\n".join(self._lines)

    def wait_for(self, pattern: str, timeout: float, *, after: int = 0) -> tuple[int, re.Match[str]]:
        """The index and match of the first line from `after` on matching `pattern`; AssertionError
        (with everything seen) when none arrives within `timeout` seconds."""
        wanted = re.compile(pattern)
        until = time.monotonic() + timeout
        with self._changed:
            while True:
                for index in range(after, len(self._lines)):
                    if found := wanted.search(self._lines[index]):
                        return index, found
                left = until - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no line matching {pattern!r} in {timeout}s:\n" + "\n".join(self._lines)
                    )
                self._changed.wait(left)


def stop(process: subprocess.Popen[str], timeout: float = 20) -> int:
    """The process's exit code once it ends; killed (and an AssertionError) if it does not in time."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"the process did not end within {timeout}s") from None

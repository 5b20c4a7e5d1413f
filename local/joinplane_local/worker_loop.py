"""What every background worker of the local runtime shares: a thread that runs one cycle after
another until stopped, reporting each distinct error once, and the backoff between retries."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TextIO

# Makes an AWS client for a service name ("sqs"): the runtime's, towards the emulator or AWS.
ClientFactory = Callable[[str], Any]

MAX_BACKOFF_SECONDS = 5.0
FIRST_BACKOFF_SECONDS = 0.2


def backoff(attempts: int) -> float:
    return float(min(FIRST_BACKOFF_SECONDS * 2 ** max(0, attempts - 1), MAX_BACKOFF_SECONDS))


class Loop:
    """A background thread that runs `cycle()` until stopped and reports its errors once each."""

    name = "worker"
    interval = 0.1

    def __init__(self, log: TextIO) -> None:
        self.log = log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error: str | None = None
        self.completed = 0  # deliveries finished (any outcome): drain() sees work happen

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"joinplane-{self.name}", daemon=True)
        self._thread.start()

    def signal_stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.cycle()
                self._last_error = None
            except Exception as error:
                text = f"{type(error).__name__}: {error}"
                if text != self._last_error:
                    print(f"[joinplane-local] {self.name}: {text} (retrying)", file=self.log, flush=True)
                    self._last_error = text
                self.on_error()
                self._stop.wait(1.0)
                continue
            self._stop.wait(self.interval)

    def cycle(self) -> None:
        raise NotImplementedError

    def on_error(self) -> None:
        pass

    def is_quiet_since(self, instant: float) -> bool:
        raise NotImplementedError

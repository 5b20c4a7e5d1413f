"""What a warm Lambda container keeps between invocations, and the one way to forget it.

Each per-container cache registers how to clear itself when its module is imported; `reset()`
clears them all. Deployed, a container never resets (a new container starts empty); tests and the
local runtime call it when the emulated AWS behind the functions is replaced.

Two kinds of cache, because they go stale for different reasons:
- state (settings, pools, pool CAs, the local clock's offset) belongs to one table and bus: it is
  stale as soon as the table changes;
- clients (the botocore session and its clients) belong to one endpoint: they stay good while
  only resource names change, and rebuilding them costs ~0.25 s, so a test that swaps tables on
  the same emulator keeps them (`reset(keep_clients=True)`).
"""

from collections.abc import Callable

_state: list[Callable[[], None]] = []
_clients: list[Callable[[], None]] = []


def on_reset(clear: Callable[[], None]) -> Callable[[], None]:
    """Register a state cache's clear function (usable as a decorator)."""
    _state.append(clear)
    return clear


def on_reset_clients(clear: Callable[[], None]) -> Callable[[], None]:
    """Register a client cache's clear function (the AWS client factory)."""
    _clients.append(clear)
    return clear


def reset(*, keep_clients: bool = False) -> None:
    for clear in _state if keep_clients else [*_state, *_clients]:
        clear()

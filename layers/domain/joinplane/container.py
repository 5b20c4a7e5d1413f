"""What a warm Lambda container keeps between invocations, and the one way to forget it.

Each per-container cache (AWS clients, settings, pools, pool CAs, the local clock's offset)
registers how to clear itself when its module is imported; `reset()` clears them all. Tests and
the local runtime call it when the emulated AWS behind the functions is replaced; deployed, a
container never resets (a new container starts empty).
"""

from collections.abc import Callable

_clears: list[Callable[[], None]] = []


def on_reset(clear: Callable[[], None]) -> Callable[[], None]:
    """Register a cache's clear function (usable as a decorator)."""
    _clears.append(clear)
    return clear


def reset() -> None:
    for clear in _clears:
        clear()

"""The one clock every function reads.

Expiry is decided by comparing stored instants with `now()`, never by waiting for DynamoDB TTL or
a retention job. The local runtime moves this clock (`POST /_local/clock`) so expiry can be tested
without sleeping, and puts it back (`{"reset": true}`); deployed, the offset is always zero.
"""

import time
from datetime import UTC, datetime

from joinplane import container

_offset_seconds = 0.0


def epoch() -> float:
    return time.time() + _offset_seconds


def now() -> datetime:
    return datetime.fromtimestamp(epoch(), UTC)


def advance(seconds: float) -> float:
    """Move the clock forward (local runtime and tests only). Returns the total offset."""
    global _offset_seconds
    if seconds < 0:
        raise ValueError("the clock only moves forward")
    _offset_seconds += seconds
    return _offset_seconds


@container.on_reset
def reset() -> None:
    """Back to the real time (local runtime and tests only). What was stored while the clock ran
    ahead keeps its instants: docs/decisions.md says what that means for a machine's proofs."""
    global _offset_seconds
    _offset_seconds = 0.0


def rfc3339(instant: float | datetime) -> str:
    """RFC 3339, UTC, whole seconds, with `Z`: the one timestamp format on every wire."""
    if isinstance(instant, datetime):
        instant = instant.timestamp()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(instant)))

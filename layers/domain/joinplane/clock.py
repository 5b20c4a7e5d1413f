"""The one clock every function reads.

Expiry is decided by comparing stored instants with `now()`, never by waiting for DynamoDB TTL or
a retention job. The local runtime moves this clock (`POST /_local/clock`) so expiry can be tested
without sleeping, and puts it back (`{"reset": true}`); deployed, the offset is always zero.

Inside the domain an instant is one type: the aware UTC `datetime` that `now()` returns, read once
per operation and handed down (`now: datetime`). It changes form only at the edges: `rfc3339` for a
stored or wire timestamp, `seconds` for a stored epoch (TTL attributes, `...Epoch` attributes and
the conditions that compare them), both applied by `dal` where it writes; `epoch()` only where a
millisecond stamp is the format (a ULID's time, a proof's timestamp).
"""

import time
from datetime import UTC, datetime

from joinplane import container

_offset_seconds = 0.0


def epoch() -> float:
    return time.time() + _offset_seconds


def now() -> datetime:
    return datetime.fromtimestamp(epoch(), UTC)


def seconds(at: datetime) -> int:
    """Whole seconds since the epoch: how a stored item keeps an instant that a condition compares
    or TTL expires (an expiry in whole seconds compares with `at` as with its truncation)."""
    return int(at.timestamp())


def at_seconds(stored: int) -> datetime:
    """A stored epoch as an instant."""
    return datetime.fromtimestamp(stored, UTC)


def advance(by: float) -> float:
    """Move the clock forward (local runtime and tests only). Returns the total offset."""
    global _offset_seconds
    if by < 0:
        raise ValueError("the clock only moves forward")
    _offset_seconds += by
    return _offset_seconds


@container.on_reset
def reset() -> None:
    """Back to the real time (local runtime and tests only). What was stored while the clock ran
    ahead keeps its instants: docs/decisions.md says what that means for a machine's proofs."""
    global _offset_seconds
    _offset_seconds = 0.0


def rfc3339(instant: float | datetime) -> str:
    """RFC 3339, UTC, whole seconds, with `Z`: the one timestamp format on every wire. Of an instant,
    or of an epoch a record stored (a CA's `bundleUntil` shown in an answer)."""
    if isinstance(instant, datetime):
        instant = instant.timestamp()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(instant)))

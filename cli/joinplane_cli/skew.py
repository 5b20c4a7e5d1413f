"""The machine's clock as the server sees it, for signing a `Joinplane-Proof`.

A proof is dated (`t`) and the server accepts it only within its window (300 s back, 60 s ahead of
the server's clock), so a machine whose clock is off, or a local runtime whose clock was moved
forward to test expiry, is refused PROOF_STALE. The CLI then does what AWS SDKs do for a skewed
signature: it reads the server's time from the refusal, signs again once on that time, and keeps
the offset for the rest of the process (the agent's lifetime), learning it again on the next such
refusal.

The server's time is the refusal's ErrorInfo `serverTime` (Unix milliseconds) when it has one, else
the HTTP `Date` header (whole seconds: its middle is taken, well inside the window). Anything else,
or a time unreadable as either, is ignored and the refusal surfaces as it is.

Whose clock is followed: only an answer that came over HTTPS, or from this machine (a loopback
address: the local runtime, whose clock `POST /_local/clock` moves). Whoever answers can make the
client sign a proof dated at the time it claims; a party that could forge an answer on the way
(plain http across a network) could keep such a post-dated proof and present it when that time
comes: a re-join needs only the proof and the join token, which serves the keys it admitted even
once expired. Over HTTPS the answer is the real API's, which gains nothing from a proof dated on
its own clock. A TLS-intercepting proxy is trusted by the machine's own configuration.

The bound: a correction of more than `MAX_CORRECTION_SECONDS` either way is not made: a clock that
far off is the machine's to fix (NTP), and 31 days covers every expiry a local runtime's clock is
moved forward to test (nothing in Joinplane is issued for longer than 30 days).

The agent schedules renewals on the corrected clock, but never later than the same instant on
the machine's own clock (`joinplane_cli.service`): a wrong offset can make it renew early, never
late.
"""

from __future__ import annotations

import calendar
import ipaddress
import re
import sys
import threading
import time
import urllib.parse
from typing import TextIO

MAX_CORRECTION_SECONDS = 31 * 86_400
# A correction smaller than this would not move a proof into the window: the Date's second plus a
# round trip. A refusal that close to our clock is not about skew, and is not retried.
TOLERANCE_SECONDS = 2.0

_IMF_FIXDATE = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) "
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ([0-9]{4}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT"
)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_SERVER_MS = re.compile(r"[0-9]{13}")

_lock = threading.Lock()
_offset = 0.0
_last_proof_ms = 0


def may_follow(url: str) -> bool:
    """Whether a refusal from the API at `url` may correct this process's clock: HTTPS, or a
    loopback host (see the module's note)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "https":
        return True
    host = (parsed.hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def offset() -> float:
    """Seconds to add to this machine's clock to read the server's (0 until a refusal taught one)."""
    return _offset


def now() -> float:
    """The server's time as this process last learnt it, in Unix seconds."""
    return time.time() + _offset


def proof_ms() -> int:
    """A proof's `t`: Unix milliseconds on the server's clock, strictly increasing within this
    process (the server accepts a proof only if it is newer than the last one it accepted)."""
    global _last_proof_ms
    with _lock:
        _last_proof_ms = max(int(now() * 1000), _last_proof_ms + 1)
        return _last_proof_ms


def http_date(value: str | None) -> float | None:
    """An HTTP `Date` in IMF-fixdate (what RFC 9110 has servers send) as Unix seconds; None for
    anything else. The obsolete forms and other time zones are not guessed at."""
    found = _IMF_FIXDATE.fullmatch(value.strip()) if value else None
    if found is None:
        return None
    day, month, year, hour, minute, second = found.groups()
    try:
        moment = (int(year), _MONTHS.index(month) + 1, int(day), int(hour), int(minute), int(second))
        if not (1 <= moment[2] <= calendar.monthrange(moment[0], moment[1])[1] and moment[3] < 24):
            return None
        if moment[4] > 59 or moment[5] > 60:
            return None
    except ValueError:
        return None
    return float(calendar.timegm((*moment, 0, 0, 0)))


def server_time(metadata: dict[str, str], date: str | None) -> float | None:
    """The server's time when it refused: ErrorInfo's `serverTime` (ms), else the middle of the
    `Date` header's second."""
    precise = metadata.get("serverTime", "")
    if _SERVER_MS.fullmatch(precise):
        return int(precise) / 1000
    whole = http_date(date)
    return None if whole is None else whole + 0.5


def learn(server: float | None, sent: float, received: float, *, err: TextIO | None = None) -> bool:
    """Adopt the server's clock from a PROOF_STALE refusal answered at `server` to a request sent
    at `sent` and answered at `received` (this machine's clock). True when the proof's time moved
    enough for a second attempt to land in the window; False when there was nothing to learn or
    the correction is beyond `MAX_CORRECTION_SECONDS` (said on `err`: the clocks need fixing)."""
    global _offset, _last_proof_ms
    if server is None:
        return False
    # The server read its clock somewhere between sending and answering: take the middle.
    learnt = server - (sent + received) / 2
    out = sys.stderr if err is None else err
    if abs(learnt) > MAX_CORRECTION_SECONDS:
        print(
            f"joinplane: the server's clock is {_words(learnt)} this machine's, more than the "
            f"{MAX_CORRECTION_SECONDS // 86_400} days the CLI corrects by itself; set the machine's "
            "clock (NTP)",
            file=out,
            flush=True,
        )
        return False
    with _lock:
        if abs(learnt - _offset) < TOLERANCE_SECONDS:
            return False
        _offset = learnt
        # A correction backwards takes the next proof's `t` back with it.
        _last_proof_ms = 0
    print(
        f"joinplane: the server's clock is {_words(learnt)} this machine's; signing the proof again "
        "on the server's time",
        file=out,
        flush=True,
    )
    return True


def forget() -> None:
    """Back to this machine's own clock, as a new process starts (for whatever runs the CLI
    in-process several times, tests above all)."""
    global _offset, _last_proof_ms
    with _lock:
        _offset = 0.0
        _last_proof_ms = 0


def _words(seconds: float) -> str:
    how, size = ("ahead of" if seconds > 0 else "behind"), abs(seconds)
    if size < 600:
        return f"{size:.0f} s {how}"
    return f"{size / 60:.0f} min {how}" if size < 2 * 86_400 else f"{size / 86_400:.0f} days {how}"

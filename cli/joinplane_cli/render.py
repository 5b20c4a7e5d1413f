"""What a person reads: aligned tables, durations in words, "expires in 3 hours"."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

NONE = "-"
# States in which an expiry time no longer matters to anyone.
_HASH = re.compile(r"[0-9a-f]{64}")  # a SHA-256 in hex, as the API writes every hash
_SETTLED = frozenset({"rejected", "consumed", "revoked", "exhausted", "archived"})


def parse_time(value: Any) -> float | None:
    """RFC 3339 (the API writes `...Z`) → epoch seconds; None for anything else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _plural(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def duration(seconds: float) -> str:
    """A length of time the way a person says it: precise when short, coarse when long.

    Rounded to the unit shown, so 23 h 50 min reads "1 day" rather than "23 hours" (a person
    glancing at a table cares about the order of magnitude; exact instants are shown beside it
    where they matter). Two units only while the second still matters (`1 hour 30 minutes`,
    `2 days 4 hours`); from ten hours or three days on, the first unit alone."""
    total = abs(seconds)
    if total < 59.5:
        return _plural(round(total), "second")
    if total < 3570:
        return _plural(round(total / 60), "minute")
    if total < 10 * 3600 - 30:
        hours, minutes = divmod(round(total / 60), 60)
        return f"{_plural(hours, 'hour')} {_plural(minutes, 'minute')}" if minutes else _plural(hours, "hour")
    if total < 86_400 - 1800:
        return _plural(round(total / 3600), "hour")
    if total < 3 * 86_400 - 1800:
        days, hours = divmod(round(total / 3600), 24)
        return f"{_plural(days, 'day')} {_plural(hours, 'hour')}" if hours else _plural(days, "day")
    return _plural(round(total / 86_400), "day")


def until(expires_at: Any, now: float) -> str:
    """`in 3 hours`, `expired 5 minutes ago`, or `-` when there is no expiry."""
    instant = parse_time(expires_at)
    if instant is None:
        return NONE
    left = instant - now
    if left >= 1:
        return f"in {duration(left)}"
    if left > -1:
        return "now"
    return f"expired {duration(-left)} ago"


def since(occurred_at: Any, now: float) -> str:
    """`5 minutes ago` (or `just now`)."""
    instant = parse_time(occurred_at)
    if instant is None:
        return NONE
    ago = now - instant
    if ago < 1:
        return "just now" if ago > -60 else f"in {duration(-ago)}"
    return f"{duration(ago)} ago"


def expiry(state: Any, expires_at: Any, now: float) -> str:
    """Time-to-expiry for a thing in `state`: a settled thing shows none."""
    if state in _SETTLED:
        return NONE
    return until(expires_at, now)


def cell(value: Any) -> str:
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value) or NONE
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    # A table row is one line: control characters from the server never reach the terminal.
    return "".join(ch if ch.isprintable() else " " for ch in str(value))


def shorten(text: str, width: int) -> str:
    # A hash is what an operator copies back (`tpm allow-list remove HASH`, `tpm manufacturers
    # remove SHA256`): cut, it is useless, so it is shown whole.
    if _HASH.fullmatch(text):
        return text
    # ASCII on purpose: a terminal in the C locale must not fail on an ellipsis.
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, max_width: int = 60) -> str:
    """Left-aligned columns, two spaces apart, headers in capitals; no trailing spaces."""
    cells = [[shorten(cell(v), max_width) for v in row] for row in rows]
    titles = [h.upper() for h in headers]
    widths = [len(t) for t in titles]
    for row in cells:
        for index, value in enumerate(row):
            widths[index] = max(widths[index], len(value))
    lines = []
    for row in [titles, *cells]:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


Column = tuple[str, Callable[[dict[str, Any]], Any]]


def print_table(
    columns: Sequence[Column], items: Sequence[dict[str, Any]], out: TextIO | None = None
) -> None:
    out = out or sys.stdout
    print(
        table([name for name, _ in columns], ([get(item) for _, get in columns] for item in items)), file=out
    )


def print_json(value: Any, out: TextIO | None = None) -> None:
    print(json.dumps(value, indent=2, sort_keys=False), file=out or sys.stdout)


def print_json_line(value: Any, out: TextIO | None = None) -> None:
    """One JSON document on one line, flushed: a line of a stream another program reads as it comes."""
    print(json.dumps(value, separators=(",", ":")), file=out or sys.stdout, flush=True)


class Lines(tuple[str, ...]):
    """A value `fields` shows one element a line."""


def fields(pairs: Sequence[tuple[str, Any]], out: TextIO | None = None) -> None:
    """`name  value` lines, names aligned: one object shown to a person."""
    width = max((len(name) for name, _ in pairs), default=0)
    for name, value in pairs:
        # Lines the command built (a join policy, one rule a line) stay lines, aligned under the first;
        # a string from the server stays on its one line, whatever it holds.
        lines = list(value) if isinstance(value, Lines) and value else [value]
        print(f"  {name.ljust(width)}  {cell(lines[0])}", file=out or sys.stdout)
        for line in lines[1:]:
            print(f"  {' ' * width}  {cell(line)}", file=out or sys.stdout)

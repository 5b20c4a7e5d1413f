"""Tables and time in words: what the operator reads at a glance."""

from __future__ import annotations

import io

import pytest

from joinplane_cli import render

NOW = render.parse_time("2026-01-01T12:00:00Z") or 0.0


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "0 seconds"),
        (1, "1 second"),
        (59, "59 seconds"),
        (60, "1 minute"),
        (59.6, "1 minute"),
        (89, "1 minute"),
        (91, "2 minutes"),
        (3599, "1 hour"),
        (3600, "1 hour"),
        (5400, "1 hour 30 minutes"),
        (9 * 3600 + 60, "9 hours 1 minute"),
        (10 * 3600 + 1800, "10 hours"),
        (23 * 3600, "23 hours"),
        (86_399, "1 day"),
        (86_400, "1 day"),
        (86_400 + 4 * 3600, "1 day 4 hours"),
        (2 * 86_400 + 3600, "2 days 1 hour"),
        (3 * 86_400 + 3600, "3 days"),
        (30 * 86_400, "30 days"),
    ],
)
def test_durations_read_as_a_person_says_them(seconds: float, words: str) -> None:
    # When / Then
    assert render.duration(seconds) == words


@pytest.mark.parametrize(
    ("expires_at", "words"),
    [
        ("2026-01-02T12:00:00Z", "in 1 day"),
        ("2026-01-01T15:00:00Z", "in 3 hours"),
        ("2026-01-01T12:05:20Z", "in 5 minutes"),
        ("2026-01-01T12:00:00Z", "now"),
        ("2026-01-01T11:58:00Z", "expired 2 minutes ago"),
        ("2025-12-29T12:00:00Z", "expired 3 days ago"),
        ("", "-"),
        (None, "-"),
        ("not a time", "-"),
    ],
)
def test_time_to_expiry_in_words(expires_at: str | None, words: str) -> None:
    # When / Then
    assert render.until(expires_at, NOW) == words


def test_settled_things_show_no_expiry_and_open_ones_do() -> None:
    # Given
    tomorrow = "2026-01-02T12:00:00Z"

    # When / Then
    assert render.expiry("pending", tomorrow, NOW) == "in 1 day"
    assert render.expiry("approved", tomorrow, NOW) == "in 1 day"
    for settled in ("rejected", "consumed", "revoked", "exhausted"):
        assert render.expiry(settled, tomorrow, NOW) == "-"
    assert render.since("2026-01-01T11:55:00Z", NOW) == "5 minutes ago"
    assert render.since("2026-01-01T12:00:00Z", NOW) == "just now"


def test_a_table_aligns_columns_and_leaves_no_trailing_spaces() -> None:
    # Given
    rows = [
        ["jreq_a", "pending", None, ["approval_required", "unknown"]],
        ["jreq_bbbbbb", "rejected", "x" * 80, []],
    ]

    # When
    text = render.table(["request", "state", "note", "why"], rows, max_width=30)

    # Then
    lines = text.splitlines()
    assert lines[0] == "REQUEST      STATE     NOTE                            WHY"
    assert lines[1] == "jreq_a       pending   -                               approval_required, unknown"
    assert lines[2] == "jreq_bbbbbb  rejected  " + "x" * 27 + "...  -"
    assert all(line == line.rstrip() for line in lines)


def test_a_hash_is_shown_whole_for_the_command_that_takes_it_back() -> None:
    # Given a SHA-256 (what `tpm allow-list remove` and `tpm manufacturers remove` take) and a
    # description as long
    digest = "49e580bd009ec6dbe68040229ea25f1fcbca40333a22b0dbf911a3f61aa2b3c4"
    rows = [[digest, "x" * 64]]

    # When
    text = render.table(["sha256", "description"], rows)

    # Then the hash is whole, the description shortened as before
    assert text.splitlines()[1] == f"{digest}  {'x' * 57}..."


def test_cells_from_the_server_cannot_break_the_line_or_the_terminal() -> None:
    # When
    text = render.table(["host"], [["evil\n\x1b[2Jhost"], [True], [{"b": 1, "a": 2}]])

    # Then
    assert text.splitlines() == ["HOST", "evil  [2Jhost", "yes", '{"a":2,"b":1}']


def test_lines_the_command_built_stay_lines_and_a_server_string_stays_one_line() -> None:
    # Given a join policy summarised one rule a line, and a name from the server holding a newline
    out = io.StringIO()
    # When both are shown as fields
    render.fields(
        [("join policy", render.Lines(["approve a: true", "deny b: false"])), ("name", "x\ny")], out
    )
    # Then the rules are two lines, the second under the first, and the name is one line
    assert out.getvalue().splitlines() == [
        "  join policy  approve a: true",
        "               deny b: false",
        "  name         x y",
    ]

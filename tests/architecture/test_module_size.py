"""No module of the domain, the functions, the local runtime or the CLI grows past 600 lines: past
that, a module holds several concepts, and a newcomer looking for one rule reads all of them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600
ROOMS = ("layers/domain/joinplane", "functions", "local/joinplane_local", "cli/joinplane_cli")
MODULES = sorted(p for room in ROOMS for p in (ROOT / room).rglob("*.py"))


def test_the_rooms_have_modules() -> None:
    # A moved room would make the check below pass on nothing.
    assert {room for room in ROOMS if any(p.is_relative_to(ROOT / room) for p in MODULES)} == set(ROOMS)


def test_no_module_is_over_600_lines() -> None:
    # Given every module of the rooms, Then none is longer than the limit
    lengths = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in MODULES}
    assert {path: n for path, n in lengths.items() if n > LIMIT} == {}, "split these along seams of their own"

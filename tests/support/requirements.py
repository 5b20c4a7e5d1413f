"""The pinned requirement files: `name==version` lines, and `-r other.txt` includes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "requirements-run.txt"
DEV = ROOT / "requirements-dev.txt"


def canonicalize_name(name: str) -> str:
    """PEP 503's normal form (packaging's, which the import guard cannot load: it is no run
    requirement)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lines(path: Path) -> list[str]:
    """The file's requirement lines (comments and blanks left out), includes not followed."""
    return [
        line.split("#", 1)[0].strip()
        for line in path.read_text().splitlines()
        if line.split("#", 1)[0].strip()
    ]


def pins(path: Path) -> dict[str, list[str]]:
    """Every version each distribution is pinned to, by canonical name, includes followed: a name
    pinned twice, even to the same version, has two entries."""
    found: dict[str, list[str]] = {}
    for line in lines(path):
        if line.startswith("-r "):
            for name, versions in pins(path.parent / line.removeprefix("-r ").strip()).items():
                found.setdefault(name, []).extend(versions)
            continue
        name, separator, version = line.partition("==")
        assert separator and version, f"{path.name}: {line!r} is not pinned with =="
        found.setdefault(canonicalize_name(name.strip()), []).append(version.strip())
    return found

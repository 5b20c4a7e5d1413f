"""The user-facing Markdown as a reader (or GitHub) sees it: which files those are, the words a
user should never meet in them, and links that lead nowhere or out of the repository."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

# Words from how the project is run, not from the product: a reader of a clone has no brief, no
# seed files and no issue tracker. `../shared/seeds` is the old form of naming a contract by file.
# (To seed a table, or a fuzzer's fixed seed, are the product's words and stay allowed.)
INTERNAL = re.compile(
    r"\.\./shared/seeds|\bseed 0|\bthe seeds?\b|\bseed(?:'s|-exact| routes?| schemas?| documents?| files?)\b"
    r"|\bthe brief\b|\bissue [0-9]|\bitem [0-9]",
    re.IGNORECASE,
)
# A path that climbs out of the file's folder, wherever it is written (a link, a code span, prose);
# not a `.../approve` ellipsis.
_CLIMB = re.compile(r"(?<![\w.])(?:\.\./)+[^\s`)\]>\"'|,;…]*")
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def user_docs(root: Path) -> list[Path]:
    """README.md, ARCHITECTURE.md, shared/README.md and every page under docs/: what a clone's user reads."""
    return [
        root / "README.md",
        root / "ARCHITECTURE.md",
        root / "shared" / "README.md",
        *sorted((root / "docs").glob("*.md")),
    ]


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, _CODE_SPAN.sub("``", line)))
    return lines


def internal_words(text: str) -> list[str]:
    """Each use of an internal word, as `line N: word`, code blocks included."""
    return [
        f"line {number}: {found.group(0)}"
        for number, line in enumerate(text.splitlines(), 1)
        for found in INTERNAL.finditer(line)
    ]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lower-cased, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading anchors by its text
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page offers: its headings' (a repeated one gets -1, -2, ...) and <a id>s."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(_HTML_ANCHOR.findall(line))
    return found


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link and image outside code."""
    found: list[tuple[int, str]] = []
    for number, line in _prose_lines(text):
        found.extend((number, target) for target in _INLINE_LINK.findall(line))
        reference = _REFERENCE.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def broken_links(page: Path, root: Path, text: str | None = None) -> list[str]:
    """Each relative link of `page` that leads out of the repository, to no file, or to an anchor the
    target page lacks; and each `../` path written anywhere in it that climbs out of the repository."""
    text = page.read_text() if text is None else text
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        for climb in _CLIMB.findall(line):
            if not _inside((page.parent / climb).resolve(), root):
                problems.append(f"line {number}: {climb} is outside the repository")
    for number, target in links(text):
        if _SCHEME.match(target):
            continue  # a web address or mailto: not a file of the repository
        path_part, _, fragment = target.partition("#")
        if path_part.startswith("/"):
            problems.append(f"line {number}: {target} is absolute; link relative to the page")
            continue
        resolved = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not _inside(resolved, root):
            problems.append(f"line {number}: {target} is outside the repository")
        elif not resolved.exists():
            problems.append(f"line {number}: {target} does not exist")
        elif fragment and resolved.suffix == ".md":
            offered = anchors(text if resolved == page else resolved.read_text())
            if unquote(fragment) not in offered:
                problems.append(f"line {number}: {target}: {resolved.name} has no heading #{fragment}")
    return problems


def table_with_header(text: str, *header: str) -> list[list[str]]:
    """The body rows of the one Markdown table of `text` whose header cells are `header` (code spans
    unwrapped: `` `code` `` is `code`), each row as its cells, likewise unwrapped."""

    def cells(line: str) -> list[str]:
        return [cell.strip().replace("`", "") for cell in line.strip().strip("|").split("|")]

    lines = _unfenced(text)
    found = [index for index, line in enumerate(lines) if cells(line) == list(header)]
    assert len(found) == 1, f"{len(found)} tables headed {header}"
    rows = []
    for line in lines[found[0] + 2 :]:
        if not line.lstrip().startswith("|"):
            break
        rows.append(cells(line))
    return rows


def _unfenced(text: str) -> list[str]:
    """Every line outside fenced code blocks, as written (code spans kept: table cells hold them)."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines

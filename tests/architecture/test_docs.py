"""The docs speak to users: README.md, ARCHITECTURE.md and every docs/*.md use none of the words
of how the project is run ("the brief", "seed 002", "the seeds", "issue 2", "item 3") and point at
nothing outside the repository; every relative link reaches a file of the repository (and, for a
page, a heading it has). The wire contracts are named by their public names (docs/contracts.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.markdown import broken_links, internal_words, user_docs

ROOT = Path(__file__).resolve().parents[2]
PAGES = user_docs(ROOT)


def test_the_pages_checked_are_the_ones_a_user_reads() -> None:
    # Given the repository's Markdown for users
    names = [str(page.relative_to(ROOT)) for page in PAGES]
    # Then the README, the architecture page and the contracts page are among them, and every one exists
    assert {"README.md", "ARCHITECTURE.md", "docs/contracts.md", "docs/join.md"} <= set(names)
    assert all(page.is_file() for page in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_internal_words(page: Path) -> None:
    # Given a page a user reads
    text = page.read_text()
    # When it is searched for the project's internal words
    found = internal_words(text)
    # Then there are none
    assert found == [], f"{page.relative_to(ROOT)}: {found}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(page: Path) -> None:
    # Given a page a user reads
    # When its links and its ../ paths are followed
    problems = broken_links(page, ROOT)
    # Then each reaches a file of the repository, and a heading of it when it names one
    assert problems == [], f"{page.relative_to(ROOT)}: {problems}"


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    # Given a page in a repository with every kind of fault, and one without any
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## Known (heading) `here`\n")
    bad = tmp_path / "docs" / "bad.md"
    bad.write_text(
        "# Bad\n"
        "As the Brief says, see seed 002 (`../../shared/seeds/002_…`) and Issue 14, item 4.\n"
        "Where the seeds are silent, seed-exact schemas answer.\n"
        "[gone](missing.md), [out](../../elsewhere.md), [abs](/docs/other.md),\n"
        "[no heading](other.md#nowhere), [here](#nowhere-here)\n"
    )
    good = tmp_path / "docs" / "good.md"
    good.write_text(
        "# Good\n"
        "levers9's JoinMachine; an issued certificate; an item of the table; `.../approve`.\n"
        "make run seeds tenant dev; schemathesis runs with a fixed seed.\n"
        "[other](other.md#known-heading-here), [top](#good), [web](https://example.com/x.md#y),\n"
        "![picture](other.md)\n"
        "```\n[not a link](missing.md)\n```\n"
    )
    # When both are checked
    words = internal_words(bad.read_text())
    problems = broken_links(bad, tmp_path)
    # Then every fault of the first is reported, and nothing of the second
    expected_words = [
        "the Brief",
        "seed 0",
        "../shared/seeds",
        "Issue 1",
        "item 4",
        "the seeds",
        "seed-exact",
    ]
    assert [w.split(": ", 1)[1] for w in words] == expected_words
    assert [p.split(": ", 1)[1] for p in problems] == [
        "../../shared/seeds/002_ is outside the repository",
        "../../elsewhere.md is outside the repository",
        "missing.md does not exist",
        "../../elsewhere.md is outside the repository",
        "/docs/other.md is absolute; link relative to the page",
        "other.md#nowhere: other.md has no heading #nowhere",
        "#nowhere-here: bad.md has no heading #nowhere-here",
    ]
    assert internal_words(good.read_text()) == []
    assert broken_links(good, tmp_path) == []


# The code speaks to its readers too: a comment or docstring that cites a tracker number or a seed
# file says where a rule came from, not why it holds. These two files define and test the words.
_WORD_LISTS = {"tests/architecture/test_docs.py", "tests/support/markdown.py"}
# In code "the seed" is also a cryptographic word (MakeCredential's seed, a fuzzer's seed): only the
# forms that name a seed file, the brief or a tracker are refused there.
_CODE_INTERNAL = re.compile(
    r"\.\./shared/seeds|\bseed 0|\bseed-exact\b|\bthe brief\b|\bissue [0-9]|\bitem [0-9]", re.IGNORECASE
)
_CODE_SUFFIXES = {".py", ".js", ".css", ".html", ".yaml", ".yml", ".toml", ".sh", ".txt"}


def _code_files() -> list[Path]:
    roots = [ROOT / name for name in ("layers", "local", "cli", "functions", "tests", ".ci")]
    found = [ROOT / "template.yaml", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for root in roots:
        for path in root.rglob("*"):
            parts = set(path.relative_to(ROOT).parts)
            if parts & {"node_modules", "__pycache__", ".venv", "dist", "build"} or not path.is_file():
                continue
            if path.suffix in _CODE_SUFFIXES or path.name == "run":
                found.append(path)
    return [path for path in found if str(path.relative_to(ROOT)) not in _WORD_LISTS]


def test_no_internal_words_in_code() -> None:
    # Given every source, test, template and build file of the repository
    files = _code_files()
    assert len(files) > 200
    # When each is searched for the project's internal words (tracker and seed-file numbers)
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for match in _CODE_INTERNAL.finditer(line)
    ]
    # Then there are none: name the contract by its public name, and say why the rule holds
    assert found == []

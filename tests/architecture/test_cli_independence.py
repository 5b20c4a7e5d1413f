"""The `joinplane` command is a client of the HTTP API and a package of its own (cli/pyproject.toml):
it imports nothing of the server, and every third-party module it imports is a declared dependency.
Its modules stay small enough to read whole."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "cli"
SOURCES = sorted((CLI / "joinplane_cli").rglob("*.py"))


def _top_level_imports(path: Path) -> set[str]:
    """Every module the file imports, anywhere in it (a function's lazy import counts too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _declared() -> set[str]:
    project = tomllib.loads((CLI / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~\[; ]", requirement)[0].lower() for requirement in project["dependencies"]}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_the_cli_imports_only_itself_the_standard_library_and_its_declared_dependencies(path: Path) -> None:
    # Given one module of the CLI, When its imports are read, Then each is the CLI's own, the
    # standard library's, or a dependency cli/pyproject.toml declares: never `joinplane` (the
    # domain), `joinplane_local`, boto3 or pydantic, which a machine installing ./cli does not get
    outside = _top_level_imports(path) - {"joinplane_cli"} - set(sys.stdlib_module_names)
    assert outside <= _declared(), f"{path.relative_to(ROOT)} imports {sorted(outside - _declared())}"


def test_the_cli_declares_what_it_needs_and_nothing_of_the_server() -> None:
    # Given cli/pyproject.toml, Then it depends on cryptography (keys, CSRs, certificate checks) and
    # on no server library, and installs the `joinplane` command from joinplane_cli alone
    project = tomllib.loads((CLI / "pyproject.toml").read_text())
    assert _declared() == {"cryptography"}
    assert project["project"]["scripts"] == {"joinplane": "joinplane_cli.main:main"}
    assert project["tool"]["setuptools"]["packages"] == ["joinplane_cli"]

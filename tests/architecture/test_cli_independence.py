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


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", requirement)[0].lower() for requirement in requirements}


def _declared() -> set[str]:
    return _names(tomllib.loads((CLI / "pyproject.toml").read_text())["project"]["dependencies"])


# The optional extras, and the one module each may be imported from (lazily, in a function).
EXTRAS = {"aws": ("botocore", "aws_iam.py")}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_the_cli_imports_only_itself_the_standard_library_and_its_declared_dependencies(path: Path) -> None:
    # Given one module of the CLI, When its imports are read, Then each is the CLI's own, the
    # standard library's, or a dependency cli/pyproject.toml declares: never `joinplane` (the
    # domain), `joinplane_local`, boto3 or pydantic, which a machine installing ./cli does not get
    outside = _top_level_imports(path) - {"joinplane_cli"} - set(sys.stdlib_module_names)
    allowed = _declared() | {module for module, where in EXTRAS.values() if path.name == where}
    assert outside <= allowed, f"{path.relative_to(ROOT)} imports {sorted(outside - allowed)}"


def test_an_extra_is_pinned_and_imported_only_lazily_by_its_module() -> None:
    # Given cli/pyproject.toml's optional extras, Then each is the pinned library its module needs
    extras = tomllib.loads((CLI / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {name: _names(requirements) for name, requirements in extras.items()} == {
        name: {module} for name, (module, _) in EXTRAS.items()
    }
    assert all("==" in requirement for requirements in extras.values() for requirement in requirements)
    for module, where in EXTRAS.values():
        # And its module imports it only inside functions: `joinplane --help` never loads it
        tree = ast.parse((CLI / "joinplane_cli" / where).read_text())
        at_top = [
            node
            for node in tree.body
            if isinstance(node, ast.Import | ast.ImportFrom)
            and module
            in {(getattr(node, "module", None) or "").split(".")[0]}
            | {alias.name.split(".")[0] for alias in node.names}
        ]
        assert at_top == [], f"{where} imports {module} at module level"


def test_the_cli_declares_what_it_needs_and_nothing_of_the_server() -> None:
    # Given cli/pyproject.toml, Then it depends on cryptography (keys, CSRs, certificate checks) and
    # on no server library, and installs the `joinplane` command from joinplane_cli alone
    project = tomllib.loads((CLI / "pyproject.toml").read_text())
    assert _declared() == {"cryptography"}
    assert project["project"]["scripts"] == {"joinplane": "joinplane_cli.main:main"}
    assert project["tool"]["setuptools"]["packages"] == ["joinplane_cli"]

"""The local runtime (local/joinplane_local) is a package of its own (local/pyproject.toml): it
emulates AWS around the functions, and reaches into the domain only where MAY_IMPORT says why.
Checked on the source (no imports run): every import counts, a function's lazy one too."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.requirements import RUN, canonicalize_name, pins

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "local"
DOMAIN = ROOT / "layers" / "domain" / "joinplane"
SOURCES = sorted((LOCAL / "joinplane_local").rglob("*.py"))

# Each module of the domain the local runtime may import, and why. It runs the functions by their
# handlers (functions/<name>/app.py, loaded by path), so serving a route needs none of the domain:
# what it imports is for the services it stands in for and the dev tenant it seeds.
MAY_IMPORT = {
    "clock": "the clock the functions read: moved by /_local/clock, the Date of answers, schedules",
    "aws": "the functions' client factory: pointed at the emulator, hooked by the emulated IAM",
    "container": "per-container state, forgotten when a runtime starts or stops",
    "credentials": "seeding the dev tenant: the admin key's secret",
    "keyauth": "seeding the dev tenant: the admin key's stored form",
    "dal.apikeys": "seeding the dev tenant: the admin key's record",
    "pools": "seeding the dev tenant: the dev pool",
    "ids": "seeding the dev tenant: the admin key's id",
    "errors": "seeding the dev tenant: what already exists",
    "grants": "seeding the dev tenant: the admin's grant",
    "clusters.inventory": "make cost: a Sylve node's inventory report, digested as a node digests it",
}


def _module(dotted: str) -> str:
    """`joinplane.dal.apikeys` -> `dal.apikeys`, the name a module of the domain goes by here."""
    return dotted.removeprefix("joinplane").lstrip(".")


def _is_module(name: str) -> bool:
    path = DOMAIN.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@functools.cache
def domain_imports(path: Path) -> frozenset[str]:
    """Every module of the domain the file imports, anywhere in it (`from joinplane import pools`
    and `from joinplane.pools import CreatePool` both import `pools`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {_module(a.name) for a in node.names if a.name.split(".")[0] == "joinplane"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "joinplane":
                continue
            base = _module(node.module)
            for alias in node.names:
                submodule = f"{base}.{alias.name}".lstrip(".")
                found.add(submodule if _is_module(submodule) else base)
    return frozenset(found - {""})


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of every import of the file that is neither ours nor the standard library's."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - {"joinplane", "joinplane_local"} - set(sys.stdlib_module_names)


def declared() -> dict[str, str]:
    """local/pyproject.toml's dependencies: canonical name -> pinned version."""
    pinned: dict[str, str] = {}
    for requirement in tomllib.loads((LOCAL / "pyproject.toml").read_text())["project"]["dependencies"]:
        name, separator, version = requirement.partition("==")
        assert separator and re.fullmatch(r"[0-9][0-9A-Za-z.]*", version), f"{requirement} is not pinned"
        pinned[canonicalize_name(name)] = version
    return pinned


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_the_local_runtime_imports_only_the_domain_modules_it_names(path: Path) -> None:
    # Given one module of the local runtime, When its imports of the domain are read
    strays = sorted(domain_imports(path) - set(MAY_IMPORT))
    # Then each is one the runtime names, with its reason
    assert strays == [], (
        f"{path.relative_to(ROOT)} imports joinplane.{', joinplane.'.join(strays)}, which the local "
        "runtime may not import: it emulates AWS around the functions and reaches the domain only where "
        "tests/architecture/test_local_runtime.py's MAY_IMPORT says why. Reach it through a function's "
        "handler or the HTTP API instead, or, if the runtime itself must, add it to MAY_IMPORT with the "
        "reason and say so in ARCHITECTURE.md"
    )


def test_every_domain_module_the_local_runtime_may_import_is_one_it_imports() -> None:
    # Given every module of the local runtime
    imported = set().union(*(domain_imports(path) for path in SOURCES))
    # Then MAY_IMPORT names no more than they import: a permission no code uses is removed with it
    assert sorted(set(MAY_IMPORT) - imported) == [], "no module of local/joinplane_local imports these"
    # And each name is a module of the domain
    assert [name for name in MAY_IMPORT if not _is_module(name)] == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_the_local_runtime_imports_only_its_declared_dependencies(path: Path) -> None:
    # Given one module of the local runtime and the distributions installed here
    owners = {top: {canonicalize_name(d) for d in dists} for top, dists in _distributions().items()}
    # When each third-party import is traced to its distribution
    undeclared = {top: sorted(owners.get(top, {top})) for top in third_party_imports(path)}
    # Then local/pyproject.toml declares it
    undeclared = {top: dists for top, dists in undeclared.items() if not set(dists) & set(declared())}
    assert undeclared == {}, f"{path.relative_to(ROOT)} imports what local/pyproject.toml does not declare"


def test_the_local_runtime_pins_its_dependencies_as_make_run_installs_them() -> None:
    # Given local/pyproject.toml's dependencies and requirements-run.txt (what make run installs)
    run = pins(RUN)
    # Then each is pinned there, to the same version
    wanted = {name: [version] for name, version in declared().items()}
    assert wanted == {name: run.get(name) for name in wanted}


def test_the_local_runtime_is_a_package_of_its_own() -> None:
    # Given the two pyproject files
    local = tomllib.loads((LOCAL / "pyproject.toml").read_text())
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # Then joinplane_local is the local project's only package, and the domain's project does not ship it
    assert local["project"]["name"] == "joinplane-local"
    assert local["tool"]["setuptools"]["packages"] == ["joinplane_local"]
    assert "joinplane_local" not in root["tool"]["setuptools"]["packages"]


@functools.cache
def _distributions() -> dict[str, list[str]]:
    """Top-level module -> the distributions installing it (half a second to read: read once)."""
    return dict(importlib.metadata.packages_distributions())

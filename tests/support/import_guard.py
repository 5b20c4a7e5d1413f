"""Run a module as `python -m` would, with only the distributions a requirement file installs
importable, as in a virtualenv built from that file alone (without the minute pip takes to
build one).

    python tests/support/import_guard.py REQUIREMENTS REPORT MODULE [ARG...]

(as a script, not `-m tests.support...`: the package's initialiser would load half the test
helpers, and what they import, before the guard is in place).

A top-level module that only other installed distributions provide is not found (an import fails
with ModuleNotFoundError, `importlib.util.find_spec` says None), as it would be there, so optional
imports take their fallback. At exit REPORT
holds, as JSON, `refused` (each refused module and the distribution that has it) and `loaded`
(every distribution a module loaded by then belongs to). This project's own packages (the
editable installs) and pip's and setuptools' (every virtualenv has them) stay importable."""

from __future__ import annotations

import os
import sys

# As `python -m` would have it: the working directory first, not this file's directory, whose
# modules (http.py) would shadow the standard library's.
sys.path[0] = os.getcwd()

import atexit  # noqa: E402
import importlib.abc  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import runpy  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402


def _requirements() -> ModuleType:
    """tests/support/requirements.py, loaded by its path (see above)."""
    path = Path(__file__).with_name("requirements.py")
    spec = importlib.util.spec_from_file_location("_requirements", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_REQUIREMENTS = _requirements()
canonicalize_name, pins = _REQUIREMENTS.canonicalize_name, _REQUIREMENTS.pins

ALWAYS = {"joinplane", "joinplane-local", "joinplane-cli", "pip", "setuptools"}


class Refuse(importlib.abc.MetaPathFinder):
    """In place of the path finder: finds what it would, except the refused top-level modules,
    which it does not find at all (so `importlib.util.find_spec` says None, as it would there)."""

    def __init__(
        self, finder: type[importlib.machinery.PathFinder], allowed: set[str], refused: dict[str, str]
    ) -> None:
        self.finder = finder
        self.allowed = allowed
        self.refused = refused
        self.attempts: dict[str, str] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is None and fullname in self.refused:
            self.attempts[fullname] = self.refused[fullname]
            return None
        return self.finder.find_spec(fullname, path, target)

    def invalidate_caches(self) -> None:
        self.finder.invalidate_caches()

    def find_distributions(
        self, context: importlib.metadata.DistributionFinder.Context | None = None
    ) -> Iterator[importlib.metadata.Distribution]:
        """importlib.metadata's view: the allowed distributions only."""
        found = self.finder.find_distributions(context or importlib.metadata.DistributionFinder.Context())
        return (d for d in found if canonicalize_name(d.metadata["Name"]) in self.allowed)


def owners() -> dict[str, list[str]]:
    """Top-level module name -> the canonical names of the distributions that install it."""
    return {
        top: sorted({canonicalize_name(d) for d in dists})
        for top, dists in importlib.metadata.packages_distributions().items()
    }


def main(argv: list[str]) -> None:
    requirements, report, module, *args = argv
    allowed = set(pins(Path(requirements))) | ALWAYS
    by_module = owners()
    refused = {top: dists[0] for top, dists in by_module.items() if not any(d in allowed for d in dists)}
    guard = Refuse(importlib.machinery.PathFinder, allowed, refused)
    sys.meta_path[sys.meta_path.index(importlib.machinery.PathFinder)] = guard

    def write_report() -> None:
        loaded = sorted({d for name in list(sys.modules) for d in by_module.get(name.partition(".")[0], [])})
        Path(report).write_text(json.dumps({"refused": guard.attempts, "loaded": loaded}))

    atexit.register(write_report)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])

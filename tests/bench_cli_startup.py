"""`make bench`, the CLI: what a start of `joinplane` costs, and what a parser library would add.

CPU time (user + system) of each command, the minimum of RUNS: wall time on a shared machine
measures the neighbours. `import click` / `import typer` are measured when they are installed in
this interpreter (`pip install click typer` in a scratch virtualenv to compare), and the installed
size of the CLI's own dependencies is read from their package metadata.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from tests.support.runtime import command

RUNS = 30


def cpu_ms(argv: list[str]) -> tuple[float, float]:
    spent = []
    for _ in range(RUNS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, capture_output=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    return min(spent), statistics.median(spent)


def installed_mib(distribution: str) -> float:
    files = importlib.metadata.distribution(distribution).files or []
    return sum(Path(str(f.locate())).stat().st_size for f in files if Path(str(f.locate())).is_file()) / 2**20


def main() -> None:
    python = sys.executable
    cases = {
        "python -c pass": [python, "-c", "pass"],
        "import argparse": [python, "-c", "import argparse"],
        "joinplane --version": [*command(), "--version"],
        "joinplane completion bash": [*command(), "completion", "bash"],
        "the agent's import": [
            python,
            "-c",
            "import joinplane_cli.main, joinplane_cli.agent, joinplane_cli.service",
        ],
    }
    for library in ("click", "typer"):
        if importlib.util.find_spec(library):
            cases[f"import {library}"] = [python, "-c", f"import {library}"]
    print(f"CPU time, min and median of {RUNS} runs")
    for name, argv in cases.items():
        low, middle = cpu_ms(argv)
        print(f"  {name:28} {low:5.0f} ms  {middle:5.0f} ms")
    print("installed size")
    for distribution in (
        "joinplane-cli",
        "cryptography",
        "cffi",
        "pycparser",
        "click",
        "typer",
        "rich",
        "pygments",
    ):
        try:
            print(f"  {distribution:28} {installed_mib(distribution):5.1f} MiB")
        except importlib.metadata.PackageNotFoundError:
            print(f"  {distribution:28}     - (not installed here)")


if __name__ == "__main__":
    main()

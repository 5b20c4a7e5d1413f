"""The CLI walk-throughs of README.md and docs/cli.md, run as written: every command of the fenced block
between `<!-- cli-walkthrough:begin -->` and `<!-- cli-walkthrough:end -->`, in one shell, in order.

A command's trailing `# exit N` is the exit code it must end with (0 otherwise). Only the runtime's
address and admin key differ from `make run`'s: the block's `http://127.0.0.1:3000` and its dev admin
key (the one `JOINPLANE_DEV_ADMIN_KEY` fixes in the text around it) become this test's runtime's.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.runtime import Cli, command

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- cli-walkthrough:begin -->", "<!-- cli-walkthrough:end -->"
MAKE_RUN_URL = "http://127.0.0.1:3000"
DEV_KEY = re.compile(r"jpk_[0-9a-hjkmnp-tv-z]{26}_[0-9a-hjkmnp-tv-z]{32}")
EXPECTED = re.compile(r"#\s*exit (\d+)\b")
NO_CONFIG = "/nonexistent/joinplane/config.toml"  # no test reads the config file of whoever runs it


def walkthrough(document: Path) -> list[str]:
    """The command lines of the document's walk-through block."""
    text = document.read_text()
    assert BEGIN in text and END in text, f"{document.name} has no block between {BEGIN} and {END}"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    fenced = re.search(r"```(?:sh|bash|console)?\n(.*?)```", block, re.DOTALL)
    assert fenced, f"{document.name}'s walk-through holds no fenced block"
    lines = [
        line for line in fenced.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    assert not [line for line in lines if line.rstrip().endswith("\\")], "one command per line, please"
    return lines


def script(lines: list[str], url: str, key: str) -> str:
    """The lines as one bash script that stops at the first command ending with another exit code."""
    steps = []
    for number, line in enumerate(lines, 1):
        found = EXPECTED.search(line)
        expected = int(found.group(1)) if found else 0
        runnable = DEV_KEY.sub(key, line.replace(MAKE_RUN_URL, url))
        steps.append(
            f"echo '$ '{shlex.quote(line)}\n{runnable}\n__rc=$?\n"
            f'if [ "$__rc" != {expected} ]; then echo "line {number} exited $__rc, not {expected}: "'
            f"{shlex.quote(line)} >&2; exit 99; fi"
        )
    return "\n".join(steps) + "\n"


def test_docs_cli_holds_the_readmes_walkthrough() -> None:
    # One walk-through, shown in both places; the README's runs below
    assert walkthrough(ROOT / "docs/cli.md") == walkthrough(ROOT / "README.md")


def test_the_cli_walkthrough_runs_as_written(cli: Cli, tmp_path: Path) -> None:
    # Given the README's walk-through commands, a fresh directory, and a shell with only the venv on
    # PATH (the package's runtime: a second runtime in this process would share moto's tables, and
    # its teardown would delete them under the first)
    assert cli.runtime.admin_key
    lines = walkthrough(ROOT / "README.md")
    env = {k: v for k, v in cli.env.items() if not k.startswith("JOINPLANE_")}
    env.update(PATH=f"{Path(command()[0]).parent}:{os.environ['PATH']}", JOINPLANE_CONFIG=NO_CONFIG)

    # When they run in order, in one shell
    done = subprocess.run(
        ["bash", "-c", script(lines, cli.runtime.url, cli.runtime.admin_key)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # Then every command ended as the walk-through says
    assert done.returncode == 0, f"{done.stderr}\n--- output ---\n{done.stdout}"

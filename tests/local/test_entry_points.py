"""Every command a user runs (each `python -m joinplane_local...` and `python -m
joinplane.contract...` module, and the `joinplane` CLI), on a machine with no AWS region, no AWS
credentials and no Joinplane URL: each either works without them or ends with one readable line and
an exit code, never a traceback."""

from __future__ import annotations

import ast
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.requirements import ROOT
from tests.support.runtime import command

LOCAL = ROOT / "local" / "joinplane_local"
DOMAIN = ROOT / "layers" / "domain" / "joinplane"
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers

# module -> (arguments, exit code, what its one line must say); None: it needs none of them and works
MODULES: dict[str, list[tuple[list[str], int, str | None]]] = {
    "joinplane_local": [
        (["--aws", "--stack-name", "joinplane-dev", "--port", "0"], 1, "cannot start"),
        (["--endpoint-url", NOWHERE, "--port", "0"], 1, "cannot start"),
    ],
    "joinplane_local.bootstrap": [
        (["--stack-name", "joinplane-dev", "--tenant", "acme"], 1, "no AWS region"),
        (
            ["--stack-name", "joinplane-dev", "--tenant", "acme", "--region", "us-east-1"],
            1,
            "no AWS credentials",
        ),
    ],
    "joinplane_local.deploydoc": [([], 0, None)],
    # Runs the flows in an embedded emulator, needing no AWS set-up (`make cost`, minutes long):
    # here only its refusals of what it cannot run.
    "joinplane_local.cost": [
        (["--flow", "nosuch"], 2, "invalid choice"),
        (["--repeat", "0"], 2, "must be at least 1"),
    ],
    "joinplane.contract": [([], 0, None)],
    "joinplane.contract.template": [([], 2, "no template.yaml here")],
    "joinplane.event_schemas": [([], 0, None)],
}
# The operator's commands share one settings path (`requests list` stands for them all); a machine's
# three commands each have their own.
CLI: list[tuple[list[str], int, str]] = [
    (["join", "--token", "jtok_x"], 2, "missing --url"),
    (["agent", "--token", "jtok_x"], 2, "to join, pass --url"),
    (["renew"], 2, "run `joinplane join`"),
    (["requests", "list"], 2, "missing --url"),
    (["pools", "list", "--url", NOWHERE, "--api-key", "jpk_x"], 7, "cannot reach"),
]


def bare_environment(home: Path) -> dict[str, str]:
    """A shell of someone with no AWS set-up and no Joinplane settings: no region, no credentials
    (no files, no instance metadata), no URL, no config file."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "AWS_CONFIG_FILE": str(home / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "JOINPLANE_CONFIG": str(home / "none"),
        "JOINPLANE_DIR": str(home / "machine"),
    }


def test_every_entry_point_is_covered() -> None:
    # Given the modules `python -m` runs (a __main__ guard, or the package's __main__.py)
    runnable = {"joinplane_local"} | {
        f"joinplane_local.{path.stem}"
        for path in LOCAL.glob("*.py")
        if path.name != "__main__.py" and _has_main_guard(path)
    }
    runnable |= {
        ".".join(("joinplane", *path.relative_to(DOMAIN).with_suffix("").parts)).removesuffix(".__main__")
        for path in DOMAIN.rglob("*.py")
        if path.name == "__main__.py" or _has_main_guard(path)
    }
    scripts = tomllib.loads((ROOT / "cli" / "pyproject.toml").read_text())["project"]["scripts"]

    # Then each has its cases here, and the one console script is the CLI tested below
    assert runnable == set(MODULES)
    assert scripts == {"joinplane": "joinplane_cli.main:main"}


def _has_main_guard(path: Path) -> bool:
    return any(
        isinstance(node, ast.If)
        and "__name__" in ast.unparse(node.test)
        and "__main__" in ast.unparse(node.test)
        for node in ast.parse(path.read_text()).body
    )


@pytest.mark.parametrize(
    ("module", "args", "code", "says"),
    [(module, *case) for module, cases in MODULES.items() for case in cases],
)
def test_a_module_without_aws_settings(
    module: str, args: list[str], code: int, says: str | None, tmp_path: Path
) -> None:
    # When it runs with no region, credentials or endpoint
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=tmp_path,
        env=bare_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then it works, or it ends with the exit code and one readable line last, no traceback
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    if says is not None:
        last = done.stderr.strip().splitlines()[-1]
        assert says in last and last.startswith(("joinplane-local:", f"python -m {module}:")), done.stderr


def test_a_port_in_use_is_named_with_how_to_move(tmp_path: Path) -> None:
    # Given a port something else listens on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # When the local runtime is started on it
        done = subprocess.run(
            [sys.executable, "-m", "joinplane_local", "--port", str(port)],
            cwd=tmp_path,
            env=bare_environment(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )

    # Then one line names the port and how to move it
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        f"joinplane-local: cannot start: port {port} on 127.0.0.1 is in use (another make run?); "
        "move this one with PORT=N make run, or --port N"
    )


@pytest.mark.parametrize(("args", "code", "says"), CLI)
def test_the_cli_without_settings(args: list[str], code: int, says: str, tmp_path: Path) -> None:
    # When a command runs with no URL, key or state directory
    done = subprocess.run(
        [*command(), *args],
        cwd=tmp_path,
        env=bare_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )

    # Then one line says what is missing, with the documented exit code
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("joinplane: ") and says in lines[0], done.stderr

"""`pip install ./cli` alone: a `joinplane` with its own dependencies and nothing of the server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from joinplane_cli.version import VERSION
from tests.support.runtime import Cli

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# Pinned as the project's own venv has them, so the install is the same everywhere (and cached).
PINNED = ("cryptography", "cffi", "pycparser")


def _run(*command: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, env=env, cwd=cwd, check=False, timeout=300
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} exited {done.returncode}:\n{done.stderr}{done.stdout}"
    )
    return done.stdout


def test_cli_installs_alone_into_a_fresh_virtualenv_and_joins_a_machine(cli: Cli, tmp_path: Path) -> None:
    # Given a copy of ./cli as a clone has it (the build writes beside the sources) and a fresh venv
    source = tmp_path / "cli"
    shutil.copytree(
        ROOT / "cli", source, ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info")
    )
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    pins = [
        line.strip()
        for line in (ROOT / "requirements-run.txt").read_text().splitlines()
        if line.split("==")[0].strip().lower() in PINNED
    ]
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")

    # When pip installs it there
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "--disable-pip-version-check"]
    _run(*pip, "install", "-q", "-c", constraints, source)

    # Then the venv holds the CLI and its dependencies only: no domain layer, emulator or AWS library
    installed = {item["name"].lower() for item in json.loads(_run(*pip, "list", "--format", "json"))}
    assert installed == {"joinplane-cli", *PINNED}
    env = {k: v for k, v in cli.env.items() if k != "PYTHONPATH"}
    for module in ("joinplane", "joinplane_local", "boto3", "moto", "pydantic"):
        probe = subprocess.run(
            [venv / "bin" / "python", "-c", f"import {module}"], capture_output=True, env=env, cwd=tmp_path
        )
        assert probe.returncode != 0, f"{module} is importable in the CLI's venv"
    joinplane = venv / "bin" / "joinplane"
    assert _run(joinplane, "--version", env=env, cwd=tmp_path).strip() == f"joinplane {VERSION}"

    # And that joinplane works against the local runtime, for the operator and for a machine
    pool = f"p-install-{uuid.uuid4().hex[:8]}"
    _run(joinplane, "pools", "create", pool, "--site", "site-cli", env=env, cwd=tmp_path)
    token = json.loads(
        _run(joinplane, "tokens", "create", "--pool", pool, "-o", "json", env=env, cwd=tmp_path)
    )
    machine = tmp_path / "machine"
    joined = _run(joinplane, "join", "--token", token["token"], "--dir", machine, env=env, cwd=tmp_path)
    assert "Admitted: this machine joined pool" in joined
    _run("openssl", "verify", "-CAfile", "ca.crt", "machine.crt", cwd=machine)

"""`make run` installs requirements-run.txt only: it must pin everything the local runtime loads,
and each pin must live once (requirements-dev.txt includes it)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

from tests.support.polling import wait_until
from tests.support.requirements import DEV, ROOT, RUN, canonicalize_name, pins
from tests.support.runtime import command

GUARD = ROOT / "tests" / "support" / "import_guard.py"
DEV_KEY = "jpk_01kdevdevdevdevdevdevdevde_devkeydevkeydevkeydevkeydevkeyde"


def test_the_run_pins_are_the_dev_pins_kept_once() -> None:
    # Given both files, includes followed
    run, dev = pins(RUN), pins(DEV)

    # Then every run pin is a dev pin, identical, and no distribution is pinned twice
    assert {name: dev.get(name) for name in run} == run
    assert {name: versions for name, versions in dev.items() if len(versions) > 1} == {}
    assert "-r requirements-run.txt" in DEV.read_text().splitlines()


def test_the_lambda_layer_ships_what_make_run_runs() -> None:
    # Given the layer's requirements (sam build reads that file, so its pins cannot be an include)
    layer = pins(ROOT / "layers" / "domain" / "requirements.txt")

    # Then each is pinned for make run too, to the same version: the runtime runs the functions
    # with the libraries Lambda will
    assert {name: pins(RUN).get(name) for name in layer} == layer


def test_the_run_requirements_are_closed_under_dependencies() -> None:
    # Given the run pins and the metadata of the distributions they name (installed at those pins)
    run = pins(RUN)
    environment = {**default_environment(), "extra": ""}
    missing: dict[str, list[str]] = {}
    for name, (version,) in run.items():
        distribution = importlib.metadata.distribution(name)
        assert distribution.version == version, f"{name}: installed {distribution.version}, pinned {version}"

        # When each one's unconditional requirements are read
        for line in distribution.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            # Then each is pinned too, so pip never picks an unpinned version at install time
            if canonicalize_name(requirement.name) not in run:
                missing.setdefault(name, []).append(str(requirement))
    assert missing == {}


def test_the_local_runtime_serves_a_join_with_the_run_requirements_alone(tmp_path: Path) -> None:
    # Given `python -m joinplane_local`, as `make run` starts it, where only what requirements-run.txt
    # installs can be imported
    report, output, log = tmp_path / "imports.json", tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with output.open("w") as stdout, log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, GUARD, RUN, report, "joinplane_local", "--port", "0"],
            cwd=ROOT,
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, "JOINPLANE_DEV_ADMIN_KEY": DEV_KEY, "PYTHONUNBUFFERED": "1"},
        )
    try:
        banner = wait_until(
            lambda: "Ctrl-C" in output.read_text() or process.poll() is not None, timeout=120, interval=0.2
        )
        url = re.search(r"Serving on (http://\S+)", output.read_text())
        assert banner and url, (
            f"the runtime ended before its banner:\n{log.read_text()[-3000:]}\n{_report(report)}"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOINPLANE_")}
        env.update(
            JOINPLANE_URL=url.group(1), JOINPLANE_API_KEY=DEV_KEY, JOINPLANE_CONFIG=str(tmp_path / "none")
        )

        # When a machine joins with a certificate (a pool CA's KMS key, a signature), the console's
        # page is fetched, and the join's event reaches the audit trail (stream, bus, rule, consumer)
        def cli(*args: str) -> str:
            done = subprocess.run(
                [*command(), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, f"joinplane {' '.join(args)}: {done.stderr}\n{_report(report)}"
            return done.stdout

        cli("tokens", "create", "--pool", "dev-pool", "--token-out", "machine.token")
        joined = cli("join", "--token-file", "machine.token", "--dir", "machine")
        with urllib.request.urlopen(url.group(1) + "/console", timeout=10) as page:
            console = page.read().decode()
        audited = wait_until(
            lambda: "machine.joined" in cli("audit", "list", "--pool", "dev-pool", "-o", "json"), timeout=30
        )
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # Then all of it worked, and nothing the runtime loaded came from outside requirements-run.txt
    assert "Admitted" in joined
    assert (tmp_path / "machine" / "machine.crt").exists()
    assert "<html" in console
    assert audited
    assert process.returncode == 0
    imports = _report(report)
    ours = {"joinplane", "joinplane-local", "joinplane-cli", "pip", "setuptools"}
    outside = set(imports["loaded"]) - set(pins(RUN)) - ours
    assert outside == set(), imports


def _report(report: Path) -> dict[str, list[str]]:
    return json.loads(report.read_text()) if report.exists() else {"loaded": [], "refused": []}

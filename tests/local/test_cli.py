"""`python -m joinplane_local` (what `make run` starts): banner, serving, clean Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from joinplane_local.__main__ import parse_args
from joinplane_local.functions import DEFAULT_CONCURRENCY
from tests.support.runtime import FIXTURE_TEMPLATE


def test_the_cli_serves_until_ctrl_c_and_stops_without_a_traceback() -> None:
    # Given
    command = [sys.executable, "-m", "joinplane_local", "--port", "0", "--no-seed"]
    command += ["--template", str(FIXTURE_TEMPLATE)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PORT": "1"}
    )
    try:
        banner = []
        deadline = time.monotonic() + 30
        assert process.stdout is not None
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            banner.append(line)
            if "Ctrl-C" in line:
                break
        text = "".join(banner)
        found = re.search(r"Serving on (http://127\.0\.0\.1:(\d+))", text)
        assert found, text
        assert found.group(2) not in ("0", "1")  # the port actually bound is reported
        assert "GET /items/{id}" in text and "→ Echo" in text
        assert "[authorizer Key]" in text
        assert "rate(5 minutes) → Ticker" in text

        # When
        with urllib.request.urlopen(found.group(1) + "/items/cli", timeout=10) as response:
            event = json.loads(response.read())["event"]
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=20)

        # Then
        assert event["pathParameters"] == {"id": "cli"}
        assert process.returncode == 0, errors
        assert "Traceback" not in errors
        assert "GET /items/cli 200" in errors
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_the_port_comes_from_port_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given
    monkeypatch.setenv("PORT", "4321")

    # When / Then
    assert parse_args([]).port == 4321
    assert parse_args(["--port", "0"]).port == 0


def test_aws_options_need_aws_and_names() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--stack-name", "prod"])
    with pytest.raises(SystemExit):
        parse_args(["--aws"])
    args = parse_args(["--aws", "--stack-name", "prod"])
    assert (args.aws, args.stack_name, args.workers, args.seed) == (True, "prod", None, None)


def test_the_concurrency_limit_is_a_positive_number_defaulting_to_the_runtimes() -> None:
    assert parse_args([]).concurrency == DEFAULT_CONCURRENCY
    assert parse_args(["--concurrency", "3"]).concurrency == 3
    for wrong in ("0", "-1", "many"):
        with pytest.raises(SystemExit):
            parse_args(["--concurrency", wrong])

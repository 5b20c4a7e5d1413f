"""The agent service's schedule, backoff and systemd unit, without a server."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from joinplane_cli import agent, main, service
from joinplane_cli.api import ApiError


@pytest.mark.parametrize(
    ("draw", "expected"),
    [
        (0.5, 1000 + 200),  # two thirds of a 300 s lifetime
        (0.0, 1000 + 300 * (2 / 3 - 0.05)),
        (1.0, 1000 + 300 * (2 / 3 + 0.05)),
    ],
)
def test_renewal_comes_at_two_thirds_of_the_lifetime_give_or_take_five_percent(
    draw: float, expected: float
) -> None:
    # Given a certificate issued at t=1000 that expires at t=1300
    # When the agent schedules its renewal with a given draw of jitter
    due = service.renewal_time(1000.0, 1300.0, draw)
    # Then it lands within five percent of the lifetime around two thirds of it
    assert due == pytest.approx(expected)


def test_an_already_expired_certificate_is_renewed_at_once() -> None:
    # Given a certificate whose expiry is not after its issue (a bad clock, a broken answer)
    # When the renewal is scheduled, Then it is due at its issue instant, i.e. already
    assert service.renewal_time(1000.0, 900.0, 0.9) == 1000.0


def test_backoff_doubles_with_jitter_up_to_a_minute_and_starts_over_after_a_success() -> None:
    # Given a backoff and a seeded random source
    random.seed(7)
    backoff = agent.Backoff()
    # When the server fails ten times in a row
    delays = [backoff.next() for _ in range(10)]
    # Then each pause is between half and all of 1, 2, 4 ... seconds, never over 60
    for failures, delay in enumerate(delays):
        ceiling = min(60.0, 2.0**failures)
        assert ceiling / 2 <= delay <= ceiling, (failures, delay)
    assert max(delays) <= 60
    # And after a success the next failure waits about a second again
    backoff.reset()
    assert 0.5 <= backoff.next() <= 1.0


def test_a_busy_server_is_waited_out_at_least_as_long_as_its_retry_after() -> None:
    # Given a 503 saying when to come back (KMS throttled the join), and one saying nothing
    told = ApiError(503, "UNAVAILABLE", "the key store (KMS) is busy")
    told.retry_after = 20.0
    silent = ApiError(503, "UNAVAILABLE", "busy")
    # When the agent waits each out after its first failure
    # Then it waits at least what the server asked, else its own backoff (half to all of 1 s)
    assert agent.Backoff().next(told.retry_after or 0.0) >= 20.0
    assert 0.5 <= agent.Backoff().next(silent.retry_after or 0.0) <= 1.0


@pytest.mark.parametrize(
    ("status", "code", "retried"),
    [
        (503, "UNAVAILABLE", True),
        (429, "RESOURCE_EXHAUSTED", True),
        (500, "INTERNAL", True),
        (502, "HTTP_502", True),
        (403, "PERMISSION_DENIED", False),
        (401, "UNAUTHENTICATED", False),
        (400, "INVALID_ARGUMENT", False),
    ],
)
def test_only_a_busy_or_failing_server_is_waited_out(status: int, code: str, retried: bool) -> None:
    # Given a server's error answer, When the agent decides whether to try again, Then it retries
    # 5xx and 429 only: a refusal is permanent
    assert agent.retryable(ApiError(status, code, "x")) is retried


def test_the_printed_systemd_unit_is_one_systemd_accepts_and_keeps_secrets_and_dollars_literal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given the options a machine's agent runs with, a hook with a shell variable among them
    token_file = tmp_path / "token"
    # When the unit is printed
    code = main.main(
        [
            "agent",
            "--print-systemd-unit",
            "--url",
            "https://joinplane.example.com",
            "--token",
            "jpt_secret_never_printed",
            "--token-file",
            str(token_file),
            "--dir",
            "/var/lib/joinplane",
            "--on-renew",
            "systemctl reload nginx && echo $HOSTNAME 100%",
        ]
    )
    printed = capsys.readouterr().out
    # (the unit alone: a stream worker another test left running may log to this process's stdout)
    start, end = printed.index("# Joinplane agent:"), printed.index("WantedBy=multi-user.target\n")
    unit = printed[start : end + len("WantedBy=multi-user.target\n")]
    # Then it runs `joinplane agent` with those options, systemd-quoted
    assert code == 0
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.endswith(
        f"agent --dir /var/lib/joinplane --url https://joinplane.example.com --token-file {token_file} "
        '--on-renew "systemctl reload nginx && echo $$HOSTNAME 100%%"'
    )
    # And it never holds the token itself, and does not restart after a permanent refusal
    assert "jpt_" not in unit.replace("JOINPLANE_TOKEN=jpt_...", "")
    assert "RestartPreventExitStatus=4 5 6 8" in unit
    # And systemd itself finds nothing wrong with it
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    path = tmp_path / "joinplane-agent.service"
    program = exec_start.removeprefix("ExecStart=").split(" ")[0]
    path.write_text(unit.replace(f"ExecStart={program} ", f"ExecStart={shutil.which('true')} "))
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr
    assert path.name not in checked.stderr  # a setting it ignores is only a warning


@pytest.mark.parametrize(
    ("program", "directory", "protected"),
    [
        ("/usr/local/bin/joinplane", "/var/lib/joinplane", True),
        ("/root/.local/bin/joinplane", "/var/lib/joinplane", False),  # make install-cli, as root
        ("/home/ops/.local/bin/joinplane", "/var/lib/joinplane", False),
        ("/usr/local/bin/joinplane", "/home/ops/joinplane", False),
    ],
)
def test_protect_home_only_when_neither_the_program_nor_its_directory_is_under_a_home(
    program: str, directory: str, protected: bool
) -> None:
    # Given where joinplane and its directory live, When the unit is printed, Then systemd's
    # ProtectHome (which hides /home, /root and /run/user) is set only where it hides neither
    unit = service.systemd_unit(program, Path(directory), "https://api.example", None, None)
    assert ("ProtectHome=yes" in unit) is protected
    assert f"ExecStart={program} agent --dir {directory}" in unit


def test_an_aws_iam_agents_unit_names_its_token_by_id_and_holds_no_secret() -> None:
    # Given an agent that joins with its AWS identity, When its unit is printed
    token_id = "jtok_01j9zzzzzzzzzzzzzzzzzzzzzz"
    unit = service.systemd_unit(
        "/usr/local/bin/joinplane",
        Path("/var/lib/joinplane"),
        "https://api.example",
        None,
        None,
        None,
        token_id,
    )
    # Then it runs the agent with --aws-iam and the token's id, which is no secret
    assert f"agent --dir /var/lib/joinplane --aws-iam --token-id {token_id} --url https://api.example" in unit
    assert "jpt_" not in unit.split("ExecStart=", 1)[1].split("\n", 1)[0]

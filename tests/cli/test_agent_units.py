"""The agent's reading of the server: error dialects, denial kinds, the status line, key reuse."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from joinplane_cli import agent, api, main, statedir
from joinplane_cli.exits import Exit
from joinplane_cli.keys import MachineKey, csr_matches


@pytest.mark.parametrize(
    ("message", "code", "reason"),
    [
        ("join request jreq_01abc was rejected: not in inventory", Exit.REJECTED, "not in inventory"),
        ("join request jreq_01abc was rejected", Exit.REJECTED, ""),
        ("join request jreq_01abc is rejected", Exit.REJECTED, ""),
        ("join request jreq_01abc has expired", Exit.EXPIRED, ""),
        ("join request jreq_01abc is expired", Exit.EXPIRED, ""),
        ("the join request of this machine no longer exists; ask for a new join token", Exit.EXPIRED, ""),
        ("this machine has been revoked", Exit.DENIED, "this machine has been revoked"),
        (
            "join denied: TPM endorsement key is not on the allow-list",
            Exit.DENIED,
            "TPM endorsement key is not on the allow-list",
        ),
    ],
)
def test_permission_denied_is_told_apart_by_its_message(message: str, code: Exit, reason: str) -> None:
    # When
    denial = agent.classify_denial(message)

    # Then
    assert denial.exit_code == code
    assert denial.reason == reason


@pytest.mark.parametrize(
    ("status", "raw", "code", "message"),
    [
        (
            404,
            b'{"error": {"code": "NOT_FOUND", "message": "pool not found", "details": []}}',
            "NOT_FOUND",
            "pool not found",
        ),
        (
            403,
            b'{"code": 7, "message": "this machine has been revoked", "details": []}',
            "PERMISSION_DENIED",
            "this machine has been revoked",
        ),
        (401, b'{"message": "Unauthorized"}', "UNAUTHENTICATED", "Unauthorized"),
        (502, b"<html>Bad Gateway</html>", "HTTP_502", "<html>Bad Gateway</html>"),
    ],
)
def test_every_error_dialect_becomes_one_error(status: int, raw: bytes, code: str, message: str) -> None:
    # When
    error = api.parse_error(status, raw)

    # Then
    assert (error.code, error.server_message) == (code, message)
    assert error.exit_code == (Exit.UNAUTHENTICATED if code == "UNAUTHENTICATED" else Exit.ERROR)


def test_retryable_errors_are_the_transient_ones() -> None:
    # When / Then
    assert api.parse_error(409, b'{"code": 10, "message": "concurrent join lost; retry"}').transient
    assert api.parse_error(503, b'{"code": 14, "message": "retry"}').transient
    assert not api.parse_error(400, b'{"code": 9, "message": "pool archived"}').transient


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_status_line_rewrites_itself_on_a_terminal_and_prints_lines_elsewhere() -> None:
    # Given
    terminal, pipe = _Terminal(), io.StringIO()

    # When
    for out in (terminal, pipe):
        line = agent.StatusLine(out)
        line.show("pending 1")
        line.show("pending 1 (tick)", tick=True)
        line.show("pending 2")
        line.done()

    # Then
    assert terminal.getvalue() == "\r\x1b[2Kpending 1\r\x1b[2Kpending 1 (tick)\r\x1b[2Kpending 2\n"
    assert pipe.getvalue() == "pending 1\npending 2\n"


def test_a_retry_reuses_the_stored_key_and_csr(tmp_path: Path) -> None:
    # Given a first attempt that stored its key and CSR
    options = agent.JoinOptions(url="http://127.0.0.1:9", token="jpt_x", directory=tmp_path / "m")
    statedir.ensure(options.directory)
    first_key, first_csr = agent.Agent(options)._key("host", persist=True)

    # When the agent runs again
    second_key, second_csr = agent.Agent(options)._key("host", persist=True)
    fresh_key, _ = agent.Agent(
        agent.JoinOptions(url="http://127.0.0.1:9", token="jpt_x", directory=options.directory, new_key=True)
    )._key("host", persist=True)

    # Then
    assert second_key.public_key_sha256() == first_key.public_key_sha256()
    assert second_csr == first_csr
    assert fresh_key.public_key_sha256() != first_key.public_key_sha256()
    assert (options.directory / "machine.key").stat().st_mode & 0o777 == 0o600


def test_a_csr_for_another_key_is_not_reused() -> None:
    # Given
    one, other = MachineKey.generate(), MachineKey.generate()

    # When / Then
    assert csr_matches(one.csr("h"), one)
    assert not csr_matches(other.csr("h"), one)
    assert not csr_matches("not a csr", one)


def test_usage_errors_exit_2_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    # When
    missing_url = main.main(
        ["requests", "list", "--pool", "p", "--api-key", "k", "--tenant", "t", "--url", ""]
    )
    bad_url = main.main(["pools", "list", "--api-key", "k", "--tenant", "t", "--url", "ftp://x"])
    with pytest.raises(SystemExit) as parsed:
        main.main(["requests", "list", "--state", "bogus"])

    # Then
    errors = capsys.readouterr().err
    assert missing_url == 2 and "missing --url (or set JOINPLANE_URL)" in errors
    assert bad_url == 2 and "--url must be an http:// or https:// URL" in errors
    assert parsed.value.code == 2
    assert "Traceback" not in errors

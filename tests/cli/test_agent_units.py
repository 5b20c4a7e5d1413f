"""The agent's reading of the server: error dialects, denial kinds, the status line, key reuse."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from joinplane_cli import agent, api, main, refusals, statedir
from joinplane_cli.exits import Exit
from joinplane_cli.keys import MachineKey, csr_matches


def rpc_status(code: int, message: str, reason: str = "", **metadata: str) -> bytes:
    """An rpcStatus as the join dialect writes it: its ErrorInfo names the refusal."""
    info = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "joinplane",
        "metadata": metadata,
    }
    return json.dumps({"code": code, "message": message, "details": [info] if reason else []}).encode()


@pytest.mark.parametrize(
    ("raw", "exit_code", "reason", "request_id"),
    [
        (
            rpc_status(7, "refused", "JOIN_REQUEST_REJECTED", requestId="jreq_1", rejectionReason="not here"),
            Exit.REJECTED,
            "not here",
            "jreq_1",
        ),
        (rpc_status(7, "refused", "JOIN_REQUEST_REJECTED", requestId="jreq_1"), Exit.REJECTED, "", "jreq_1"),
        (rpc_status(7, "refused", "JOIN_REQUEST_EXPIRED", requestId="jreq_2"), Exit.EXPIRED, "", "jreq_2"),
        (
            rpc_status(7, "the join request of this key no longer exists", "JOIN_REQUEST_EXPIRED"),
            Exit.EXPIRED,
            "",
            "",
        ),
        (rpc_status(7, "gone", "MACHINE_REVOKED"), Exit.DENIED, "gone", ""),
        (rpc_status(7, "replaced", "KEY_RETIRED"), Exit.DENIED, "replaced", ""),
        (rpc_status(7, "join denied: no TPM", "JOIN_DENIED"), Exit.DENIED, "no TPM", ""),
        # The reason decides, never the words: a message that reads like a rejection is a denial
        (
            rpc_status(7, "join request jreq_3 was rejected: x", "JOIN_DENIED"),
            Exit.DENIED,
            "join request jreq_3 was rejected: x",
            "",
        ),
        # A 7 without a reason (an older server) is a denial
        (
            rpc_status(7, "join request jreq_4 was rejected"),
            Exit.DENIED,
            "join request jreq_4 was rejected",
            "",
        ),
    ],
)
def test_permission_denied_is_told_apart_by_its_reason(
    raw: bytes, exit_code: Exit, reason: str, request_id: str
) -> None:
    # When
    denial = refusals.classify_denial(api.parse_error(403, raw))

    # Then
    assert (denial.exit_code, denial.reason, denial.request_id) == (exit_code, reason, request_id)


def test_every_denial_reason_the_cli_knows_is_in_the_servers_catalogue() -> None:
    from joinplane import errors

    assert set(refusals.DENIAL_EXITS) <= errors.CATALOGUE
    assert {reason for reason in errors.CATALOGUE if reason.startswith("PROOF_")} == refusals.PROOF_REASONS


def test_the_reason_is_read_from_both_envelopes() -> None:
    operator = api.parse_error(
        409, b'{"error": {"code": "INVALID_STATE", "reason": "POOL_ARCHIVED", "message": "m", "details": []}}'
    )
    join = api.parse_error(400, rpc_status(9, "m", "WRONG_POOL"))
    foreign = api.parse_error(
        400,
        b'{"code": 9, "message": "m", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", '
        b'"reason": "WRONG_POOL", "domain": "example.com", "metadata": {}}]}',
    )
    assert (operator.reason, join.reason, foreign.reason) == ("POOL_ARCHIVED", "WRONG_POOL", "")


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

"""`joinplane` against a local runtime, as the machine and the operator use it from a terminal."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until
from tests.support.runtime import Cli

pytestmark = pytest.mark.e2e

POLL = "0.2"  # seconds between the agent's retries while it waits


def _wait_for_request(cli: Cli, pool: str, deadline: float = 30) -> dict[str, Any]:
    """The pool's one pending request, once the waiting agent has made it."""
    requests = wait_until(
        lambda: cli.ok("requests", "list", "--pool", pool, "-o", "json").json()["requests"], deadline, 0.1
    )
    assert len(requests) == 1, requests
    return dict(requests[0])


def _finish(agent: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str, str]:
    try:
        out, err = agent.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        agent.kill()
        out, err = agent.communicate()
        raise AssertionError(f"the agent did not finish:\n{out}\n{err}") from None
    return agent.returncode, out, err


def _audit_trail(cli: Cli, pool: str, subjects: set[str], expected: int) -> list[str]:
    """The pool's event detail-types about `subjects`, oldest first, once `expected` have arrived."""
    trail: list[str] = []
    until = time.monotonic() + 20
    while time.monotonic() < until:
        cli.runtime.drain()
        events = cli.ok("audit", "list", "--pool", pool, "--all", "-o", "json").json()["events"]
        trail = [
            event["detailType"]
            for event in reversed(events)  # the API lists newest first
            if subjects & {event.get("detail", {}).get("requestId"), event.get("detail", {}).get("machineId")}
        ]
        if len(trail) >= expected:
            break
        time.sleep(0.2)
    return trail


def test_a_waiting_agent_is_admitted_when_an_operator_approves_it(cli: Cli, tmp_path: Path) -> None:
    # Given a pool and a token that requires approval, both made with the CLI
    pool = cli.new_pool(name="GPU rack 1", workspace="ws-gpu")
    token = cli.new_token(pool, "--require-approval")
    machine_dir = tmp_path / "machine"

    # When the agent waits in the background and the operator approves its request
    agent = cli.start("join", "--token", token, "--dir", str(machine_dir), "--wait", "--poll-interval", POLL)
    try:
        request = _wait_for_request(cli, pool)
        approved = cli.run("requests", "approve", request["requestId"], "--pool", pool, "--reason", "rack 1")
        code, out, err = _finish(agent)
    finally:
        if agent.poll() is None:
            agent.kill()

    # Then the agent is admitted and leaves a complete identity that verifies against the pool's CA
    assert approved.code == 0, approved.err
    assert f"Approved {request['requestId']}" in approved.out
    assert code == 0, err + out
    deferred = (
        "join deferred: this join token requires an operator's approval. "
        f"An operator of pool {pool} must approve {request['requestId']}."
    )
    assert deferred in out.splitlines()  # the server's errMsg, verbatim, on a line of its own
    assert f"joinplane requests approve {request['requestId']}" in out
    assert (
        f"{request['requestId']}: pending, request expires in " in out
    )  # the status line, as plain lines off a TTY
    assert 'Admitted: this machine joined pool "GPU rack 1"' in out
    names = {p.name for p in machine_dir.iterdir()}
    assert {"machine.key", "machine.crt", "ca.crt", "bootstrap.json", "machine.token"} <= names
    for secret in ("machine.key", "machine.token", "bootstrap.json"):
        assert (machine_dir / secret).stat().st_mode & 0o777 == 0o600, secret
    assert machine_dir.stat().st_mode & 0o777 == 0o700
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".machine.") and p.suffix != ".lock"]
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.crt", "machine.crt"],
        cwd=machine_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    machine = json.loads((machine_dir / "machine.json").read_text())
    assert machine["machineId"].startswith("mach_")
    assert json.loads((machine_dir / "bootstrap.json").read_text())["workspaceId"] == "ws-gpu"
    listed = cli.ok("machines", "list", "--pool", pool)
    assert machine["machineId"] in listed.out and "active" in listed.out

    # And the audit trail tells the story in order
    trail = _audit_trail(cli, pool, {request["requestId"], machine["machineId"]}, expected=4)
    assert trail == [
        "security.join-request.created",
        "security.join-request.approved",
        "security.join-request.consumed",
        "security.machine.joined",
    ]


def test_a_rejected_request_is_said_plainly_with_the_operators_reason(cli: Cli, tmp_path: Path) -> None:
    # Given an agent waiting for approval
    pool = cli.new_pool()
    token = cli.new_token(pool, "--require-approval")
    machine_dir = tmp_path / "machine"
    agent = cli.start("join", "--token", token, "--dir", str(machine_dir), "--wait", "--poll-interval", POLL)
    try:
        request = _wait_for_request(cli, pool)

        # When the operator rejects it with a reason
        rejected = cli.run(
            "requests", "reject", request["requestId"], "--pool", pool, "--reason", "not in inventory"
        )
        code, out, err = _finish(agent)
    finally:
        if agent.poll() is None:
            agent.kill()

    # Then the agent exits with the rejection's own code and says why, without a traceback
    assert rejected.code == 0, rejected.err
    assert code == 4, err + out
    assert f"Join request {request['requestId']} was rejected by an operator." in err
    assert "Reason: not in inventory" in err
    assert "Traceback" not in err
    assert not (machine_dir / "machine.crt").exists()
    # And asking again with the same key is refused the same way
    again = cli.run("join", "--token", token, "--dir", str(machine_dir))
    assert again.code == 4 and "Reason: not in inventory" in again.err


def test_without_wait_a_deferred_join_exits_pending_and_a_retry_reuses_the_key(
    cli: Cli, tmp_path: Path
) -> None:
    # Given
    pool = cli.new_pool()
    token = cli.new_token(pool, "--require-approval")
    machine_dir = tmp_path / "m"

    # When
    first = cli.run("join", "--token", token, "--dir", str(machine_dir))
    key = (machine_dir / "machine.key").read_bytes()
    second = cli.run("join", "--token", token, "--dir", str(machine_dir))

    # Then the same single request is reported both times, and the key is kept between them
    assert first.code == 3 and second.code == 3, first.err + second.err
    requests = cli.ok("requests", "list", "--pool", pool, "-o", "json").json()["requests"]
    assert len(requests) == 1
    assert requests[0]["requestId"] in first.out and requests[0]["requestId"] in second.out
    assert (machine_dir / "machine.key").read_bytes() == key
    assert (machine_dir / "machine.key").stat().st_mode & 0o777 == 0o600


def test_an_expired_request_ends_the_wait_with_its_own_code(cli: Cli, tmp_path: Path) -> None:
    # Given a pool whose deferred joins wait one minute, and an agent waiting on one
    pool = cli.new_pool(join_request_ttl="60")
    token = cli.new_token(pool, "--require-approval")
    agent = cli.start(
        "join", "--token", token, "--dir", str(tmp_path / "m"), "--wait", "--poll-interval", POLL
    )
    try:
        _wait_for_request(cli, pool)

        # When the server's clock passes the request's expiry
        advance = urllib.request.Request(
            cli.runtime.url + "/_local/clock", data=b'{"advanceSeconds": 120}', method="POST"
        )
        with urllib.request.urlopen(advance, timeout=10):
            pass
        code, out, err = _finish(agent)
    finally:
        if agent.poll() is None:
            agent.kill()

    # Then
    assert code == 5, err + out
    assert "expired before it was approved and used" in err
    listed = cli.ok("requests", "list", "--pool", pool, "--state", "expired")
    assert "expired" in listed.out


def test_ctrl_c_stops_the_wait_cleanly_and_keeps_the_key(cli: Cli, tmp_path: Path) -> None:
    # Given a waiting agent
    pool = cli.new_pool()
    token = cli.new_token(pool, "--require-approval")
    agent = cli.start(
        "join", "--token", token, "--dir", str(tmp_path / "m"), "--wait", "--poll-interval", POLL
    )
    try:
        request = _wait_for_request(cli, pool)
        time.sleep(0.5)

        # When
        agent.send_signal(signal.SIGINT)
        code, _, err = _finish(agent)
    finally:
        if agent.poll() is None:
            agent.kill()

    # Then
    assert code == 130, err
    assert f"Stopped waiting. Join request {request['requestId']} stays pending" in err
    assert "Traceback" not in err
    assert (tmp_path / "m" / "machine.key").exists()


def test_dry_run_reports_the_verdict_and_records_nothing(cli: Cli, tmp_path: Path) -> None:
    # Given
    pool = cli.new_pool()
    deferring = cli.new_token(pool, "--require-approval")
    admitting = cli.new_token(pool)

    # When
    deferred = cli.run("join", "--token", deferring, "--dir", str(tmp_path / "a"), "--dry-run")
    admitted = cli.run("join", "--token", admitting, "--dir", str(tmp_path / "b"), "--dry-run", "-o", "json")

    # Then
    assert deferred.code == 3, deferred.err
    assert "the server would DEFER this join" in deferred.out
    assert "approval_required" in deferred.out
    assert admitted.code == 0, admitted.err
    assert admitted.json()["verdict"] == "admit"
    assert cli.ok("requests", "list", "--pool", pool, "--state", "all", "-o", "json").json()["requests"] == []
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_admitted_machine_renews_its_certificate(cli: Cli, tmp_path: Path) -> None:
    # Given a machine admitted straight away
    pool = cli.new_pool()
    machine_dir = tmp_path / "m"
    joined = cli.run("join", "--token", cli.new_token(pool), "--dir", str(machine_dir))
    assert joined.code == 0, joined.err
    before = (machine_dir / "machine.crt").read_text()

    # When
    renewed = cli.run("renew", "--dir", str(machine_dir), env={"JOINPLANE_URL": ""})

    # Then the URL came from the machine's own record, and the new certificate verifies
    assert renewed.code == 0, renewed.err
    assert "Renewed the certificate of mach_" in renewed.out
    after = (machine_dir / "machine.crt").read_text()
    assert after != before
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.crt", "machine.crt"],
        cwd=machine_dir,
        capture_output=True,
        check=False,
    )
    assert verified.returncode == 0
    # And joining again in the same directory is refused rather than silently replacing it
    again = cli.run("join", "--token", "jpt_unused", "--dir", str(machine_dir))
    assert again.code == 2 and "already holds the identity of machine" in again.err


def test_a_machine_rotates_its_key_and_renews_with_the_new_one(cli: Cli, tmp_path: Path) -> None:
    # Given an admitted machine
    pool = cli.new_pool()
    machine_dir = tmp_path / "m"
    machine_id = cli.ok(
        "join", "--token", cli.new_token(pool), "--dir", str(machine_dir), "-o", "json"
    ).json()["machineId"]
    old_key = (machine_dir / "machine.key").read_text()
    # When it renews with its key, then with a new key (the proof is signed by both), then again
    before = cli.run("renew", "--dir", str(machine_dir))
    rotated = cli.run("renew", "--dir", str(machine_dir), "--rotate-key")
    again = cli.run("renew", "--dir", str(machine_dir))
    # Then all succeed, the key on disk is the new one, and its certificate verifies
    assert before.code == 0, before.err
    assert rotated.code == 0, rotated.err
    assert again.code == 0, again.err
    assert (machine_dir / "machine.key").read_text() != old_key
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.crt", "machine.crt"],
        cwd=machine_dir,
        capture_output=True,
        check=False,
    )
    assert verified.returncode == 0
    # And the audit trail holds the join and the key's rotation, nothing for the same-key renewals
    # (sorted: events of one second are ordered by id)
    cli.runtime.drain()
    assert sorted(_audit_trail(cli, pool, {machine_id}, 2)) == [
        "security.machine.joined",
        "security.machine.key-rotated",
    ]


def test_a_machine_that_lost_its_files_after_admission_joins_again_as_itself(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a machine admitted by the server that crashed before writing anything but its key
    pool = cli.new_pool()
    token = cli.new_token(pool)
    machine_dir = tmp_path / "m"
    cli.ok("join", "--token", token, "--dir", str(machine_dir))
    machine_id = json.loads((machine_dir / "machine.json").read_text())["machineId"]
    for name in ("machine.crt", "ca.crt", "bootstrap.json", "machine.token", "machine.json"):
        (machine_dir / name).unlink()

    # When it runs the same join again (the single-use token is spent by now)
    again = cli.run("join", "--token", token, "--dir", str(machine_dir))

    # Then it is the same machine, with a complete identity again
    assert again.code == 0, again.err
    assert json.loads((machine_dir / "machine.json").read_text())["machineId"] == machine_id
    assert (machine_dir / "machine.token").read_text().startswith("jpm_")


def test_a_revoked_machine_cannot_renew(cli: Cli, tmp_path: Path) -> None:
    # Given
    pool = cli.new_pool()
    machine_dir = tmp_path / "m"
    cli.ok("join", "--token", cli.new_token(pool), "--dir", str(machine_dir))
    machine_id = json.loads((machine_dir / "machine.json").read_text())["machineId"]

    # When
    revoked = cli.run("machines", "revoke", machine_id, "--reason", "decommissioned")
    renewed = cli.run("renew", "--dir", str(machine_dir))

    # Then
    assert revoked.code == 0 and f"Revoked machine {machine_id}" in revoked.out
    assert renewed.code == 6, renewed.err
    assert "revoked" in renewed.err


def test_operator_lists_are_aligned_tables_with_expiry_in_words(cli: Cli, tmp_path: Path) -> None:
    # Given two pending requests in a pool
    pool = cli.new_pool()
    token = cli.new_token(pool, "--require-approval", "--max-uses", "2", "--description", "rack 7")
    for name in ("a", "b"):
        assert cli.run("join", "--token", token, "--dir", str(tmp_path / name)).code == 3

    # When
    requests = cli.ok("requests", "list", "--pool", pool)
    tokens = cli.ok("tokens", "list", "--pool", pool)
    paged = cli.ok("requests", "list", "--pool", pool, "--limit", "1", "--all", "-o", "json")
    one_page = cli.run("requests", "list", "--pool", pool, "--limit", "1")

    # Then
    lines = requests.out.splitlines()
    assert lines[0].split() == [
        "REQUEST",
        "STATE",
        "HOST",
        "RESOURCES",
        "DEFERRED",
        "BECAUSE",
        "ASKED",
        "EXPIRES",
    ]
    assert len(lines) == 3
    state_column = lines[0].index("STATE")
    assert all(line[state_column:].startswith("pending") for line in lines[1:])
    assert all("in 23 hours" in line or "in 1 day" in line for line in lines[1:])
    assert "approval_required" in lines[1]
    token_lines = tokens.out.splitlines()
    assert token_lines[0].split()[:3] == ["TOKEN", "STATE", "FOR"]
    assert "exhausted" in token_lines[1] and "0/2" in token_lines[1] and "rack 7" in token_lines[1]
    assert len(paged.json()["requests"]) == 2 and "nextCursor" not in paged.json()
    assert len(one_page.out.splitlines()) == 2 and "--all" in one_page.err


def test_pools_create_get_list_and_archive(cli: Cli) -> None:
    # Given
    pool = cli.new_pool(name="Archive me")

    # When
    got = cli.ok("pools", "get", pool)
    archived = cli.ok("pools", "archive", pool)
    listed = cli.ok("pools", "list", "--state", "archived", "--all", "-o", "json")
    refused = cli.run("tokens", "create", "--pool", pool)

    # Then
    assert "Archive me" in got.out and "site-cli" in got.out and "1 day" in got.out
    assert "archived" in archived.out
    assert pool in [p["poolId"] for p in listed.json()["pools"]]
    assert refused.code == 1
    assert refused.err.startswith("joinplane: INVALID_STATE: ")


def test_errors_print_the_servers_code_and_message(cli: Cli, tmp_path: Path) -> None:
    # When
    missing = cli.run("requests", "approve", "jreq_01m8nz575gxt4jmzbr8kdk67za", "--pool", "dev-pool")
    bad_key = cli.run("pools", "list", env={"JOINPLANE_API_KEY": "jpk_not_a_key"})
    no_key = cli.run("pools", "list", env={"JOINPLANE_API_KEY": ""})
    bad_token = cli.run("join", "--token", "jpt_nope", "--dir", str(tmp_path / "m"))

    # Then
    assert missing.code == 1 and missing.err == "joinplane: NOT_FOUND: join request not found\n"
    assert bad_key.code == 8 and "UNAUTHENTICATED" in bad_key.err
    assert no_key.code == 2 and "missing --api-key" in no_key.err
    assert bad_token.code == 8 and "join token was refused" in bad_token.err
    for result in (missing, bad_key, no_key, bad_token):
        assert "Traceback" not in result.err


def test_a_connection_failure_is_said_plainly(cli: Cli, tmp_path: Path) -> None:
    # When nothing listens on the URL
    operator = cli.run("requests", "list", "--pool", "p", env={"JOINPLANE_URL": "http://127.0.0.1:9"})
    machine = cli.run(
        "join", "--token", "jpt_x", "--dir", str(tmp_path / "m"), env={"JOINPLANE_URL": "http://127.0.0.1:9"}
    )

    # Then
    for result in (operator, machine):
        assert result.code == 7, result.err
        assert (
            result.err.strip()
            == "joinplane: cannot reach http://127.0.0.1:9: connection refused (is the server running?)"
        )


def test_the_audit_trail_is_complete_when_a_multi_use_token_retries(cli: Cli, tmp_path: Path) -> None:
    """A retry under a multi-use token meets a cancelled transaction (the optimistic join). The
    emulator once leaked such a transaction's stream records and then stalled the stream; this is
    the end-to-end guard that it no longer does (tests/local/test_emulator_transactions.py is the
    narrow one)."""
    # Given a token for a whole rack (several uses), and an agent that retried while pending
    pool = cli.new_pool()
    token = cli.new_token(pool, "--require-approval", "--max-uses", "5")
    machine_dir = tmp_path / "machine"
    assert cli.run("join", "--token", token, "--dir", str(machine_dir)).code == 3
    assert cli.run("join", "--token", token, "--dir", str(machine_dir)).code == 3
    request = _wait_for_request(cli, pool)

    # When the operator approves and the machine retries once more
    cli.ok("requests", "approve", request["requestId"], "--pool", pool)
    cli.ok("join", "--token", token, "--dir", str(machine_dir))
    machine_id = json.loads((machine_dir / "machine.json").read_text())["machineId"]

    # Then the pool's trail holds its setting up (admin actions) and this request's transitions
    # once each, in order
    cli.runtime.drain()
    trail = cli.ok("audit", "list", "--pool", pool, "--all", "-o", "json").json()["events"]
    events = [e for e in trail if e["detailType"].startswith(("security.join-request.", "security.machine."))]
    set_up = sorted(e["detailType"] for e in trail if e not in events)
    # (the pool's CA is created by the first join that needs a certificate, when it is)
    assert set_up in (
        ["security.join-token.created", "security.pool.created"],
        ["security.certificate-authority.created", "security.join-token.created", "security.pool.created"],
    )
    assert [e["detailType"] for e in reversed(events)] == [
        "security.join-request.created",
        "security.join-request.approved",
        "security.join-request.consumed",
        "security.machine.joined",
    ]
    assert {e["detail"].get("requestId") for e in events[1:]} == {request["requestId"]}
    assert events[0]["detail"]["machineId"] == machine_id

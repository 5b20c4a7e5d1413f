"""`joinplane agent` as a service manager runs it: started before the server is up, renewing by itself,
stopped with SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cryptography import x509

from tests.support.runtime import Cli
from tests.support.service import Lines, down_until_up, stop

pytestmark = pytest.mark.e2e

IDENTITY = {
    "machine.key",
    "machine.csr",
    "machine.crt",
    "ca.crt",
    "bootstrap.json",
    "machine.token",
    "machine.json",
}


def _certificate(directory: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate((directory / "machine.crt").read_bytes())


def _verify(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.crt", "machine.crt"],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
    )


def _leftovers(parent: Path) -> list[str]:
    """What a half-finished replacement of DIR would leave beside it (the lock file is meant to stay)."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".machine.") and p.suffix != ".lock")


def test_the_agent_joins_once_the_server_is_up_renews_by_itself_and_stops_cleanly(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a pool whose certificates live 300 s, a join token, and a server address that is down
    pool = cli.new_pool(certificate_ttl="300")
    token = cli.new_token(pool)
    directory, hooks = tmp_path / "machine", tmp_path / "hooks.log"
    on_renew = f'echo "$JOINPLANE_EVENT $JOINPLANE_MACHINE_ID $(head -1 machine.crt)" >> {hooks}'
    with down_until_up(cli.runtime.url) as server:
        # When the agent starts while the server is down
        agent = cli.start(
            "agent", "--url", server.url, "--token", token, "--dir", str(directory), "--on-renew", on_renew
        )
        out, err = Lines(agent.stdout), Lines(agent.stderr)  # type: ignore[arg-type]
        try:
            out.wait_for(r"join: server unreachable: connection refused.*; next check in \d+s", 15)
            assert agent.poll() is None, err.text()
            assert not (directory / "machine.crt").exists()

            # Then it joins by itself once the server comes up
            server.up()
            admitted, _ = out.wait_for(r"^Admitted: this machine joined pool", 30)
            joined_at = time.monotonic()
            first = _certificate(directory)
            machine_id = json.loads((directory / "machine.json").read_text())["machineId"]
            scheduled = out.wait_for(
                rf"^Certificate of {machine_id} expires .*; renewing at ", 5, after=admitted
            )
            assert _verify(directory).returncode == 0

            # And renews at about two thirds of the 300 s lifetime, with no one running `renew`
            renewed, _ = out.wait_for(
                rf"^Renewed the certificate of {machine_id}: expires", 260, after=scheduled[0]
            )
            waited = time.monotonic() - joined_at
            second = _certificate(directory)
            out.wait_for(r"^Certificate of .*; renewing at ", 5, after=renewed)

            # When a service manager stops it
            agent.send_signal(signal.SIGTERM)
            code = stop(agent)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()

    # Then the renewal came near two thirds of the lifetime, under the same key, and verifies
    assert 170 <= waited <= 225, waited  # due at 185-215 s from issuance; slack for a loaded machine
    assert second.serial_number != first.serial_number
    assert second.not_valid_after_utc > first.not_valid_after_utc
    assert second.public_key() == first.public_key()
    verified = _verify(directory)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # And --on-renew ran after the join and after the renewal, in DIR, with the machine's id
    events = [line.split(" ", 2) for line in hooks.read_text().splitlines()]
    assert events == [
        ["joined", machine_id, "-----BEGIN CERTIFICATE-----"],
        ["renewed", machine_id, "-----BEGIN CERTIFICATE-----"],
    ]
    # And SIGTERM ended it cleanly (exit 0), leaving one whole identity and nothing half-written
    assert code == 0, err.text()
    assert "Stopped (SIGTERM)" in out.text()
    assert {p.name for p in directory.iterdir()} == IDENTITY
    assert _leftovers(tmp_path) == []
    listed = cli.ok("machines", "list", "--pool", pool, "-o", "json").json()["machines"]
    assert [m["machineId"] for m in listed] == [machine_id]


def test_sigterm_while_the_server_is_still_down_stops_the_agent_at_once(cli: Cli, tmp_path: Path) -> None:
    # Given an agent waiting for a server that is down
    pool = cli.new_pool()
    token = cli.new_token(pool)
    directory = tmp_path / "machine"
    with down_until_up(cli.runtime.url) as server:
        agent = cli.start(
            "agent", "--url", server.url, "--token", token, "--dir", str(directory), "-o", "json"
        )
        out, err = Lines(agent.stdout), Lines(agent.stderr)  # type: ignore[arg-type]
        try:
            err.wait_for(r"server unreachable", 15)  # progress goes to stderr: stdout is JSON

            # When a service manager stops it
            started = time.monotonic()
            agent.send_signal(signal.SIGTERM)
            code = stop(agent)
            stopped_in = time.monotonic() - started
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()

    # Then it exits 0 within a second, saying so in JSON, keeping only its key and CSR for the next start
    assert code == 0
    assert stopped_in < 2, stopped_in
    assert json.loads(out.text().splitlines()[-1]) == {
        "event": "stopped",
        "signal": "SIGTERM",
        "directory": str(directory),
    }
    assert {p.name for p in directory.iterdir()} == {"machine.key", "machine.csr"}
    assert _leftovers(tmp_path) == []


def test_join_wait_keeps_trying_an_unreachable_server_until_max_wait(cli: Cli, tmp_path: Path) -> None:
    # Given a server that is down at boot
    token = cli.new_token(cli.new_pool())
    with down_until_up(cli.runtime.url) as server:
        # When a machine joins with --wait and a short --max-wait
        started = time.monotonic()
        directory = str(tmp_path / "m")
        result = cli.run(
            "join", "--url", server.url, "--token", token, "--dir", directory, "--wait", "--max-wait", "3s"
        )
        elapsed = time.monotonic() - started

    # Then it kept trying with backoff, and said the server was unreachable only once out of time
    assert result.code == 7, result.err
    assert elapsed >= 3, elapsed
    assert result.out.count("join: server unreachable: connection refused") >= 2, result.out
    assert "cannot reach" in result.err

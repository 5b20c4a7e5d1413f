"""`joinplane ca get|rotate` against a local runtime (issue 12): an operator rotates a pool's CA from a
terminal; machines joined before and after both verify with the bundle `ca get` writes out, and a
machine's next renewal brings the new CA into its own ca.crt."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.runtime import Cli

pytestmark = pytest.mark.e2e


def openssl_verify(ca_file: Path, certificate: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca_file), str(certificate)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_an_operator_rotates_a_pools_ca_and_every_machine_keeps_verifying(cli: Cli, tmp_path: Path) -> None:
    # Given a machine joined with the CLI under the pool's first CA
    pool = cli.new_pool()
    token = cli.new_token(pool, "--max-uses", "2")
    before, after = tmp_path / "before", tmp_path / "after"
    cli.ok("join", "--token", token, "--dir", str(before))
    first = cli.ok("ca", "get", "--pool", pool, "-o", "json").json()["active"]

    # When the operator rotates it, and a second machine joins
    rotated = cli.ok("ca", "rotate", "--pool", pool)
    cli.ok("join", "--token", token, "--dir", str(after))
    shown = cli.ok("ca", "get", "--pool", pool, "--bundle-out", str(tmp_path / "bundle.pem"))

    # Then the operator was told what happens next, and `ca get` shows a new CA and a bundle of two
    assert f"Rotated the CA of pool {pool}" in rotated.out
    assert "2 certificates to trust" in shown.out
    assert first["caId"] not in shown.out
    assert (tmp_path / "bundle.pem").read_text().count("BEGIN CERTIFICATE") == 2
    # And both machines verify with the bundle
    for machine in (before, after):
        result = openssl_verify(tmp_path / "bundle.pem", machine / "machine.crt")
        assert result.returncode == 0, result.stderr
    # And the first machine's renewal brings the bundle into its own ca.crt
    cli.ok("renew", "--dir", str(before))
    assert (before / "ca.crt").read_text() == (tmp_path / "bundle.pem").read_text()
    assert openssl_verify(before / "ca.crt", before / "machine.crt").returncode == 0


def test_the_ca_of_a_pool_that_does_not_exist_is_not_found(cli: Cli, tmp_path: Path) -> None:
    refused = cli.run("ca", "rotate", "--pool", "no-such-pool", "--bundle-out", str(tmp_path / "b.pem"))
    assert refused.code != 0 and "pool not found" in refused.err
    assert not (tmp_path / "b.pem").exists()

"""`joinplane ca get|rotate` against a local runtime: an operator rotates a pool's CA from a
terminal; machines joined before and after both verify with the bundle `ca get` writes out, and a
machine's next renewal brings the new CA into its own ca.crt."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.openssl_ca import OrgPki
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

    # When the operator shortens the pool's propagation period, then rotates the CA
    updated = cli.ok("pools", "update", "--pool", pool, "--ca-propagation", "10m")
    rotated = cli.ok("ca", "rotate", "--pool", pool)
    prepared = cli.ok("ca", "get", "--pool", pool, "-o", "json").json()["next"]
    # Then they are told when the new CA will sign, and `ca get` shows the phases
    assert "new CAs sign after  10 minutes" in updated.out
    assert f"Prepared CA {prepared['caId']} for pool {pool}" in rotated.out
    assert f"signs from {prepared['activatesAt']} (in 10 minutes)" in rotated.out
    phases = cli.ok("ca", "get", "--pool", pool).out
    assert f"next ca        {prepared['caId']}, prepared: in the bundle, signs from" in phases
    assert "2 certificates to trust" in phases

    # When the operator activates it, and a second machine joins
    activated = cli.ok("ca", "activate", "--pool", pool, "--ca-id", prepared["caId"])
    cli.ok("join", "--token", token, "--dir", str(after))
    shown = cli.ok("ca", "get", "--pool", pool, "--bundle-out", str(tmp_path / "bundle.pem"))

    # Then `ca get` shows the new CA active, the first retired, and a bundle of two
    assert f"CA {prepared['caId']} of pool {pool} signs from now on" in activated.out
    assert "2 certificates to trust" in shown.out
    assert f"retired ca     {first['caId']}: signs nothing, in the bundle until" in shown.out
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


def test_an_operator_has_the_pools_ca_signed_by_the_organisations_root(cli: Cli, tmp_path: Path) -> None:
    # Given a pool and an organisation's root CA, made with openssl
    pool = cli.new_pool()
    pki = OrgPki(tmp_path / "org")
    root = pki.root()

    # When the operator asks for a CSR, has the root sign it, and imports the certificate with its chain
    csr_file = tmp_path / "pool-ca.csr"
    asked = cli.ok("ca", "create-csr", "--pool", pool, "--out", str(csr_file))
    # (and `ca get` shows the request waiting for its signature)
    ca_id = cli.ok("ca", "get", "--pool", pool, "-o", "json").json()["pending"]["caId"]
    assert f"pending request  {ca_id}, asked " in cli.ok("ca", "get", "--pool", pool).out
    signed = pki.sign(root, csr_file.read_text(), "pool-ca")
    imported = cli.ok(
        "ca", "import", "--pool", pool, "--certificate", str(signed.certificate),
        "--chain", str(root.certificate), "--bundle-out", str(tmp_path / "bundle.pem"),
    )  # fmt: skip
    # (prepared, as a rotation's CA is: the operator activates it at once)
    assert f"CA {ca_id}, signed by your organisation's, is in the bundle now" in imported.out
    cli.ok("ca", "activate", "--pool", pool)
    # And a machine joins afterwards
    machine = tmp_path / "machine"
    cli.ok("join", "--token", cli.new_token(pool), "--dir", str(machine))

    # Then the operator was told what to do with the CSR and what the import did
    assert "-----BEGIN CERTIFICATE REQUEST-----" in csr_file.read_text()
    assert f"joinplane ca import --pool {pool}" in asked.out
    assert f"Imported the CA certificate of pool {pool}" in imported.out
    # (an emergency rotation warns what it breaks)
    emergency = cli.ok("ca", "rotate", "--pool", pool, "--emergency")
    assert "in an emergency" in emergency.out and "fetches the bundle again" in emergency.err
    # And the machine's certificate verifies up to the organisation's root through the pool's CA
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(root.certificate), "-untrusted", str(signed.certificate),
         str(machine / "machine.crt")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_import_without_a_certificate_in_its_files_is_refused_before_asking(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a chain file that holds no certificate
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    (tmp_path / "two.pem").write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" * 2)
    # When the operator imports with it
    no_chain = cli.run("ca", "import", "--pool", "p", "--certificate", str(tmp_path / "two.pem"),
                       "--chain", str(tmp_path / "empty.pem"))  # fmt: skip
    missing = cli.run("ca", "import", "--pool", "p", "--certificate", str(tmp_path / "nope.pem"),
                      "--chain", str(tmp_path / "empty.pem"))  # fmt: skip
    # Then each is a usage error naming the file
    assert no_chain.code == 2 and "holds 2 certificates" in no_chain.err
    assert missing.code == 2 and "nope.pem" in missing.err

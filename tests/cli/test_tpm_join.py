"""Joins with a TPM over the CLI against the local runtime, on a real TPM stack: swtpm manufactured
under a TPM maker's CA, `joinplane join --tpm` and `joinplane agent --tpm` driving it through
tpm2-tools, the server challenging the EK with credential activation.

The operator enrols as a site would: `joinplane tpm identify` on the machine, then the EK's hash on
the site's allow-list, or the maker's root and intermediate on its manufacturer list. An attacker
who knows a listed EK (its certificate, its public key) but does not hold that TPM is never
admitted."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtime import Cli, Result
from tests.support.service import Lines, stop
from tests.support.swtpm import Manufacturer, SoftwareTpm, manufacturer, software_tpm

pytestmark = pytest.mark.e2e

SITE = "site-cli"  # the site of `Cli.new_pool`'s pools (it exists once a pool of it does)


@pytest.fixture(scope="module")
def acme(tmp_path_factory: pytest.TempPathFactory) -> Manufacturer:
    return manufacturer(tmp_path_factory.mktemp("acme"), "Acme TPM")


@pytest.fixture(scope="module")
def machine_tpm(acme: Manufacturer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoftwareTpm]:
    """The machine's TPM, made by Acme: every join of this module uses it, one after another, so
    a TPM without a resource manager sees them all (nothing must stay loaded between them)."""
    with software_tpm(acme, tmp_path_factory.mktemp("machine-tpm")) as running:
        yield running


@pytest.fixture(scope="module")
def other_tpm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoftwareTpm]:
    """Another machine's TPM, made by Globex, a maker no site of these tests lists."""
    globex = manufacturer(tmp_path_factory.mktemp("globex"), "Globex TPM")
    with software_tpm(globex, tmp_path_factory.mktemp("other-tpm")) as running:
        yield running


def identify(cli: Cli, tpm: SoftwareTpm, kind: str) -> dict[str, Any]:
    """What the operator learns by running `joinplane tpm identify` on the machine."""
    done = cli.run("tpm", "identify", "--ek", kind, "-o", "json", env={"TPM2TOOLS_TCTI": tpm.tcti})
    assert done.code == 0, done.err
    (key,) = done.json()["endorsementKeys"]
    return dict(key)


def listed(done: Result) -> None:
    """An operator's `tpm allow-list add` or `tpm manufacturers add`: listing what is listed
    already (by an earlier test on this site) is no failure."""
    assert done.code == 0 or "ALREADY_EXISTS" in done.err, done.err


def allow_list(cli: Cli, ek_sha256: str) -> None:
    listed(
        cli.run(
            "tpm", "allow-list", "add", "--site", SITE, "--ek-sha256", ek_sha256, "--description", "rack 7"
        )
    )


def list_maker(cli: Cli, maker: Manufacturer, workdir: Path) -> None:
    """The maker's root and intermediate at the site, as the operator lists them from PEM files."""
    for name, pem in (("root", maker.root_pem), ("intermediate", maker.intermediate_pem)):
        path = workdir / f"{name}.pem"
        path.write_text(pem)
        listed(cli.run("tpm", "manufacturers", "add", "--site", SITE, "--certificate", str(path)))


def join(cli: Cli, token: str, directory: Path, tpm: SoftwareTpm | None, *extra: str) -> Any:
    args = ["join", "--token", token, "--dir", str(directory), "-o", "json", *extra]
    return cli.run(*args, env={"TPM2TOOLS_TCTI": tpm.tcti} if tpm else None)


@pytest.fixture
def machines(cli: Cli) -> Iterator[list[Path]]:
    """Directories of machines a test admits, revoked when it ends: one EK is one active machine,
    and every test of this module joins with the same TPM."""
    joined: list[Path] = []
    yield joined
    for directory in joined:
        if (directory / "machine.json").exists():
            machine_id = json.loads((directory / "machine.json").read_text())["machineId"]
            cli.ok("machines", "revoke", machine_id, "--reason", "end of test")


def machine_tpm_facts(cli: Cli, directory: Path) -> dict[str, Any]:
    machine_id = json.loads((directory / "machine.json").read_text())["machineId"]
    shown = cli.ok("machines", "get", machine_id, "-o", "json").json()
    return dict(shown["tpm"])


def test_a_machine_whose_ek_is_allow_listed_is_admitted_with_its_tpm_proven(
    cli: Cli, machine_tpm: SoftwareTpm, tmp_path: Path, machines: list[Path]
) -> None:
    machines.append(tmp_path / "machine")
    # Given a token that requires a TPM, and the machine's RSA EK on the site's allow-list, as the
    # operator read it with `tpm identify`
    token = cli.new_token(cli.new_pool(), "--tpm", "require")
    ek = identify(cli, machine_tpm, "rsa")
    allow_list(cli, ek["ekPublicKeySha256"])
    shown_list = cli.ok("tpm", "allow-list", "list", "--site", SITE, "-o", "json").json()["keys"]
    assert ek["ekPublicKeySha256"] in [key["ekPublicKeySha256"] for key in shown_list]

    # When the machine joins with its TPM
    done = join(cli, token, tmp_path / "machine", machine_tpm, "--tpm", "--tpm-ek", "rsa")

    # Then it is admitted, and the machine shows its EK activated and trusted by the allow-list
    assert done.code == 0, done.err
    assert done.json()["state"] == "admitted"
    shown = machine_tpm_facts(cli, tmp_path / "machine")
    assert shown["ekPublicKeySha256"] == ek["ekPublicKeySha256"]
    assert shown["activated"] is True
    assert shown["verifiedBy"] == "allow-list"
    # And `machines get` says so to a person too
    machine_id = json.loads((tmp_path / "machine" / "machine.json").read_text())["machineId"]
    table = cli.ok("machines", "get", machine_id).out
    assert f"EK {ek['ekPublicKeySha256']}: activated, verified by allow-list" in table
    # And the TPM is left as it was found: nothing loaded
    assert machine_tpm.transient_handles() == []
    assert machine_tpm.sessions() == []


def test_a_machine_whose_tpm_maker_is_listed_is_admitted_without_an_allow_list_entry(
    cli: Cli, acme: Manufacturer, machine_tpm: SoftwareTpm, tmp_path: Path, machines: list[Path]
) -> None:
    machines.append(tmp_path / "machine")
    # Given Acme's root and intermediate listed at the site, and a token trusting listed makers
    pool = cli.new_pool()
    list_maker(cli, acme, tmp_path)
    makers = cli.ok("tpm", "manufacturers", "list", "--site", SITE).out
    assert "Acme TPM Root CA" in makers and "Acme TPM EK CA" in makers
    token = cli.new_token(pool, "--tpm", "require", "--tpm-trust", "manufacturer")

    # When the machine joins with its ECC EK, whose certificate Acme issued
    done = join(cli, token, tmp_path / "machine", machine_tpm, "--tpm", "--tpm-ek", "ecc")

    # Then it is admitted through its maker, and the machine names the certificate's issuer
    assert done.code == 0, done.err
    shown = machine_tpm_facts(cli, tmp_path / "machine")
    assert shown["activated"] is True
    assert shown["verifiedBy"] == "manufacturer"
    assert "Acme TPM EK CA" in shown["ekCertificateIssuer"]
    assert machine_tpm.transient_handles() == []


def test_a_tpm_of_an_unlisted_maker_waits_for_an_operator_who_sees_why(
    cli: Cli, acme: Manufacturer, other_tpm: SoftwareTpm, tmp_path: Path
) -> None:
    # Given Acme listed at the site, and a machine whose TPM Globex made
    deferring = cli.new_token(cli.new_pool(), "--tpm", "defer-unlisted", "--tpm-trust", "manufacturer")
    requiring = cli.new_token(cli.new_pool(), "--tpm", "require", "--tpm-trust", "manufacturer")
    list_maker(cli, acme, tmp_path)

    for token in (deferring, requiring):
        # When it joins with its TPM, through a token that defers unlisted TPMs or requires a TPM
        directory = tmp_path / token[-8:]
        done = join(cli, token, directory, other_tpm, "--tpm")
        # Then its join waits for an operator (exit 3), not admitted: under `require` too, since
        # the TPM is there and proven, only not vouched for (no TPM at all is what `require` denies)
        assert done.code == 3, done.err + done.out
        assert not (directory / "machine.token").exists()
        # And the operator sees the TPM proven, and why its certificate did not verify
        request = cli.ok("requests", "get", done.json()["requestId"], "-o", "json").json()
        shown = request["machine"]["tpm"]
        assert shown["activated"] is True
        assert "verifiedBy" not in shown
        assert "Globex TPM" in shown["ekCertificateProblem"] or "Globex TPM" in shown["ekCertificateIssuer"]
    assert other_tpm.transient_handles() == []


def _shims(directory: Path, victim: SoftwareTpm, victim_ek: Path, guess: bool) -> dict[str, str]:
    """tpm2-tools as an attacker rigs them: the attacker's own TPM does the work, but the EK public
    area and EK certificate handed to the CLI are the victim's (both are public); with `guess`,
    activation "recovers" random bytes instead of asking the TPM."""
    directory.mkdir()
    victim_certificate = directory / "victim-ek.crt"
    victim_certificate.write_bytes(victim.ek_certificate_der("rsa"))
    scripts = {
        # Runs the real tool, then swaps the EK public area it wrote (-u FILE) for the victim's.
        "tpm2_createek": f"""
real=/usr/bin/tpm2_createek; out=""; prev=""
for arg in "$@"; do [ "$prev" = "-u" ] && out="$arg"; prev="$arg"; done
"$real" "$@" || exit $?
[ -n "$out" ] && cp {victim_ek} "$out"
exit 0
""",
        # The victim's EK certificate, wherever the CLI reads NV to (-o FILE).
        "tpm2_nvread": f"""
out=""; prev=""
for arg in "$@"; do [ "$prev" = "-o" ] && out="$arg"; prev="$arg"; done
cp {victim_certificate} "$out"
""",
    }
    if guess:
        scripts["tpm2_activatecredential"] = """
out=""; prev=""
for arg in "$@"; do [ "$prev" = "-o" ] && out="$arg"; prev="$arg"; done
head -c 32 /dev/urandom > "$out"
"""
    for name, body in scripts.items():
        path = directory / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{directory}:{os.environ['PATH']}"}


@pytest.mark.parametrize("guess", [False, True], ids=["own-tpm-activates", "guessed-secret"])
def test_an_attacker_with_a_listed_eks_public_material_and_another_tpm_is_not_admitted(
    cli: Cli, machine_tpm: SoftwareTpm, other_tpm: SoftwareTpm, tmp_path: Path, guess: bool
) -> None:
    # Given the victim's RSA EK on the allow-list of a token that requires it, and everything public
    # about it in the attacker's hands: the EK's public area and its certificate
    victim_ek = tmp_path / "victim-ek.pub"
    machine_tpm.tool("tpm2_createek", "-c", str(tmp_path / "ek.ctx"), "-G", "rsa", "-u", str(victim_ek))
    machine_tpm.tool("tpm2_flushcontext", "-t")
    token = cli.new_token(cli.new_pool(), "--tpm", "require")
    allow_list(cli, machine_tpm.ek_spki_sha256("rsa"))
    # And the CLI's TPM tools rigged to present them, on a TPM of the attacker's own
    path = _shims(tmp_path / "shims", machine_tpm, victim_ek, guess)

    # When the attacker joins with --tpm
    env = {**path, "TPM2TOOLS_TCTI": other_tpm.tcti}
    done = cli.run(
        "join", "--token", token, "--dir", str(tmp_path / "attacker"), "--tpm", "--tpm-ek", "rsa", env=env
    )

    # Then the attacker's TPM cannot recover the secret sealed to the victim's EK (exit 9); a guessed
    # secret is refused by the server (exit 10); either way nothing is admitted
    assert done.code == (10 if guess else 9), done.err + done.out
    assert done.err.count("\n") == 1, done.err
    assert not (tmp_path / "attacker" / "machine.token").exists()
    assert other_tpm.transient_handles() == []


def test_a_deferred_tpm_join_waits_and_is_admitted_once_approved_without_a_new_activation_failing(
    cli: Cli, machine_tpm: SoftwareTpm, tmp_path: Path, machines: list[Path]
) -> None:
    machines.append(tmp_path / "machine")
    # Given a token that defers TPMs on no allow-list, and a machine whose ECC EK is on none
    pool = cli.new_pool()
    token = cli.new_token(pool, "--tpm", "defer-unlisted")
    tpm_env = Cli(cli.runtime, {**cli.env, "TPM2TOOLS_TCTI": machine_tpm.tcti})

    # When it joins with --tpm and --wait
    waiting = tpm_env.start(
        "join", "--token", token, "--dir", str(tmp_path / "machine"), "--tpm", "--tpm-ek", "ecc",
        "--wait", "--poll-interval", "0.2",
    )  # fmt: skip
    out, err = Lines(waiting.stdout), Lines(waiting.stderr)  # type: ignore[arg-type]
    try:
        _, found = out.wait_for(r"request\s+(jreq_\w+)", 30)
        # Then its request shows the TPM proven, for the operator to decide on
        request = cli.ok("requests", "get", found[1], "-o", "json").json()
        assert request["machine"]["tpm"]["activated"] is True, request
        # When the operator approves it
        cli.ok("requests", "approve", found[1])
        # Then the waiting join is admitted
        out.wait_for(r"^Admitted: this machine joined pool", 30)
        assert stop(waiting) == 0, err.text()
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert machine_tpm_facts(cli, tmp_path / "machine")["activated"] is True
    assert machine_tpm.transient_handles() == []


def test_the_agent_joins_with_its_tpm_renews_with_its_key_and_re_joins_only_with_the_tpm(
    cli: Cli, machine_tpm: SoftwareTpm, tmp_path: Path, machines: list[Path]
) -> None:
    machines.append(tmp_path / "machine")
    # Given a token that admits allow-listed TPMs (and defers other machines: under `require`, a
    # join without a TPM would be denied before the re-join rule is asked), and wants the TPM a
    # machine joined with activated again on re-join; and the machine's ECC EK allow-listed
    token = cli.new_token(
        cli.new_pool(), "--tpm", "defer-unlisted", "--tpm-rejoin", "activate", "--max-uses", "5"
    )
    allow_list(cli, machine_tpm.ek_spki_sha256("ecc"))
    directory = tmp_path / "machine"
    tpm_env = Cli(cli.runtime, {**cli.env, "TPM2TOOLS_TCTI": machine_tpm.tcti})

    # When the agent starts with --tpm
    agent = tpm_env.start("agent", "--token", token, "--dir", str(directory), "--tpm", "--tpm-ek", "ecc")
    out, err = Lines(agent.stdout), Lines(agent.stderr)  # type: ignore[arg-type]
    try:
        # Then it joins with the TPM and schedules its renewal; a service manager then stops it
        admitted, _ = out.wait_for(r"^Admitted: this machine joined pool", 30)
        out.wait_for(r"^Certificate of mach_\w+ expires .*; renewing at ", 10, after=admitted)
        agent.terminate()
        assert stop(agent) == 0, err.text()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    machine_id = json.loads((directory / "machine.json").read_text())["machineId"]
    assert machine_tpm_facts(cli, directory)["activated"] is True

    # When the machine renews: Then its key is enough (the TPM was proven when the key was admitted)
    renewed = tpm_env.run("renew", "--dir", str(directory), "-o", "json")
    assert renewed.code == 0, renewed.err
    assert renewed.json()["machineId"] == machine_id

    # When it re-joins without its TPM: Then the token wants the TPM again (exit 10, one line)
    bare = tpm_env.run("join", "--token", token, "--dir", str(directory), "--rejoin")
    assert bare.code == 10, bare.err + bare.out
    assert "run the join with --tpm" in bare.err

    # When it re-joins with it: Then it is the same machine, its TPM activated again
    again = tpm_env.run(
        "join", "--token", token, "--dir", str(directory), "--rejoin", "--tpm", "--tpm-ek", "ecc"
    )
    assert again.code == 0, again.err
    assert json.loads((directory / "machine.json").read_text())["machineId"] == machine_id
    assert machine_tpm.transient_handles() == []
    assert machine_tpm.sessions() == []

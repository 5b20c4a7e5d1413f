"""The CLI's TPM half on a real TPM stack (swtpm driven by tpm2-tools), no server needed:
`joinplane tpm identify` names the EK as openssl does from its certificate, a credential made by
`tpm2_makecredential -T none` is activated from the blobs a server sends, nothing stays loaded in a
TPM without a resource manager, and each way the TPM can be missing ends in one line and exit 9."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from joinplane_cli import facts, main, tpm
from tests.support.runtime import command
from tests.support.swtpm import (
    EK_CERTIFICATE_NV_ATTRIBUTES,
    Manufacturer,
    SoftwareTpm,
    manufacturer,
    software_tpm,
)

KINDS = ["rsa", "ecc"]


@pytest.fixture(scope="module")
def maker(tmp_path_factory: pytest.TempPathFactory) -> Manufacturer:
    return manufacturer(tmp_path_factory.mktemp("maker"), "Acme TPM")


@pytest.fixture(scope="module")
def machine_tpm(maker: Manufacturer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoftwareTpm]:
    with software_tpm(maker, tmp_path_factory.mktemp("tpm")) as running:
        yield running


def joinplane(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command(), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def openssl(*args: str, data: bytes) -> bytes:
    return subprocess.run(["openssl", *args], input=data, capture_output=True, check=True).stdout


def make_credential(ek_public: bytes, ak_name: bytes, secret: bytes, workdir: Path) -> tuple[str, str]:
    """What a server sends (credentialBlob, encryptedSecret, base64) for `secret`, made by
    tpm2-tools itself without a TPM: the credential file's blobs after its 8-byte header."""
    (workdir / "ek.pub").write_bytes(ek_public)
    (workdir / "secret.in").write_bytes(secret)
    made = ["tpm2_makecredential", "-T", "none", "-e", "ek.pub", "-s", "secret.in", "-n", ak_name.hex()]
    subprocess.run([*made, "-o", "cred"], cwd=workdir, capture_output=True, check=True)
    blobs = (workdir / "cred").read_bytes()[8:]
    size = int.from_bytes(blobs[:2], "big") + 2
    return base64.b64encode(blobs[:size]).decode(), base64.b64encode(blobs[size:]).decode()


@pytest.mark.parametrize("kind", KINDS)
def test_identify_names_the_ek_as_openssl_does_from_its_certificate(
    machine_tpm: SoftwareTpm, maker: Manufacturer, kind: str, tmp_path: Path
) -> None:
    # Given the EK certificate in the TPM's NV, read with tpm2-tools and hashed with openssl
    der = tmp_path / "ek.der"
    machine_tpm.tool("tpm2_nvread", "-C", "o", "-o", str(der), f"{tpm.EK_CERTIFICATE_INDEX[kind]:#010x}")
    public = openssl("x509", "-inform", "der", "-noout", "-pubkey", data=der.read_bytes())
    expected = hashlib.sha256(openssl("pkey", "-pubin", "-outform", "der", data=public)).hexdigest()
    serial = openssl("x509", "-inform", "der", "-noout", "-serial", data=der.read_bytes()).decode()

    # When the operator runs `joinplane tpm identify` on the machine
    done = joinplane("tpm", "identify", "--ek", kind, "-o", "json", env=machine_tpm.env())

    # Then the EK hash is the certificate's SPKI hash, and the certificate is the manufacturer's
    assert done.returncode == 0, done.stderr
    (key,) = json.loads(done.stdout)["endorsementKeys"]
    assert key["ekPublicKeySha256"] == expected
    assert key["certificate"]["certifiesThisEk"] is True
    assert key["certificate"]["issuer"] == "CN=Acme TPM EK CA,O=Joinplane test TPM makers"
    assert int(key["certificate"]["serialNumber"], 16) == int(serial.strip().removeprefix("serial="), 16)
    assert json.loads(done.stdout)["manufacturer"] == "IBM"  # swtpm reports itself as IBM's
    # And the table for people says the same
    table = joinplane("tpm", "identify", env=machine_tpm.env())
    assert table.returncode == 0, table.stderr
    assert expected in table.stdout and "Acme TPM EK CA" in table.stdout
    # And nothing is left loaded in the TPM
    assert machine_tpm.transient_handles() == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_credential_made_by_tpm2_makecredential_is_activated_from_the_blobs_a_server_sends(
    machine_tpm: SoftwareTpm, kind: str, tmp_path: Path
) -> None:
    with tpm.Tpm.open(machine_tpm.tcti) as device:
        # Given an EK and AK of the TPM, as a join sends them
        attestation = device.attestation(kind)
        fields = attestation.fields()
        assert base64.b64decode(fields["ekPublic"]) == attestation.endorsement.public
        assert fields["ekPublicKeySha256"] == machine_tpm.ek_spki_sha256(kind)
        # And a challenge made for them without any TPM, as the server's tpmChallenge carries it
        secret = os.urandom(32)
        blob, encrypted = make_credential(
            attestation.endorsement.public, attestation.ak_name, secret, tmp_path
        )
        challenge = {
            "credentialBlob": blob,
            "encryptedSecret": encrypted,
            "expiresAt": "2030-01-01T00:00:00Z",
        }

        # When the client writes the credential file and the TPM activates it
        credential = tpm.challenge_credential(challenge)
        recovered = device.activate(attestation, credential)

    # Then the file is byte for byte tpm2-tools' own, and the TPM recovers the secret
    assert credential == (tmp_path / "cred").read_bytes()
    assert recovered == secret
    # And no transient object or session is left behind
    assert machine_tpm.transient_handles() == []
    assert machine_tpm.sessions() == []


def test_repeated_attestations_do_not_exhaust_a_tpm_without_a_resource_manager(
    machine_tpm: SoftwareTpm, tmp_path: Path
) -> None:
    # Given swtpm over TCP, which holds three transient objects and flushes none by itself
    # When more attestations and activations run than it could hold objects
    for attempt in range(4):
        with tpm.Tpm.open(machine_tpm.tcti) as device:
            attestation = device.attestation("ecc")
            secret = os.urandom(32)
            blob, encrypted = make_credential(
                attestation.endorsement.public, attestation.ak_name, secret, tmp_path
            )
            challenge = {"credentialBlob": blob, "encryptedSecret": encrypted}
            # Then each one works
            assert device.activate(attestation, tpm.challenge_credential(challenge)) == secret, attempt
    # And the TPM is as empty as before
    assert machine_tpm.transient_handles() == []
    assert machine_tpm.sessions() == []


def test_a_credential_made_for_one_tpm_cannot_be_activated_by_another(
    machine_tpm: SoftwareTpm, maker: Manufacturer, tmp_path: Path
) -> None:
    # Given a credential made for this TPM's EK and AK
    with tpm.Tpm.open(machine_tpm.tcti) as device:
        attestation = device.attestation("ecc")
    blob, encrypted = make_credential(
        attestation.endorsement.public, attestation.ak_name, b"s" * 32, tmp_path
    )
    credential = tpm.challenge_credential({"credentialBlob": blob, "encryptedSecret": encrypted})
    # When another TPM tries to activate it with an EK and AK of its own
    with software_tpm(maker, tmp_path / "other") as other, tpm.Tpm.open(other.tcti) as device:
        own = device.attestation("ecc")
        with pytest.raises(tpm.TpmUnavailable, match="failed to activate the server's credential"):
            device.activate(own, credential)
        # Then it fails, and leaves nothing loaded either
        assert other.transient_handles() == []
        assert other.sessions() == []


@pytest.mark.parametrize(
    "challenge",
    [
        None,
        {"credentialBlob": "AAA", "encryptedSecret": "AAA="},
        {"credentialBlob": "AAI=", "encryptedSecret": "AAE="},  # size prefixes that lie
        {"credentialBlob": 5, "encryptedSecret": "AAA="},
        {"encryptedSecret": "AAA="},
    ],
    ids=["not-an-object", "not-base64", "sizes-lie", "not-a-string", "missing"],
)
def test_an_unusable_challenge_is_refused_before_the_tpm_sees_it(challenge: object) -> None:
    with pytest.raises(ValueError):
        tpm.challenge_credential(challenge)


def test_a_tpm_whose_ek_certificates_were_removed_is_still_identified_by_its_ek(
    maker: Manufacturer, tmp_path: Path
) -> None:
    # Given a TPM with no EK certificate in NV (as many TPMs of servers and VMs ship)
    with software_tpm(maker, tmp_path / "bare") as bare:
        for index in tpm.EK_CERTIFICATE_INDEX.values():
            bare.tool("tpm2_nvundefine", "-C", "p", f"{index:#010x}")
        # And (a TPM provisioned wrongly) bytes that are no certificate where the ECC one belongs
        (tmp_path / "junk").write_bytes(b"\x30\x03junk" * 8)
        bare.tool("tpm2_nvdefine", "-C", "p", "0x01c0000a", "-s", "56", "-a", EK_CERTIFICATE_NV_ATTRIBUTES)
        bare.tool("tpm2_nvwrite", "-C", "p", "-i", str(tmp_path / "junk"), "0x01c0000a")
        # When the operator identifies it
        done = joinplane("tpm", "identify", "-o", "json", env=bare.env())
        table = joinplane("tpm", "identify", env=bare.env())
        # And a join would describe its ECC EK
        with tpm.Tpm.open(bare.tcti) as device:
            fields = device.attestation("ecc").fields()
    # Then each EK is named by its hash, said to have no certificate, and the command succeeds
    assert done.returncode == 0, done.stderr
    rsa, ecc = json.loads(done.stdout)["endorsementKeys"]
    assert (rsa["kind"], rsa["certificate"]) == ("rsa", None)
    assert rsa["ekPublicKeySha256"] == bare.ek_spki_sha256("rsa")
    assert "none in NV 0x01c00002: only the allow-list by EK hash admits it" in table.stdout
    # And the junk is called what it is, and never sent as a certificate
    assert ecc["certificate"]["problem"].startswith("NV 0x01c0000a holds no X.509 certificate")
    assert "ekCertificatePem" not in fields
    assert fields["ekPublicKeySha256"] == bare.ek_spki_sha256("ecc")


def test_an_ek_certificate_labelling_its_key_rsaes_oaep_still_certifies_the_ek(
    machine_tpm: SoftwareTpm,
) -> None:
    # Given the machine's RSA EK certificate as some manufacturers issue it: the same key under the
    # algorithm id-RSAES-OAEP instead of rsaEncryption (same length, so the DER stays well formed)
    rsa_encryption, rsaes_oaep = (
        bytes.fromhex("06092a864886f70d010101"),
        bytes.fromhex("06092a864886f70d010107"),
    )
    original = machine_tpm.ek_certificate_der("rsa")
    assert original.count(rsa_encryption) == 1
    relabelled = original.replace(rsa_encryption, rsaes_oaep)
    with tpm.Tpm.open(machine_tpm.tcti) as device:
        ek, ecc = device.endorsement("rsa"), device.endorsement("ecc")
    # When identify checks the certificate against the TPM's EK
    details = tpm.certificate_details(relabelled, ek.spki)
    # Then it certifies this EK (the key's bits are compared, not its label), and not another key
    assert details["certifiesThisEk"] is True
    assert tpm.certificate_details(original, ek.spki)["certifiesThisEk"] is True
    assert tpm.certificate_details(relabelled, ecc.spki)["certifiesThisEk"] is False


@pytest.mark.parametrize(
    ("environment", "says"),
    [
        (
            {"TPM2TOOLS_TCTI": "swtpm:host=127.0.0.1,port=1"},
            "no TPM answers at TCTI swtpm:host=127.0.0.1,port=1",
        ),
        (
            {"TPM2TOOLS_TCTI": "device:/nonexistent/tpmrm0"},
            "no TPM answers at TCTI device:/nonexistent/tpmrm0",
        ),
        ({"PATH": "/nonexistent"}, "tpm2-tools is not installed"),
    ],
    ids=["nothing-listening", "no-device", "no-tpm2-tools"],
)
def test_a_missing_tpm_is_one_line_and_exit_9(environment: dict[str, str], says: str) -> None:
    # Given a machine where the TPM cannot be reached, or tpm2-tools is missing
    env = {**os.environ, **environment}
    # When the operator asks for its identity
    done = joinplane("tpm", "identify", env=env)
    # Then one line says what to fix, with the TPM's exit code
    assert done.returncode == 9
    assert done.stdout == ""
    assert done.stderr.startswith(f"joinplane: {says}")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["allow-list", "add", "--site", "dc1", "--ek-sha256", "26ff97e1...9f32"], "--ek-sha256"),
        (["allow-list", "remove", "--site", "dc1", "26ff97e1"], "HASH"),
        (["manufacturers", "remove", "--site", "dc1", "49e580bd" * 7 + "..."], "SHA256"),
    ],
    ids=["allow-add", "allow-remove", "manufacturers-remove"],
)
def test_a_cut_hash_is_named_by_what_was_typed_and_nothing_is_sent(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a hash cut short, as a table or a document abbreviates it, and a URL nothing answers at
    # When an operator passes it
    code = main.main(["tpm", *args, "--url", "http://127.0.0.1:9", "--api-key", "jpk_x", "--tenant", "dev"])
    # Then it is a usage error naming the option or argument, before any call (no exit 7)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith(f"joinplane: {named}: ") and "is not a SHA-256 (64 hex digits" in err
    assert err.count("\n") == 1


def test_the_agents_systemd_unit_keeps_its_tpm_options(capsys: pytest.CaptureFixture[str]) -> None:
    # Given an agent that attests with the TPM's ECC EK
    # When its systemd unit is printed
    code = main.main(
        ["agent", "--print-systemd-unit", "--dir", "/var/lib/joinplane", "--tpm", "--tpm-ek", "ecc"]
    )
    # Then the service runs with the same TPM options
    unit = capsys.readouterr().out
    assert code == 0
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.endswith("agent --dir /var/lib/joinplane --tpm --tpm-ek ecc")


def test_the_unproven_ek_hash_of_a_join_without_tpm_leaves_nothing_loaded_either(
    machine_tpm: SoftwareTpm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a TPM without a resource manager and without a persistent EK, so that the EK hash a
    # join without --tpm reports is derived with tpm2_createek
    machine_tpm.tool("tpm2_evictcontrol", "-C", "o", "-c", "0x81010001")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/tpm0").write_text("")
    monkeypatch.setenv("TPM2TOOLS_TCTI", machine_tpm.tcti)
    # When the machine's facts are collected
    found = facts.collect(tmp_path)
    # Then the hash is the RSA EK's, and the EK it created was flushed
    assert found.ek_sha256 == machine_tpm.ek_spki_sha256("rsa")
    assert machine_tpm.transient_handles() == []

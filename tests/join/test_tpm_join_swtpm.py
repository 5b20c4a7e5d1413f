"""The server's TPM half on a real TPM stack: swtpm manufactured under a TPM manufacturer's CA
(tests/support/swtpm.py), driven by tpm2-tools. The server reads what tpm2_createek and
tpm2_createak write, names the AK as tpm2-tools does, seals credentials the TPM activates just as it
activates tpm2_makecredential's, and verifies swtpm's EK certificates against the manufacturer."""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from joinplane import tpm_credential, tpm_manufacturers
from joinplane.dal.tpm_manufacturers import ManufacturerRecord
from tests.support import call, join
from tests.support.swtpm import Manufacturer, SoftwareTpm, manufacturer, software_tpm

SIGNING = {"rsa": "rsassa", "ecc": "ecdsa"}


@pytest.fixture(scope="module")
def maker(tmp_path_factory: pytest.TempPathFactory) -> Manufacturer:
    return manufacturer(tmp_path_factory.mktemp("maker"), "Acme TPM")


@pytest.fixture(scope="module")
def tpm(maker: Manufacturer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoftwareTpm]:
    with software_tpm(maker, tmp_path_factory.mktemp("tpm")) as running:
        yield running


def _keys(tpm: SoftwareTpm, kind: str, where: Path) -> tuple[bytes, bytes, bytes]:
    """(EK TPM2B_PUBLIC, AK TPM2B_PUBLIC, AK name) as tpm2-tools writes them; their contexts saved
    in `where` (reloaded by tpm2_activatecredential: the TPM holds only three objects)."""
    tpm.tool("tpm2_createek", "-c", "ek.ctx", "-G", kind, "-u", "ek.pub", cwd=where)
    tpm.tool(
        "tpm2_createak", "-C", "ek.ctx", "-c", "ak.ctx", "-G", kind, "-g", "sha256", "-s", SIGNING[kind],
        "-u", "ak.pub", "-n", "ak.name", cwd=where,
    )  # fmt: skip
    tpm.tool("tpm2_flushcontext", "-t", cwd=where)
    return (where / "ek.pub").read_bytes(), (where / "ak.pub").read_bytes(), (where / "ak.name").read_bytes()


def _activate(tpm: SoftwareTpm, where: Path, credential_file: bytes) -> bytes:
    """TPM2_ActivateCredential with the EK's policy session, as a machine runs it."""
    (where / "credential").write_bytes(credential_file)
    try:
        tpm.tool("tpm2_startauthsession", "--policy-session", "-S", "session.ctx", cwd=where)
        tpm.tool("tpm2_policysecret", "-S", "session.ctx", "-c", "e", cwd=where)
        tpm.tool(
            "tpm2_activatecredential", "-c", "ak.ctx", "-C", "ek.ctx", "-i", "credential", "-o", "secret",
            "-P", "session:session.ctx", cwd=where,
        )  # fmt: skip
    finally:
        tpm.tool("tpm2_flushcontext", "-t", cwd=where)
        tpm.tool("tpm2_flushcontext", "-s", cwd=where)
    return (where / "secret").read_bytes()


def _credential_file(blob: bytes, encrypted: bytes) -> bytes:
    return struct.pack(">II", 0xBADCC0DE, 1) + blob + encrypted


def _sized(data: bytes) -> list[int]:
    """The sizes of the consecutive TPM2Bs in `data`."""
    sizes = []
    while data:
        size = struct.unpack(">H", data[:2])[0]
        sizes.append(size)
        data = data[2 + size :]
    return sizes


@pytest.mark.parametrize("kind", ["rsa", "ecc"])
def test_the_tpm_activates_the_servers_credential_as_it_does_tpm2_makecredentials(
    tpm: SoftwareTpm, kind: str, tmp_path: Path
) -> None:
    # Given an EK and an AK made by tpm2-tools on the TPM
    ek_blob, ak_blob, ak_name = _keys(tpm, kind, tmp_path)
    ek, ak = tpm_credential.parse_public(ek_blob), tpm_credential.parse_public(ak_blob)
    tpm_credential.check_ek(ek)
    tpm_credential.check_ak(ak)
    # Then the server names the AK as tpm2-tools does, and the EK as its certificate does
    assert ak.name == ak_name
    assert hashlib.sha256(ek.spki_der()).hexdigest() == tpm.ek_spki_sha256(kind)
    # When the server and tpm2_makecredential (no TPM involved) each seal a secret to them
    ours_secret, theirs_secret = os.urandom(32), os.urandom(32)
    ours = tpm_credential.make_credential(ek, ak.name, ours_secret)
    (tmp_path / "theirs.in").write_bytes(theirs_secret)
    tpm.tool(
        "tpm2_makecredential", "-T", "none", "-u", "ek.pub", "-s", "theirs.in", "-n", ak_name.hex(),
        "-o", "theirs.cred", cwd=tmp_path,
    )  # fmt: skip
    theirs = (tmp_path / "theirs.cred").read_bytes()
    # Then the same structures come out (the random seed aside): the same sizes, field by field
    assert theirs[:8] == _credential_file(b"", b"")
    assert _sized(theirs[8:]) == _sized(ours.credential_blob + ours.encrypted_secret)
    # And the TPM activates both, giving back each secret
    assert _activate(tpm, tmp_path, _credential_file(*ours)) == ours_secret
    assert _activate(tpm, tmp_path, theirs) == theirs_secret


@pytest.mark.parametrize("kind", ["rsa", "ecc"])
def test_swtpms_ek_certificates_chain_to_the_manufacturer_where_strict_validation_refuses(
    tpm: SoftwareTpm, maker: Manufacturer, kind: str
) -> None:
    # Given the manufacturer's root and intermediate as a site lists them
    listed = [
        ManufacturerRecord("acme", "rack-1", "-", pem, "", "", False, "", "", "", None)
        for pem in (maker.root_pem, maker.intermediate_pem)
    ]
    certificate = tpm.ek_certificate(kind)
    # Then a general X.509 path validator refuses the EK certificate (no clientAuth EKU, a critical
    # directoryName SAN, an empty subject: what the TCG's EK profile prescribes)
    root = x509.load_pem_x509_certificate(maker.root_pem.encode())
    intermediate = x509.load_pem_x509_certificate(maker.intermediate_pem.encode())
    with pytest.raises(VerificationError):
        PolicyBuilder().store(Store([root])).build_client_verifier().verify(certificate, [intermediate])
    # And the server's own check chains it to the listed root
    assert tpm_manufacturers.chain(certificate, listed, datetime.now(UTC)) == (
        root.subject.rfc4514_string(),
        "",
    )
    # But not to a root the site does not list
    assert tpm_manufacturers.chain(certificate, listed[1:], datetime.now(UTC))[0] == ""


def test_a_swtpm_joins_with_its_manufacturer_listed(
    tpm: SoftwareTpm, maker: Manufacturer, make_token, machine_factory, admin_key, tmp_path: Path
) -> None:
    # Given a site listing the TPM's manufacturer, and a token requiring a TPM it trusts
    for pem in (maker.root_pem, maker.intermediate_pem):
        added = call(
            "/api/compute/tpmAllowList/manufacturers/add",
            {"tenantId": "acme", "siteId": "rack-1", "certificatePem": pem},
            admin_key,
        )
        assert added.status == 200, added.body
    token = make_token(attestation={"tpm": "require", "tpmTrust": "manufacturer"})
    machine = machine_factory()
    ek_blob, ak_blob, _ = _keys(tpm, "rsa", tmp_path)
    certificate = tpm.ek_certificate("rsa").public_bytes(serialization.Encoding.PEM).decode()
    presented: dict[str, Any] = {
        "ekPublic": base64.b64encode(ek_blob).decode(),
        "akPublic": base64.b64encode(ak_blob).decode(),
        "ekCertificatePem": certificate,
    }
    body = {"joinToken": token["token"], "csr": machine.csr, "tpm": presented}
    # When it joins, the TPM activates the challenge, and it retries with the secret
    challenge = join(body, signed_by=machine.key).body["tpmChallenge"]
    blob, encrypted = (base64.b64decode(challenge[k]) for k in ("credentialBlob", "encryptedSecret"))
    secret = _activate(tpm, tmp_path, _credential_file(blob, encrypted))
    retry = {**body, "tpm": {**presented, "activation": {"secret": base64.b64encode(secret).decode()}}}
    admitted = join(retry, signed_by=machine.key)
    # Then it is admitted, trusted through its manufacturer, with no transient object left behind
    assert admitted.status == 200, admitted.body
    shown = call(
        "/api/compute/machines/get", {"tenantId": "acme", "machineId": admitted.body["machineId"]}, admin_key
    ).body["tpm"]
    assert (shown["activated"], shown["verifiedBy"]) == (True, "manufacturer")
    assert shown["ekCertificateIssuer"].startswith("CN=Acme TPM EK CA")
    assert tpm.transient_handles() == []

"""The software TPM the TPM tests run on: manufactured with EK certificates of both kinds under a
manufacturer's CA, reachable through its TCTI, and its certificates chaining to that manufacturer
as openssl sees them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.swtpm import (
    ECC_EK_CERTIFICATE_INDEX,
    RSA_EK_CERTIFICATE_INDEX,
    Manufacturer,
    SoftwareTpm,
    manufacturer,
    software_tpm,
)


@pytest.fixture(scope="module")
def maker(tmp_path_factory: pytest.TempPathFactory) -> Manufacturer:
    return manufacturer(tmp_path_factory.mktemp("maker"), "Acme TPM")


@pytest.fixture(scope="module")
def tpm(maker: Manufacturer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SoftwareTpm]:
    with software_tpm(maker, tmp_path_factory.mktemp("tpm")) as running:
        yield running


@pytest.mark.parametrize(
    ("kind", "index"),
    [("rsa", RSA_EK_CERTIFICATE_INDEX), ("ecc", ECC_EK_CERTIFICATE_INDEX)],
    ids=["rsa", "ecc"],
)
def test_the_tpm_holds_each_ek_certificate_in_nv_and_it_chains_to_the_manufacturer(
    tpm: SoftwareTpm, maker: Manufacturer, kind: str, index: int, tmp_path: Path
) -> None:
    # Given a TPM manufactured under Acme's CA
    # When its EK certificate is read from NV, as a machine would
    certificate = tmp_path / "ek.der"
    tpm.tool("tpm2_nvread", "-C", "o", "-o", str(certificate), f"{index:#010x}")
    # Then it is the certificate Acme issued
    assert certificate.read_bytes() == (
        tpm.rsa_ek_certificate_der if kind == "rsa" else tpm.ecc_ek_certificate_der
    )
    # And openssl chains it to Acme's root through Acme's intermediate
    (tmp_path / "root.pem").write_text(maker.root_pem)
    (tmp_path / "intermediate.pem").write_text(maker.intermediate_pem)
    subprocess.run(
        ["openssl", "x509", "-inform", "der", "-in", str(certificate), "-out", str(tmp_path / "ek.pem")],
        check=True,
    )
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", "root.pem", "-untrusted", "intermediate.pem", "ek.pem"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_ek_certificates_certify_the_eks_of_the_default_templates(
    tpm: SoftwareTpm, tmp_path: Path
) -> None:
    for kind in ("rsa", "ecc"):
        # Given the TPM's EK of the default template, made as tpm2_createek makes it
        tpm.tool("tpm2_createek", "-c", "ek.ctx", "-G", kind, "-u", "ek.pub", cwd=tmp_path)
        tpm.tool("tpm2_readpublic", "-c", "ek.ctx", "-f", "der", "-o", f"{kind}.der", cwd=tmp_path)
        tpm.tool("tpm2_flushcontext", "-t")
        # Then its public key is the one the EK certificate certifies
        spki = (tmp_path / f"{kind}.der").read_bytes()
        certified = subprocess.run(
            ["openssl", "x509", "-inform", "der", "-noout", "-pubkey"],
            input=tpm.ek_certificate_der(kind),
            capture_output=True,
            check=True,
        ).stdout
        as_der = subprocess.run(
            ["openssl", "pkey", "-pubin", "-outform", "der"], input=certified, capture_output=True, check=True
        ).stdout
        assert spki == as_der
    # And nothing stays loaded
    assert tpm.transient_handles() == []


def test_two_manufacturers_are_two_issuers(tmp_path: Path, maker: Manufacturer) -> None:
    # Given a second manufacturer
    other = manufacturer(tmp_path / "other", "Globex TPM")
    # Then its roots are not Acme's
    assert other.root_pem != maker.root_pem
    assert (
        "Globex TPM Root CA"
        in subprocess.run(
            ["openssl", "x509", "-noout", "-subject"],
            input=other.root_pem,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )

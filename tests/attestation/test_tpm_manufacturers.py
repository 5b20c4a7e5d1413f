"""A site's TPM manufacturers: their routes through the real authorizer and handler, and the chain
check an EK certificate gets against them (tests/support/tpm_blobs.py makes the CAs and the EK
certificates, shaped as the TCG's EK Credential Profile shapes them)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from joinplane import tpm_credential, tpm_manufacturers
from joinplane.dal.tpm_manufacturers import ManufacturerRecord
from joinplane.errors import InvalidArgument
from tests.support.attestation import call, make_key
from tests.support.table import all_items
from tests.support.tpm_blobs import SoftManufacturer, soft_ek

ADD, LIST, REMOVE = (f"/api/compute/tpmAllowList/manufacturers/{verb}" for verb in ("add", "list", "remove"))
SITE = {"tenantId": "acme", "siteId": "site-a"}


@pytest.fixture(scope="module")
def acme() -> SoftManufacturer:
    return SoftManufacturer.make("Acme TPM")


def test_add_list_and_remove(site_a: str, acme: SoftManufacturer) -> None:
    # Given a manufacturer's root and intermediate, When an operator lists both at the site
    root = call(ADD, {**SITE, "certificatePem": acme.root_pem, "description": "Acme"}, site_a)
    intermediate = call(ADD, {**SITE, "certificatePem": acme.intermediate_pem}, site_a)
    # Then each is described, root or not
    assert (root.status, root.body["root"], root.body["subject"]) == (200, True, "CN=Acme TPM Root CA")
    assert (intermediate.body["root"], intermediate.body["issuer"]) == (False, "CN=Acme TPM Root CA")
    listed = call(LIST, SITE, site_a).body["manufacturers"]
    assert sorted(m["certificateSha256"] for m in listed) == sorted(
        r.body["certificateSha256"] for r in (root, intermediate)
    )
    # When one is listed again, Then it already exists and nothing changes
    before = all_items()
    again = call(ADD, {**SITE, "certificatePem": acme.root_pem}, site_a)
    assert (again.status, again.code) == (409, "ALREADY_EXISTS") and all_items() == before
    # When it is removed, Then it is gone, and removing it again is NOT_FOUND
    digest = root.body["certificateSha256"]
    assert call(REMOVE, {**SITE, "certificateSha256": digest}, site_a).status == 200
    assert [m["certificateSha256"] for m in call(LIST, SITE, site_a).body["manufacturers"]] == [
        intermediate.body["certificateSha256"]
    ]
    gone = call(REMOVE, {**SITE, "certificateSha256": digest}, site_a)
    assert (gone.status, gone.code) == (404, "NOT_FOUND")


def _pem(der: bytes) -> str:
    return "-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(der).decode() + "-----END CERTIFICATE-----\n"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"certificatePem": "hello"}, "certificatePem"),
        ({"certificatePem": _pem(bytes(range(200)))}, "certificatePem"),
        ({"certificatePem": "x" * 20000}, "certificatePem"),
        ({}, "certificatePem"),
        ({"certificatePem": 7}, "certificatePem"),
        ({"certificatePem": "x", "colour": "red"}, "colour"),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(site_a: str, body: dict[str, Any], field: str) -> None:
    before = all_items()
    reply = call(ADD, {**SITE, **body}, site_a)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
    assert field in reply.body["error"]["message"]
    assert all_items() == before


def test_an_ek_certificate_is_no_manufacturer(site_a: str, acme: SoftManufacturer) -> None:
    # Given an EK certificate (basicConstraints cA false), Then it cannot be listed as a manufacturer
    reply = call(ADD, {**SITE, "certificatePem": acme.ek_certificate(soft_ek("rsa"))}, site_a)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT") and "not a CA" in reply.body["error"][
        "message"
    ]


def test_read_only_keys_and_other_sites(admin_key: str, site_a: str, acme: SoftManufacturer) -> None:
    reader = make_key(admin_key, "compute:attestation:read@site/site-a")
    assert call(LIST, SITE, reader).status == 200
    denied = call(ADD, {**SITE, "certificatePem": acme.root_pem}, reader)
    assert (denied.status, denied.code) == (403, "PERMISSION_DENIED")
    hidden = call(ADD, {**SITE, "siteId": "no-such-site", "certificatePem": acme.root_pem}, site_a)
    assert (hidden.status, hidden.code) == (404, "NOT_FOUND")


def _listed(*pems: str) -> list[ManufacturerRecord]:
    return [
        ManufacturerRecord("acme", "site-a", str(i), pem, "", "", False, "", "", "", None)
        for i, pem in enumerate(pems)
    ]


def _leaf(acme: SoftManufacturer, **options: Any) -> Any:
    return x509.load_pem_x509_certificate(acme.ek_certificate(soft_ek("ecc"), **options).encode())


def test_an_ek_certificate_chains_through_the_intermediate_to_the_root(acme: SoftManufacturer) -> None:
    leaf, now = _leaf(acme), datetime.now(UTC)
    assert tpm_manufacturers.chain(leaf, _listed(acme.root_pem, acme.intermediate_pem), now) == (
        "CN=Acme TPM Root CA",
        "",
    )
    # Without its intermediate, or with only the intermediate (no root ends the chain), it does not
    assert tpm_manufacturers.chain(leaf, _listed(acme.root_pem), datetime.now(UTC))[0] == ""
    assert tpm_manufacturers.chain(leaf, _listed(acme.intermediate_pem), datetime.now(UTC))[0] == ""


def test_expired_and_foreign_certificates_do_not_chain_and_say_why(acme: SoftManufacturer) -> None:
    listed = _listed(acme.root_pem, acme.intermediate_pem)
    expired = tpm_manufacturers.chain(_leaf(acme, expired=True), listed, datetime.now(UTC))
    assert expired[0] == "" and "the EK certificate expired at" in expired[1]
    # A manufacturer whose root expires: checked at the join's time
    late = tpm_manufacturers.chain(_leaf(acme), listed, datetime.now(UTC) + timedelta(days=4000))
    assert late[0] == "" and "expired" in late[1]
    # An impostor CA of the same names but other keys signs nothing the real one did
    impostor = SoftManufacturer.make("Acme TPM")
    foreign = tpm_manufacturers.chain(_leaf(impostor), listed, datetime.now(UTC))
    assert foreign[0] == "" and "no manufacturer certificate listed" in foreign[1]


RSA_ENCRYPTION = bytes.fromhex("06092a864886f70d010101")
RSAES_OAEP = bytes.fromhex("06092a864886f70d010107")


def test_an_ek_certified_under_the_rsaes_oaep_identifier_is_the_same_key(acme: SoftManufacturer) -> None:
    # Given an RSA EK whose certificate names its key id-RSAES-OAEP (as some TPM vendors do)
    ek = soft_ek("rsa")
    der = x509.load_pem_x509_certificate(acme.ek_certificate(ek).encode()).public_bytes(
        serialization.Encoding.DER
    )
    assert der.count(RSA_ENCRYPTION) == 1
    pem = _pem(der.replace(RSA_ENCRYPTION, RSAES_OAEP))
    spki = tpm_credential.parse_public(ek.blob).spki_der()
    # Then the certificate is read as certifying the activated EK
    _, facts = tpm_manufacturers.read_ek_certificate(pem, spki)
    assert facts.issuer == "CN=Acme TPM EK CA"
    # And a certificate of another key is refused, whatever it is labelled
    with pytest.raises(InvalidArgument, match="another key"):
        tpm_manufacturers.read_ek_certificate(
            pem, tpm_credential.parse_public(soft_ek("rsa").blob).spki_der()
        )

"""The TPM allow-list: its routes through the real authorizer and handler, EK names taken from
certificates the openssl CLI made, and the attestor's one-GetItem check."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

from joinplane import tpm_allow
from joinplane.errors import InvalidArgument
from tests.support.attestation import call, dynamodb_calls, make_key, make_site
from tests.support.csr import make_csr
from tests.support.table import all_items

ADD, LIST, REMOVE = (f"/api/compute/tpmAllowList/{verb}" for verb in ("add", "list", "remove"))
SITE = {"tenantId": "acme", "siteId": "site-a"}
HASH_1, HASH_2, HASH_3 = ("1" * 64, "2" * 64, "3" * 64)


def openssl(*args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True).stdout


def spki_sha256_by_openssl(certificate: Path) -> str:
    """The EK name as an operator would compute it by hand: the certificate's public key as DER."""
    pem = openssl("x509", "-in", str(certificate), "-pubkey", "-noout")
    der = openssl("pkey", "-pubin", "-outform", "DER", stdin=pem)
    return hashlib.sha256(der).hexdigest()


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An RSA-2048 v1 certificate (no version field: `x509 -req`), an ECDSA P-256 v3 one (`req
    -x509`, with extensions), and a CSR that is not a certificate."""
    folder = tmp_path_factory.mktemp("ek")
    rsa = make_csr(folder, "rsa2048", "/CN=EK RSA", key_name="rsa.key", csr_name="rsa.csr")
    rsa_key, csr, rsa_cert = rsa.key_path, rsa.csr_path, folder / "rsa-v1.pem"
    openssl("x509", "-req", "-in", str(csr), "-signkey", str(rsa_key), "-out", str(rsa_cert), "-days", "1")
    ec_key, ec_cert = folder / "ec.key", folder / "ec-v3.pem"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(ec_key), "-out", str(ec_cert), "-subj", "/CN=EK EC", "-days", "1")  # fmt: skip
    return {"rsa": rsa_cert, "ec": ec_cert, "csr": csr}


def allow_items() -> list[dict[str, Any]]:
    return [item for item in all_items() if item["pk"].endswith("#TPMALLOW")]


# --- the EK name ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_the_ek_name_is_the_sha256_of_the_certificates_spki(certificates: dict[str, Path], kind: str) -> None:
    pem = certificates[kind].read_text()
    assert tpm_allow.ek_hash_from_certificate(pem) == spki_sha256_by_openssl(certificates[kind])
    # CRLF line ends and surrounding blank lines are the same certificate
    assert tpm_allow.ek_hash_from_certificate("\n" + pem.replace("\n", "\r\n") + "\n\n") == (
        spki_sha256_by_openssl(certificates[kind])
    )


def test_an_ek_under_the_rsaes_oaep_identifier_is_named_by_its_bytes(certificates: dict[str, Path]) -> None:
    # Given the RSA certificate with its key relabelled id-RSAES-OAEP (1.2.840.113549.1.1.7), as some
    # TPM vendors issue EK certificates: a key cryptography cannot load
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm

    rsa_encryption, rsaes_oaep = (
        bytes.fromhex("06092a864886f70d010101"),
        bytes.fromhex("06092a864886f70d010107"),
    )
    der = base64.b64decode("".join(certificates["rsa"].read_text().splitlines()[1:-1]))
    assert der.count(rsa_encryption) == 1
    relabelled = der.replace(rsa_encryption, rsaes_oaep)
    with pytest.raises(UnsupportedAlgorithm):
        x509.load_der_x509_certificate(relabelled).public_key()
    pem = (
        "-----BEGIN CERTIFICATE-----\n"
        + base64.encodebytes(relabelled).decode()
        + "-----END CERTIFICATE-----\n"
    )
    # Then its name is still the SHA-256 of the SPKI exactly as encoded
    spki = openssl("pkey", "-pubin", "-outform", "DER", stdin=openssl("x509", "-in", str(certificates["rsa"]),
                   "-pubkey", "-noout")).replace(rsa_encryption, rsaes_oaep)  # fmt: skip
    assert tpm_allow.ek_hash_from_certificate(pem) == hashlib.sha256(spki).hexdigest()


def test_the_rsa_certificate_really_is_version_1(certificates: dict[str, Path]) -> None:
    # The [0] version field is absent in v1: the SPKI walk must not assume it
    text = openssl("x509", "-in", str(certificates["rsa"]), "-noout", "-text").decode()
    assert "Version: 1 (0x0)" in text


# --- add / list / remove --------------------------------------------------------------------


def test_add_by_certificate_then_by_hash_of_the_same_key_is_already_exists(
    site_a: str, certificates: dict[str, Path]
) -> None:
    expected = spki_sha256_by_openssl(certificates["ec"])
    # When the EK certificate is added
    added = call(
        ADD, {**SITE, "ekCertificatePem": certificates["ec"].read_text(), "description": "node 7"}, site_a
    )
    # Then the key is listed under its SPKI hash
    assert added.status == 200, added.body
    assert added.body["ekPublicKeySha256"] == expected and added.body["addedFrom"] == "certificate"
    assert added.body["description"] == "node 7" and added.body["createdBy"].startswith("key_")
    [item] = allow_items()
    assert (item["pk"], item["sk"]) == ("SITE#acme#site-a#TPMALLOW", f"EK#{expected}")
    assert "ekCertificatePem" not in item
    # And adding the same key again, as a hash in upper case, changes nothing
    before = all_items()
    again = call(ADD, {**SITE, "ekPublicKeySha256": expected.upper()}, site_a)
    assert (again.status, again.code) == (409, "ALREADY_EXISTS")
    assert all_items() == before


def test_add_by_hash_list_and_remove(site_a: str) -> None:
    for digest in (HASH_3, HASH_1, HASH_2.upper()):
        reply = call(ADD, {**SITE, "ekPublicKeySha256": digest}, site_a)
        assert reply.status == 200 and reply.body["addedFrom"] == "hash"
    first = call(LIST, {**SITE, "limit": 2}, site_a)
    assert [k["ekPublicKeySha256"] for k in first.body["keys"]] == [HASH_1, HASH_2]
    rest = call(LIST, {**SITE, "cursor": first.body["nextCursor"]}, site_a)
    assert [k["ekPublicKeySha256"] for k in rest.body["keys"]] == [HASH_3] and "nextCursor" not in rest.body

    removed = call(REMOVE, {**SITE, "ekPublicKeySha256": HASH_2.upper()}, site_a)
    assert removed.status == 200 and removed.body["ekPublicKeySha256"] == HASH_2
    assert [i["ekPublicKeySha256"] for i in allow_items()] == [HASH_1, HASH_3]
    before = all_items()
    again = call(REMOVE, {**SITE, "ekPublicKeySha256": HASH_2}, site_a)
    assert (again.status, again.code) == (404, "NOT_FOUND")
    assert all_items() == before


def test_list_of_an_empty_allow_list_is_empty(site_a: str) -> None:
    assert call(LIST, SITE, site_a).body == {"keys": []}


# --- is_listed (the attestor's side) --------------------------------------------------------


def test_is_listed_is_one_get_item(site_a: str) -> None:
    call(ADD, {**SITE, "ekPublicKeySha256": HASH_1}, site_a)
    make_site(site_a, "site-b")
    with dynamodb_calls() as calls:
        assert tpm_allow.is_listed("acme", "site-a", HASH_1) is True
    assert calls == ["GetItem"]
    assert tpm_allow.is_listed("acme", "site-a", HASH_1.upper()) is True
    assert tpm_allow.is_listed("acme", "site-a", HASH_2) is False
    # Listed at one site means nothing at another, nor for another tenant
    assert tpm_allow.is_listed("acme", "site-b", HASH_1) is False
    assert tpm_allow.is_listed("globex", "site-a", HASH_1) is False
    # A value that is not a SHA-256 is never listed, and costs no call
    with dynamodb_calls() as calls:
        assert tpm_allow.is_listed("acme", "site-a", "x" * 5000) is False
    assert calls == []


# --- isolation ------------------------------------------------------------------------------


def test_a_site_key_sees_its_site_only(admin_key: str) -> None:
    make_site(admin_key, "site-a")
    make_site(admin_key, "site-b")
    make_site(admin_key, "site-z", tenant="globex")
    manager = make_key(admin_key, "compute:attestation:*@site/site-a")
    call(ADD, {"tenantId": "acme", "siteId": "site-b", "ekPublicKeySha256": HASH_2}, admin_key)

    assert call(ADD, {**SITE, "ekPublicKeySha256": HASH_1}, manager).status == 200
    assert len(call(LIST, SITE, manager).body["keys"]) == 1
    before = all_items()
    for site in ["site-b", "no-such-site", "site-z"]:
        for path, body in [
            (LIST, {}),
            (ADD, {"ekPublicKeySha256": HASH_3}),
            (REMOVE, {"ekPublicKeySha256": HASH_2}),
        ]:
            hidden = call(path, {"tenantId": "acme", "siteId": site, **body}, manager)
            assert (hidden.status, hidden.code) == (404, "NOT_FOUND"), (path, site)
            assert hidden.body["error"]["message"] == "site not found"
    for path, body in [(LIST, {}), (ADD, {"ekPublicKeySha256": HASH_3})]:
        foreign = call(path, {"tenantId": "globex", "siteId": "site-z", **body}, manager)
        assert (foreign.status, foreign.code) == (403, "PERMISSION_DENIED")
    # Site b's key, named at site a, is not on site a's list
    crossed = call(REMOVE, {**SITE, "ekPublicKeySha256": HASH_2}, manager)
    assert (crossed.status, crossed.code) == (404, "NOT_FOUND")
    assert all_items() == before


def test_read_only_and_unrelated_grants(admin_key: str) -> None:
    make_site(admin_key, "site-a", pool="pool-a")
    call(ADD, {**SITE, "ekPublicKeySha256": HASH_1}, admin_key)
    reader = make_key(admin_key, "compute:attestation:read@site/site-a")
    discovery_only = make_key(admin_key, "compute:discovery:*@site/site-a")
    pool_scoped = make_key(admin_key, "compute:attestation:*@compute-pool/pool-a")
    before = all_items()
    assert call(LIST, SITE, reader).status == 200
    for path in (ADD, REMOVE):
        denied = call(path, {**SITE, "ekPublicKeySha256": HASH_1}, reader)
        assert (denied.status, denied.code) == (403, "PERMISSION_DENIED")
    assert call(LIST, SITE, discovery_only).code == "PERMISSION_DENIED"
    assert call(LIST, SITE, pool_scoped).code == "NOT_FOUND"
    assert all_items() == before


# --- bad input ------------------------------------------------------------------------------


GARBAGE_PEMS = {
    "text": "hello",
    "empty armour": "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
    "bad base64": "-----BEGIN CERTIFICATE-----\nMIIB!!notbase64\n-----END CERTIFICATE-----\n",
    "random der": "-----BEGIN CERTIFICATE-----\n"
    + base64.encodebytes(bytes(range(200))).decode()
    + "-----END CERTIFICATE-----\n",
    "truncated": (
        "-----BEGIN CERTIFICATE-----\n"
        "MIIBkTCB+wIJAKHBfpegPjMCMA0GCSqGSIb3DQEBCwUA\n"
        "-----END CERTIFICATE-----\n"
    ),
}


@pytest.mark.parametrize("name", sorted(GARBAGE_PEMS))
def test_garbage_pem_fails_as_both_a_value_error_and_a_domain_error(name: str) -> None:
    # The join endpoint shares the function: whichever it catches, garbage must not become a 500
    with pytest.raises(ValueError) as raised:
        tpm_allow.ek_hash_from_certificate(GARBAGE_PEMS[name])
    assert isinstance(raised.value, InvalidArgument)
    assert raised.value.details == [
        {"field": "ekCertificatePem", "reason": raised.value.details[0]["reason"]}
    ]


@pytest.mark.parametrize("name", sorted(GARBAGE_PEMS))
def test_garbage_pem_is_invalid_argument_and_nothing_is_written(site_a: str, name: str) -> None:
    before = all_items()
    reply = call(ADD, {**SITE, "ekCertificatePem": GARBAGE_PEMS[name]}, site_a)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
    assert [d["field"] for d in reply.body["error"]["details"]] == ["ekCertificatePem"]
    assert "ekCertificatePem" in reply.body["error"]["message"]
    assert all_items() == before


def test_what_is_not_exactly_one_certificate_is_refused(site_a: str, certificates: dict[str, Path]) -> None:
    before = all_items()
    rsa, ec = certificates["rsa"].read_text(), certificates["ec"].read_text()
    public_key = openssl("x509", "-in", str(certificates["rsa"]), "-pubkey", "-noout").decode()
    for pem in [certificates["csr"].read_text(), rsa + ec, public_key]:
        reply = call(ADD, {**SITE, "ekCertificatePem": pem}, site_a)
        assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), pem[:40]
    assert all_items() == before


def test_bad_pem_is_refused_before_tenant_and_site_checks(site_a: str) -> None:
    # Shape comes first (docs/decisions.md): another tenant's unknown site still gets 400
    reply = call(ADD, {"tenantId": "globex", "siteId": "nowhere", "ekCertificatePem": "hello"}, site_a)
    assert reply.code == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (ADD, {**SITE, "ekPublicKeySha256": HASH_1, "colour": "red"}, "colour"),
        (ADD, {**SITE, "ekPublicKeySha256": "1" * 63}, "ekPublicKeySha256"),
        (ADD, {**SITE, "ekPublicKeySha256": "g" * 64}, "ekPublicKeySha256"),
        (ADD, {**SITE, "ekPublicKeySha256": 123}, "ekPublicKeySha256"),
        (ADD, {**SITE, "ekCertificatePem": ["x"]}, "ekCertificatePem"),
        (ADD, {**SITE, "ekCertificatePem": "x" * (16 * 1024 + 1)}, "ekCertificatePem"),
        (ADD, {**SITE, "ekPublicKeySha256": HASH_1, "description": "bad\u0007"}, "description"),
        (ADD, {**SITE, "siteId": "-bad", "ekPublicKeySha256": HASH_1}, "siteId"),
        (LIST, {**SITE, "limit": 0}, "limit"),
        (LIST, {**SITE, "limit": True}, "limit"),
        (LIST, {**SITE, "cursor": "EK#" + HASH_1}, "cursor"),
        (REMOVE, SITE, "ekPublicKeySha256"),
        (REMOVE, {**SITE, "ekPublicKeySha256": HASH_1 + "0"}, "ekPublicKeySha256"),
    ],
)
def test_invalid_fields_are_named_and_nothing_is_written(
    site_a: str, path: str, body: dict[str, Any], field: str
) -> None:
    call(ADD, {**SITE, "ekPublicKeySha256": HASH_3}, site_a)
    before = all_items()
    reply = call(path, body, site_a)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT"), reply.body
    assert field in [d["field"] for d in reply.body["error"]["details"]], reply.body
    assert field in reply.body["error"]["message"]
    assert all_items() == before


@pytest.mark.parametrize("body", [SITE, {**SITE, "ekPublicKeySha256": HASH_1, "ekCertificatePem": "x"}])
def test_exactly_one_of_hash_or_certificate(site_a: str, body: dict[str, Any]) -> None:
    before = all_items()
    reply = call(ADD, body, site_a)
    assert (reply.status, reply.code) == (400, "INVALID_ARGUMENT")
    assert "exactly one of ekPublicKeySha256 or ekCertificatePem" in reply.body["error"]["message"]
    assert all_items() == before

"""The server's MakeCredential and TPM2B_PUBLIC reading, without a TPM: against an independent
software ActivateCredential (tests/support/tpm_blobs.py). The same code against a real TPM stack
and tpm2_makecredential is in test_tpm_credential_swtpm.py."""

from __future__ import annotations

import os

import pytest

from joinplane import tpm_credential
from joinplane.tpm_credential import InvalidPublic
from tests.support.tpm_blobs import (
    AK_ATTRIBUTES,
    DECRYPT,
    FIXED_PARENT,
    FIXED_TPM,
    RESTRICTED,
    SIGN,
    activate,
    name_of,
    soft_ak,
    soft_ek,
)


@pytest.mark.parametrize("kind", ["rsa", "ecc"])
def test_the_tpm_holding_the_ek_recovers_the_secret_for_the_named_ak(kind: str) -> None:
    # Given an EK and an AK
    ek, ak_blob = soft_ek(kind), soft_ak(kind)
    ak = tpm_credential.parse_public(ak_blob)
    secret = os.urandom(32)
    # When the server seals the secret to them
    sealed = tpm_credential.make_credential(tpm_credential.parse_public(ek.blob), ak.name, secret)
    # Then the EK's holder recovers it for that AK's name, which is the name tpm2-tools computes
    assert ak.name == name_of(ak_blob)
    assert activate(ek, ak.name, *sealed) == secret


@pytest.mark.parametrize("kind", ["rsa", "ecc"])
def test_another_ek_or_another_ak_name_recovers_nothing(kind: str) -> None:
    # Given a credential sealed to one EK and one AK
    ek, ak = soft_ek(kind), tpm_credential.parse_public(soft_ak(kind))
    sealed = tpm_credential.make_credential(tpm_credential.parse_public(ek.blob), ak.name, os.urandom(32))
    other_name = tpm_credential.parse_public(soft_ak(kind)).name
    # Then a second TPM (another EK) cannot open it, nor the first for an AK of another name
    with pytest.raises(ValueError):
        activate(soft_ek(kind), ak.name, *sealed)
    with pytest.raises(ValueError):
        activate(ek, other_name, *sealed)


def test_fixed_seeds_give_the_same_credential_twice() -> None:
    # Given the random parts fixed (the RSA seed); Then the result is a function of its inputs
    ek = tpm_credential.parse_public(soft_ek("rsa").blob)
    name = tpm_credential.parse_public(soft_ak()).name
    first = tpm_credential.make_credential(ek, name, b"s" * 32, seed=b"x" * 32)
    second = tpm_credential.make_credential(ek, name, b"s" * 32, seed=b"x" * 32)
    # OAEP is randomised: the seed's encryption differs, the sealed credential does not
    assert first.credential_blob == second.credential_blob
    assert first.encrypted_secret != second.encrypted_secret


@pytest.mark.parametrize(
    ("attributes", "says"),
    [
        (AK_ATTRIBUTES & ~FIXED_TPM, "not fixedTPM"),
        (AK_ATTRIBUTES & ~FIXED_PARENT, "not fixedParent"),
        (AK_ATTRIBUTES & ~RESTRICTED, "not restricted"),
        (AK_ATTRIBUTES & ~SIGN, "not sign"),
        (AK_ATTRIBUTES | DECRYPT, "decrypt"),
    ],
)
def test_an_ak_a_tpm_could_export_or_misuse_is_refused(attributes: int, says: str) -> None:
    # Given an AK lacking an attribute that makes it this TPM's own signing key
    ak = tpm_credential.parse_public(soft_ak("ecc", attributes))
    # Then it is refused, naming what is wrong
    with pytest.raises(InvalidPublic, match=says):
        tpm_credential.check_ak(ak)


def test_a_signing_key_is_no_ek() -> None:
    with pytest.raises(InvalidPublic, match="not decrypt"):
        tpm_credential.check_ek(tpm_credential.parse_public(soft_ak("rsa")))


def test_an_ek_whose_modulus_is_short_or_no_key_is_refused() -> None:
    # Given RSA EK blobs of the right length whose modulus is zero, or a 1024-bit one padded to 2048
    import struct

    blob = soft_ek("rsa").blob
    zero = blob[:-256] + bytes(256)
    short = (int.from_bytes(blob[-256:], "big") >> 1024) | 1
    padded = blob[:-256] + short.to_bytes(256, "big")
    assert struct.unpack(">H", blob[-258:-256])[0] == 256
    # Then neither is an EK
    for spoiled in (zero, padded):
        with pytest.raises(InvalidPublic, match="RSA key"):
            tpm_credential.check_ek(tpm_credential.parse_public(spoiled))


@pytest.mark.parametrize(
    "blob",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00", id="one byte"),
        pytest.param(b"\x00\x10" + b"\x00" * 4, id="says 16 bytes, has 4"),
        pytest.param(soft_ak()[:-1], id="truncated"),
        pytest.param(soft_ak() + b"\x00", id="trailing bytes"),
        pytest.param(b"\x00\x08\x00\x25\x00\x0b\x00\x00\x00\x00", id="a symmetric-cipher object"),
        pytest.param(b"\xff\xff" + b"\x00" * 65535, id="oversize"),
    ],
)
def test_garbage_is_no_tpm2b_public(blob: bytes) -> None:
    with pytest.raises(InvalidPublic):
        tpm_credential.parse_public(blob)


def test_the_ek_is_named_by_its_subject_public_key_info() -> None:
    # Given a software EK; Then its SPKI is the key's standard X.509 encoding
    from cryptography.hazmat.primitives import serialization

    ek = soft_ek("ecc")
    spki = ek.private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert tpm_credential.parse_public(ek.blob).spki_der() == spki

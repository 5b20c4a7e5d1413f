"""TPM structures made in software, for tests that need a TPM2B_PUBLIC no TPM would make (an AK
without fixedTPM, a truncated blob) or the TPM's half of credential activation without a TPM: an
"EK" whose private key the test holds, and TPM2_ActivateCredential written from TPM 2.0 Part 1
("Credential Protection") independently of the server's MakeCredential, so each checks the other.
Tests on a real TPM stack use tests/support/swtpm.py; these are for the many cases around it."""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import NamedTuple

from cryptography.hazmat.decrepit.ciphers.modes import CFB
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

SHA256, AES, CFB_MODE, NULL, RSA, ECC = 0x000B, 0x0006, 0x0043, 0x0010, 0x0001, 0x0023
RSASSA, ECDSA, P256 = 0x0014, 0x0018, 0x0003
FIXED_TPM, FIXED_PARENT, SENSITIVE_DATA_ORIGIN, USER_WITH_AUTH = 1 << 1, 1 << 4, 1 << 5, 1 << 6
ADMIN_WITH_POLICY, RESTRICTED, DECRYPT, SIGN = 1 << 7, 1 << 16, 1 << 17, 1 << 18
# What tpm2_createek and tpm2_createak give their keys (the TCG's EK template; tpm2-tools' AK).
EK_ATTRIBUTES = FIXED_TPM | FIXED_PARENT | SENSITIVE_DATA_ORIGIN | ADMIN_WITH_POLICY | RESTRICTED | DECRYPT
AK_ATTRIBUTES = FIXED_TPM | FIXED_PARENT | SENSITIVE_DATA_ORIGIN | USER_WITH_AUTH | RESTRICTED | SIGN


def _sized(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def public_blob(key: rsa.RSAPublicKey | ec.EllipticCurvePublicKey, attributes: int, *, ek: bool) -> bytes:
    """A TPM2B_PUBLIC for `key`: an EK's (AES-128-CFB protecting, no scheme) or a signing key's."""
    head = struct.pack(">HHI", RSA if isinstance(key, rsa.RSAPublicKey) else ECC, SHA256, attributes)
    head += _sized(b"\x11" * 32 if ek else b"")  # authPolicy: any digest; it changes only the name
    symmetric = struct.pack(">HHH", AES, 128, CFB_MODE) if ek else struct.pack(">H", NULL)
    if isinstance(key, rsa.RSAPublicKey):
        numbers = key.public_numbers()
        scheme = struct.pack(">H", NULL) if ek else struct.pack(">HH", RSASSA, SHA256)
        body = scheme + struct.pack(">HI", key.key_size, 0 if numbers.e == 65537 else numbers.e)
        unique = _sized(numbers.n.to_bytes(key.key_size // 8, "big"))
    else:
        point = key.public_numbers()
        scheme = struct.pack(">H", NULL) if ek else struct.pack(">HH", ECDSA, SHA256)
        body = scheme + struct.pack(">HH", P256, NULL)
        unique = _sized(point.x.to_bytes(32, "big")) + _sized(point.y.to_bytes(32, "big"))
    return _sized(head + symmetric + body + unique)


def name_of(blob: bytes) -> bytes:
    return struct.pack(">H", SHA256) + hashlib.sha256(blob[2:]).digest()


class SoftEk(NamedTuple):
    """An endorsement key held in software: its private key and its TPM2B_PUBLIC."""

    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    blob: bytes


def soft_ek(kind: str) -> SoftEk:
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if kind == "rsa":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        private = ec.generate_private_key(ec.SECP256R1())
    return SoftEk(private, public_blob(private.public_key(), EK_ATTRIBUTES, ek=True))


def soft_ak(kind: str = "ecc", attributes: int = AK_ATTRIBUTES) -> bytes:
    """An AK's TPM2B_PUBLIC (its private key is not needed: activation names the AK, never uses it)."""
    if kind == "rsa":
        return public_blob(rsa.generate_private_key(65537, 2048).public_key(), attributes, ek=False)
    return public_blob(ec.generate_private_key(ec.SECP256R1()).public_key(), attributes, ek=False)


def _kdfa(key: bytes, label: bytes, u: bytes, v: bytes, bits: int) -> bytes:
    out, i = b"", 0
    while len(out) * 8 < bits:
        i += 1
        out += hmac.new(
            key, struct.pack(">I", i) + label + b"\0" + u + v + struct.pack(">I", bits), "sha256"
        ).digest()
    return out[: bits // 8]


def _unsized(data: bytes) -> tuple[bytes, bytes]:
    size = struct.unpack(">H", data[:2])[0]
    if len(data) < 2 + size:
        raise ValueError("short TPM2B")
    return data[2 : 2 + size], data[2 + size :]


def activate(ek: SoftEk, ak_name: bytes, credential_blob: bytes, encrypted_secret: bytes) -> bytes:
    """TPM2_ActivateCredential in software: the secret, or ValueError where a TPM fails (a wrong
    EK cannot recover the seed; a wrong name fails the integrity check)."""
    secret, rest = _unsized(encrypted_secret)
    assert rest == b""
    if isinstance(ek.private, rsa.RSAPrivateKey):
        oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=b"IDENTITY\0")
        seed = ek.private.decrypt(secret, oaep)  # raises ValueError on a wrong key
    else:
        qx, rest = _unsized(secret)
        qy, _ = _unsized(rest)
        point = ec.EllipticCurvePublicNumbers(
            int.from_bytes(qx, "big"), int.from_bytes(qy, "big"), ec.SECP256R1()
        )
        z = ek.private.exchange(ec.ECDH(), point.public_key())
        ek_x = ek.private.public_key().public_numbers().x.to_bytes(32, "big")
        seed = hashlib.sha256(struct.pack(">I", 1) + z + b"IDENTITY\0" + qx + ek_x).digest()
    identity, _ = _unsized(credential_blob)
    integrity, enc_identity = _unsized(identity)
    hmac_key = _kdfa(seed, b"INTEGRITY", b"", b"", 256)
    if not hmac.compare_digest(integrity, hmac.new(hmac_key, enc_identity + ak_name, "sha256").digest()):
        raise ValueError("integrity check failed")
    key = _kdfa(seed, b"STORAGE", ak_name, b"", 128)
    decryptor = Cipher(algorithms.AES(key), CFB(bytes(16))).decryptor()
    plain = decryptor.update(enc_identity) + decryptor.finalize()
    credential, _ = _unsized(plain)
    return credential

"""TPM structures made in software, for tests that need a TPM2B_PUBLIC no TPM would make (an AK
without fixedTPM, a truncated blob) or the TPM's half of credential activation without a TPM: an
"EK" whose private key the test holds, and TPM2_ActivateCredential written from TPM 2.0 Part 1
("Credential Protection") independently of the server's MakeCredential, so each checks the other.
Tests on a real TPM stack use tests/support/swtpm.py; these are for the many cases around it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from cryptography import x509
from cryptography.hazmat.decrepit.ciphers.modes import CFB
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.x509.oid import NameOID

from .http import Reply, join

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


class SoftTpm(NamedTuple):
    """A machine's TPM in software: its EK and an AK, as a join sends them, and the TPM's answer
    to a challenge (ActivateCredential with its EK)."""

    ek: SoftEk
    ak_blob: bytes

    @classmethod
    def make(cls, kind: str = "ecc", ak_attributes: int = AK_ATTRIBUTES) -> SoftTpm:
        return cls(soft_ek(kind), soft_ak(kind, ak_attributes))

    def presented(self) -> dict[str, str]:
        """The join's `tpm` fields."""
        return {
            "ekPublic": base64.b64encode(self.ek.blob).decode(),
            "akPublic": base64.b64encode(self.ak_blob).decode(),
        }

    def ek_sha256(self) -> str:
        spki = self.ek.private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return hashlib.sha256(spki).hexdigest()

    def answer(self, challenge: dict[str, str]) -> str:
        """The base64 secret this TPM recovers from a `tpmChallenge` (ValueError: it cannot)."""
        secret = activate(
            self.ek,
            name_of(self.ak_blob),
            base64.b64decode(challenge["credentialBlob"]),
            base64.b64decode(challenge["encryptedSecret"]),
        )
        return base64.b64encode(secret).decode()


def join_with_tpm(body: dict[str, Any], key: Path, tpm: SoftTpm) -> tuple[Reply, Reply]:
    """A TPM join from start to end: the challenge, then the retry with the recovered secret,
    signed by the machine's key (`key`). Both answers."""
    first = join({**body, "tpm": {**body.get("tpm", {}), **tpm.presented()}}, signed_by=key)
    assert first.status == 202 and first.body.get("tpmChallenge"), first.body
    retry = with_answer(body, tpm, tpm.answer(first.body["tpmChallenge"]))
    return first, join(retry, signed_by=key)


def with_answer(body: dict[str, Any], tpm: SoftTpm, secret: str) -> dict[str, Any]:
    """The retry's body: the join's, with the TPM's fields and the activation's secret."""
    return {**body, "tpm": {**body.get("tpm", {}), **tpm.presented(), "activation": {"secret": secret}}}


class SoftManufacturer(NamedTuple):
    """A TPM manufacturer's CA in software: a root, an intermediate that issues EK certificates,
    and the intermediate's key. EK certificates are shaped as the TCG's EK Credential Profile
    shapes them (and as swtpm_localca issues them): an empty subject, the TPM's manufacturer, model
    and version in a critical subjectAltName directoryName, keyEncipherment only."""

    root_pem: str
    intermediate_pem: str
    intermediate_key: rsa.RSAPrivateKey
    intermediate: x509.Certificate

    @classmethod
    def make(cls, name: str = "Acme TPM", *, days: int = 3650) -> SoftManufacturer:
        root_key = rsa.generate_private_key(65537, 2048)
        key = rsa.generate_private_key(65537, 2048)
        root_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} Root CA")])
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} EK CA")])
        root = _ca(root_name, root_key.public_key(), root_name, root_key, days)
        intermediate = _ca(ca_name, key.public_key(), root_name, root_key, days)
        pem = serialization.Encoding.PEM
        return cls(
            root.public_bytes(pem).decode(), intermediate.public_bytes(pem).decode(), key, intermediate
        )

    def ek_certificate(self, ek: SoftEk, *, valid_days: int = 3650, expired: bool = False) -> str:
        now = datetime.now(UTC)
        start, end = (now - timedelta(days=30), now - timedelta(days=1)) if expired else (now, now)
        tpm_name = x509.Name(
            [
                x509.NameAttribute(x509.ObjectIdentifier("2.23.133.2.1"), "id:00001014"),
                x509.NameAttribute(x509.ObjectIdentifier("2.23.133.2.2"), "swtpm"),
                x509.NameAttribute(x509.ObjectIdentifier("2.23.133.2.3"), "id:20191023"),
            ]
        )
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.intermediate.subject)
            .public_key(ek.private.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start - timedelta(minutes=5))
            .not_valid_after(end + timedelta(days=0 if expired else valid_days))
            .add_extension(x509.SubjectAlternativeName([x509.DirectoryName(tpm_name)]), critical=True)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, True, False, False, False, False, False, False), critical=True
            )
            .sign(self.intermediate_key, hashes.SHA256())
        )
        return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _ca(
    subject: x509.Name, public: rsa.RSAPublicKey, issuer: x509.Name, issuer_key: rsa.RSAPrivateKey, days: int
) -> x509.Certificate:
    now = datetime.now(UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(issuer_key, hashes.SHA256())
    )

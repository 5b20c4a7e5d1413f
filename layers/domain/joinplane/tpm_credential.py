"""TPM 2.0 credential activation, the server's half: read an EK's and an AK's TPM2B_PUBLIC, check
the AK is a key only this TPM can use, name it, and seal a secret to the pair with MakeCredential
(TPM 2.0 Part 1, "Credential Protection"; Part 3, TPM2_MakeCredential, which does the same in a
TPM). Only the TPM holding the EK's private key, and holding an object of exactly this AK's name,
can get the secret back (TPM2_ActivateCredential), so a returned secret proves both.

Supported: EKs of the TCG default templates (RSA-2048 and ECC NIST P-256, nameAlg SHA-256,
AES-128-CFB as their symmetric algorithm) and AKs of any type whose nameAlg is SHA-256.

Only a join that presents a TPM imports this module, and `cryptography` is imported inside the
functions that need it: a join without TPM attestation loads none of it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

ALG_RSA, ALG_ECC = 0x0001, 0x0023
ALG_SHA256, ALG_AES, ALG_CFB, ALG_NULL = 0x000B, 0x0006, 0x0043, 0x0010
ALG_ECDAA = 0x001A
CURVE_NIST_P256 = 0x0003
SHA256_SIZE = 32
MAX_PUBLIC_BYTES = 1024  # a TPMT_PUBLIC of RSA-4096 is well under this

# TPMA_OBJECT (Part 2)
FIXED_TPM = 1 << 1
FIXED_PARENT = 1 << 4
SENSITIVE_DATA_ORIGIN = 1 << 5
RESTRICTED = 1 << 16
DECRYPT = 1 << 17
SIGN = 1 << 18

# The attributes an AK must have, and the one it must not, for a signature to say "this TPM": a
# key made inside this TPM (sensitiveDataOrigin), that can never leave it (fixedTPM, fixedParent),
# and that signs only what the TPM itself produced (restricted signing key, never a decryption key).
AK_REQUIRED = {
    "fixedTPM": FIXED_TPM,
    "fixedParent": FIXED_PARENT,
    "sensitiveDataOrigin": SENSITIVE_DATA_ORIGIN,
    "restricted": RESTRICTED,
    "sign": SIGN,
}
AK_FORBIDDEN = {"decrypt": DECRYPT}
# An EK must be a key the TPM can decrypt the seed with (restricted decryption) and never exports.
EK_REQUIRED = {"fixedTPM": FIXED_TPM, "restricted": RESTRICTED, "decrypt": DECRYPT}

IDENTITY_LABEL = b"IDENTITY\x00"


class InvalidPublic(ValueError):
    """Not a TPM2B_PUBLIC this server can use, or a key with the wrong attributes; the message
    says which, in words an operator can act on."""


class Public(NamedTuple):
    """A parsed TPMT_PUBLIC: what MakeCredential and the join need of it."""

    type: int  # ALG_RSA | ALG_ECC
    name_alg: int
    attributes: int
    symmetric: tuple[int, int, int]  # (algorithm, keyBits, mode); (ALG_NULL, 0, 0) when none
    rsa_bits: int
    rsa_exponent: int
    rsa_modulus: bytes
    curve: int
    ecc_x: bytes
    ecc_y: bytes
    area: bytes  # the TPMT_PUBLIC bytes, exactly as sent: the name is their hash

    @property
    def name(self) -> bytes:
        """The object's TPM name: nameAlg || H_nameAlg(TPMT_PUBLIC)."""
        return struct.pack(">H", self.name_alg) + hashlib.sha256(self.area).digest()

    def spki_der(self) -> bytes:
        """The key as an X.509 SubjectPublicKeyInfo (DER): what an EK is named by at a site (its
        SHA-256, `ekPublicKeySha256`) and what its certificate must carry."""
        from cryptography.hazmat.primitives import serialization

        return self.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def public_key(self) -> RSAPublicKey | EllipticCurvePublicKey:
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        if self.type == ALG_RSA:
            exponent = self.rsa_exponent or 65537
            try:
                return rsa.RSAPublicNumbers(exponent, int.from_bytes(self.rsa_modulus, "big")).public_key()
            except ValueError:
                raise InvalidPublic("the RSA key's modulus and exponent are not a usable RSA key") from None
        try:
            return ec.EllipticCurvePublicNumbers(
                int.from_bytes(self.ecc_x, "big"), int.from_bytes(self.ecc_y, "big"), ec.SECP256R1()
            ).public_key()
        except ValueError:
            raise InvalidPublic("the ECC point is not on the NIST P-256 curve") from None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise InvalidPublic("the TPM2B_PUBLIC ends early")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def sized(self) -> bytes:
        return self.take(self.u16())


def parse_public(blob: bytes) -> Public:
    """A TPM2B_PUBLIC (size-prefixed TPMT_PUBLIC), as `tpm2_createek -u` and `tpm2_createak -u`
    write it. InvalidPublic for anything else: a key type other than RSA or ECC P-256, a nameAlg
    other than SHA-256, a truncated or overlong structure."""
    if len(blob) > MAX_PUBLIC_BYTES + 2:
        raise InvalidPublic("the TPM2B_PUBLIC is too large")
    outer = _Reader(blob)
    area = outer.sized()
    if outer.at != len(blob):
        raise InvalidPublic("bytes follow the TPM2B_PUBLIC")
    r = _Reader(area)
    kind, name_alg, attributes = r.u16(), r.u16(), r.u32()
    if kind not in (ALG_RSA, ALG_ECC):
        raise InvalidPublic("the key is neither RSA nor ECC")
    if name_alg != ALG_SHA256:
        raise InvalidPublic("the key's nameAlg is not SHA-256")
    r.sized()  # authPolicy: the EK's is the TCG's, the AK's its own; neither changes the credential
    symmetric = (r.u16(), 0, 0)
    if symmetric[0] != ALG_NULL:
        symmetric = (symmetric[0], r.u16(), r.u16())
    scheme = r.u16()
    if scheme != ALG_NULL:
        r.u16()  # the scheme's hash
        if scheme == ALG_ECDAA:
            r.u16()  # its count
    rsa_bits = rsa_exponent = curve = 0
    modulus = x = y = b""
    if kind == ALG_RSA:
        rsa_bits, rsa_exponent = r.u16(), r.u32()
        modulus = r.sized()
        if rsa_bits not in (2048, 3072, 4096) or len(modulus) * 8 != rsa_bits:
            raise InvalidPublic("the RSA key's size is not 2048, 3072 or 4096 bits")
    else:
        curve = r.u16()
        kdf = r.u16()
        if kdf != ALG_NULL:
            r.u16()
        x, y = r.sized(), r.sized()
        if curve != CURVE_NIST_P256 or len(x) != 32 or len(y) != 32:
            raise InvalidPublic("the ECC key is not on the NIST P-256 curve")
    if r.at != len(area):
        raise InvalidPublic("bytes follow the TPMT_PUBLIC")
    return Public(kind, name_alg, attributes, symmetric, rsa_bits, rsa_exponent, modulus, curve, x, y, area)


def _missing(public: Public, required: dict[str, int], forbidden: dict[str, int]) -> list[str]:
    lacks = [name for name, bit in required.items() if not public.attributes & bit]
    has = [name for name, bit in forbidden.items() if public.attributes & bit]
    return [f"not {name}" for name in lacks] + has


def check_ak(public: Public) -> None:
    """InvalidPublic naming each attribute an attestation key lacks (or must not have)."""
    wrong = _missing(public, AK_REQUIRED, AK_FORBIDDEN)
    if wrong:
        raise InvalidPublic("the attestation key is " + ", ".join(wrong))


def check_ek(public: Public) -> None:
    """InvalidPublic unless this is an endorsement key MakeCredential can seal to: a restricted
    decryption key of the TPM, RSA-2048 or ECC P-256, protecting with AES-128-CFB."""
    wrong = _missing(public, EK_REQUIRED, {})
    if wrong:
        raise InvalidPublic("the endorsement key is " + ", ".join(wrong))
    if public.symmetric != (ALG_AES, 128, ALG_CFB):
        raise InvalidPublic("the endorsement key's symmetric algorithm is not AES-128-CFB")
    if public.type == ALG_RSA and public.rsa_bits != 2048:
        raise InvalidPublic("the endorsement key is RSA but not RSA-2048")
    # Whatever a blob says, the key itself must be one MakeCredential can use: a modulus of full
    # size (not a short one padded with zeros), a point on the curve. Read here, so a blob that
    # is not a key is a 400 naming tpm.ekPublic rather than an error later, when the key is used.
    if public.type == ALG_RSA and not public.rsa_modulus[0] & 0x80:
        raise InvalidPublic("the RSA key's modulus is shorter than its declared 2048 bits")
    public.public_key()


# --- Part 1, "Key Derivation Functions" ------------------------------------------------------------


def kdfa(key: bytes, label: bytes, context_u: bytes, context_v: bytes, bits: int) -> bytes:
    """KDFa with HMAC-SHA-256 (SP 800-108 counter mode); `label` gets its terminating zero here."""
    out = b""
    counter = 0
    while len(out) * 8 < bits:
        counter += 1
        message = (
            struct.pack(">I", counter) + label + b"\x00" + context_u + context_v + struct.pack(">I", bits)
        )
        out += hmac.new(key, message, hashlib.sha256).digest()
    return out[: (bits + 7) // 8]


def kdfe(z: bytes, label: bytes, party_u: bytes, party_v: bytes, bits: int) -> bytes:
    """KDFe with SHA-256 (SP 800-56A concatenation KDF); `label` gets its terminating zero here."""
    out = b""
    counter = 0
    while len(out) * 8 < bits:
        counter += 1
        out += hashlib.sha256(struct.pack(">I", counter) + z + label + b"\x00" + party_u + party_v).digest()
    return out[: (bits + 7) // 8]


# --- MakeCredential --------------------------------------------------------------------------------


class Credential(NamedTuple):
    """TPM2_MakeCredential's two outputs, each size-prefixed as on the wire of tpm2-tools."""

    credential_blob: bytes  # TPM2B_ID_OBJECT
    encrypted_secret: bytes  # TPM2B_ENCRYPTED_SECRET


def _sized(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def _seed_for(ek: Public, seed: bytes | None, ephemeral: object | None) -> tuple[bytes, bytes]:
    """(seed, TPMU_ENCRYPTED_SECRET's bytes): the seed encrypted to the EK."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    public = ek.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        seed = seed if seed is not None else os.urandom(SHA256_SIZE)
        sha256 = hashes.SHA256()
        oaep = padding.OAEP(mgf=padding.MGF1(sha256), algorithm=sha256, label=IDENTITY_LABEL)
        return seed, public.encrypt(seed, oaep)
    # ECC: the seed is agreed, not chosen: an ephemeral key's ECDH with the EK, through KDFe.
    if isinstance(ephemeral, ec.EllipticCurvePrivateKey):
        key = ephemeral
    else:
        key = ec.generate_private_key(ec.SECP256R1())
    z = key.exchange(ec.ECDH(), public)
    numbers = key.public_key().public_numbers()
    qx, qy = numbers.x.to_bytes(32, "big"), numbers.y.to_bytes(32, "big")
    agreed = kdfe(z, IDENTITY_LABEL[:-1], qx, ek.ecc_x, SHA256_SIZE * 8)
    return agreed, _sized(qx) + _sized(qy)


def make_credential(
    ek: Public, ak_name: bytes, secret: bytes, *, seed: bytes | None = None, ephemeral: object | None = None
) -> Credential:
    """Seal `secret` (at most 32 bytes) to the TPM holding `ek` and an object named `ak_name`.

    `seed` (RSA) and `ephemeral` (ECC, a P-256 private key) fix what is otherwise random, so tests
    can compare the result with another implementation byte for byte; a join never passes them."""
    # CFB is "decrepit" to cryptography, but it is what the TCG's EK templates protect with.
    from cryptography.hazmat.decrepit.ciphers.modes import CFB
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    check_ek(ek)
    if not 0 < len(secret) <= SHA256_SIZE:
        raise ValueError("the credential is 1 to 32 bytes")
    seed, encrypted = _seed_for(ek, seed, ephemeral)
    symmetric_key = kdfa(seed, b"STORAGE", ak_name, b"", 128)
    encryptor = Cipher(algorithms.AES(symmetric_key), CFB(bytes(16))).encryptor()
    enc_identity = encryptor.update(_sized(secret)) + encryptor.finalize()
    hmac_key = kdfa(seed, b"INTEGRITY", b"", b"", SHA256_SIZE * 8)
    outer_hmac = hmac.new(hmac_key, enc_identity + ak_name, hashlib.sha256).digest()
    return Credential(_sized(_sized(outer_hmac) + enc_identity), _sized(encrypted))

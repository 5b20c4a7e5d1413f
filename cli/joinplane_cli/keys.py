"""The machine's key and CSR. The key never leaves DIR; the server matches retries on the SHA-256 of
the CSR's public key, so reusing the key on every retry is what keeps one join request per machine."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from joinplane_cli import skew


def _proof_time() -> int:
    """Unix milliseconds on the server's clock as last learnt, strictly increasing within this
    process: the server accepts a proof only if it is newer than the last one it accepted for the key."""
    return skew.proof_ms()


@dataclass(frozen=True)
class MachineKey:
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def generate(cls) -> MachineKey:
        return cls(ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def load(cls, pem: bytes) -> MachineKey:
        key = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
            raise ValueError("machine.key is not an ECDSA P-256 private key")
        return cls(key)

    def pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def public_key_sha256(self) -> str:
        """The join identity the server computes from our CSR."""
        spki = self.key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return hashlib.sha256(spki).hexdigest()

    def proof(
        self, purpose: str, credential: str, body: bytes, *, rotating_to: MachineKey | None = None
    ) -> str:
        """A `Joinplane-Proof` header for exactly this request (docs/join.md): fresh possession of
        this key, bound to the credential sent (join token or machine token) and the body's bytes.
        `rotating_to` is the new key of a renewal that changes keys: the header then names this key
        and carries the new key's signature too."""
        t = _proof_time()
        message = (
            f"joinplane-proof-v1\n{purpose}\n{t}\n{hashlib.sha256(credential.encode()).hexdigest()}\n"
            f"{hashlib.sha256(body).hexdigest()}\n"
        ).encode()
        header = f"t={t},sig={base64.b64encode(self.key.sign(message, ec.ECDSA(hashes.SHA256()))).decode()}"
        if rotating_to is not None:
            new_signature = rotating_to.key.sign(message, ec.ECDSA(hashes.SHA256()))
            header += f",key={base64.b64encode(_spki(self.key.public_key())).decode()}"
            header += f",csrsig={base64.b64encode(new_signature).decode()}"
        return header

    def csr(self, common_name: str) -> str:
        # The server ignores the subject (the certificate names the machine id); the hostname only
        # helps a person reading the CSR.
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (common_name or "joinplane-machine")[:64])])
        request = x509.CertificateSigningRequestBuilder().subject_name(name).sign(self.key, hashes.SHA256())
        return request.public_bytes(serialization.Encoding.PEM).decode()


def csr_matches(csr_pem: str, key: MachineKey) -> bool:
    """A stored CSR is reused only if it is for this key (a restored backup could mix them)."""
    try:
        request = x509.load_pem_x509_csr(csr_pem.encode())
    except ValueError:
        return False
    ours = key.key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    theirs = request.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return ours == theirs and request.is_signature_valid


def _spki(public_key: Any) -> bytes:
    return bytes(
        public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def pem_certificates(text: object) -> list[x509.Certificate]:
    """The certificates of a PEM text; ValueError unless it holds at least one."""
    if not isinstance(text, str) or "-----BEGIN CERTIFICATE-----" not in text:
        raise ValueError("is not a PEM certificate")
    try:
        return x509.load_pem_x509_certificates(text.encode())
    except ValueError:  # a broken PEM block, or text that cannot be encoded (a lone surrogate)
        raise ValueError("is not a PEM certificate") from None


def certificate_for(text: object, key: MachineKey) -> x509.Certificate:
    """The PEM certificate in `text` (the first, should a chain follow it), if it is for `key`;
    ValueError saying what is wrong."""
    leaf = pem_certificates(text)[0]
    try:
        theirs = _spki(leaf.public_key())
    except (ValueError, UnsupportedAlgorithm):
        theirs = b""
    if theirs != _spki(key.key.public_key()):
        raise ValueError("is not for this machine's key")
    return leaf

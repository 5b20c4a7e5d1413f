"""Keys and CSRs made by the `openssl` CLI, as a real machine makes them: the one CSR maker of the
suite. Python's `cryptography` would make the same bytes, but a CSR from the CLI proves the server
reads what a hand-rolled client sends."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

OPENSSL = "openssl"

# `openssl req -new` arguments that choose the key, by kind. The first four are the kinds a machine
# may use; the others are refused, or odd, and exist so the CA tests can show how.
KINDS: dict[str, tuple[str, ...]] = {
    "p256": ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"),
    "p384": ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"),
    "ed25519": ("-newkey", "ed25519"),
    "rsa2048": ("-newkey", "rsa:2048"),
    "rsa4096": ("-newkey", "rsa:4096"),
    "rsa1024": ("-newkey", "rsa:1024"),
    "p521": ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-521"),
    "secp256k1": ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:secp256k1"),
    "ed448": ("-newkey", "ed448"),
    "rsa-pss": ("-newkey", "rsa-pss", "-pkeyopt", "rsa_keygen_bits:2048"),
    "p256-sha1": ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-sha1"),
    "p256-asks-for-more": (
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-addext",
        "subjectAltName=DNS:evil.example,URI:spiffe://other-tenant/pool/p/machine/m",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-addext",
        "extendedKeyUsage=serverAuth,codeSigning",
    ),
}


@dataclass(frozen=True)
class CsrFile:
    pem: str
    key_path: Path
    csr_path: Path


def openssl(
    *args: str, cwd: Path | None = None, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OPENSSL, *args], cwd=cwd, input=stdin, capture_output=True, text=True, check=check, timeout=60
    )


def make_csr(
    directory: Path,
    kind: str = "p256",
    subject: str = "/CN=test",
    *,
    key_name: str = "key.pem",
    csr_name: str = "csr.pem",
) -> CsrFile:
    """A new key of `kind` and a CSR for it, both written to `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    key, out = directory / key_name, directory / csr_name
    openssl("req", "-new", *KINDS[kind], "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(out))
    return CsrFile(out.read_text(), key, out)


def csr_for_key(key_path: Path, subject: str = "/CN=again") -> str:
    """Another CSR for a key already on disk (what a retry after a crash, or a renewal, sends)."""
    return openssl("req", "-new", "-key", str(key_path), "-subj", subject).stdout


def openssl_csr(directory: Path, subject: str = "/CN=test") -> str:
    """A P-256 key (`key.pem`) and CSR (`csr.pem`) in `directory`; the CSR's PEM."""
    return make_csr(directory, "p256", subject).pem


class Csrs:
    """CSRs made once per session (RSA 4096 key generation is slow), by kind or from a key file."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._made: dict[str, CsrFile] = {}

    def __getitem__(self, kind: str) -> CsrFile:
        if kind not in self._made:
            self._made[kind] = self.fresh(kind, kind)
        return self._made[kind]

    def fresh(self, kind: str, name: str) -> CsrFile:
        return make_csr(self.workdir, kind, "/CN=whatever", key_name=f"{name}.key", csr_name=f"{name}.csr")

    def for_key(self, key_path: Path, name: str, subject: str = "/CN=retry") -> str:
        out = self.workdir / f"{name}.csr"
        out.write_text(csr_for_key(key_path, subject))
        return out.read_text()

    def with_key_args(self, name: str, *genpkey_args: str) -> CsrFile:
        """A CSR for a key openssl genpkey makes (DSA, RSA with an odd exponent...)."""
        key = self.workdir / f"{name}.key"
        openssl("genpkey", *genpkey_args, "-out", str(key), cwd=self.workdir)
        pem = self.for_key(key, name, "/CN=whatever")
        return CsrFile(pem, key, self.workdir / f"{name}.csr")


@dataclass
class OpensslTool:
    """What a machine or a verifier does with the openssl CLI: verify a chain, read a certificate,
    compute a key's join identity."""

    workdir: Path

    def write(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.write_text(text)
        return path

    def verify(
        self, ca_pem: str, cert_pem: str, purpose: str = "sslclient"
    ) -> subprocess.CompletedProcess[str]:
        ca_file, cert_file = self.write("ca.pem", ca_pem), self.write("cert.pem", cert_pem)
        return openssl(
            "verify",
            "-CAfile",
            str(ca_file),
            "-purpose",
            purpose,
            str(cert_file),
            cwd=self.workdir,
            check=False,
        )

    def text(self, cert_pem: str) -> str:
        return openssl("x509", "-noout", "-text", cwd=self.workdir, stdin=cert_pem).stdout

    def spki_sha256(self, csr_pem: str) -> str:
        """The join identity as a machine would compute it, without Python."""
        public_pem = openssl("req", "-pubkey", "-noout", cwd=self.workdir, stdin=csr_pem).stdout
        der = subprocess.run(
            [OPENSSL, "pkey", "-pubin", "-outform", "DER"],
            input=public_pem.encode(),
            capture_output=True,
            check=True,
        ).stdout
        return (
            subprocess.run([OPENSSL, "dgst", "-sha256", "-r"], input=der, capture_output=True, check=True)
            .stdout.split()[0]
            .decode()
        )


def openssl_verify(directory: Path, ca_pem: str, cert_pem: str) -> subprocess.CompletedProcess[str]:
    """`openssl verify -purpose sslclient` of a machine certificate against its pool's CA; both stay
    in `directory` (ca.crt, machine.crt) for the test to look at further."""
    (directory / "ca.crt").write_text(ca_pem)
    (directory / "machine.crt").write_text(cert_pem)
    return openssl(
        "verify",
        "-purpose",
        "sslclient",
        "-CAfile",
        str(directory / "ca.crt"),
        str(directory / "machine.crt"),
        check=False,
    )

"""Fixtures for the CA tests: an isolated environment, Secrets Manager in moto (in-process, or one
threaded moto server for the races), and CSRs made by the `openssl` CLI as a real machine would."""

from __future__ import annotations

import functools
import logging
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from moto.secretsmanager.models import SecretsManagerBackend
from moto.server import ThreadedMotoServer

from joinplane import aws, ca, clock
from joinplane.settings import settings

OPENSSL = "/usr/bin/openssl"


def _reset_process_state() -> None:
    settings.cache_clear()
    aws.reset()
    ca.reset()
    clock.reset()


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("TABLE_NAME", "unused")
    for name in (
        "AWS_ENDPOINT_URL",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "CA_SECRET_PREFIX",
        "SPIFFE_TRUST_DOMAIN",
    ):
        monkeypatch.delenv(name, raising=False)
    _reset_process_state()
    yield
    _reset_process_state()


@pytest.fixture
def secretsmanager() -> Iterator[Any]:
    """Secrets Manager emulated in-process; yields the same client the CA module uses."""
    with mock_aws():
        yield aws.client("secretsmanager")
        aws.reset()


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """One moto server on a free port shared by every thread, as separate Lambdas share one AWS."""
    # Real CreateSecret is atomic; moto's checks for the name and then inserts, so two concurrent
    # creates can both "succeed" (seen about once in 30 eight-way races). Serialising it restores
    # the service's contract, so a failing race test means our code is wrong, not the emulator.
    create_lock = threading.Lock()
    unlocked_create = SecretsManagerBackend.create_secret

    @functools.wraps(unlocked_create)
    def atomic_create(self: SecretsManagerBackend, *args: Any, **kwargs: Any) -> Any:
        with create_lock:
            return unlocked_create(self, *args, **kwargs)

    monkeypatch.setattr(SecretsManagerBackend, "create_secret", atomic_create)
    request_log = logging.getLogger("werkzeug")
    previous_level = request_log.level
    request_log.setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    aws.reset()
    try:
        yield endpoint
    finally:
        # No moto reset here: its backends are process-global, and the session's embedded emulator
        # (tests/conftest.py) may share them. Race tests use fresh pool ids instead.
        server.stop()
        aws.reset()
        request_log.setLevel(previous_level)


# --- openssl ------------------------------------------------------------------------------------------


def openssl(
    *args: str, cwd: Path, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OPENSSL, *args], cwd=cwd, input=stdin, capture_output=True, text=True, check=check, timeout=60
    )


@dataclass(frozen=True)
class CsrFile:
    pem: str
    key_path: Path


# How a machine would make each kind of CSR: `openssl req -new` arguments that choose the key.
CSR_KINDS: dict[str, tuple[str, ...]] = {
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


class Csrs:
    """CSRs made once per session (RSA 4096 key generation is slow), by kind or from a key file."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._made: dict[str, CsrFile] = {}

    def __getitem__(self, kind: str) -> CsrFile:
        if kind not in self._made:
            self._made[kind] = self._generate(kind)
        return self._made[kind]

    def fresh(self, kind: str, name: str) -> CsrFile:
        return self._generate(kind, name)

    def for_key(self, key_path: Path, name: str, subject: str = "/CN=retry") -> str:
        out = self.workdir / f"{name}.csr"
        openssl("req", "-new", "-key", str(key_path), "-subj", subject, "-out", str(out), cwd=self.workdir)
        return out.read_text()

    def with_key_args(self, name: str, *genpkey_args: str) -> CsrFile:
        """A CSR for a key openssl genpkey makes (DSA, RSA with an odd exponent...)."""
        key = self.workdir / f"{name}.key"
        openssl("genpkey", *genpkey_args, "-out", str(key), cwd=self.workdir)
        return CsrFile(self.for_key(key, name, "/CN=whatever"), key)

    def _generate(self, kind: str, name: str | None = None) -> CsrFile:
        name = name or kind
        key, out = self.workdir / f"{name}.key", self.workdir / f"{name}.csr"
        args = ("req", "-new", *CSR_KINDS[kind], "-nodes", "-subj", "/CN=whatever")
        openssl(*args, "-keyout", str(key), "-out", str(out), cwd=self.workdir)
        return CsrFile(out.read_text(), key)


@pytest.fixture(scope="session")
def csrs(tmp_path_factory: pytest.TempPathFactory) -> Csrs:
    return Csrs(tmp_path_factory.mktemp("csrs"))


@dataclass
class OpensslTool:
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


@pytest.fixture
def ossl(tmp_path: Path) -> OpensslTool:
    return OpensslTool(tmp_path)


@pytest.fixture
def run_together() -> Callable[[int, Callable[[], Any]], list[Any]]:
    """Run `action` in n threads released at once by a barrier; results (or exceptions) in order."""

    def run(n: int, action: Callable[[], Any]) -> list[Any]:
        start = threading.Barrier(n)
        results: list[Any] = [None] * n

        def worker(index: int) -> None:
            start.wait()
            try:
                results[index] = action()
            except Exception as failure:
                results[index] = failure

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        return results

    return run

"""A software TPM 2.0 on a real TPM stack: swtpm manufactured by `swtpm_setup` with EK certificates
issued under a TPM manufacturer's CA, served over TCP, driven by tpm2-tools through its TCTI.

`manufacturer(workdir, name)` makes a manufacturer: a root and an intermediate (the certificates a
site lists as TPM manufacturer roots) and the configuration swtpm's local CA (`swtpm_localca`)
issues EK certificates with. `software_tpm(maker, workdir)` manufactures one TPM under it and
serves it on free loopback ports until the block ends: its `tcti` is what `TPM2TOOLS_TCTI` takes.

What the TPM holds, as a machine's TPM would: an RSA-2048 EK certificate at NV 0x01c00002 for the
EK of the default template (swtpm_setup's), and an ECC P-256 EK certificate at NV 0x01c0000a.
swtpm_setup certifies only a P-384 ECC EK (at 0x01c00016, the high range), so the P-256 EK of
the default template (`tpm2_createek -G ecc`) is certified here the way swtpm_setup certifies its
own: swtpm_localca with the EK's point, written into NV under the platform hierarchy.

The EKs are decryption keys, as the TCG default templates make them and as credential activation
needs (`--allow-signing` would make a non-standard EK that signs too, and `tpm2_createek` could
not re-create it).

Nothing is written under /etc or the home directory: swtpm_setup reads its configuration from
`--config`, and XDG_CONFIG_HOME and TMPDIR point into the work directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

# Where a TPM keeps its EK certificates (TCG EK Credential Profile, low range).
RSA_EK_CERTIFICATE_INDEX = 0x01C00002
ECC_EK_CERTIFICATE_INDEX = 0x01C0000A
# What swtpm reports itself as; swtpm_localca writes it into the EK certificate's subject alt name.
TPM_IDENTITY = (
    "--tpm-spec-family", "2.0", "--tpm-spec-level", "0", "--tpm-spec-revision", "164",
    "--tpm-manufacturer", "id:00001014", "--tpm-model", "swtpm", "--tpm-version", "id:20191023",
)  # fmt: skip
# Attributes of an EK certificate's index as swtpm_setup defines them (readable by the owner
# without a password, written once by the platform).
EK_CERTIFICATE_NV_ATTRIBUTES = "ppwrite|writedefine|ppread|ownerread|authread|no_da|platformcreate"
STARTUP_SECONDS = 10.0
TOOLS = ("swtpm", "swtpm_setup", "swtpm_localca", "tpm2_createek", "tpm2_nvdefine", "openssl")


def require_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(
            f"{', '.join(missing)} not installed: `make tools` installs swtpm, swtpm-tools, tpm2-tools"
        )


@dataclass(frozen=True)
class Manufacturer:
    """A TPM manufacturer's CA: what a site lists (root and intermediate) and what swtpm_localca
    signs EK certificates with (the intermediate's key)."""

    name: str
    directory: Path
    root_pem: str
    intermediate_pem: str

    @property
    def setup_config(self) -> Path:
        return self.directory / "swtpm_setup.conf"

    @property
    def localca_config(self) -> Path:
        return self.directory / "swtpm-localca.conf"

    @property
    def localca_options(self) -> Path:
        return self.directory / "swtpm-localca.options"


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Joinplane test TPM makers"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _ca_certificate(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: x509.Name,
    issuer_key: rsa.RSAPrivateKey,
    path_length: int | None,
) -> x509.Certificate:
    now = datetime.now(UTC)
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
        .sign(issuer_key, hashes.SHA256())
    )


def manufacturer(workdir: Path, name: str = "Acme TPM") -> Manufacturer:
    """A manufacturer named `name`: an RSA root, an intermediate under it that signs EK
    certificates, and swtpm_setup's and swtpm_localca's configuration files, all in `workdir`."""
    require_tools()
    workdir.mkdir(parents=True, exist_ok=True)
    root_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    intermediate_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    root_name, intermediate_name = _name(f"{name} Root CA"), _name(f"{name} EK CA")
    root = _ca_certificate(root_name, root_key, root_name, root_key, None)
    intermediate = _ca_certificate(intermediate_name, intermediate_key, root_name, root_key, 0)
    pem = serialization.Encoding.PEM
    (workdir / "signkey.pem").write_bytes(
        intermediate_key.private_bytes(
            pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
    )
    (workdir / "issuercert.pem").write_bytes(intermediate.public_bytes(pem))
    (workdir / "root.pem").write_bytes(root.public_bytes(pem))
    (workdir / "certserial").write_text("1")
    made = Manufacturer(
        name, workdir, root.public_bytes(pem).decode(), intermediate.public_bytes(pem).decode()
    )
    made.localca_config.write_text(
        f"statedir = {workdir}\n"
        f"signingkey = {workdir / 'signkey.pem'}\n"
        f"issuercert = {workdir / 'issuercert.pem'}\n"
        f"certserial = {workdir / 'certserial'}\n"
    )
    made.localca_options.write_text(
        "--platform-manufacturer Joinplane\n--platform-version 2.1\n--platform-model test\n"
    )
    made.setup_config.write_text(
        f"create_certs_tool = {shutil.which('swtpm_localca')}\n"
        f"create_certs_tool_config = {made.localca_config}\n"
        f"create_certs_tool_options = {made.localca_options}\n"
        "active_pcr_banks = sha256\n"
    )
    return made


@dataclass(frozen=True)
class SoftwareTpm:
    """A running swtpm: its TCTI, the manufacturer that certified its EKs, and its EK certificates
    as the manufacturer issued them (DER), read from the CA's output rather than from the TPM."""

    tcti: str
    port: int
    maker: Manufacturer
    workdir: Path
    rsa_ek_certificate_der: bytes
    ecc_ek_certificate_der: bytes

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) with TPM2TOOLS_TCTI naming this TPM."""
        return {**(os.environ if base is None else base), "TPM2TOOLS_TCTI": self.tcti}

    def tool(self, *args: str, cwd: Path | None = None) -> bytes:
        """A tpm2-tools command against this TPM (its stdout; a failure raises with its stderr)."""
        done = subprocess.run(args, env=self.env(), cwd=cwd or self.workdir, capture_output=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.decode(errors='replace')}")
        return done.stdout

    def ek_certificate_der(self, kind: str) -> bytes:
        """The EK certificate of `kind` ("rsa" or "ecc") as the manufacturer issued it."""
        return self.rsa_ek_certificate_der if kind == "rsa" else self.ecc_ek_certificate_der

    def ek_certificate(self, kind: str) -> x509.Certificate:
        return x509.load_der_x509_certificate(self.ek_certificate_der(kind))

    def ek_spki_sha256(self, kind: str) -> str:
        spki = (
            self.ek_certificate(kind)
            .public_key()
            .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        return hashlib.sha256(spki).hexdigest()

    def transient_handles(self) -> list[str]:
        """The transient objects loaded in the TPM (swtpm has no resource manager: what a client
        leaves loaded stays, and the TPM holds only three)."""
        return _handles(self.tool("tpm2_getcap", "handles-transient"))

    def sessions(self) -> list[str]:
        return _handles(self.tool("tpm2_getcap", "handles-loaded-session")) + _handles(
            self.tool("tpm2_getcap", "handles-saved-session")
        )


def _handles(listing: bytes) -> list[str]:
    return [line.strip().lstrip("- ") for line in listing.decode().splitlines() if line.strip()]


def _free_port_pair() -> int:
    """A port P of 127.0.0.1 free along with P+1 (swtpm's control channel), at the time of asking."""
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port >= 65535:
            continue
        with socket.socket() as second:
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def _run(args: list[str], env: dict[str, str], cwd: Path) -> bytes:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {output}")
    return done.stdout


def _manufacture(maker: Manufacturer, state: Path, workdir: Path, env: dict[str, str]) -> bytes:
    """swtpm_setup's TPM state with its EKs and EK certificates; the RSA EK certificate (DER)."""
    certificates = workdir / "setup-certs"
    certificates.mkdir()
    _run(
        [
            "swtpm_setup",
            "--tpm2",
            "--tpmstate",
            str(state),
            "--create-ek-cert",
            "--create-platform-cert",
            "--config",
            str(maker.setup_config),
            "--overwrite",
            "--write-ek-cert-files",
            str(certificates),
            "--logfile",
            str(workdir / "swtpm_setup.log"),
        ],
        env,
        workdir,
    )
    return (certificates / "ek-rsa2048.crt").read_bytes()


def _serve(state: Path, workdir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """swtpm serving `state` on a free port pair: the process and its command port."""
    for _ in range(5):
        port = _free_port_pair()
        process = subprocess.Popen(
            [
                "swtpm",
                "socket",
                "--tpm2",
                "--tpmstate",
                f"dir={state}",
                "--server",
                f"type=tcp,port={port},bindaddr=127.0.0.1",
                "--ctrl",
                f"type=tcp,port={port + 1},bindaddr=127.0.0.1",
                "--flags",
                "not-need-init,startup-clear",
                "--log",
                f"file={workdir / 'swtpm.log'}",
            ],
            env=env,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return process, port
            except OSError:
                time.sleep(0.02)
        # Lost the ports to someone else between asking and binding, or hung: try other ports.
        process.kill()
        process.wait()
    raise RuntimeError(f"swtpm did not start: {(workdir / 'swtpm.log').read_text(errors='replace')}")


def _certify_ecc_p256_ek(maker: Manufacturer, workdir: Path, env: dict[str, str]) -> bytes:
    """The P-256 EK of the default template certified by `maker` and stored at 0x01c0000a."""
    ek = workdir / "ecc-ek"
    ek.mkdir()
    _run(["tpm2_createek", "-c", "ek.ctx", "-G", "ecc", "-u", "ek.pub"], env, ek)
    try:
        _run(["tpm2_readpublic", "-c", "ek.ctx", "-f", "pem", "-o", "ek.pem"], env, ek)
    finally:
        _run(["tpm2_flushcontext", "-t"], env, ek)
    point = serialization.load_pem_public_key((ek / "ek.pem").read_bytes())
    assert isinstance(point, ec.EllipticCurvePublicKey)
    numbers = point.public_numbers()
    _run(
        [
            "swtpm_localca",
            "--type",
            "ek",
            "--ek",
            f"x={numbers.x:064x},y={numbers.y:064x},id=secp256r1",
            "--dir",
            str(ek),
            *TPM_IDENTITY,
            "--tpm2",
            "--configfile",
            str(maker.localca_config),
            "--optsfile",
            str(maker.localca_options),
            "--logfile",
            str(workdir / "swtpm_localca.log"),
        ],
        env,
        ek,
    )
    der = (ek / "ek.cert").read_bytes()
    index = f"{ECC_EK_CERTIFICATE_INDEX:#010x}"
    _run(
        ["tpm2_nvdefine", "-C", "p", index, "-s", str(len(der)), "-a", EK_CERTIFICATE_NV_ATTRIBUTES],
        env,
        ek,
    )
    _run(["tpm2_nvwrite", "-C", "p", "-i", "ek.cert", index], env, ek)
    return der


@contextmanager
def software_tpm(maker: Manufacturer, workdir: Path) -> Iterator[SoftwareTpm]:
    """A TPM manufactured under `maker`, served over TCP on 127.0.0.1 until the block ends (then
    stopped, its state left in `workdir` for the test's tmp_path to clean)."""
    require_tools()
    workdir.mkdir(parents=True, exist_ok=True)
    state = workdir / "state"
    state.mkdir()
    (workdir / "xdg").mkdir()
    (workdir / "tmp").mkdir()
    env = {**os.environ, "XDG_CONFIG_HOME": str(workdir / "xdg"), "TMPDIR": str(workdir / "tmp")}
    env.pop("TPM2TOOLS_TCTI", None)
    rsa_certificate = _manufacture(maker, state, workdir, env)
    process, port = _serve(state, workdir, env)
    try:
        tcti = f"swtpm:host=127.0.0.1,port={port}"
        ecc_certificate = _certify_ecc_p256_ek(maker, workdir, {**env, "TPM2TOOLS_TCTI": tcti})
        yield SoftwareTpm(tcti, port, maker, workdir, rsa_certificate, ecc_certificate)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

"""The facts a joining machine reports about itself (levers9 JoinMachine's names), from wherever
Linux keeps them.

Every source is optional: a container has no DMI, most machines have no GPU, few have a TPM or
tpm2-tools, and DMI serials are root-only. A missing or unreadable source is skipped and noted in
`Facts.skipped`, never an error: the server's attestors decide what a missing fact means.

`root` re-roots every file read (/etc, /proc, /sys, /dev) so tests can build a fake machine; tools
are found on PATH.
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOOL_TIMEOUT_SECONDS = 15
FINGERPRINT_DOMAIN = b"joinplane-machine-fingerprint-v1"
EK_PERSISTENT_HANDLE = "0x81010001"  # TCG EK Credential Profile: the RSA EK's persistent handle

# Go's GOARCH names: levers9's clients are Go programs and report `runtime.GOARCH`.
_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
}
_UUID = re.compile(r"\{?([0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12})\}?")
_MAC = re.compile(r"[0-9a-f]{2}(?::[0-9a-f]{2}){5}")
_PEM_PUBLIC_KEY = re.compile(r"-----BEGIN PUBLIC KEY-----(.+?)-----END PUBLIC KEY-----", re.S)


@dataclass
class Facts:
    hostname: str = ""
    os: str = ""
    arch: str = ""
    cpu_count: int = 0
    memory_mb: int = 0
    gpus: list[str] = field(default_factory=list)
    gpu_ids: list[str] = field(default_factory=list)
    serial_number: str = ""
    system_uuid: str = ""
    mac_addresses: list[str] = field(default_factory=list)
    ek_sha256: str = ""
    fingerprint: str = ""
    fingerprint_sources: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (fact, why)

    def request_fields(self) -> dict[str, Any]:
        """The `/machines/join` body fields; facts we do not have are left out, not sent empty."""
        body: dict[str, Any] = {
            "machineFingerprint": self.fingerprint,
            "hostname": self.hostname,
            "os": self.os,
            "arch": self.arch,
            "cpuCount": self.cpu_count,
            "memoryMb": self.memory_mb,
            "gpu": self.gpus,
            "gpuCount": len(self.gpus),
            "gpuIds": self.gpu_ids,
        }
        hardware: dict[str, Any] = {}
        if self.serial_number:
            hardware["serialNumber"] = self.serial_number
        if self.system_uuid:
            hardware["systemUuid"] = self.system_uuid
        if self.mac_addresses:
            hardware["macAddresses"] = self.mac_addresses
        if hardware:
            body["hardware"] = hardware
        if self.ek_sha256:
            body["tpm"] = {"ekPublicKeySha256": self.ek_sha256}
        return {k: v for k, v in body.items() if v not in ("", [], 0) or k == "gpuCount"}

    def summary(self) -> str:
        memory = f"{self.memory_mb / 1024:.1f} GiB" if self.memory_mb else "memory unknown"
        gpus = f"{len(self.gpus)} GPU" + ("" if len(self.gpus) == 1 else "s")
        return f"{self.hostname} ({self.os}/{self.arch}, {self.cpu_count} CPUs, {memory}, {gpus})"


def _read(path: Path) -> str | None:
    """A small text file, stripped; None when it is missing or unreadable."""
    try:
        with path.open("rb") as handle:
            data = handle.read(64 * 1024)
    except OSError:
        return None
    return data.decode("utf-8", "replace").strip()


def _why_unreadable(path: Path) -> str:
    if not path.exists():
        return f"{path} does not exist"
    return f"{path} is not readable (root only?)"


def _run(command: list[str]) -> subprocess.CompletedProcess[str] | str:
    """The tool's result, or why it could not run."""
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"{command[0]} did not answer within {TOOL_TIMEOUT_SECONDS} s"
    except OSError as failed:
        return f"{command[0]} could not run: {failed.strerror or failed}"


def _failure(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stderr or result.stdout or "").strip().splitlines()
    return f"{Path(result.args[0]).name} exited {result.returncode}" + (
        f": {lines[0][:120]}" if lines else ""
    )


def memory_mb(root: Path) -> int | None:
    text = _read(root / "proc/meminfo")
    found = re.search(r"^MemTotal:\s+(\d+)\s*kB", text or "", re.M)
    if found:
        return int(found.group(1)) // 1024
    if root == Path("/"):
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
        except (ValueError, OSError, AttributeError):
            return None
    return None


def system_uuid(raw: str) -> str | None:
    """The DMI product UUID when it is one; the server refuses hardware ids that are not."""
    match = _UUID.fullmatch(raw.strip())
    return match.group(1).lower() if match else None


def mac_addresses(root: Path) -> list[str]:
    """MACs of physical interfaces only: virtual ones (bridges, veths, tunnels) get random addresses
    on every boot and would make the same machine look new. Physical means the kernel links the
    interface to a device (`/sys/class/net/<if>/device`)."""
    found: set[str] = set()
    net = root / "sys/class/net"
    try:
        interfaces = sorted(net.iterdir())
    except OSError:
        return []
    for interface in interfaces:
        if not (interface / "device").exists():
            continue
        mac = (_read(interface / "address") or "").lower()
        if not _MAC.fullmatch(mac) or mac == "00:00:00:00:00:00" or int(mac[:2], 16) & 1:
            continue
        found.add(mac)
    return sorted(found)


def gpus() -> tuple[list[str], list[str]] | str:
    """(names, UUIDs) from nvidia-smi, or why there are none."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return "nvidia-smi not found"
    result = _run([tool, "--query-gpu=name,uuid", "--format=csv,noheader"])
    if isinstance(result, str):
        return result
    if result.returncode != 0:
        return _failure(result)
    names, ids = [], []
    for line in result.stdout.splitlines():
        if not line.strip():
            continue
        name, _, uuid = line.partition(",")
        names.append(name.strip())
        if uuid.strip():
            ids.append(uuid.strip())
    return names, ids


def spki_sha256_from_pem(text: str) -> str | None:
    """The EK's name as the server's TPM allow-list spells it: SHA-256 of the SubjectPublicKeyInfo
    DER, hashed as the tool wrote it rather than re-encoded."""
    match = _PEM_PUBLIC_KEY.search(text)
    if match is None:
        return None
    try:
        der = base64.b64decode("".join(match.group(1).split()), validate=True)
    except ValueError:
        return None
    return hashlib.sha256(der).hexdigest()


def tpm_ek_sha256(root: Path) -> str:
    """The EK hash, or raises LookupError with why there is none. The persistent EK is read first;
    without one, tpm2_createek derives it (the EK is a deterministic function of the TPM's seed,
    so a transient one has the same public key)."""
    if not any((root / "dev" / name).exists() for name in ("tpmrm0", "tpm0")):
        raise LookupError("no TPM device (/dev/tpmrm0, /dev/tpm0)")
    readpublic, createek = shutil.which("tpm2_readpublic"), shutil.which("tpm2_createek")
    if readpublic is None and createek is None:
        raise LookupError("tpm2-tools not installed (tpm2_readpublic, tpm2_createek)")
    reasons = []
    with tempfile.TemporaryDirectory(prefix="joinplane-ek-") as scratch:
        pem = Path(scratch) / "ek.pem"
        attempts = []
        if readpublic:
            attempts.append([readpublic, "-c", EK_PERSISTENT_HANDLE, "-f", "pem", "-o", str(pem)])
        if createek:
            attempts.append(
                [createek, "-c", str(Path(scratch) / "ek.ctx"), "-G", "rsa", "-u", str(pem), "-f", "pem"]
            )
        for command in attempts:
            result = _run(command)
            flush = shutil.which("tpm2_flushcontext")
            if command[0] == createek and flush:
                # tpm2_createek leaves the EK loaded: a TPM without a resource manager (/dev/tpm0)
                # holds about three objects, and every join would take one more.
                _run([flush, "-t"])
            if isinstance(result, str):
                reasons.append(result)
                continue
            if result.returncode != 0:
                reasons.append(_failure(result))
                continue
            digest = spki_sha256_from_pem(_read(pem) or "")
            if digest:
                return digest
            reasons.append(f"{Path(command[0]).name} wrote no PEM public key")
    raise LookupError("; ".join(reasons))


def fingerprint(root: Path, product_uuid: str | None, hostname: str) -> tuple[str, list[str]]:
    """SHA-256 over the systemd/D-Bus machine id and the DMI product UUID, whichever exist: both
    survive reboots, and the UUID keeps two clones of one disk image apart. Only the hostname is
    left when neither exists (a bare container), which is weaker and said so in the sources."""
    parts: list[bytes] = [FINGERPRINT_DOMAIN]
    sources: list[str] = []
    for candidate in ("etc/machine-id", "var/lib/dbus/machine-id"):
        machine_id = _read(root / candidate)
        if machine_id:
            parts.append(b"machine-id=" + machine_id.lower().encode())
            sources.append("/" + candidate)
            break
    if product_uuid:
        parts.append(b"product-uuid=" + product_uuid.encode())
        sources.append("/sys/class/dmi/id/product_uuid")
    if not sources:
        parts.append(b"hostname=" + hostname.encode())
        sources.append("hostname")
    return hashlib.sha256(b"\n".join(parts)).hexdigest(), sources


def collect(root: Path = Path("/"), *, tpm_ek: bool = True) -> Facts:
    facts = Facts(
        hostname=socket.gethostname(),
        os=platform.system().lower() or "linux",
        arch=_ARCH.get(platform.machine().lower(), platform.machine().lower()),
        cpu_count=os.cpu_count() or 0,
    )
    memory = memory_mb(root)
    if memory is None:
        facts.skipped.append(("memory", "/proc/meminfo not readable"))
    else:
        facts.memory_mb = memory

    found = gpus()
    if isinstance(found, str):
        facts.skipped.append(("gpus", found))
    else:
        facts.gpus, facts.gpu_ids = found

    dmi = root / "sys/class/dmi/id"
    serial = _read(dmi / "product_serial")
    if serial and serial.isprintable():
        facts.serial_number = serial
    else:
        facts.skipped.append(
            ("serial number", _why_unreadable(dmi / "product_serial") if serial is None else "empty")
        )
    raw_uuid = _read(dmi / "product_uuid")
    uuid = system_uuid(raw_uuid) if raw_uuid else None
    if uuid:
        facts.system_uuid = uuid
    else:
        why = (
            _why_unreadable(dmi / "product_uuid") if raw_uuid is None else f"{raw_uuid[:40]!r} is not a UUID"
        )
        facts.skipped.append(("system UUID", why))

    facts.mac_addresses = mac_addresses(root)
    if not facts.mac_addresses:
        facts.skipped.append(("MAC addresses", "no physical network interface"))

    if tpm_ek:
        try:
            facts.ek_sha256 = tpm_ek_sha256(root)
        except LookupError as missing:
            facts.skipped.append(("TPM EK", str(missing)))

    facts.fingerprint, facts.fingerprint_sources = fingerprint(root, uuid, facts.hostname)
    return facts

"""Fact collection on fake machines: a missing or broken source is skipped, never fatal."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from joinplane_cli import facts


def _tool(bin_dir: Path, name: str, script: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\nPATH=/usr/bin:/bin\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An otherwise empty PATH: only the tools a test puts here exist."""
    directory = tmp_path / "bin"
    directory.mkdir()
    monkeypatch.setenv("PATH", str(directory))
    return directory


def _machine(root: Path, *, machine_id: str | None = "3d1219c7c4c5404aaa1f6d2a48adfda4") -> Path:
    (root / "proc").mkdir(parents=True)
    (root / "proc/meminfo").write_text("MemTotal:       16314772 kB\nMemFree:         1000 kB\n")
    if machine_id is not None:
        (root / "etc").mkdir()
        (root / "etc/machine-id").write_text(machine_id + "\n")
    return root


def _nic(root: Path, name: str, mac: str, *, physical: bool = True) -> None:
    interface = root / "sys/class/net" / name
    interface.mkdir(parents=True)
    (interface / "address").write_text(mac + "\n")
    if physical:
        (interface / "device").mkdir()


def test_a_bare_container_reports_what_it_has_and_says_what_it_skipped(tmp_path: Path, bin_dir: Path) -> None:
    # Given no DMI, no NICs, no GPU tool, no TPM
    root = _machine(tmp_path / "root")

    # When
    found = facts.collect(root)

    # Then
    assert found.memory_mb == 16314772 // 1024
    assert found.cpu_count >= 1 and found.hostname and found.os and found.arch
    skipped = dict(found.skipped)
    assert skipped["gpus"] == "nvidia-smi not found"
    assert "does not exist" in skipped["serial number"]
    assert "does not exist" in skipped["system UUID"]
    assert skipped["MAC addresses"] == "no physical network interface"
    assert skipped["TPM EK"].startswith("no TPM device")
    body = found.request_fields()
    assert "hardware" not in body and "tpm" not in body
    assert body["gpuCount"] == 0 and "gpu" not in body
    assert body["machineFingerprint"] == found.fingerprint


def test_unreadable_dmi_and_a_broken_driver_are_skipped(tmp_path: Path, bin_dir: Path) -> None:
    # Given DMI files that cannot be read (a directory stands in for a root-only file: tests run as
    # root, who reads anything) and an nvidia-smi that cannot talk to its driver
    root = _machine(tmp_path / "root")
    dmi = root / "sys/class/dmi/id"
    (dmi / "product_serial").mkdir(parents=True)
    (dmi / "product_uuid").write_text("Not Settable\n")
    _tool(
        bin_dir,
        "nvidia-smi",
        "echo 'NVIDIA-SMI has failed because it could not talk to the driver' >&2; exit 9\n",
    )

    # When
    found = facts.collect(root)

    # Then
    skipped = dict(found.skipped)
    assert "not readable" in skipped["serial number"]
    assert skipped["system UUID"] == "'Not Settable' is not a UUID"
    assert (
        skipped["gpus"]
        == "nvidia-smi exited 9: NVIDIA-SMI has failed because it could not talk to the driver"
    )
    assert found.serial_number == "" and found.system_uuid == ""


def test_a_full_machine_reports_dmi_gpus_physical_macs_and_the_fingerprint(
    tmp_path: Path, bin_dir: Path
) -> None:
    # Given
    root = _machine(tmp_path / "root")
    dmi = root / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_serial").write_text("SN-12345\n")
    (dmi / "product_uuid").write_text("4C4C4544-0042-3510-8052-B2C04F4E4E32\n")
    _nic(root, "eno1", "3C:EC:EF:01:02:03")
    _nic(root, "eno2", "3c:ec:ef:01:02:04")
    _nic(root, "docker0", "02:42:ac:11:00:01", physical=False)
    _nic(root, "lo", "00:00:00:00:00:00", physical=False)
    _tool(
        bin_dir,
        "nvidia-smi",
        'echo "NVIDIA A100-SXM4-80GB, GPU-1111"\necho "NVIDIA A100-SXM4-80GB, GPU-2222"\n',
    )

    # When
    found = facts.collect(root)
    again = facts.collect(root)

    # Then
    body = found.request_fields()
    assert body["gpu"] == ["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"]
    assert body["gpuIds"] == ["GPU-1111", "GPU-2222"] and body["gpuCount"] == 2
    assert body["hardware"] == {
        "serialNumber": "SN-12345",
        "systemUuid": "4c4c4544-0042-3510-8052-b2c04f4e4e32",
        "macAddresses": ["3c:ec:ef:01:02:03", "3c:ec:ef:01:02:04"],
    }
    assert found.fingerprint_sources == ["/etc/machine-id", "/sys/class/dmi/id/product_uuid"]
    assert found.fingerprint == again.fingerprint  # stable: nothing in it changes across reboots
    expected = hashlib.sha256(
        b"joinplane-machine-fingerprint-v1\nmachine-id=3d1219c7c4c5404aaa1f6d2a48adfda4\n"
        b"product-uuid=4c4c4544-0042-3510-8052-b2c04f4e4e32"
    ).hexdigest()
    assert found.fingerprint == expected


def test_the_fingerprint_falls_back_to_dbus_then_hostname(tmp_path: Path) -> None:
    # Given
    dbus = tmp_path / "dbus"
    (dbus / "var/lib/dbus").mkdir(parents=True)
    (dbus / "var/lib/dbus/machine-id").write_text("abc\n")

    # When
    from_dbus = facts.fingerprint(dbus, None, "host")
    bare = facts.fingerprint(tmp_path / "empty", None, "host")

    # Then
    assert from_dbus[1] == ["/var/lib/dbus/machine-id"]
    assert bare[1] == ["hostname"]
    assert from_dbus[0] != bare[0]


def _ek_pem() -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return pem.decode(), hashlib.sha256(der).hexdigest()


def _tpm_tool(bin_dir: Path, name: str, pem: str, output_flag: str) -> None:
    """A tpm2-tools stand-in that writes `pem` to the file after `output_flag`."""
    (bin_dir / f"{name}.pem").write_text(pem)
    _tool(
        bin_dir,
        name,
        f'while [ $# -gt 0 ]; do if [ "$1" = "{output_flag}" ]; then cp "{bin_dir}/{name}.pem" "$2"; fi; '
        "shift; done\n",
    )


def test_the_tpm_ek_hash_comes_from_tpm2_readpublic(tmp_path: Path, bin_dir: Path) -> None:
    # Given a TPM device and tpm2_readpublic reading the persistent EK
    root = _machine(tmp_path / "root")
    (root / "dev").mkdir()
    (root / "dev/tpmrm0").write_text("")
    pem, digest = _ek_pem()
    _tpm_tool(bin_dir, "tpm2_readpublic", pem, "-o")

    # When
    found = facts.collect(root)

    # Then
    assert found.ek_sha256 == digest
    assert found.request_fields()["tpm"] == {"ekPublicKeySha256": digest}


def test_without_a_persistent_ek_tpm2_createek_derives_it(tmp_path: Path, bin_dir: Path) -> None:
    # Given
    root = _machine(tmp_path / "root")
    (root / "dev").mkdir()
    (root / "dev/tpm0").write_text("")
    _tool(bin_dir, "tpm2_readpublic", "echo 'ERROR: the handle is not persistent' >&2; exit 1\n")
    pem, digest = _ek_pem()
    _tpm_tool(bin_dir, "tpm2_createek", pem, "-u")

    # When
    found = facts.collect(root)

    # Then
    assert found.ek_sha256 == digest


def test_a_tpm_without_tools_or_with_failing_tools_is_skipped(tmp_path: Path, bin_dir: Path) -> None:
    # Given a TPM device but no tools, then tools that fail
    root = _machine(tmp_path / "root")
    (root / "dev").mkdir()
    (root / "dev/tpmrm0").write_text("")

    # When
    without_tools = dict(facts.collect(root).skipped)["TPM EK"]
    _tool(bin_dir, "tpm2_readpublic", "echo 'no resource manager' >&2; exit 1\n")
    failing = dict(facts.collect(root).skipped)["TPM EK"]

    # Then
    assert without_tools.startswith("tpm2-tools not installed")
    assert failing == "tpm2_readpublic exited 1: no resource manager"


def test_the_real_machine_can_always_be_collected() -> None:
    # When (whatever this test machine lacks)
    found = facts.collect()

    # Then
    assert found.fingerprint and len(found.fingerprint) == 64
    assert os.cpu_count() == found.cpu_count

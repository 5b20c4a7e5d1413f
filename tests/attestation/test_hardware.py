"""Placeholder hardware identifiers and canonical spellings: pure functions, table-driven."""

from __future__ import annotations

import pytest

from joinplane import hardware
from joinplane.hardware import normalize_mac, normalize_serial, normalize_uuid, placeholder_reasons


@pytest.mark.parametrize(
    "serial",
    [
        "To Be Filled By O.E.M.",
        "to be filled by o.e.m.",
        "  TO BE FILLED BY OEM ",
        "Default string",
        "DEFAULT  STRING",
        "Default_string",
        "System Serial Number",
        "Chassis Serial Number",
        "Base Board Serial Number",
        "Type2 - Board Serial Number",
        "0123456789",
        "123456789",
        "1234567890",
        "Not Specified",
        "None",
        "none",
        "N/A",
        "n/a",
        "OEM",
        "O.E.M.",
        "Unknown",
        "",
        "   ",
        "\t",
        "0000000",
        "XXXXXXXX",
        "xxxxxxxx",
        "0",
        "FFFFFFFFFFFF",
        "- - - -",
    ],
)
def test_placeholder_serials_are_reported(serial: str) -> None:
    [(field, why)] = placeholder_reasons(serial, None, [])
    assert field == "serialNumber" and why


@pytest.mark.parametrize(
    "serial", ["PF2ABCDE", "CZ12345678", "J9X7Y2", "VMware-56 4d 12", "1A2B3C4D", "00000001"]
)
def test_real_serials_are_not_placeholders(serial: str) -> None:
    assert placeholder_reasons(serial, None, []) == []


@pytest.mark.parametrize(
    "system_uuid",
    [
        "00000000-0000-0000-0000-000000000000",
        "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
        "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "03000200-0400-0500-0006-000700080009",
        "{03000200-0400-0500-0006-000700080009}",
        " 03000200-0400-0500-0006-000700080009 ",
        "03000200040005000006000700080009",
        # The same AMI default read with the other byte order (SMBIOS before 2.6)
        "00020003-0004-0005-0006-000700080009",
        "03020100-0504-0706-0809-0A0B0C0D0E0F",
        "00010203-0405-0607-0809-0a0b0c0d0e0f",
        "10000000-0000-8000-0040-000000000000",
        "12345678-1234-5678-90AB-CDDEEFAABBCC",
        "11111111-1111-1111-1111-111111111111",
        "Not Settable",
        "Not Present",
        "",
        "not-a-uuid",
    ],
)
def test_placeholder_uuids_are_reported(system_uuid: str) -> None:
    [(field, why)] = placeholder_reasons(None, system_uuid, [])
    assert field == "systemUuid" and why


@pytest.mark.parametrize(
    "system_uuid",
    [
        "4c4c4544-0042-3510-8052-b3c04f4b4e32",
        "{226E380E-67D1-4214-9868-5383A79AF0B8}",
        "ec2a1b2c3d4e5f60718293a4b5c6d7e8",
    ],
)
def test_real_uuids_are_not_placeholders(system_uuid: str) -> None:
    assert placeholder_reasons(None, system_uuid, []) == []


def test_each_placeholder_mac_is_named_by_its_position() -> None:
    reasons = placeholder_reasons(
        None,
        None,
        [
            "aa:bb:cc:dd:ee:f0",
            "00:00:00:00:00:00",
            "FF-FF-FF-FF-FF-FF",
            " ffffffffffff ",
            "01:00:5e:00:00:fb",
            "x",
        ],
    )
    assert [field for field, _ in reasons] == [
        "macAddresses.1",
        "macAddresses.2",
        "macAddresses.3",
        "macAddresses.4",
        "macAddresses.5",
    ]


def test_every_field_is_reported_together_and_absent_fields_are_not_reasons() -> None:
    reasons = placeholder_reasons(
        "Default string", "00000000-0000-0000-0000-000000000000", ["00:00:00:00:00:00"]
    )
    assert [field for field, _ in reasons] == ["serialNumber", "systemUuid", "macAddresses.0"]
    assert placeholder_reasons(None, None, []) == []
    assert (
        placeholder_reasons("PF2ABCDE", "226e380e-67d1-4214-9868-5383a79af0b8", ["aa:bb:cc:dd:ee:f0"]) == []
    )


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [(" pf2abcde ", "PF2ABCDE"), ("Pf2-Ab Cd", "PF2-AB CD"), ("x", "X")],
)
def test_serials_are_trimmed_and_uppercased(raw: str, canonical: str) -> None:
    assert normalize_serial(raw) == canonical


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("226E380E-67D1-4214-9868-5383A79AF0B8", "226e380e-67d1-4214-9868-5383a79af0b8"),
        ("{226e380e-67d1-4214-9868-5383a79af0b8}", "226e380e-67d1-4214-9868-5383a79af0b8"),
        (" {226E380E-67D1-4214-9868-5383A79AF0B8} ", "226e380e-67d1-4214-9868-5383a79af0b8"),
        ("226E380E67D1421498685383A79AF0B8", "226e380e-67d1-4214-9868-5383a79af0b8"),
    ],
)
def test_uuids_become_lowercase_8_4_4_4_12(raw: str, canonical: str) -> None:
    assert normalize_uuid(raw) == canonical


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("AA:BB:CC:DD:EE:F0", "aa:bb:cc:dd:ee:f0"),
        ("aa-bb-cc-dd-ee-f0", "aa:bb:cc:dd:ee:f0"),
        ("AABBCCDDEEF0", "aa:bb:cc:dd:ee:f0"),
        (" aa:bb:cc:dd:ee:f0\n", "aa:bb:cc:dd:ee:f0"),
    ],
)
def test_macs_become_lowercase_colon_separated(raw: str, canonical: str) -> None:
    assert normalize_mac(raw) == canonical


@pytest.mark.parametrize(
    ("normalize", "raw"),
    [
        (normalize_serial, ""),
        (normalize_serial, "  "),
        (normalize_serial, "AB\x00CD"),
        (normalize_serial, "AB\x85CD"),
        (normalize_uuid, "226e380e-67d1-4214-9868-5383a79af0b"),
        (normalize_uuid, "226e380e-67d1-4214-9868-5383a79af0b8-"),
        (normalize_uuid, "226e380e67d1-4214-9868-5383a79af0b8"),
        (normalize_uuid, "{226e380e-67d1-4214-9868-5383a79af0b8"),
        (normalize_uuid, "g26e380e-67d1-4214-9868-5383a79af0b8"),
        (normalize_mac, "aa:bb:cc:dd:ee"),
        (normalize_mac, "aa:bb-cc:dd:ee:f0"),
        (normalize_mac, "aabb.ccdd.eef0"),
        (normalize_mac, "gg:bb:cc:dd:ee:f0"),
        (normalize_mac, "aa:bb:cc:dd:ee:f0:11"),
    ],
)
def test_malformed_identifiers_are_refused(normalize: object, raw: str) -> None:
    assert callable(normalize)
    with pytest.raises(ValueError):
        normalize(raw)


def test_byte_order_twins_are_computed_not_typed() -> None:
    # The SMBIOS 2.6 mixed-endian swap maps the AMI default onto the spelling old boards print.
    assert hardware._swap_mixed_endian("03000200-0400-0500-0006-000700080009") == (
        "00020003-0004-0005-0006-000700080009"
    )

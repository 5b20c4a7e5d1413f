"""Bad input to /machines/join: a clear rpcStatus, nothing stored, no token use taken."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from joinplane.dal import dynamo
from joinplane.dal.tokens import token_key
from tests.support import join
from tests.support.table import all_items
from tests.support.tpm_blobs import SoftTpm


def uses_left(token: dict) -> int:
    item = dynamo.get(*token_key(token["tokenId"]))
    assert item is not None
    return int(item["usesRemaining"])


def tampered(csr_pem: str) -> str:
    """The CSR with one byte of its signature flipped."""
    body = "".join(line for line in csr_pem.strip().splitlines() if "-----" not in line)
    der = bytearray(base64.b64decode(body))
    der[-5] ^= 0x01
    encoded = base64.b64encode(bytes(der)).decode()
    lines = [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
    return (
        "-----BEGIN CERTIFICATE REQUEST-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE REQUEST-----\n"
    )


def signed_by_another_key(tmp_path: Path, machine) -> str:
    """A CSR carrying one key's public key but signed by another (no proof of possession)."""
    other = tmp_path / "other.key"
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(other)],
        check=True,
        capture_output=True,
    )
    # Build with the other key, then graft the first key's SubjectPublicKeyInfo into it.
    theirs = subprocess.run(
        ["openssl", "req", "-new", "-key", str(other), "-subj", "/CN=x", "-outform", "DER"],
        check=True,
        capture_output=True,
    ).stdout
    mine = subprocess.run(
        ["openssl", "pkey", "-in", str(machine.key), "-pubout", "-outform", "DER"],
        check=True,
        capture_output=True,
    ).stdout
    their_spki = subprocess.run(
        ["openssl", "pkey", "-in", str(other), "-pubout", "-outform", "DER"], check=True, capture_output=True
    ).stdout
    assert len(mine) == len(their_spki) and their_spki in theirs
    forged = theirs.replace(their_spki, mine)
    encoded = base64.b64encode(forged).decode()
    lines = [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
    return (
        "-----BEGIN CERTIFICATE REQUEST-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE REQUEST-----\n"
    )


@pytest.mark.parametrize(
    ("case", "status", "code", "says"),
    [
        ("garbage csr", 400, 3, "csr"),
        ("tampered signature", 400, 3, "signature"),
        ("signed by another key", 400, 3, "signature"),
        ("rsa 1024", 400, 3, "1024"),
        ("cpuCount wrong type", 400, 3, "cpuCount"),
        ("cpuCount not a number", 400, 3, "cpuCount"),
        ("memoryMb negative", 400, 3, "memoryMb"),
        ("unknown field", 400, 3, "colour"),
        ("duplicate field by proto name", 400, 3, "cpuCount"),
        ("not json", 400, 3, "JSON"),
        ("not an object", 400, 3, "object"),
        ("bad ek hash", 400, 3, "ekPublicKeySha256"),
        ("no identity", 400, 3, "machineFingerprint"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    case, status, code, says, make_token, machine_factory, tmp_path: Path
) -> None:
    token = make_token()
    machine = machine_factory()
    body: dict = {"joinToken": token["token"], "csr": machine.csr}
    raw = None
    if case == "garbage csr":
        body["csr"] = "-----BEGIN CERTIFICATE REQUEST-----\nbm90IGEgY3Ny\n-----END CERTIFICATE REQUEST-----\n"
    elif case == "tampered signature":
        body["csr"] = tampered(machine.csr)
    elif case == "signed by another key":
        body["csr"] = signed_by_another_key(tmp_path, machine)
    elif case == "rsa 1024":
        body["csr"] = machine_factory("rsa1024").csr
    elif case == "cpuCount wrong type":
        body["cpuCount"] = True
    elif case == "cpuCount not a number":
        body["cpuCount"] = "sixty-four"
    elif case == "memoryMb negative":
        body["memoryMb"] = "-1"
    elif case == "unknown field":
        body["colour"] = "red"
    elif case == "duplicate field by proto name":
        body.update(cpuCount=1, cpu_count=2)
    elif case == "not json":
        raw = b'{"joinToken": '
    elif case == "not an object":
        raw = b'["joinToken"]'
    elif case == "bad ek hash":
        body["tpm"] = {"ekPublicKeySha256": "zz"}
    elif case == "no identity":
        body.pop("csr")
    before = all_items()
    reply = join(body, raw=raw)
    assert (reply.status, reply.body["code"]) == (status, code), reply.body
    assert says in reply.body["message"], reply.body
    assert reply.body["details"] == [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "VALIDATION_FAILED",
            "domain": "joinplane",
            "metadata": {},
        }
    ]
    assert all_items() == before
    assert uses_left(token) == 1


def test_a_one_mebibyte_body_is_413_before_parsing(make_token) -> None:
    token = make_token()
    before = all_items()
    reply = join(
        None, raw=json.dumps({"joinToken": token["token"], "hostname": "x" * (1024 * 1024)}).encode()
    )
    assert (reply.status, reply.body["code"], reply.reason) == (413, 8, "PAYLOAD_TOO_LARGE")
    assert all_items() == before


def _tpm_case(case: str, tpm: SoftTpm) -> dict:
    """The `tpm` of a join that gets its TPM fields wrong, one way each."""
    fields: dict = tpm.presented()
    if case == "ekPublic not base64":
        fields["ekPublic"] = "not base64!"
    elif case == "ekPublic unpadded":
        fields["ekPublic"] = fields["ekPublic"].rstrip("=") + "A"
    elif case == "ekPublic oversize":
        fields["ekPublic"] = base64.b64encode(bytes(1100)).decode()
    elif case == "ekPublic garbage":
        fields["ekPublic"] = base64.b64encode(b"\x00\x04garb").decode()
    elif case == "akPublic alone":
        fields.pop("ekPublic")
    elif case == "an AK for an EK":
        fields["ekPublic"] = fields["akPublic"]
    elif case == "activation alone":
        fields = {"activation": {"secret": base64.b64encode(bytes(32)).decode()}}
    elif case == "activation not base64":
        fields["activation"] = {"secret": "%%%"}
    elif case == "activation unknown field":
        fields["activation"] = {"secret": "", "nonce": "1"}
    elif case == "ek hash of another key":
        fields["ekPublicKeySha256"] = "ab" * 32
    return fields


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("ekPublic not base64", "tpm.ekPublic"),
        ("ekPublic unpadded", "tpm.ekPublic"),
        ("ekPublic oversize", "tpm.ekPublic"),
        ("ekPublic garbage", "tpm.ekPublic"),
        ("akPublic alone", "together"),
        ("an AK for an EK", "tpm.ekPublic"),
        ("activation alone", "together"),
        ("activation not base64", "tpm.activation.secret"),
        ("activation unknown field", "nonce"),
        ("ek hash of another key", "ekPublicKeySha256"),
        ("no csr", "csr"),
    ],
)
def test_bad_tpm_input_is_refused_and_changes_nothing(case, says, make_token, machine_factory) -> None:
    # Given a token with one use, When a TPM join gets its TPM fields wrong
    token, machine, tpm = make_token(), machine_factory(), SoftTpm.make()
    body: dict = {"joinToken": token["token"], "csr": machine.csr, "tpm": _tpm_case(case, tpm)}
    if case == "no csr":
        body = {"joinToken": token["token"], "machineFingerprint": "m-1", "tpm": tpm.presented()}
    before = all_items()
    reply = join(body)
    # Then it is refused naming the field, nothing is stored (no challenge either), no use is taken
    assert (reply.status, reply.body["code"], reply.reason) == (400, 3, "VALIDATION_FAILED"), reply.body
    assert says in reply.body["message"], reply.body
    assert all_items() == before
    assert uses_left(token) == 1

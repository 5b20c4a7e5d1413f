"""The machine's TPM 2.0, driven through tpm2-tools as an operator would drive it by hand.

`joinplane join --tpm` proves to the server that this machine's TPM holds the endorsement key (EK)
it presents, by TPM 2.0 credential activation: the client sends the EK and a fresh attestation key
(AK) made under it; the server encrypts a secret to the EK, bound to the AK's name; only the TPM
holding both can recover it (`tpm2_activatecredential`), and the client sends it back in a request
signed by the machine's key.

The TPM is the one `TPM2TOOLS_TCTI` names (`device:/dev/tpmrm0`, the kernel's resource manager,
when unset). A TPM reached without a resource manager (a bare /dev/tpm0, swtpm over TCP) keeps
whatever a client leaves loaded, and holds only about three objects: every step here ends by
flushing the transient objects and sessions it loaded (`tpm2_flushcontext`), also when it fails.

EK certificates are read from NV where the TCG EK Credential Profile puts them (RSA-2048 at
0x01c00002, ECC P-256 at 0x01c0000a). The EK itself is re-created from the TPM's endorsement seed
with the profile's default template (`tpm2_createek`): the same key on every call, the one its
certificate certifies.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joinplane_cli.exits import CliError, Exit

DEFAULT_TCTI = "device:/dev/tpmrm0"
KINDS = ("rsa", "ecc")
EK_CERTIFICATE_INDEX = {"rsa": 0x01C00002, "ecc": 0x01C0000A}
# How each kind's AK signs (tpm2_createak -G KIND -g sha256 -s SCHEME).
AK_SCHEME = {"rsa": "rsassa", "ecc": "ecdsa"}
TOOL_TIMEOUT_SECONDS = 60
# tpm2-tools' credential file (`tpm2_activatecredential -i`): magic, version, then the blobs.
CREDENTIAL_MAGIC, CREDENTIAL_VERSION = 0xBADCC0DE, 1
MAX_BLOB_BYTES = 4096

# TPM 2.0 Part 2 algorithm ids, as far as an EK's TPMT_PUBLIC needs them.
_ALG_RSA, _ALG_ECC, _ALG_NULL, _ALG_ECDAA = 0x0001, 0x0023, 0x0010, 0x001A
# tpm2-tools' log lines: `ERROR:tcti:src/...c:614:Func() message`.
_LOG_LINE = re.compile(r"^(?:ERROR|WARNING):(?P<layer>\w+):\S+:\d+:\S+\(\)\s*(?P<message>.*?)\s*$")
_PROPERTY = re.compile(r'^(TPM2_PT_\w+):\s*\n\s+raw:\s*(\S+)(?:\s*\n\s+value:\s*"?(.*?)"?\s*$)?', re.M)
# X.509 attributes of TCG's EK certificate subject alternative name (EK Credential Profile).
TCG_MANUFACTURER, TCG_MODEL, TCG_VERSION = "2.23.133.2.1", "2.23.133.2.2", "2.23.133.2.3"


class TpmUnavailable(CliError):
    """This machine's TPM cannot be used: tpm2-tools missing, no TPM at the TCTI, a step failing."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Exit.TPM_UNAVAILABLE)


def tcti(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return environ.get("TPM2TOOLS_TCTI") or DEFAULT_TCTI


# --- TPM 2.0 structures ----------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise ValueError("truncated TPM structure")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def sized(self) -> bytes:
        return self.take(self.u16())


def public_key_der(tpm2b_public: bytes) -> bytes:
    """The SubjectPublicKeyInfo DER of the RSA or ECC key in a TPM2B_PUBLIC (`tpm2_createek -u`)."""
    outer = _Reader(tpm2b_public)
    reader = _Reader(outer.sized())
    if outer.at != len(tpm2b_public):
        raise ValueError("trailing bytes after the TPM2B_PUBLIC")
    try:
        return _spki(reader)
    except ValueError as wrong:  # a point off its curve, a modulus of zero
        raise ValueError(str(wrong) or "not a usable public key") from None


def _spki(reader: _Reader) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    kind = reader.u16()
    reader.u16()  # nameAlg
    reader.u32()  # objectAttributes
    reader.sized()  # authPolicy
    if reader.u16() != _ALG_NULL:  # symmetric: keyBits and mode follow a real algorithm
        reader.take(4)
    scheme = reader.u16()
    if kind == _ALG_RSA:
        if scheme != _ALG_NULL and scheme != 0x0015:  # every RSA scheme but RSAES names a hash
            reader.u16()
        reader.u16()  # keyBits
        exponent = reader.u32() or 65537
        modulus = int.from_bytes(reader.sized(), "big")
        key: Any = rsa.RSAPublicNumbers(exponent, modulus).public_key()
    elif kind == _ALG_ECC:
        if scheme != _ALG_NULL:
            reader.take(4 if scheme == _ALG_ECDAA else 2)
        curves: dict[int, ec.EllipticCurve] = {
            0x0003: ec.SECP256R1(),
            0x0004: ec.SECP384R1(),
            0x0005: ec.SECP521R1(),
        }
        curve = curves.get(reader.u16())
        if reader.u16() != _ALG_NULL:  # kdf
            reader.u16()
        x, y = int.from_bytes(reader.sized(), "big"), int.from_bytes(reader.sized(), "big")
        if curve is None:
            raise ValueError("an ECC key on a curve other than NIST P-256, P-384 or P-521")
        key = ec.EllipticCurvePublicNumbers(x, y, curve).public_key()
    else:
        raise ValueError(f"a key of TPM algorithm {kind:#06x}, neither RSA nor ECC")
    der: bytes = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return der


def credential_file(credential_blob: bytes, encrypted_secret: bytes) -> bytes:
    """tpm2-tools' credential file from the server's TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET
    (each with its size prefix, as sent)."""
    for name, blob in (("credentialBlob", credential_blob), ("encryptedSecret", encrypted_secret)):
        if len(blob) < 2 or int.from_bytes(blob[:2], "big") != len(blob) - 2:
            raise ValueError(f"{name} is not a size-prefixed TPM2B")
    return struct.pack(">II", CREDENTIAL_MAGIC, CREDENTIAL_VERSION) + credential_blob + encrypted_secret


def _blob(challenge: Mapping[str, Any], name: str) -> bytes:
    value = challenge.get(name)
    if not isinstance(value, str) or len(value) > MAX_BLOB_BYTES * 2:
        raise ValueError(f"{name} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ValueError(f"{name} is not base64") from None


def challenge_credential(challenge: Any) -> bytes:
    """The credential file for a `tpmChallenge` of the join answer; ValueError when it is unusable."""
    if not isinstance(challenge, dict):
        raise ValueError("tpmChallenge is not an object")
    return credential_file(_blob(challenge, "credentialBlob"), _blob(challenge, "encryptedSecret"))


# --- what the TPM holds ----------------------------------------------------------------------


@dataclass(frozen=True)
class Endorsement:
    """An endorsement key: its TPM2B_PUBLIC, its SubjectPublicKeyInfo, and its certificate (DER)
    when the TPM holds one."""

    kind: str
    public: bytes
    spki: bytes
    certificate: bytes | None

    @property
    def sha256(self) -> str:
        """The EK's name on the server's allow-list: lowercase hex SHA-256 of its SPKI DER."""
        return hashlib.sha256(self.spki).hexdigest()

    def certificate_pem(self) -> str | None:
        if self.certificate is None:
            return None
        encoded = base64.b64encode(self.certificate).decode()
        lines = [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
        return "-----BEGIN CERTIFICATE-----\n" + "\n".join(lines) + "\n-----END CERTIFICATE-----\n"


@dataclass(frozen=True)
class Attestation:
    """An EK and an AK made under it, ready for a join: `fields` is the join body's `tpm`."""

    endorsement: Endorsement
    ak_public: bytes
    ak_name: bytes

    def fields(self) -> dict[str, str]:
        fields = {
            "ekPublic": base64.b64encode(self.endorsement.public).decode(),
            "akPublic": base64.b64encode(self.ak_public).decode(),
            "ekPublicKeySha256": self.endorsement.sha256,
        }
        pem = self.endorsement.certificate_pem()
        if pem is not None and _is_certificate(self.endorsement.certificate):
            fields["ekCertificatePem"] = pem
        return fields


def _is_certificate(der: bytes | None) -> bool:
    """Whether an NV index holds a certificate at all: other bytes are not sent as one."""
    from cryptography import x509

    try:
        x509.load_der_x509_certificate(der or b"")
    except ValueError:
        return False
    return True


class Tpm:
    """The TPM at one TCTI, with a private scratch directory for the tools' files (contexts,
    public areas, the credential): `with Tpm.open() as tpm:`."""

    def __init__(self, tcti_name: str, scratch: Path) -> None:
        self.tcti = tcti_name
        self.scratch = scratch

    @classmethod
    @contextlib.contextmanager
    def open(cls, tcti_name: str | None = None) -> Iterator[Tpm]:
        if shutil.which("tpm2_createek") is None:
            raise TpmUnavailable(
                "tpm2-tools is not installed (no tpm2_createek on PATH): install it "
                "(Debian and Ubuntu: apt-get install tpm2-tools) or join without --tpm"
            )
        with tempfile.TemporaryDirectory(prefix="joinplane-tpm-") as scratch:
            tpm = cls(tcti_name or tcti(), Path(scratch))
            tpm.properties()  # a TPM that does not answer is said so before anything else
            yield tpm

    # --- running the tools ----------------------------------------------------------------

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        environment = {**os.environ, "TPM2TOOLS_TCTI": self.tcti}
        try:
            return subprocess.run(
                list(args),
                cwd=self.scratch,
                env=environment,
                capture_output=True,
                timeout=TOOL_TIMEOUT_SECONDS,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise TpmUnavailable(
                f"{args[0]} did not finish within {TOOL_TIMEOUT_SECONDS} s at TCTI {self.tcti}"
            ) from None
        except OSError as failed:
            raise TpmUnavailable(f"{args[0]} could not run: {failed.strerror or failed}") from None

    def tool(self, *args: str, doing: str) -> bytes:
        """A tpm2-tools command's stdout; a failure raises TpmUnavailable saying what was being done."""
        done = self._run(*args)
        if done.returncode == 0:
            return done.stdout
        raise TpmUnavailable(self._failure(done.stderr.decode(errors="replace"), doing))

    def _failure(self, stderr: str, doing: str) -> str:
        if "Could not load tcti" in stderr:
            # The transport's own reason (no such device, connection refused) is the useful line.
            reasons = [
                m["message"] for m in map(_LOG_LINE.match, stderr.splitlines()) if m and m["layer"] == "tcti"
            ]
            why = reasons[0] if reasons else "the TCTI could not be loaded"
            return (
                f"no TPM answers at TCTI {self.tcti} ({why}); set TPM2TOOLS_TCTI to this machine's TPM "
                "(default device:/dev/tpmrm0, which needs read-write access: root or the tss group)"
            )
        # tpm2-tools ends with "ERROR: Unable to run <tool>"; the line before it says why.
        lines = [
            line.strip().removeprefix("ERROR: ") for line in stderr.splitlines() if line.startswith("ERROR: ")
        ]
        reasons = [line for line in lines if not line.startswith("Unable to run")] or lines
        last = reasons[-1] if reasons else (stderr.strip().splitlines() or ["no output"])[-1]
        return f"the TPM at {self.tcti} failed to {doing}: {last[:200]}"

    def flush(self) -> None:
        """Flush every transient object and session: a TPM without a resource manager keeps them,
        and a fourth object would not fit. Best effort: a flush that fails must not hide the
        failure that led here."""
        for flag in ("-t", "-l", "-s"):
            with contextlib.suppress(TpmUnavailable):
                self._run("tpm2_flushcontext", flag)

    @contextlib.contextmanager
    def _flushed(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.flush()

    # --- what the TPM says about itself ---------------------------------------------------

    def properties(self) -> dict[str, str]:
        """The fixed properties the TPM reports (TPM2_PT_MANUFACTURER, vendor strings, firmware):
        each property's value when it has one, else its raw number."""
        text = self.tool("tpm2_getcap", "properties-fixed", doing="report its properties").decode(
            errors="replace"
        )
        return {name: value or raw for name, raw, value in _PROPERTY.findall(text)}

    def nv_indices(self) -> set[int]:
        text = self.tool("tpm2_nvreadpublic", doing="list its NV indices").decode(errors="replace")
        return {int(found, 16) for found in re.findall(r"^(0x[0-9a-fA-F]+):", text, re.M)}

    def ek_certificate(self, kind: str, indices: set[int] | None = None) -> bytes | None:
        """The EK certificate (DER) of `kind` in NV, or None when the TPM has none there."""
        index = EK_CERTIFICATE_INDEX[kind]
        if index not in (self.nv_indices() if indices is None else indices):
            return None
        out = self.scratch / f"ek-{kind}.crt"
        self.tool("tpm2_nvread", "-C", "o", "-o", str(out), f"{index:#010x}", doing=f"read NV {index:#010x}")
        data = out.read_bytes()
        # NV indices are sized generously: the certificate is its DER SEQUENCE, padding dropped.
        return _der_sequence(data)

    def endorsement(self, kind: str, indices: set[int] | None = None) -> Endorsement:
        with self._flushed():
            self.tool(
                "tpm2_createek", "-c", f"ek-{kind}.ctx", "-G", kind, "-u", f"ek-{kind}.pub",
                doing=f"create its {kind.upper()} endorsement key",
            )  # fmt: skip
        public = (self.scratch / f"ek-{kind}.pub").read_bytes()
        try:
            spki = public_key_der(public)
        except ValueError as wrong:
            raise TpmUnavailable(f"the TPM's {kind.upper()} EK is not usable: {wrong}") from None
        return Endorsement(kind, public, spki, self.ek_certificate(kind, indices))

    def attestation(self, kind: str) -> Attestation:
        """The EK of `kind` and an AK under it, their contexts kept in the scratch directory for
        `activate` (a saved context reloads after the flush, until the TPM restarts)."""
        endorsement = self.endorsement(kind)
        with self._flushed():
            self.tool(
                "tpm2_createak", "-C", f"ek-{kind}.ctx", "-c", "ak.ctx", "-G", kind, "-g", "sha256",
                "-s", AK_SCHEME[kind], "-u", "ak.pub", "-n", "ak.name",
                doing="create an attestation key under its EK",
            )  # fmt: skip
        return Attestation(
            endorsement, (self.scratch / "ak.pub").read_bytes(), (self.scratch / "ak.name").read_bytes()
        )

    def activate(self, attestation: Attestation, credential: bytes) -> bytes:
        """The secret the TPM recovers from `credential` (tpm2-tools' credential file) with the
        attestation's AK and EK, authorised by the EK's policy (PolicySecret of the endorsement
        hierarchy). A TPM that is not the one holding both keys cannot."""
        ek = f"ek-{attestation.endorsement.kind}.ctx"
        (self.scratch / "credential").write_bytes(credential)
        secret = self.scratch / "secret"
        secret.unlink(missing_ok=True)
        with self._flushed():
            self.tool(
                "tpm2_startauthsession", "--policy-session", "-S", "session.ctx", doing="start a session"
            )
            self.tool("tpm2_policysecret", "-S", "session.ctx", "-c", "e", doing="authorise its EK")
            self.tool(
                "tpm2_activatecredential", "-c", "ak.ctx", "-C", ek, "-i", "credential", "-o", "secret",
                "-P", "session:session.ctx", doing="activate the server's credential",
            )  # fmt: skip
        return secret.read_bytes()


def _der_sequence(data: bytes) -> bytes:
    """The leading DER SEQUENCE of `data` (an NV index holds the certificate, maybe padded)."""
    if len(data) < 2 or data[0] != 0x30:
        return data
    length, start = data[1], 2
    if length & 0x80:
        octets = length & 0x7F
        length, start = int.from_bytes(data[2 : 2 + octets], "big"), 2 + octets
    return data[: start + length]


# --- choosing an EK --------------------------------------------------------------------------


def choose_kind(tpm: Tpm, wanted: str) -> str:
    """`rsa` or `ecc` as asked; for `auto`, the first kind whose EK certificate the TPM holds (a
    manufacturer-listed EK can then be admitted without an allow-list entry), else RSA."""
    if wanted in KINDS:
        return wanted
    indices = tpm.nv_indices()
    for kind in KINDS:
        if EK_CERTIFICATE_INDEX[kind] in indices:
            return kind
    return "rsa"


# --- `joinplane tpm identify` ----------------------------------------------------------------


def certificate_details(der: bytes, spki: bytes) -> dict[str, Any]:
    """What an operator checks in an EK certificate before listing it or its manufacturer."""
    from cryptography import x509

    certificate = x509.load_der_x509_certificate(der)
    tcg: dict[str, str] = {}
    with contextlib.suppress(x509.ExtensionNotFound, ValueError):
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        for directory in names.get_values_for_type(x509.DirectoryName):
            for attribute in directory:
                tcg[attribute.oid.dotted_string] = str(attribute.value)
    return {
        "issuer": certificate.issuer.rfc4514_string(),
        "subject": certificate.subject.rfc4514_string(),
        "serialNumber": format(certificate.serial_number, "x"),
        "notBefore": certificate.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "notAfter": certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sha256": hashlib.sha256(der).hexdigest(),
        "tpmManufacturer": tcg.get(TCG_MANUFACTURER, ""),
        "tpmModel": tcg.get(TCG_MODEL, ""),
        "tpmVersion": tcg.get(TCG_VERSION, ""),
        "certifiesThisEk": _public_key_bits(_certificate_spki(der)) == _public_key_bits(spki),
    }


def _tlv(data: bytes, at: int) -> tuple[int, int, int]:
    """The DER element at `at`: its tag, where its contents start, and where it ends."""
    tag, length, start = data[at], data[at + 1], at + 2
    if length & 0x80:
        octets = length & 0x7F
        length, start = int.from_bytes(data[start : start + octets], "big"), start + octets
    if start + length > len(data):
        raise ValueError("truncated DER")
    return tag, start, start + length


def _certificate_spki(der: bytes) -> bytes:
    """The SubjectPublicKeyInfo of a certificate, as encoded in it (read from the DER rather than
    through a key object: an EK certificate may label an RSA key id-RSAES-OAEP, which key loaders
    refuse)."""
    _, tbs, _ = _tlv(der, 0)  # Certificate
    _, at, _ = _tlv(der, tbs)  # tbsCertificate's contents
    if der[at] == 0xA0:  # [0] version
        at = _tlv(der, at)[2]
    for _ in range(5):  # serialNumber, signature, issuer, validity, subject
        at = _tlv(der, at)[2]
    return der[at : _tlv(der, at)[2]]


def _public_key_bits(spki: bytes) -> bytes:
    """The subjectPublicKey BIT STRING of a SubjectPublicKeyInfo (the key, whatever its label)."""
    _, at, _ = _tlv(spki, 0)
    _, start, end = _tlv(spki, _tlv(spki, at)[2])
    return spki[start:end]


def _details_or_problem(endorsement: Endorsement) -> dict[str, Any] | None:
    if endorsement.certificate is None:
        return None
    try:
        return certificate_details(endorsement.certificate, endorsement.spki)
    except (ValueError, IndexError) as wrong:
        index = EK_CERTIFICATE_INDEX[endorsement.kind]
        return {"problem": f"NV {index:#010x} holds no X.509 certificate ({wrong})"}


def _firmware(properties: Mapping[str, str]) -> str:
    """The two 32-bit halves of the firmware version as the vendor's tools print them."""
    try:
        halves = [int(properties[f"TPM2_PT_FIRMWARE_VERSION_{n}"], 16) for n in (1, 2)]
    except (KeyError, ValueError):
        return ""
    return f"{halves[0]:08x}.{halves[1]:08x}"


def identify(tpm: Tpm, kinds: tuple[str, ...] = KINDS) -> dict[str, Any]:
    properties = tpm.properties()
    vendor = " ".join(
        v for n in range(1, 5) if (v := properties.get(f"TPM2_PT_VENDOR_STRING_{n}", "")) and v != "0x0"
    )
    indices = tpm.nv_indices()
    keys = []
    for kind in kinds:
        endorsement = tpm.endorsement(kind, indices)
        keys.append(
            {
                "kind": kind,
                "ekPublicKeySha256": endorsement.sha256,
                "certificateIndex": f"{EK_CERTIFICATE_INDEX[kind]:#010x}",
                "certificate": _details_or_problem(endorsement),
                "certificatePem": endorsement.certificate_pem(),
            }
        )
    return {
        "tcti": tpm.tcti,
        "manufacturer": properties.get("TPM2_PT_MANUFACTURER", ""),
        "vendor": vendor,
        "firmwareVersion": _firmware(properties),
        "endorsementKeys": keys,
    }

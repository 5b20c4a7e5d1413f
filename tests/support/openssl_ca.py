"""An organisation's PKI run with the openssl CLI, as its operators would: a self-signed root, and
`openssl x509 -req` signing whatever CSR it is handed with the extensions the operator chose."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from joinplane import aws, ca_keys
from tests.support.csr import openssl

# What an organisation's root gives an intermediate meant to issue end-entity certificates.
INTERMEDIATE = (
    "basicConstraints=critical,CA:true,pathlen:0",
    "keyUsage=critical,keyCertSign,cRLSign",
    "subjectKeyIdentifier=hash",
    "authorityKeyIdentifier=keyid:always",
)
ROOT = (
    "basicConstraints=critical,CA:true",
    "keyUsage=critical,keyCertSign,cRLSign",
    "subjectKeyIdentifier=hash",
)
# `openssl req -newkey` arguments for a CA's key.
P256 = ("ec", "-pkeyopt", "ec_paramgen_curve:P-256")


@dataclass(frozen=True)
class Authority:
    """A CA of the organisation: its certificate and key, on disk."""

    name: str
    certificate: Path
    key: Path

    @property
    def pem(self) -> str:
        return self.certificate.read_text()


class OrgPki:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    def root(
        self,
        name: str = "root",
        extensions: tuple[str, ...] = ROOT,
        days: int = 3650,
        *,
        newkey: tuple[str, ...] = P256,
        digest: str | None = "sha256",
    ) -> Authority:
        """A self-signed root with just `extensions` (an empty config adds none of its own), a key
        made by `-newkey <newkey>` (P-256 unless told) and signed with `digest` (None: the key's own
        algorithm has none, as Ed25519)."""
        key, certificate = self.workdir / f"{name}.key", self.workdir / f"{name}.pem"
        config = self.workdir / "empty.cnf"
        config.write_text("")
        addext = [arg for line in extensions for arg in ("-addext", line)]
        openssl(
            "req", "-x509", "-newkey", *newkey, *([f"-{digest}"] if digest else []), "-nodes",
            "-subj", f"/O=Example Org/CN={name}", "-days", str(days), "-keyout", str(key),
            "-out", str(certificate), "-config", str(config), *addext,
        )  # fmt: skip
        return Authority(name, certificate, key)

    def sign(
        self,
        issuer: Authority,
        csr_pem: str,
        name: str,
        extensions: tuple[str, ...] = INTERMEDIATE,
        days: int = 365,
        *,
        digest: str | None = "sha256",
    ) -> Authority:
        """`csr_pem` signed by `issuer` with `extensions` (the CSR's own are not copied; openssl 3 adds
        the key identifiers unless told `subjectKeyIdentifier=none`) and `digest` (None for an
        Ed25519 issuer, which has its own). The key path is
        where the key would be if the organisation held it: for a KMS key's CSR, it never does.
        An extension line may name a section (`nameConstraints=permitted;dirName:dn`) given as
        further lines (`[dn]`, `O=Example Org`)."""
        csr = self.workdir / f"{name}.csr"
        csr.write_text(csr_pem)
        extfile = self.workdir / f"{name}.ext"
        extfile.write_text("\n".join(extensions) + "\n")
        certificate = self.workdir / f"{name}.pem"
        openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(issuer.certificate), "-CAkey", str(issuer.key),
            "-CAcreateserial", "-days", str(days), *([f"-{digest}"] if digest else []),
            "-extfile", str(extfile), "-out", str(certificate),
        )  # fmt: skip
        return Authority(name, certificate, self.workdir / f"{name}.key")

    def intermediate_with_key(
        self,
        issuer: Authority,
        name: str,
        extensions: tuple[str, ...] = INTERMEDIATE,
        days: int = 365,
        *,
        newkey: tuple[str, ...] = P256,
        digest: str = "sha256",
    ) -> Authority:
        """An intermediate whose key openssl makes (`-newkey <newkey>`, P-256 unless told; the
        organisation keeps it), signed by `issuer` with `digest`."""
        key = self.workdir / f"{name}.key"
        csr_pem = openssl(
            "req", "-new", "-newkey", *newkey, "-nodes",
            "-subj", f"/O=Example Org/CN={name}", "-keyout", str(key),
        ).stdout  # fmt: skip
        return self.sign(issuer, csr_pem, name, extensions, days, digest=digest)

    def verify(self, root: Authority, untrusted: list[str], leaf_pem: str, *, auth_level: int = -1) -> str:
        """`openssl verify -purpose sslclient -CAfile root -untrusted <chain> leaf`: its output, OK or not.
        `auth_level` 2 checks keys and signatures as a TLS server at OpenSSL's default security level
        does (`openssl verify` alone checks neither)."""
        chain = self.workdir / "untrusted.pem"
        chain.write_text("".join(untrusted))
        leaf = self.workdir / "leaf.pem"
        leaf.write_text(leaf_pem)
        done = openssl(
            "verify", "-purpose", "sslclient", "-auth_level", str(auth_level), "-CAfile",
            str(root.certificate), "-untrusted", str(chain), str(leaf), check=False,
        )  # fmt: skip
        return done.stdout + done.stderr


def kms_signing_key() -> tuple[str, ec.EllipticCurvePublicKey]:
    """A new P-256 signing key in (moto's) KMS, as createCsr would make one: its id and public key."""
    client = aws.client("kms")
    key_id = str(client.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"])
    public_key = serialization.load_der_public_key(bytes(client.get_public_key(KeyId=key_id)["PublicKey"]))
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    return key_id, public_key


# A machine's SPIFFE ID in the default trust domain, as a pool of tenant acme issues them.
MACHINE_SPIFFE_ID = "spiffe://joinplane.internal/tenant/acme/pool/p1/machine/mach_01upstream"


def machine_certificate(
    issuing_ca: x509.Certificate,
    key_id: str,
    public_key: ec.EllipticCurvePublicKey,
    spiffe_id: str = MACHINE_SPIFFE_ID,
) -> str:
    """A machine's client certificate issued by the pool CA `issuing_ca` (KMS key `key_id`), shaped as
    joinplane.machine_certificates shapes one (`CN=<machine id>`, its SPIFFE ID the only SAN), and
    signed through the same ca_keys.sign_certificate."""
    machine_key = ec.generate_private_key(ec.SECP256R1()).public_key()
    now = datetime.now(UTC).replace(microsecond=0)
    ski = issuing_ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    machine_id = spiffe_id.rsplit("/", 1)[1]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, machine_id)]))
        .issuer_name(issuing_ca.subject)
        .public_key(machine_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(spiffe_id)]), critical=False
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    )
    signed = ca_keys.sign_certificate(builder, key_id, public_key)
    return signed.public_bytes(serialization.Encoding.PEM).decode()

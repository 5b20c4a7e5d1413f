"""Machine certificates: what a machine's key is certified as, signed by its pool's active CA.

Everything in the certificate but the key is decided here (subject, SPIFFE ID, key usage,
lifetime, CRL distribution point), never taken from the CSR (joinplane.csr_checks). The pool's CA
and its bundle come from joinplane.ca, the signature from its KMS key (joinplane.ca_keys): a warm
issuance makes one KMS call (Sign) and nothing else. In the `intermediate` signing mode the
container's intermediate signs instead (joinplane.intermediates): a warm issuance makes no AWS call.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from joinplane import clock, intermediates
from joinplane.ca import (
    CLOCK_SKEW,
    MAX_LIFETIME_SECONDS,
    MIN_LIFETIME_SECONDS,
    PoolCa,
    check_ids,
    forget,
    pool_authorities,
    serial_number,
    spiffe_id,
)
from joinplane.ca_keys import intermediate_mode, sign_certificate
from joinplane.errors import POOL_CA_EXPIRED, FailedPrecondition, InvalidArgument, Unavailable

if TYPE_CHECKING:
    from joinplane.csr_checks import Csr

# The machine id is also the last segment of the SPIFFE ID, as it is: no `:` (`mach_<ulid>` has none).
_MACHINE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class IssuedCertificate(NamedTuple):
    certificate_pem: str  # the machine's, followed by the intermediate that signed it (if any)
    ca_certificates_pem: str  # the pool's bundle: the issuing CA first
    expires_at: datetime
    serial: str
    ca_id: str  # the CA that signed it


def issue_machine_certificate(
    *,
    tenant_id: str,
    site_id: str,
    pool_id: str,
    machine_id: str,
    csr: Csr,
    lifetime_seconds: int,
    crl_base_url: str = "",
) -> IssuedCertificate:
    """The machine's certificate from the pool's active CA; its CRL distribution point is that CA's
    CRL under `crl_base_url` (the API's public base URL; none when it is not known)."""
    check_ids(tenant_id, pool_id)
    if not _MACHINE_ID.fullmatch(machine_id):
        raise InvalidArgument("machineId is not a valid machine id")
    # Before the pool CA: a deployment without a usable trust domain creates no CA either.
    uri = spiffe_id(tenant_id, pool_id, machine_id)
    for _ in range(2):
        pool_ca = pool_authorities(tenant_id, site_id, pool_id)
        try:
            return _issue(pool_ca, machine_id, uri, csr, lifetime_seconds, crl_base_url)
        except intermediates.CaRotated:
            # This container's view of the pool CA was older than a rotation: read it again.
            forget(tenant_id, pool_id)
    raise Unavailable("the pool's CA kept changing; retry")


def _issue(
    pool_ca: PoolCa, machine_id: str, uri: str, csr: Csr, lifetime_seconds: int, crl_base_url: str
) -> IssuedCertificate:
    active = pool_ca.authorities.active
    pool_id = active.pool_id
    crl = crl_url(crl_base_url, active.ca_id) if crl_base_url else ""
    intermediate = None
    if intermediate_mode() and intermediates.can_sign_below(pool_ca):
        intermediate = intermediates.current(pool_ca, crl)

    # X.509 times have whole seconds; truncating here makes expires_at equal the certificate's.
    now = clock.now().replace(microsecond=0)
    lifetime = timedelta(seconds=min(max(int(lifetime_seconds), MIN_LIFETIME_SECONDS), MAX_LIFETIME_SECONDS))
    # A certificate outliving its CA (or a CA above it) would fail verification anyway; say so
    # instead of lying.
    not_after = min(now + lifetime, pool_ca.not_after)
    if intermediate is not None:
        # Verifiers check every certificate of the path: one that outlived its intermediate would fail.
        not_after = min(not_after, intermediate.not_after)
    if not_after - now < timedelta(seconds=MIN_LIFETIME_SECONDS):
        raise FailedPrecondition(
            f"the CA of pool {pool_id} expires at {clock.rfc3339(not_after)}", reason=POOL_CA_EXPIRED
        )

    key_usage_encipherment = isinstance(csr.public_key, rsa.RSAPublicKey)
    serial = serial_number()
    issuer = pool_ca.certificate if intermediate is None else intermediate.certificate
    ca_ski = issuer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, machine_id)]))
        .issuer_name(issuer.subject)
        .public_key(csr.public_key)
        .serial_number(serial)
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=key_usage_encipherment,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri)]),
            # RFC 5280: the SAN is critical when the subject DN is empty; ours names the machine.
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(csr.public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    )
    # A machine certificate names its issuer's CRL: the pool CA's, or the intermediate's (signed
    # once when it was made, since its key is gone with its container: docs/pki.md).
    if intermediate is not None and crl_base_url:
        crl = crl_url(crl_base_url, intermediate.intermediate_id)
    if crl:
        builder = builder.add_extension(
            x509.CRLDistributionPoints(
                [
                    x509.DistributionPoint(
                        full_name=[x509.UniformResourceIdentifier(crl)],
                        relative_name=None,
                        reasons=None,
                        crl_issuer=None,
                    )
                ]
            ),
            critical=False,
        )
    if intermediate is None:
        certificate = sign_certificate(builder, active.key_id, pool_ca.public_key)
        chain = ""
    else:
        certificate = intermediates.sign(intermediate, builder)
        # The machine presents its certificate followed by the intermediate, as a TLS client sends
        # its chain; verifiers keep trusting the pool's bundle alone.
        chain = intermediate.pem
    return IssuedCertificate(
        certificate_pem=certificate.public_bytes(serialization.Encoding.PEM).decode() + chain,
        ca_certificates_pem=pool_ca.bundle_pem,
        expires_at=not_after,
        serial=format(serial, "x"),
        ca_id=active.ca_id,
    )


def crl_url(base_url: str, ca_id: str) -> str:
    """Where the CRL of CA `ca_id` is served (joinplane.crl, `GET /crl/<caId>`)."""
    return f"{base_url.rstrip('/')}/crl/{ca_id}"

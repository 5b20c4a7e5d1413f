"""POST /api/compute/certificateAuthorities/{get,rotate,createCsr,importCertificate}; GET /crl/{caId}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import authorities, operator_api
from joinplane.http import BinaryResponse, HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("CertificateAuthoritiesFunction")


@routes.operation("certificateAuthorities.get")
def get(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.get(*operator_api.parse(request, authorities.CertificateAuthorityRef))


@routes.operation("certificateAuthorities.rotate")
def rotate(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.rotate(*operator_api.parse(request, authorities.CertificateAuthorityRef))


@routes.operation("certificateAuthorities.createCsr")
def create_csr(request: HttpRequest) -> views.CertificateAuthorityRequest:
    return authorities.create_csr(*operator_api.parse(request, authorities.CertificateAuthorityRef))


@routes.operation("certificateAuthorities.importCertificate")
def import_certificate(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.import_certificate(*operator_api.parse(request, authorities.ImportCertificate))


@routes.operation("certificateAuthorities.crl")
def crl(request: HttpRequest) -> BinaryResponse:
    # Loaded here: it loads `cryptography`, which the operator routes reach only through the CA.
    from joinplane import crl

    served = crl.served(request.path_parameters.get("caId", ""))
    return BinaryResponse(
        200, "application/pkix-crl", served.der, {"cache-control": f"public, max-age={served.max_age}"}
    )


lambda_handler = routes.handle

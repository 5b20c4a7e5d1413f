"""POST /api/compute/certificateAuthorities/{get,rotate,activate,createCsr,importCertificate};
GET /crl/{caId}; GET /bundle/{caId}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import authorities, operator_api
from joinplane.http import BinaryResponse, HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("CertificateAuthoritiesFunction")


@routes.operation("certificateAuthorities.get")
def get(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.get(
        *operator_api.parse(request, authorities.CertificateAuthorityRef), base_url=request.base_url
    )


@routes.operation("certificateAuthorities.rotate")
def rotate(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.rotate(*operator_api.parse(request, authorities.Rotate), base_url=request.base_url)


@routes.operation("certificateAuthorities.activate")
def activate(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.activate(*operator_api.parse(request, authorities.Activate), base_url=request.base_url)


@routes.operation("certificateAuthorities.createCsr")
def create_csr(request: HttpRequest) -> views.CertificateAuthorityRequest:
    return authorities.create_csr(*operator_api.parse(request, authorities.CertificateAuthorityRef))


@routes.operation("certificateAuthorities.importCertificate")
def import_certificate(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.import_certificate(
        *operator_api.parse(request, authorities.ImportCertificate), base_url=request.base_url
    )


@routes.operation("certificateAuthorities.crl")
def crl(request: HttpRequest) -> BinaryResponse:
    # Loaded here: it loads `cryptography`, which the operator routes reach only through the CA.
    from joinplane import crl

    served = crl.served(request.path_parameters.get("caId", ""))
    return BinaryResponse(
        200, "application/pkix-crl", served.der, {"cache-control": f"public, max-age={served.max_age}"}
    )


@routes.operation("certificateAuthorities.bundle")
def bundle(request: HttpRequest) -> BinaryResponse:
    # A verifier may poll it: cacheable for as long as the shortest propagation period leaves room.
    pem = authorities.served_bundle(request.path_parameters.get("caId", ""))
    return BinaryResponse(
        200,
        "application/pem-certificate-chain",
        pem.encode(),
        {"cache-control": f"public, max-age={authorities.BUNDLE_MAX_AGE_SECONDS}"},
    )


lambda_handler = routes.handle

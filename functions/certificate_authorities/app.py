"""POST /api/compute/certificateAuthorities/{get,rotate}"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import authorities, operator_api
from joinplane.http import HttpRequest

if TYPE_CHECKING:
    from joinplane import views

routes = operator_api.router("CertificateAuthoritiesFunction")


@routes.operation("certificateAuthorities.get")
def get(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.get(*operator_api.parse(request, authorities.CertificateAuthorityRef))


@routes.operation("certificateAuthorities.rotate")
def rotate(request: HttpRequest) -> views.CertificateAuthorities:
    return authorities.rotate(*operator_api.parse(request, authorities.CertificateAuthorityRef))


lambda_handler = routes.handle

"""A certificate's CRL as a verifier gets it: the URL its CRL distribution point names, fetched from
the route that serves it (as API Gateway delivers `GET /crl/{caId}`: no authorizer), as PEM for openssl."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509

from tests.support import LambdaContext, http_event, route_handler
from tests.support.csr import openssl

CRL_ROUTE = "/crl/{caId}"


def crl_url_of(certificate_pem: str) -> str:
    certificate = x509.load_pem_x509_certificate(certificate_pem.encode())
    points = certificate.extensions.get_extension_for_class(x509.CRLDistributionPoints).value
    (point,) = points
    assert point.full_name is not None
    (name,) = point.full_name
    return str(name.value)


def get_crl(path: str) -> dict[str, Any]:
    """GET `path` as API Gateway delivers `GET /crl/{caId}`: no authorizer, the route's parameters."""
    event = http_event(path, b"")
    event["routeKey"] = event["requestContext"]["routeKey"] = f"GET {CRL_ROUTE}"
    event["requestContext"]["http"]["method"] = "GET"
    event["pathParameters"] = {"caId": path.rsplit("/", 1)[1]}
    return route_handler(CRL_ROUTE, "GET")(event, LambdaContext())


def fetched_crl(certificate_pem: str, directory: Path) -> Path:
    """The CRL the certificate's distribution point names, fetched and written as PEM (crl.pem)."""
    answer = get_crl(urlsplit(crl_url_of(certificate_pem)).path)
    assert answer["statusCode"] == 200, answer
    assert answer["headers"]["content-type"] == "application/pkix-crl" and answer["isBase64Encoded"]
    (directory / "crl.der").write_bytes(base64.b64decode(answer["body"]))
    openssl("crl", "-inform", "DER", "-in", str(directory / "crl.der"), "-out", str(directory / "crl.pem"))
    return directory / "crl.pem"

"""A certificate's CRL as a verifier gets it: the URL its CRL distribution point names, fetched from
the route that serves it (as API Gateway delivers `GET /crl/{caId}`: no authorizer), as PEM for
openssl; and a pool's bundle, fetched from its public URL (`GET /bundle/{caId}`) the same way."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509

from tests.support import LambdaContext, http_event, route_handler
from tests.support.csr import openssl

CRL_ROUTE = "/crl/{caId}"
BUNDLE_ROUTE = "/bundle/{caId}"


def crl_url_of(certificate_pem: str) -> str:
    certificate = x509.load_pem_x509_certificate(certificate_pem.encode())
    points = certificate.extensions.get_extension_for_class(x509.CRLDistributionPoints).value
    (point,) = points
    assert point.full_name is not None
    (name,) = point.full_name
    return str(name.value)


def get_crl(path: str) -> dict[str, Any]:
    """GET `path` as API Gateway delivers `GET /crl/{caId}`: no authorizer, the route's parameters."""
    return get_public(CRL_ROUTE, path)


def get_bundle(url_or_path: str) -> dict[str, Any]:
    """GET a pool's public bundle (`bundleUrl`, or its path) as API Gateway delivers `GET /bundle/{caId}`."""
    return get_public(BUNDLE_ROUTE, urlsplit(url_or_path).path)


def fetched_bundle(url: str) -> str:
    """The PEM bundle a verifier fetches from `url` (certificateAuthorities/get's bundleUrl)."""
    answer = get_bundle(url)
    assert answer["statusCode"] == 200, answer
    return base64.b64decode(answer["body"]).decode() if answer["isBase64Encoded"] else str(answer["body"])


def get_public(route: str, path: str) -> dict[str, Any]:
    """GET `path` of a `GET <route>` with one `{caId}` parameter and no authorizer."""
    event = http_event(path, b"")
    event["routeKey"] = event["requestContext"]["routeKey"] = f"GET {route}"
    event["requestContext"]["http"]["method"] = "GET"
    event["pathParameters"] = {"caId": path.rsplit("/", 1)[1]}
    return route_handler(route, "GET")(event, LambdaContext())


def fetched_crl(certificate_pem: str, directory: Path) -> Path:
    """The CRL the certificate's distribution point names, fetched and written as PEM (crl.pem)."""
    answer = get_crl(urlsplit(crl_url_of(certificate_pem)).path)
    assert answer["statusCode"] == 200, answer
    assert answer["headers"]["content-type"] == "application/pkix-crl" and answer["isBase64Encoded"]
    (directory / "crl.der").write_bytes(base64.b64decode(answer["body"]))
    openssl("crl", "-inform", "DER", "-in", str(directory / "crl.der"), "-out", str(directory / "crl.pem"))
    return directory / "crl.pem"

"""Signed sts:GetCallerIdentity requests for the AWS IAM join method, made as the CLI makes them
(botocore's SigV4), with AWS credentials that the emulator's STS hands out for a role."""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

BODY = "Action=GetCallerIdentity&Version=2011-06-15"
HOST = "sts.us-east-1.amazonaws.com"


def role_credentials(endpoint_url: str, role_arn: str, session: str) -> Any:
    """Credentials of a session of `role_arn` (the emulator's STS names its account and role)."""
    import boto3
    from botocore.credentials import Credentials

    sts = boto3.client(
        "sts",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="AKIA" + uuid.uuid4().hex[:16].upper(),
        aws_secret_access_key="testing",
    )
    given = sts.assume_role(RoleArn=role_arn, RoleSessionName=session)["Credentials"]
    return Credentials(given["AccessKeyId"], given["SecretAccessKey"], given["SessionToken"])


def spki_sha256(csr_pem: str) -> str:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key = x509.load_pem_x509_csr(csr_pem.encode()).public_key()
    return hashlib.sha256(
        key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    ).hexdigest()


def signed_request(
    credentials: Any,
    *,
    spki: str,
    t_ms: int | None = None,
    host: str = HOST,
    region: str = "us-east-1",
    service: str = "sts",
    body: str = BODY,
    sign_binding: bool = True,
) -> dict[str, Any]:
    """`awsIam`'s headers and body: GetCallerIdentity signed for `host`, bound to the key `spki`
    at `t_ms` (now by default). `sign_binding=False` adds the binding header after signing."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    binding = f"t={t_ms if t_ms is not None else int(time.time() * 1000)},spki={spki}"
    headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    if sign_binding:
        headers["X-Joinplane-Join-Binding"] = binding
    request = AWSRequest(method="POST", url=f"https://{host}/", data=body.encode(), headers=headers)
    SigV4Auth(credentials, service, region).add_auth(request)
    signed = dict(request.headers.items())
    signed["Host"] = host
    if not sign_binding:
        signed["X-Joinplane-Join-Binding"] = binding
    return {"headers": signed, "body": body}

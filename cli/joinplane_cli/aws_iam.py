"""`--aws-iam`: the machine's AWS identity in place of a join token's secret (docs/aws.md).

Each join call carries an `sts:GetCallerIdentity` request signed (SigV4) with the machine's AWS
credentials, found by botocore's standard chain: the environment, the shared config and credentials
files (profiles, SSO, assume-role), ECS and EKS container credentials (Pod Identity, IRSA's web
identity) and EC2 instance metadata with IMDSv2. The signed `X-Joinplane-Join-Binding` header
names the machine key's SubjectPublicKeyInfo hash and the time, so the request is worth nothing
for another key or later than a few minutes. The request is never sent to AWS from here: the
server forwards it to STS.

botocore is the optional extra `joinplane-cli[aws]` (machines outside AWS do not carry it), and
is imported only when `--aws-iam` is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from joinplane_cli import skew
from joinplane_cli.exits import CliError, Exit

BODY = "Action=GetCallerIdentity&Version=2011-06-15"
BINDING_HEADER = "X-Joinplane-Join-Binding"
INSTALL = (
    "--aws-iam needs botocore: pip install 'joinplane-cli[aws]' "
    "(from this repository: pip install './cli[aws]')"
)
DEFAULT_REGION = "us-east-1"


def sts_host(region: str, *, fips: bool = False) -> str:
    """The regional STS endpoint the request is signed for (the server's allow-list has each)."""
    if region.startswith("cn-"):
        return f"sts.{region}.amazonaws.com.cn"
    return f"sts-fips.{region}.amazonaws.com" if fips else f"sts.{region}.amazonaws.com"


def check_url(url: str) -> None:
    """Whoever reads a signed GetCallerIdentity on the way can replay it for 15 minutes to any
    service that takes one without a binding of its own (Vault without its server-ID header): it
    travels only over HTTPS, or within this machine (the local runtime)."""
    if not skew.may_follow(url):
        raise CliError(
            f"--aws-iam sends a signed AWS request: use an https:// --url (or a loopback one), not {url}",
            Exit.USAGE,
        )


class Signer:
    """The machine's AWS credentials and region, found once; `sign` makes each call's request."""

    def __init__(self) -> None:
        try:
            import botocore.session
        except ImportError:
            raise CliError(INSTALL, Exit.USAGE) from None
        from botocore.exceptions import BotoCoreError

        session = botocore.session.get_session()
        try:
            credentials = session.get_credentials()
        except BotoCoreError as failed:  # e.g. AWS_PROFILE names no profile
            raise CliError(f"--aws-iam: {failed}", Exit.USAGE) from None
        if credentials is None:
            raise CliError(
                "--aws-iam found no AWS credentials (environment, shared config, container or "
                "instance metadata): give the machine an instance profile or role, or set "
                "AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                Exit.USAGE,
            )
        self._credentials = credentials
        # AWS_REGION first, as Lambda, ECS and EKS set it and the other SDKs read it (botocore reads
        # only AWS_DEFAULT_REGION and the shared config).
        self.region = os.environ.get("AWS_REGION") or session.get_config_variable("region") or DEFAULT_REGION
        fips = str(session.get_config_variable("use_fips_endpoint") or "").lower() == "true"
        self.host = sts_host(self.region, fips=fips)

    def sign(self, spki_sha256: str, t_ms: int) -> dict[str, Any]:
        """`awsIam`'s headers and body, bound to the key `spki_sha256` at `t_ms` (Unix ms)."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.exceptions import BotoCoreError

        request = AWSRequest(
            method="POST",
            url=f"https://{self.host}/",
            data=BODY.encode(),
            headers={
                "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
                BINDING_HEADER: f"t={t_ms},spki={spki_sha256}",
            },
        )
        try:
            # Refreshable credentials (instance metadata, containers) are renewed here when due.
            frozen = self._credentials.get_frozen_credentials()
            SigV4Auth(frozen, "sts", self.region).add_auth(request)
        except BotoCoreError as failed:
            raise CliError(f"--aws-iam could not sign with the machine's AWS credentials: {failed}") from None
        headers = dict(request.headers.items())
        headers["Host"] = self.host
        return {"headers": headers, "body": BODY}

    def joining(self, body: dict[str, Any], token_id: str, spki_sha256: str) -> Callable[[], dict[str, Any]]:
        """The join's body, made again for each call (retries too): the binding's time must be fresh,
        on the server's clock as last learnt (joinplane_cli.skew)."""

        def signed() -> dict[str, Any]:
            return {**body, "awsIam": {"tokenId": token_id, **self.sign(spki_sha256, int(skew.now() * 1000))}}

        return signed

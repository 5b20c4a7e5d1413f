"""The first platform-admin API key of a deployed stack (every later key is made with the API).

    python -m joinplane_local.bootstrap --stack-name joinplane-dev --tenant acme

Reads the stack's TableName output, writes one `*@platform` key for the tenant with your AWS
credentials, and prints the secret once. Keep it like a root password; revoke it with
`POST /api/compute/apiKeys/revoke` once you have made narrower keys.
"""

from __future__ import annotations

import argparse
import os
import sys

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from joinplane import aws, container
from joinplane_local.seed import install_admin_key

PROG = "python -m joinplane_local.bootstrap"


class BootstrapError(Exception):
    """What stopped the bootstrap, in one line for the person at the terminal."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--stack-name", required=True)
    parser.add_argument("--tenant", required=True, help="the tenant the key belongs to")
    parser.add_argument(
        "--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )
    args = parser.parse_args(argv)
    if args.region:
        os.environ["AWS_DEFAULT_REGION"] = args.region
    try:
        secret, api_url = bootstrap(args.stack_name, args.tenant)
    except BootstrapError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    print(secret)
    print(f"API: {api_url}", file=sys.stderr)
    return 0


def bootstrap(stack_name: str, tenant: str) -> tuple[str, str]:
    """The new key's secret and the stack's API URL; AWS's refusals become one line each."""
    try:
        stacks = aws.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
        if "TableName" not in outputs:
            raise BootstrapError(
                f"stack {stack_name} has no TableName output: is it a Joinplane stack, and fully deployed?"
            )
        os.environ["TABLE_NAME"] = outputs["TableName"]
        container.reset(keep_clients=True)  # the table's name changed, not the endpoint
        secret = install_admin_key(tenant, None, f"bootstrap admin of {stack_name}")
    except NoRegionError:
        raise BootstrapError("no AWS region: pass --region, or set AWS_REGION") from None
    except NoCredentialsError:
        raise BootstrapError(
            "no AWS credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), "
            "or run `aws configure`"
        ) from None
    except ClientError as error:
        raise BootstrapError(f"AWS refused: {error}") from None
    except BotoCoreError as error:
        raise BootstrapError(str(error)) from None
    return secret, outputs.get("ApiUrl", "(see the stack outputs)")


if __name__ == "__main__":
    raise SystemExit(main())

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

from joinplane import aws, container
from joinplane_local.seed import install_admin_key


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m joinplane_local.bootstrap", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--stack-name", required=True)
    parser.add_argument("--tenant", required=True, help="the tenant the key belongs to")
    parser.add_argument(
        "--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )
    args = parser.parse_args(argv)
    if args.region:
        os.environ["AWS_DEFAULT_REGION"] = args.region
    stacks = aws.client("cloudformation").describe_stacks(StackName=args.stack_name)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    os.environ["TABLE_NAME"] = outputs["TableName"]
    container.reset(keep_clients=True)  # the table's name changed, not the endpoint
    secret = install_admin_key(args.tenant, None, f"bootstrap admin of {args.stack_name}")
    print(secret)
    print(f"API: {outputs.get('ApiUrl', '(see the stack outputs)')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

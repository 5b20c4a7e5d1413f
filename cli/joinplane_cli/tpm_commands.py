"""The TPM on the command line: `--tpm` and `--tpm-ek` of `join` and `agent`, and
`joinplane tpm identify`, which prints what an operator lists to admit this machine's TPM (its EK
hash for the site's allow-list; its EK certificate's issuer for the manufacturer roots)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from joinplane_cli import render, tpm
from joinplane_cli.exits import Exit

TCTI_HELP = "the TPM is the one TPM2TOOLS_TCTI names (default device:/dev/tpmrm0)"


def join_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tpm",
        action="store_true",
        help=f"prove this machine's TPM to the server (credential activation; needs tpm2-tools); {TCTI_HELP}",
    )
    parser.add_argument(
        "--tpm-ek",
        choices=("auto", "rsa", "ecc"),
        default="auto",
        help="the endorsement key to attest with (default auto: the first with an EK certificate in NV)",
    )


def add_parser(commands: Any) -> None:
    group = commands.add_parser("tpm", help="this machine's TPM (identify)")
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    identify = actions.add_parser(
        "identify",
        help="print the TPM's EK hashes and EK certificates, for the site's allow-list",
        description=(
            "Print each endorsement key's hash (SHA-256 of its SubjectPublicKeyInfo, the name the "
            "TPM allow-list takes) and its EK certificate's issuer, serial and validity (the issuer "
            f"is the manufacturer CA a site lists). {TCTI_HELP}."
        ),
    )
    identify.add_argument(
        "--ek", choices=("all", "rsa", "ecc"), default="all", help="which endorsement keys (default all)"
    )
    identify.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="table (the default) or json"
    )
    identify.add_argument(
        "--pem", action="store_true", help="also print each EK certificate (PEM), for the allow-list"
    )
    group.set_defaults(handler=_identify)


def _identify(args: argparse.Namespace) -> Exit:
    kinds = tpm.KINDS if args.ek == "all" else (args.ek,)
    with tpm.Tpm.open() as device:
        found = tpm.identify(device, kinds)
    if args.output == "json":
        render.print_json(found)
        return Exit.OK
    print(f"TPM at {found['tcti']}")
    render.fields(
        [
            ("manufacturer", found["manufacturer"]),
            ("vendor", found["vendor"]),
            ("firmware", found["firmwareVersion"]),
        ]
    )
    for key in found["endorsementKeys"]:
        print()
        print(f"{key['kind'].upper()} endorsement key")
        pairs: list[tuple[str, Any]] = [("ek sha256", key["ekPublicKeySha256"])]
        certificate = key["certificate"]
        if certificate is None:
            pairs.append(
                (
                    "certificate",
                    f"none in NV {key['certificateIndex']}: only the allow-list by EK hash admits it",
                )
            )
        else:
            pairs += [
                ("issuer", certificate["issuer"]),
                ("serial", certificate["serialNumber"]),
                ("valid", f"{certificate['notBefore']} to {certificate['notAfter']}"),
                (
                    "tpm maker",
                    " ".join(filter(None, (certificate["tpmManufacturer"], certificate["tpmModel"]))),
                ),
            ]
            if not certificate["certifiesThisEk"]:
                pairs.append(("warning", "the certificate in NV is for another key, not this EK"))
        render.fields(pairs)
        if args.pem and key["certificatePem"]:
            sys.stdout.write(key["certificatePem"])
    return Exit.OK

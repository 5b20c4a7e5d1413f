"""The TPM on the command line: `--tpm` and `--tpm-ek` of `join` and `agent`; on the machine,
`joinplane tpm identify`, which prints what an operator lists to admit this machine's TPM (its EK
hash for the site's allow-list; its EK certificate's issuer for the manufacturer roots); and the
operator's lists of a site: `joinplane tpm allow-list` and `joinplane tpm manufacturers`."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joinplane_cli import render, tpm
from joinplane_cli.exits import CliError, Exit

if TYPE_CHECKING:
    # Only for types: `joinplane --version` and completion must not load the operator code.
    from joinplane_cli import admin

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


def add_parser(
    commands: Any,
    server: argparse.ArgumentParser,
    operator: argparse.ArgumentParser,
    connect: Callable[[argparse.Namespace], admin.Operator],
) -> None:
    """`joinplane tpm ...`; `server` and `operator` are the parents of operator commands, `connect`
    makes their API client from the parsed options."""
    group = commands.add_parser(
        "tpm", help="the TPM: identify this machine's; a site's TPM allow-list and manufacturers"
    )
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
    identify.set_defaults(handler=_identify)

    allowed = actions.add_parser(
        "allow-list", help="the site's allow-list of endorsement keys (add, list, remove)"
    )
    verbs = allowed.add_subparsers(dest="verb", required=True, metavar="ACTION")
    add = verbs.add_parser(
        "add", parents=[server, operator], help="allow an EK, by hash or by its certificate"
    )
    add.add_argument("--site", required=True, help="the site whose joins it admits")
    which = add.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--ek-sha256", metavar="HASH", help="the EK's hash, as `joinplane tpm identify` prints it"
    )
    which.add_argument(
        "--certificate", metavar="FILE", help="the EK certificate (PEM), as `tpm identify --pem`"
    )
    add.add_argument("--description", help="a note for people, e.g. the machine's asset tag")
    add.set_defaults(handler=lambda args: _allow_add(connect(args), args))
    listing = verbs.add_parser("list", parents=[server, operator], help="list the site's allowed EKs")
    listing.add_argument("--site", required=True, help="the site whose list to show")
    listing.set_defaults(handler=lambda args: _allow_list(connect(args), args.site))
    remove = verbs.add_parser("remove", parents=[server, operator], help="remove an EK from the allow-list")
    remove.add_argument("--site", required=True, help="the site whose list to change")
    remove.add_argument("ek_sha256", metavar="HASH", help="the EK's hash")
    remove.set_defaults(handler=lambda args: _allow_remove(connect(args), args.site, args.ek_sha256))

    makers = actions.add_parser(
        "manufacturers", help="TPM manufacturer CAs the site trusts for EK certificates (add, list, remove)"
    )
    verbs = makers.add_subparsers(dest="verb", required=True, metavar="ACTION")
    add = verbs.add_parser(
        "add",
        parents=[server, operator],
        help="list a manufacturer's root and intermediates (PEM, one or more)",
    )
    add.add_argument("--site", required=True, help="the site whose tokens may trust it")
    add.add_argument(
        "--certificate", required=True, metavar="FILE", help="PEM file: a root, intermediates, or both"
    )
    add.add_argument("--description", help="a note for people, e.g. the manufacturer's name")
    add.set_defaults(handler=lambda args: _makers_add(connect(args), args))
    listing = verbs.add_parser("list", parents=[server, operator], help="list the site's manufacturer CAs")
    listing.add_argument("--site", required=True, help="the site whose list to show")
    listing.set_defaults(handler=lambda args: _makers_list(connect(args), args.site))
    remove = verbs.add_parser("remove", parents=[server, operator], help="stop trusting one manufacturer CA")
    remove.add_argument("--site", required=True, help="the site whose list to change")
    remove.add_argument(
        "certificate_sha256", metavar="SHA256", help="the CA certificate's SHA-256 (from `list`)"
    )
    remove.set_defaults(
        handler=lambda args: _makers_remove(connect(args), args.site, args.certificate_sha256)
    )


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
        if certificate is not None and "problem" in certificate:
            pairs.append(("certificate", certificate["problem"]))
        elif certificate is None:
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


# --- the operator's lists --------------------------------------------------------------------

_PEM = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n?", re.S)


def _pems(path: str, option: str) -> list[str]:
    try:
        text = Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as failed:
        raise CliError(f"{option}: {getattr(failed, 'strerror', None) or failed}", Exit.USAGE) from None
    found = [match.group(0).strip() + "\n" for match in _PEM.finditer(text)]
    if not found:
        raise CliError(f"{option}: {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", Exit.USAGE)
    return found


_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def _sha256(value: str, option: str) -> str:
    # Said here, by the option typed, rather than as the API field's pattern the server answers with.
    if not _SHA256.fullmatch(value):
        raise CliError(
            f"{option}: {value!r} is not a SHA-256 (64 hex digits, whole, "
            "as `tpm identify` and `list` print it)",
            Exit.USAGE,
        )
    return value


def _allow_add(op: admin.Operator, args: argparse.Namespace) -> Exit:
    body: dict[str, Any] = {"siteId": args.site}
    if args.ek_sha256:
        body["ekPublicKeySha256"] = _sha256(args.ek_sha256, "--ek-sha256")
    else:
        pems = _pems(args.certificate, "--certificate")
        if len(pems) != 1:
            raise CliError(
                f"--certificate: {args.certificate} holds {len(pems)} certificates, not one", Exit.USAGE
            )
        body["ekCertificatePem"] = pems[0]
    if args.description:
        body["description"] = args.description
    item, _ = op.call("tpmAllowList/add", body)
    return op.show(
        item,
        f"Allowed EK {item.get('ekPublicKeySha256')} at site {item.get('siteId')}.",
        [("from", item.get("addedFrom")), ("description", item.get("description"))],
    )


def _allow_list(op: admin.Operator, site: str) -> Exit:
    items, _, _ = op.pages(
        "tpmAllowList/list", {"siteId": site}, "keys", "TPM allow", limit=None, cursor=None, every=True
    )
    columns: list[render.Column] = [
        ("ek sha256", lambda k: k.get("ekPublicKeySha256")),
        ("from", lambda k: k.get("addedFrom")),
        ("added", lambda k: k.get("createdAt")),
        ("description", lambda k: k.get("description")),
    ]
    return op.listing(items, None, "keys", columns, f"No endorsement keys are allowed at site {site}.")


def _allow_remove(op: admin.Operator, site: str, ek_sha256: str) -> Exit:
    item, _ = op.call(
        "tpmAllowList/remove", {"siteId": site, "ekPublicKeySha256": _sha256(ek_sha256, "HASH")}
    )
    return op.show(item, f"Removed EK {ek_sha256} from the allow-list of site {site}.", [])


def _makers_add(op: admin.Operator, args: argparse.Namespace) -> Exit:
    added = []
    for pem in _pems(args.certificate, "--certificate"):
        body = {"siteId": args.site, "certificatePem": pem}
        if args.description:
            body["description"] = args.description
        item, _ = op.call("tpmAllowList/manufacturers/add", body)
        added.append(item)
    if op.json:
        render.print_json({"manufacturers": added}, op.out)
        return Exit.OK
    for item in added:
        kind = "root" if item.get("root") else "intermediate"
        print(f"Listed the {kind} {item.get('subject')} at site {item.get('siteId')}.", file=op.out)
    return Exit.OK


def _makers_list(op: admin.Operator, site: str) -> Exit:
    items, _, _ = op.pages(
        "tpmAllowList/manufacturers/list",
        {"siteId": site},
        "manufacturers",
        "TPM manufacturer",
        limit=None,
        cursor=None,
        every=True,
    )
    columns: list[render.Column] = [
        ("subject", lambda m: m.get("subject")),
        ("kind", lambda m: "root" if m.get("root") else "intermediate"),
        ("not after", lambda m: m.get("notAfter")),
        ("sha256", lambda m: m.get("certificateSha256")),
        ("description", lambda m: m.get("description")),
    ]
    return op.listing(items, None, "manufacturers", columns, f"No TPM manufacturer is listed at site {site}.")


def _makers_remove(op: admin.Operator, site: str, certificate_sha256: str) -> Exit:
    item, _ = op.call(
        "tpmAllowList/manufacturers/remove",
        {"siteId": site, "certificateSha256": _sha256(certificate_sha256, "SHA256")},
    )
    return op.show(
        item, f"Removed {item.get('subject', certificate_sha256)} from site {site}'s manufacturers.", []
    )

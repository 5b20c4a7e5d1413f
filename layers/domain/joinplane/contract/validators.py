"""What the validators say that the request models' JSON Schema does not: a validator's rule
("exactly one of poolId or siteId", "not a placeholder serial", a grant's grammar), added to the
generated schema from the same constants the validators use, so the document promises exactly what
the server accepts. Keyed by the model's name (`REQUEST_PATCHES`)."""

from __future__ import annotations

import re
from collections.abc import Callable

from joinplane import grants, hardware
from joinplane.contract.common import Schema, ecma


def _either(*names: str) -> Callable[[Schema], None]:
    """Exactly one of `names`, given as a string (null counts as absent)."""

    def patch(schema: Schema) -> None:
        schema["oneOf"] = [{"required": [name], "properties": {name: {"type": "string"}}} for name in names]

    return patch


def _some_of(*names: str) -> Callable[[Schema], None]:
    """At least one of the lists `names` given, and not empty."""

    def patch(schema: Schema) -> None:
        schema["anyOf"] = [{"required": [name], "properties": {name: {"minItems": 1}}} for name in names]

    return patch


def _no_null(*keep: str) -> Callable[[Schema], None]:
    """Optional fields that may be left out but not set to null (`pools/update`)."""

    def patch(schema: Schema) -> None:
        for name, prop in schema["properties"].items():
            if name in keep or "anyOf" not in prop:
                continue
            options = [o for o in prop.pop("anyOf") if o != {"type": "null"}]
            prop.pop("default", None)
            if len(options) == 1:
                prop.update(options[0])
            else:
                prop["anyOf"] = options

    return patch


def _grants(schema: Schema) -> None:
    schema["properties"]["grants"]["items"] = {
        "type": "string",
        "pattern": ecma(grants.GRANT_PATTERN),
        "examples": ["compute:join-tokens:*@compute-pool/dev-pool", "compute:*@tenant"],
    }


_SEP = r"[\s._/\\-]*"


def _squashed(word: str) -> str:
    """A pattern for `word` as hardware._squash compares it: any case, any separators between."""
    return _SEP.join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


def _placeholder_serials() -> Schema:
    words = sorted(hardware._PLACEHOLDER_SERIALS | hardware._COUNTING_SERIALS)
    alternatives = "|".join(_squashed(word) for word in words)
    return {
        "anyOf": [
            {"pattern": rf"^{_SEP}(?:{alternatives}){_SEP}$"},
            # What normalize_serial refuses besides: C1 control characters.
            {"pattern": "[\u0080-\u009f]"},
            # One repeated character (any case), or nothing but separators.
            {"pattern": rf"^{_SEP}(?:([^\s._/\\-]){_SEP}(?:\1{_SEP})*)?$"},
        ]
    }


def _register_entry(schema: Schema) -> None:
    props = schema["properties"]
    serial = props["serialNumber"]["anyOf"][0]
    serial["not"] = _placeholder_serials()
    serial["description"] = "Not a placeholder (firmware default, counting run, one repeated character)."
    uuid = props["systemUuid"]["anyOf"][0]
    hexadecimal = (
        r"(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{32})"
    )
    uuid["pattern"] = rf"^\s*(?:\{{{hexadecimal}\}}|{hexadecimal})\s*$"
    placeholders = "|".join(
        "-?".join("".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in part) for part in u.split("-"))
        for u in sorted(hardware._PLACEHOLDER_UUID_SET)
    )
    uuid["not"] = {
        "anyOf": [
            {"pattern": rf"^\s*\{{?(?:{placeholders})\}}?\s*$"},
            {"pattern": r"^\s*\{?([0-9a-fA-F])(?:-?\1)*\}?\s*$"},
        ]
    }
    uuid["description"] = "8-4-4-4-12 or 32 hexadecimal digits (braces allowed); not a firmware placeholder."
    mac = props["macAddresses"]["items"]
    mac["pattern"] = (
        r"^\s*(?:[0-9a-fA-F][02468aceACE](?::[0-9a-fA-F]{2}){5}|[0-9a-fA-F][02468aceACE](?:-[0-9a-fA-F]{2}){5}"
        r"|[0-9a-fA-F][02468aceACE][0-9a-fA-F]{10})\s*$"
    )
    mac["description"] = "A unicast address (`:`, `-` or no separators); not all-zero or 02:00:00:00:00:00."
    mac["not"] = {"pattern": r"^\s*(?:00[:-]?){5}00\s*$|^\s*02(?:[:-]?00){5}\s*$"}
    schema["anyOf"] = [
        {"required": ["serialNumber"], "properties": {"serialNumber": {"type": "string"}}},
        {"required": ["systemUuid"], "properties": {"systemUuid": {"type": "string"}}},
        {"required": ["macAddresses"], "properties": {"macAddresses": {"minItems": 1}}},
        {"required": ["machineFingerprint"], "properties": {"machineFingerprint": {"type": "string"}}},
    ]


def _add_key(schema: Schema) -> None:
    _either("ekPublicKeySha256", "ekCertificatePem")(schema)
    pem = schema["properties"]["ekCertificatePem"]["anyOf"][0]
    pem["pattern"] = r"^\s*-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\s]*-----END CERTIFICATE-----\s*$"
    pem["description"] = "One PEM CERTIFICATE block holding a DER X.509 certificate."


def _add_manufacturer(schema: Schema) -> None:
    pem = schema["properties"]["certificatePem"]
    pem["pattern"] = r"^\s*-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\s]*-----END CERTIFICATE-----\s*$"
    pem["description"] = (
        "One PEM CERTIFICATE block: a CA certificate (basicConstraints cA true, or none), unexpired."
    )


REQUEST_PATCHES: dict[str, Callable[[Schema], None]] = {
    "CreateApiKey": _grants,
    "CreateJoinToken": _either("poolId", "siteId"),
    "ListJoinTokens": _either("poolId", "siteId"),
    "AddKey": _add_key,
    "AddManufacturer": _add_manufacturer,
    "UpdatePool": _no_null("tenantId", "poolId", "cluster"),
    "RegisterEntry": _register_entry,
    "AwsAttestation": _some_of("accounts", "arns"),
}

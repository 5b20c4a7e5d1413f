"""shared/events/<detail-type>.schema.json, generated from the detail types of
`joinplane.event_details` and `joinplane.admin_event_details`: the schemas consumers read are the
types mypy checks the publisher with.

    python -m joinplane.event_schemas           # exit 1, naming each file that differs
    python -m joinplane.event_schemas --write   # rewrite shared/events

A development tool: no function imports it (tests/architecture holds that).
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import CoreSchema

from joinplane import admin_event_details as admin
from joinplane import event_details as details

FOLDER = Path(__file__).resolve().parents[3] / "shared" / "events"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

# Every detail-type the publisher makes, and its detail: one schema each in shared/events.
DETAILS: dict[str, type] = {
    "security.join-request.created": details.JoinRequestCreatedDetail,
    "security.join-request.approval-recorded": details.JoinRequestApprovalRecordedDetail,
    "security.join-request.approved": details.JoinRequestApprovedDetail,
    "security.join-request.rejected": details.JoinRequestRejectedDetail,
    "security.join-request.consumed": details.JoinRequestConsumedDetail,
    "security.join-request.expired": details.JoinRequestExpiredDetail,
    "security.machine.joined": details.MachineJoinedDetail,
    "security.machine.key-rotated": details.MachineKeyRotatedDetail,
    "security.machine.revoked": details.MachineRevokedDetail,
    "security.cluster.node-joined": details.ClusterNodeJoinedDetail,
    "security.join-token.created": admin.JoinTokenCreatedDetail,
    "security.join-token.revoked": admin.JoinTokenRevokedDetail,
    "security.api-key.created": admin.ApiKeyCreatedDetail,
    "security.api-key.revoked": admin.ApiKeyRevokedDetail,
    "security.pool.created": admin.PoolCreatedDetail,
    "security.pool.updated": admin.PoolUpdatedDetail,
    "security.pool.archived": admin.PoolArchivedDetail,
    "security.cluster-key.rotated": admin.ClusterKeyRotatedDetail,
    "security.certificate-authority.created": admin.CertificateAuthorityCreatedDetail,
    "security.certificate-authority.requested": admin.CertificateAuthorityRequestedDetail,
    "security.certificate-authority.prepared": admin.CertificateAuthorityPreparedDetail,
    "security.certificate-authority.activated": admin.CertificateAuthorityActivatedDetail,
    "security.certificate-authority.rotated": admin.CertificateAuthorityRotatedDetail,
    "security.certificate-authority.expired": admin.CertificateAuthorityExpiredDetail,
    "security.discovery-entry.registered": admin.DiscoveryEntryRegisteredDetail,
    "security.discovery-entry.removed": admin.DiscoveryEntryRemovedDetail,
    "security.tpm-key.allowed": admin.TpmKeyAllowedDetail,
    "security.tpm-key.removed": admin.TpmKeyRemovedDetail,
}


class _Generator(GenerateJsonSchema):
    """Pydantic's schema without a title per field (a field's name says it)."""

    def field_title_should_be_set(self, schema: CoreSchema) -> bool:
        return False


def _tidy(node: Any) -> Any:
    """Descriptions on one line (they come from docstrings and wrapped strings), and a nullable
    value as JSON Schema writes it by hand, `"type": ["string", "null"]`, rather than pydantic's
    `anyOf` of the value and null: the same schema, easier to read."""
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: " ".join(v.split()) if k == "description" else _tidy(v) for k, v in node.items()}
    options = node.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        (value,) = [o for o in options if o != {"type": "null"}]
        if isinstance(value.get("type"), str):
            del node["anyOf"]
            nullable = {**value, "type": [value["type"], "null"]}
            if "enum" in value:
                nullable["enum"] = [*value["enum"], None]
            node = nullable | node
    return node


def schema(detail_type: str) -> dict[str, Any]:
    """The JSON Schema (2020-12) of one detail-type's `detail`."""
    generated = _tidy(TypeAdapter(DETAILS[detail_type]).json_schema(schema_generator=_Generator))
    generated.pop("title")
    what = generated.pop("description")
    return {
        "$schema": DRAFT,
        "$id": f"https://joinplane.dev/schemas/events/{detail_type}.json",
        "title": detail_type,
        "description": (
            f"The `detail` of an EventBridge event with source `joinplane` and detail-type "
            f"`{detail_type}`: {what}"
        ),
        **generated,
    }


@functools.cache
def rendered() -> dict[str, str]:
    """Each schema file's name and text, as committed (the types cannot change while running)."""
    return {
        f"{detail_type}.schema.json": json.dumps(schema(detail_type), indent=2, ensure_ascii=False) + "\n"
        for detail_type in sorted(DETAILS)
    }


def stale(folder: Path = FOLDER) -> list[str]:
    """The files of `folder` that differ from the generated ones, or are missing, or are extra."""
    expected = rendered()
    present = {p.name: p.read_text() for p in folder.glob("*.schema.json")}
    return sorted(
        name for name in expected.keys() | present.keys() if expected.get(name) != present.get(name)
    )


def write(folder: Path = FOLDER) -> None:
    expected = rendered()
    for extra in folder.glob("*.schema.json"):
        if extra.name not in expected:
            extra.unlink()  # a detail-type no longer published
    for name, text in expected.items():
        (folder / name).write_text(text)


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        write()
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    differing = stale()
    for name in differing:
        print(f"shared/events/{name} is not what the detail types generate", file=sys.stderr)
    if differing:
        print("regenerate: python -m joinplane.event_schemas --write", file=sys.stderr)
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

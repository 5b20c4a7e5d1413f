"""shared/events is generated from the detail types mypy checks the publisher with: the committed
schemas are the generated ones, the check finds a schema that drifted from them, and every
attestation policy a token can store meets its event's schema."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import jsonschema

from joinplane import event_schemas, events
from tests.support.events import SCHEMAS, TOKEN, record


def test_the_committed_schemas_are_the_generated_ones() -> None:
    # Given the detail types; When the check runs as a developer runs it; Then nothing differs
    assert event_schemas.main([]) == 0, "regenerate: python -m joinplane.event_schemas --write"


def test_the_check_names_a_schema_edited_by_hand_a_missing_one_and_an_extra_one(tmp_path: Path) -> None:
    # Given a folder as the generator writes it
    event_schemas.write(tmp_path)
    assert event_schemas.stale(tmp_path) == []
    # When one schema is edited by hand, one is deleted and one no detail type makes is added
    edited = tmp_path / "security.pool.created.schema.json"
    schema = json.loads(edited.read_text())
    schema["required"].remove("decidedBy")
    edited.write_text(json.dumps(schema, indent=2) + "\n")
    (tmp_path / "security.api-key.revoked.schema.json").unlink()
    (tmp_path / "security.pool.renamed.schema.json").write_text("{}\n")
    # Then the check names each of them
    assert event_schemas.stale(tmp_path) == [
        "security.api-key.revoked.schema.json",
        "security.pool.created.schema.json",
        "security.pool.renamed.schema.json",
    ]
    # And writing again restores the folder
    event_schemas.write(tmp_path)
    assert event_schemas.stale(tmp_path) == []


def test_the_command_refuses_an_unknown_argument() -> None:
    assert event_schemas.main(["--check"]) == 2


def test_a_token_event_states_any_attestation_policy_as_the_token_stores_it() -> None:
    # Given tokens with every optional attestation setting, the TPM trust and re-join ones included
    schema = jsonschema.Draft202012Validator(SCHEMAS["security.join-token.created"])
    settings = itertools.product(
        (None, "any", "key"), (None, "allow-list", "manufacturer"), (None, "any", "activate")
    )
    for identity, trust, rejoin in settings:
        optional = {"identity": identity, "tpmTrust": trust, "tpmRejoin": rejoin}
        stored = {"discovery": "defer-unknown", "tpm": "require"} | {k: v for k, v in optional.items() if v}
        # When its creation is published
        event = events.from_stream_record(record(None, {**TOKEN, "attestation": stored}))
        # Then the event states the policy as stored, and meets its schema
        assert event is not None and event.detail["attestation"] == stored
        schema.validate(event.detail)


def test_a_token_event_states_the_aws_callers_it_admits() -> None:
    # Given a token of the AWS IAM join method, as stored
    rules = {"accounts": ["123456789012"], "arns": ["arn:aws:sts::123456789012:assumed-role/gpu-node-*/*"]}
    stored = {"discovery": "off", "tpm": "off", "aws": rules}
    # When its creation is published
    event = events.from_stream_record(record(None, {**TOKEN, "attestation": stored}))
    # Then the audit trail says who the token lets in, and the event meets its schema
    assert event is not None and event.detail["attestation"]["aws"] == rules
    jsonschema.Draft202012Validator(SCHEMAS["security.join-token.created"]).validate(event.detail)

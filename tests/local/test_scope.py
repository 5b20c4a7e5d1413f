"""docs/local.md says what the local runtime emulates and what not; held to template.yaml here, so a
new kind of resource or event source is placed on one side or the other when it is added."""

from __future__ import annotations

from joinplane_local.template import load
from tests.support.requirements import ROOT

FUNCTION = "AWS::Serverless::Function"


def test_every_resource_and_event_source_type_of_the_template_is_in_the_local_runtime_scope() -> None:
    # Given template.yaml's resource types, its functions' event source types and dead-letter types
    resources = load()["Resources"]
    kinds = {resource["Type"] for resource in resources.values()}
    functions = [
        r.get("Properties", {}) for r in resources.values() if r["Type"] == "AWS::Serverless::Function"
    ]
    events = {event["Type"] for props in functions for event in (props.get("Events") or {}).values()}
    dead_letters = {
        f"Type: {props['DeadLetterQueue']['Type']}" for props in functions if "DeadLetterQueue" in props
    }

    # When docs/local.md is read
    page = (ROOT / "docs" / "local.md").read_text()

    # Then each is named there, as emulated or not
    missing = sorted(name for name in kinds | events | dead_letters if f"`{name}`" not in page)
    assert missing == [], f"docs/local.md does not say whether the local runtime emulates {missing}"

"""docs/deploy.md: its parameter table and costs are template.yaml's, as `python -m
joinplane_local.deploydoc --write` last wrote them, and the counts behind the costs are checked here
against the template by a count of their own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from joinplane_local import deploydoc
from joinplane_local.template import TEMPLATE, load

PAGE = deploydoc.PAGE


def section() -> str:
    text = PAGE.read_text()
    return text[text.index(deploydoc.BEGIN) : text.index(deploydoc.END) + len(deploydoc.END)] + "\n"


def test_the_page_holds_what_the_generator_writes_from_the_template() -> None:
    # Given the template as it is now
    # When the section is generated
    generated = deploydoc.render()

    # Then the page holds it unchanged (else: python -m joinplane_local.deploydoc --write)
    assert section() == generated


def test_every_parameter_is_in_the_table_with_its_default() -> None:
    # Given the template's parameters and the page's table
    parameters = load(TEMPLATE)["Parameters"]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", section(), re.MULTILINE))

    # Then each parameter has a row showing its default, and no row names anything else
    assert set(rows) == set(parameters)
    for name, spec in parameters.items():
        default = spec.get("Default")
        expected = "(empty)" if default == "" else "(required)" if default is None else f"`{default}`"
        assert rows[name].strip() == expected, name


def test_the_idle_cost_counts_the_templates_alarms_dashboards_and_keys() -> None:
    # Given the template's resources, counted here: an alarm is billed per metric it reads
    resources = load(TEMPLATE)["Resources"].values()
    always = [r for r in resources if "Condition" not in r]
    alarms = [r for r in always if r["Type"] == "AWS::CloudWatch::Alarm"]
    metrics = sum(
        len([m for m in a["Properties"]["Metrics"] if "MetricStat" in m])
        if "Metrics" in a["Properties"]
        else 1
        for a in alarms
    )
    dashboards = len([r for r in always if r["Type"] == "AWS::CloudWatch::Dashboard"])
    keys = len([r for r in always if r["Type"] == "AWS::KMS::Key"])

    # Then the page's idle rows state those counts, priced at the page's prices
    text = section()
    assert f"| {len(alarms)} alarms reading {metrics} metrics | ${metrics * 0.10:.2f} |" in text
    assert f"| {dashboards} dashboard | ${dashboards * 3.00:.2f} |" in text
    assert f"| {keys} KMS key (the alarm topic's) | ${keys * 1.00:.2f} |" in text
    assert "| CloudWatch | $0.10 | alarm metric per month" in text
    assert "| CloudWatch | $3.00 | dashboard per month" in text
    assert "| KMS | $1.00 | customer managed key per month |" in text
    assert re.search(r"### Prices \(us-east-1 list prices, read \d{4}-\d\d-\d\d\)", text)


def test_every_resource_type_is_in_the_deploy_permissions() -> None:
    # Given the template's resource types
    kinds = {r["Type"] for r in load(TEMPLATE)["Resources"].values()}

    # Then the page's table of what `sam deploy` creates lists each, with its IAM service
    listed = set(re.findall(r"^\| `(AWS::[\w:]+)` \| \d+ \|", section(), re.MULTILINE))
    assert listed == kinds


def _template_with(tmp_path: Path, change: dict[str, dict[str, object]]) -> Path:
    document = load(TEMPLATE)
    for part, entries in change.items():
        document[part].update(entries)
    path = tmp_path / "template.yaml"
    # The loader turns `!Ref X` into {"Ref": X}, which reads back the same.
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"Parameters": {"Undocumented": {"Type": "String", "Default": "x"}}}, "has no Description"),
        ({"Resources": {"Odd": {"Type": "AWS::Batch::JobQueue", "Properties": {}}}}, "AWS::Batch::JobQueue"),
    ],
)
def test_a_template_the_page_cannot_describe_is_refused(
    change: dict[str, dict[str, object]], says: str, tmp_path: Path
) -> None:
    # Given a template with a parameter without a description, or a resource type of unknown service
    template = _template_with(tmp_path, change)

    # When the section is generated from it / Then it says what to add, rather than write a gap
    with pytest.raises(ValueError, match=re.escape(says)):
        deploydoc.render(template)


def test_the_section_is_replaced_in_place_and_nothing_else() -> None:
    # Given a page with text around the section
    page = f"before\n{deploydoc.BEGIN}\nold\n{deploydoc.END}\nafter\n"

    # When it is replaced
    written = deploydoc.replace_section(page, deploydoc.render())

    # Then the text around it stays, and a page without the markers is refused
    assert written.startswith("before\n" + deploydoc.BEGIN) and written.endswith(deploydoc.END + "\nafter\n")
    assert "\nold\n" not in written
    with pytest.raises(ValueError, match="no section"):
        deploydoc.replace_section("no markers here", deploydoc.render())

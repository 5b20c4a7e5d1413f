"""template.yaml, read once and made concrete for a local run.

The local runtime and the tests create their table and bus from the template's own resource
definitions, so there is no second copy of the schema to drift.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
LOCAL_STACK = "joinplane-local"
REGION = "us-east-1"
ACCOUNT = "123456789012"


class _CfnLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type hints
    """YAML with CloudFormation's short-form intrinsics (`!Ref X` → `{"Ref": "X"}`)."""


def _intrinsic(loader: _CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = str(value).split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _intrinsic)


def referenced_logical_id(value: Any, attribute: str) -> str | None:
    """The logical id behind `!Ref X`, `!GetAtt X.<attribute>` or `!Sub ${X.<attribute>}`."""
    if isinstance(value, dict) and len(value) == 1:
        ((name, argument),) = value.items()
        if name == "Ref" and isinstance(argument, str):
            return argument
        if name == "Fn::GetAtt":
            parts = argument if isinstance(argument, list) else str(argument).split(".", 1)
            return str(parts[0]) if len(parts) == 2 and parts[1] == attribute else None
        if name == "Fn::Sub" and isinstance(argument, str):
            found = re.fullmatch(r"\$\{([A-Za-z0-9]+)\." + attribute + r"\}", argument)
            return found.group(1) if found else None
    return None


def load(path: Path = TEMPLATE) -> dict[str, Any]:
    with path.open() as handle:
        document = yaml.load(handle, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    assert isinstance(document, dict)
    return document


@dataclass
class Names:
    """Physical names of the template's resources in one run (local or real)."""

    stack: str = LOCAL_STACK
    region: str = REGION
    account: str = ACCOUNT
    physical: dict[str, str] = field(default_factory=dict)
    # Parameter values may be secrets (NoEcho): never in a repr.
    parameters: dict[str, str] = field(default_factory=dict, repr=False)

    def ref(self, logical_id: str) -> str:
        pseudo = {
            "AWS::StackName": self.stack,
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::Partition": "aws",
        }
        if logical_id in pseudo:
            return pseudo[logical_id]
        if logical_id in self.parameters:
            return self.parameters[logical_id]
        return self.physical.get(logical_id, f"{self.stack}-{logical_id}")

    def get_att(self, logical_id: str, attribute: str) -> str:
        name = self.ref(logical_id)
        arns = {
            "Arn": f"arn:aws:dynamodb:{self.region}:{self.account}:table/{name}",
            "StreamArn": f"arn:aws:dynamodb:{self.region}:{self.account}:table/{name}/stream/local",
        }
        return arns.get(attribute, f"{name}.{attribute}")


class Template:
    def __init__(self, document: dict[str, Any], names: Names | None = None) -> None:
        self.document = document
        self.names = names or Names()
        for name, spec in document.get("Parameters", {}).items():
            if "Default" in spec:
                self.names.parameters.setdefault(name, str(spec["Default"]))
        for logical_id, resource in self.resources.items():
            explicit = resource.get("Properties", {}).get("Name") or resource.get("Properties", {}).get(
                "TableName"
            )
            if explicit is not None and logical_id not in self.names.physical:
                self.names.physical[logical_id] = str(self.resolve(explicit))

    @property
    def resources(self) -> dict[str, Any]:
        resources: dict[str, Any] = self.document["Resources"]
        return resources

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v.get("Type") == resource_type}

    def resolve(self, value: Any) -> Any:
        """Replace intrinsics with this run's concrete values."""
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((name, argument),) = value.items()
            if name == "Ref":
                return self.names.ref(argument)
            if name == "Fn::GetAtt":
                logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
                return self.names.get_att(logical_id, attribute)
            if name == "Fn::Sub":
                text, extra = (argument, {}) if isinstance(argument, str) else argument
                return self._substitute(text, {k: self.resolve(v) for k, v in extra.items()})
            if name == "Fn::Join":
                separator, parts = argument
                return separator.join(str(self.resolve(p)) for p in parts)
        return {k: self.resolve(v) for k, v in value.items()}

    def _substitute(self, text: str, extra: dict[str, Any]) -> str:
        def one(match: re.Match[str]) -> str:
            token = match.group(1)
            if token in extra:
                return str(extra[token])
            if "." in token and not token.startswith("AWS::"):
                logical_id, attribute = token.split(".", 1)
                return self.names.get_att(logical_id, attribute)
            return self.names.ref(token)

        return re.sub(r"\$\{([^}!]+)\}", one, text)

    # --- conditions ---------------------------------------------------------------------

    def condition(self, name: str) -> bool:
        """A `Conditions` entry evaluated over this run's parameters, as CloudFormation does."""
        conditions = self.document.get("Conditions") or {}
        if name not in conditions:
            raise ValueError(f"no condition {name!r} in the template")
        return self._holds(conditions[name])

    def _holds(self, expression: Any) -> bool:
        if isinstance(expression, dict) and len(expression) == 1:
            ((function, argument),) = expression.items()
            if function == "Condition":
                return self.condition(str(argument))
            if function == "Fn::Not":
                return not self._holds(argument[0])
            if function == "Fn::And":
                return all(self._holds(a) for a in argument)
            if function == "Fn::Or":
                return any(self._holds(a) for a in argument)
            if function == "Fn::Equals":
                left, right = (self.resolve(a) for a in argument)
                return str(left) == str(right)
        raise ValueError(f"condition {expression!r} cannot be evaluated locally")

    def broken_rules(self) -> list[str]:
        """The `Rules` section's failed assertions (their descriptions), as CloudFormation would
        refuse the stack for them. A rule using a function not emulated here is not checked."""
        broken = []
        for name, rule in (self.document.get("Rules") or {}).items():
            try:
                if "RuleCondition" in rule and not self._holds(rule["RuleCondition"]):
                    continue
                for assertion in rule.get("Assertions") or []:
                    if not self._holds(assertion["Assert"]):
                        broken.append(f"{name}: {assertion.get('AssertDescription', 'assertion failed')}")
            except ValueError:
                continue
        return broken

    def included(self, logical_id: str) -> bool:
        """Whether the resource exists in this run: it has no `Condition`, or its condition holds."""
        condition = self.resources[logical_id].get("Condition")
        return condition is None or self.condition(str(condition))

    # --- resources a local run creates -------------------------------------------------

    def table_definitions(self) -> dict[str, dict[str, Any]]:
        """CreateTable arguments per DynamoDB table, taken from the template's Properties."""
        tables = {}
        for logical_id, resource in self.of_type("AWS::DynamoDB::Table").items():
            props = self.resolve(resource["Properties"])
            create: dict[str, Any] = {
                "TableName": self.names.ref(logical_id),
                "AttributeDefinitions": props["AttributeDefinitions"],
                "KeySchema": props["KeySchema"],
                "BillingMode": props.get("BillingMode", "PROVISIONED"),
            }
            if props.get("GlobalSecondaryIndexes"):
                create["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
            if props.get("StreamSpecification"):
                create["StreamSpecification"] = {
                    "StreamEnabled": True,
                    "StreamViewType": props["StreamSpecification"]["StreamViewType"],
                }
            tables[logical_id] = {"create": create, "ttl": props.get("TimeToLiveSpecification")}
        return tables

    def event_bus_names(self) -> dict[str, str]:
        return {
            logical_id: self.names.ref(logical_id) for logical_id in self.of_type("AWS::Events::EventBus")
        }

    def function_environment(self) -> dict[str, str]:
        """Globals plus every function's variables, resolved. In-process functions share one
        environment, so the union is what each of them sees (names never conflict in values)."""
        merged: dict[str, str] = {}
        globals_env = self.document.get("Globals", {}).get("Function", {}).get("Environment", {})
        for source in [globals_env] + [
            f.get("Properties", {}).get("Environment", {})
            for f in self.of_type("AWS::Serverless::Function").values()
        ]:
            for name, value in self.resolve(source.get("Variables", {})).items():
                merged[name] = str(value)
        return merged


def create_resources(template: Template, clients: Any) -> None:
    """Create the template's tables (with TTL and streams) and event buses where they are
    missing. `clients(service)` returns a boto3 client for the target endpoint."""
    dynamodb = clients("dynamodb")
    for definition in template.table_definitions().values():
        create = definition["create"]
        # Created, and an existing one told by the answer: a listing comes in pages (50 buses
        # in moto's), and an emulator that many runs share holds more than one page.
        try:
            dynamodb.create_table(**create)
        except dynamodb.exceptions.ResourceInUseException:
            continue
        dynamodb.get_waiter("table_exists").wait(TableName=create["TableName"])
        ttl = definition["ttl"]
        if ttl and ttl.get("Enabled"):
            dynamodb.update_time_to_live(
                TableName=create["TableName"],
                TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
            )
    events = clients("events")
    for name in template.event_bus_names().values():
        with contextlib.suppress(events.exceptions.ResourceAlreadyExistsException):
            events.create_event_bus(Name=name)

"""What an operator finds in CloudWatch Logs, checked on template.yaml: every function logs to its
own log group, created by the stack (never by Lambda on first write, which would keep lines
forever), kept for the LogRetentionDays parameter."""

from __future__ import annotations

from typing import Any

from joinplane_local.template import load

TEMPLATE = load()
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
FUNCTIONS = {k: v for k, v in RESOURCES.items() if v["Type"] == "AWS::Serverless::Function"}


def test_every_function_logs_to_its_own_log_group_kept_for_the_retention_parameter() -> None:
    # Given every function of the stack
    groups = []
    for name, function in FUNCTIONS.items():
        # When we follow its LoggingConfig to the log group it names
        reference = function["Properties"]["LoggingConfig"]["LogGroup"]
        assert set(reference) == {"Ref"}, f"{name} must point at a log group of this stack"
        group = RESOURCES[reference["Ref"]]
        # Then it is a log group of the stack, kept for LogRetentionDays
        assert group["Type"] == "AWS::Logs::LogGroup", name
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
        groups.append(reference["Ref"])
    # And no two functions share one (a log group tells whose lines these are)
    assert len(groups) == len(set(groups)) == len(FUNCTIONS) == 17


def test_log_retention_is_a_parameter_cloudwatch_accepts() -> None:
    parameter = TEMPLATE["Parameters"]["LogRetentionDays"]
    # CloudWatch Logs takes only these retention periods; anything else fails the deployment late
    assert set(parameter["AllowedValues"]) <= {
        1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
        3288, 3653,
    }  # fmt: skip
    assert parameter["Default"] in parameter["AllowedValues"]


def test_the_global_logging_format_still_applies() -> None:
    # A function's LoggingConfig is merged with the Globals' by SAM: JSON lines at LogLevel.
    globals_logging = TEMPLATE["Globals"]["Function"]["LoggingConfig"]
    assert globals_logging["LogFormat"] == "JSON"
    assert globals_logging["ApplicationLogLevel"] == {"Ref": "LogLevel"}
    for name, function in FUNCTIONS.items():
        assert set(function["Properties"]["LoggingConfig"]) == {"LogGroup"}, name

"""Reading what a function printed as CloudWatch would: JSON log lines and EMF metric blobs."""

from __future__ import annotations

import json
from typing import Any


def json_lines(output: str) -> list[dict[str, Any]]:
    """Every stdout line that is a JSON object (what Logs Insights would parse)."""
    parsed = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            parsed.append(json.loads(line))
    return parsed


def log_lines(output: str) -> list[dict[str, Any]]:
    return [line for line in json_lines(output) if "_aws" not in line]


def metrics(output: str) -> list[dict[str, Any]]:
    """The EMF blobs, each checked against the format CloudWatch extracts metrics from."""
    blobs = [line for line in json_lines(output) if "_aws" in line]
    for blob in blobs:
        [directive] = blob["_aws"]["CloudWatchMetrics"]
        assert isinstance(blob["_aws"]["Timestamp"], int)
        for dimension_set in directive["Dimensions"]:
            assert all(isinstance(blob[name], str) for name in dimension_set), blob
        for metric in directive["Metrics"]:
            assert metric["Name"] in blob, blob
    return blobs


def counted(output: str) -> list[tuple[str, str, float]]:
    """(metric, outcome, value) of every EMF blob, in order."""
    found = []
    for blob in metrics(output):
        for metric in blob["_aws"]["CloudWatchMetrics"][0]["Metrics"]:
            values = blob[metric["Name"]]
            for value in values if isinstance(values, list) else [values]:
                found.append((metric["Name"], blob.get("outcome", ""), value))
    return found

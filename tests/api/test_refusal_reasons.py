"""Every refusal carries a reason from one catalogue (joinplane.errors), and every dialect shows it:
the join dialect in a google.rpc.ErrorInfo, the operator envelope in `error.reason`, Sylve's
envelope as its `message` outcome."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
from pathlib import Path

import pytest

import joinplane
from joinplane import errors, join_wire, operator_api
from joinplane.clusters import sylve_wire

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "layers" / "domain" / "joinplane").rglob("*.py")) + sorted(
    (ROOT / "functions").rglob("*.py")
)


def _every_error_class() -> list[type[errors.JoinplaneError]]:
    for module in pkgutil.walk_packages(joinplane.__path__, "joinplane."):
        importlib.import_module(module.name)
    found, pending = [], [errors.JoinplaneError]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending.extend(kind.__subclasses__())
    return sorted(set(found), key=lambda kind: kind.__qualname__)


def _instance(kind: type[errors.JoinplaneError]) -> errors.JoinplaneError:
    if issubclass(kind, sylve_wire.SylveError):
        return kind(409, "cluster_version_mismatch")
    return kind("some refusal")


@pytest.mark.parametrize("kind", _every_error_class(), ids=lambda kind: kind.__qualname__)
def test_every_error_class_renders_a_reason_in_every_dialect(kind: type[errors.JoinplaneError]) -> None:
    error = _instance(kind)
    assert error.reason

    joined = json.loads(join_wire.render_error(error)["body"])
    infos = [d for d in joined["details"] if d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"]
    assert infos == [{**infos[0], "reason": error.reason, "domain": "joinplane"}]

    operator = json.loads(operator_api.render_error(error)["body"])["error"]
    assert operator["reason"] == error.reason

    if isinstance(error, sylve_wire.SylveError):
        assert error.reason == error.message.upper()
    else:
        assert error.reason in errors.CATALOGUE


def _reason_names(node: ast.expr) -> list[str]:
    """The catalogue names a `reason=` argument can take: `errors.X`, `X`, or `a if c else b` of them."""
    if isinstance(node, ast.IfExp):
        return _reason_names(node.body) + _reason_names(node.orelse)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "errors":
        return [node.attr]
    if isinstance(node, ast.Name):
        return [node.id]
    raise AssertionError(f"reason= is not a catalogue constant: {ast.unparse(node)}")


def _raise_site_reasons() -> list[tuple[str, str]]:
    error_names = {kind.__name__ for kind in _every_error_class()}
    sites = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name not in error_names:
                continue
            for keyword in node.keywords:
                if keyword.arg == "reason":
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    sites += [(where, reason) for reason in _reason_names(keyword.value)]
    return sites


def test_every_reason_given_at_a_raise_site_is_in_the_catalogue() -> None:
    sites = _raise_site_reasons()
    # The refusals a client must tell apart are set where they are raised (join, proof, renew...).
    assert len(sites) >= 30
    unknown = [(where, name) for where, name in sites if getattr(errors, name, None) not in errors.CATALOGUE]
    assert unknown == []


def test_the_catalogue_is_upper_snake_case_and_each_constant_names_itself() -> None:
    for reason in errors.CATALOGUE:
        assert reason.replace("_", "").isalpha() and reason.isupper(), reason
        assert getattr(errors, reason) == reason

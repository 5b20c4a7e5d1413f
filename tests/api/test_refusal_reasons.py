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
from tests.support.markdown import table_with_header

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


# --- Statuses: every code has a documented one in every dialect, and only a bug is a 500 ----------

DOCS = ROOT / "docs"


def _documented(page: str, *header: str) -> dict[str, list[str]]:
    """A status table of `page`, by its first column (the error code)."""
    rows = table_with_header((DOCS / page).read_text(), *header)
    return {row[0]: row[1:] for row in rows}


@pytest.mark.parametrize("kind", _every_error_class(), ids=lambda kind: kind.__qualname__)
def test_every_error_class_has_its_documented_status_in_every_dialect_and_only_a_bug_is_a_500(
    kind: type[errors.JoinplaneError],
) -> None:
    # Given a refusal of this class
    error = _instance(kind)
    bug = error.code == "INTERNAL"
    sylve_only = isinstance(error, sylve_wire.SylveError)

    # When the Sylve envelope renders it, Then its status is documented and 500 only for a bug
    sylve = sylve_wire.render_error(error)
    message = json.loads(sylve["body"])["message"]
    if sylve_only:
        outcomes = table_with_header((DOCS / "contracts.md").read_text(), "status", "message", "when")
        assert [str(sylve["statusCode"]), message] in [row[:2] for row in outcomes]
        return  # Sylve's own outcomes are raised on its path only, never in the other dialects
    status, documented_message = _documented("contracts.md", "code", "HTTP", "message")[error.code]
    assert sylve["statusCode"] == int(status)
    assert message == (documented_message if documented_message.isidentifier() else error.reason.lower())

    # When the operator envelope (the joinRequests API's too) renders it, Then likewise
    operator = operator_api.render_error(error)
    assert operator["statusCode"] == int(_documented("contracts.md", "code", "HTTP", "when")[error.code][0])

    # When levers9's JoinMachine dialect renders it, Then its gRPC code and HTTP status are documented
    joined = join_wire.render_error(error)
    grpc, http = _documented("join.md", "code", "gRPC code", "HTTP")[error.code]
    assert (json.loads(joined["body"])["code"], joined["statusCode"]) == (int(grpc), int(http))

    # And in none of them is a refusal a 500: that is kept for bugs (and the API's 5xx alarm)
    statuses = {sylve["statusCode"], operator["statusCode"], joined["statusCode"]}
    assert statuses == {500} if bug else 500 not in statuses


def test_every_status_table_covers_the_same_codes_as_its_dialect() -> None:
    # Given the codes the dialects map (a code missing from a table would be answered 500)
    codes = set(operator_api.STATUS)
    # Then every dialect maps exactly these, and each page documents exactly these
    assert set(join_wire.GRPC) == codes and set(sylve_wire.STATUS) == codes
    assert set(_documented("contracts.md", "code", "HTTP", "when")) == codes
    assert set(_documented("contracts.md", "code", "HTTP", "message")) == codes
    assert set(_documented("join.md", "code", "gRPC code", "HTTP")) == codes
    # And every error class's code is one of them
    assert {_instance(kind).code for kind in _every_error_class()} - {"SYLVE"} <= codes


def _sylve_outcomes_raised() -> set[tuple[int, str]]:
    """(status, message) of every SylveError(...) made with literals in the sources."""
    made = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "SylveError":
                status, message = node.args[:2]
                assert isinstance(status, ast.Constant) and isinstance(message, ast.Constant)
                made.add((status.value, message.value))
    return made


def test_every_outcome_of_sylves_envelope_is_in_its_documented_table() -> None:
    # Given every Sylve outcome the sources raise
    raised = _sylve_outcomes_raised()
    assert len(raised) >= 6
    # When the Sylve section's outcome table is read
    outcomes = table_with_header((DOCS / "contracts.md").read_text(), "status", "message", "when")
    # Then each (status, message) is a row of it
    assert raised <= {(int(row[0]), row[1]) for row in outcomes}


def test_every_reason_of_the_catalogue_is_in_the_refusal_table() -> None:
    # When the refusal table of the join page is read
    header = ("reason", "code (HTTP)", "meaning", "what a client should do")
    rows = table_with_header((DOCS / "join.md").read_text(), *header)
    # Then every reason of the catalogue has a row (the generic ones share theirs)
    listed = {reason.strip() for row in rows for reason in row[0].split(",")}
    assert sorted(errors.CATALOGUE - listed) == []

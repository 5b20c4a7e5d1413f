"""The emulated IAM of the functions (joinplane_local.iam) as tests meet it: acting as a function,
and collecting the refusals a test expects (tests/conftest.py fails a test on any other)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from joinplane_local import iam, iam_policy
from joinplane_local.template import Names, Template, load


@contextmanager
def refusals() -> Iterator[list[str]]:
    """The refusals IAM made inside, taken so they do not fail the test."""
    enforcement = iam.installed()
    assert enforcement is not None, "tests/conftest.py installs the enforcement"
    enforcement.take_denials()
    taken: list[str] = []
    try:
        yield taken
    finally:
        taken.extend(enforcement.take_denials())


def policies(
    table: str = "jp-table", stack: str = "joinplane-local"
) -> dict[str, list[iam_policy.Statement]]:
    """Every function's statements, resolved for one table and stack."""
    template = Template(load(), Names(stack=stack, physical={"Table": table}))
    return {fid: iam_policy.statements_of(template, fid) for fid in template.of_type(iam.FUNCTION_TYPE)}

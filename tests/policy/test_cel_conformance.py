"""The chosen CEL engine against the conformance sample that chose it (docs/policy.md): a new
version that changes an answer fails here before it changes a policy's decision."""

from __future__ import annotations

from typing import Any

import pytest

from joinplane import policy
from tests.support.cel_cases import CASES, ERROR, KNOWN_DEVIATIONS


@pytest.mark.parametrize(("expression", "variables", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_engine_answers_the_conformance_sample(
    expression: str, variables: dict[str, Any], expected: Any
) -> None:
    # Given the engine as the policies load it
    cel = policy._cel()

    # When the case's expression is evaluated
    try:
        got: Any = cel.evaluate(expression, variables)
    except Exception:
        got = ERROR

    # Then it answers as CEL's specification says, except the deviations docs/policy.md names
    if expression in KNOWN_DEVIATIONS:
        assert got != expected
    else:
        assert got == expected and type(got) is type(expected)

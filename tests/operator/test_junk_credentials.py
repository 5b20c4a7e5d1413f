"""Junk in `Authorization` on an operator route: the authorizer lets it through (the route answers
401 in the operator envelope, which API Gateway's own 403 could not carry), logs and counts the
refusal once, and the route's function adds no second line for it (docs/operating.md prices a
million such requests)."""

from __future__ import annotations

import pytest

from tests.support import call
from tests.support.logs import counted, log_lines

JUNK = [
    pytest.param("Zq8ltUe0rQ2u9H1xWcE3vKp7YbN5aJdF4gMsTo6i", id="not a key"),
    pytest.param("jpk_01m8sz50j301kx97qw0qs5wccc_0123456789abcdefghjkmnpqrstvwxyz", id="a key's shape"),
]


@pytest.mark.parametrize("junk", JUNK)
def test_junk_is_401_in_the_envelope_logged_once_by_the_authorizer(
    admin_key: str, capsys: pytest.CaptureFixture[str], junk: str
) -> None:
    # Given nothing printed yet
    capsys.readouterr()

    # When junk credentials call an operator route
    reply = call("/api/compute/pools/list", {"tenantId": "acme"}, junk)

    # Then the caller gets our 401, with its reason
    assert (reply.status, reply.code, reply.reason) == (401, "UNAUTHENTICATED", "UNAUTHENTICATED")
    # And the one line about it is the authorizer's, with one count of why; never the value itself
    out = capsys.readouterr().out
    lines = log_lines(out)
    assert [line["message"] for line in lines] == ["api key refused"], lines
    assert [(m, outcome) for m, outcome, _ in counted(out)] == [("AuthorizerRefusals", lines[0]["outcome"])]
    assert junk not in out


def test_a_valid_key_refused_by_the_route_is_still_logged_by_the_route(
    admin_key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a real key, and nothing printed yet
    capsys.readouterr()

    # When it sends a request the route refuses (an unknown field)
    reply = call("/api/compute/pools/list", {"tenantId": "acme", "bogus": 1}, admin_key)

    # Then the route logs its refusal: only the authorizer's own refusals go unrepeated
    assert reply.status == 400
    messages = [line["message"] for line in log_lines(capsys.readouterr().out)]
    assert messages == ["request refused"], messages

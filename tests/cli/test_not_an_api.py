"""A URL that is not a Joinplane API is said as such, also when the tenant is left to the key
(found in review: the tenant lookup's 404 hid the hint behind "missing --tenant")."""

from __future__ import annotations

import http.server
from typing import Any

import pytest

from joinplane_cli import main
from tests.support import serving

KEY = "jpk_01m8r0yd50q39mxq4da14f37wb_" + "0" * 32


@pytest.mark.parametrize("command", [["apikeys", "whoami"], ["requests", "list"], ["pools", "list"]])
def test_a_server_that_answers_404_to_everything_is_named_as_not_a_joinplane_api(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a web server that is not Joinplane: 404 to everything, in no Joinplane envelope
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(404)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"not found")

        def log_message(self, *_: Any) -> None:
            pass

    with serving(NotFound) as url:
        # When an operator command runs against it without --tenant
        code = main.main([*command, "--url", url, "--api-key", KEY])
    # Then it stops with a usage error that asks whether --url is the API's base URL
    err = capsys.readouterr().err
    assert code == 2, err
    assert "a route every Joinplane API has" in err and "is --url the API's base URL" in err, err

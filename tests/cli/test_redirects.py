"""A redirect never carries the CLI's credentials anywhere (found in review): urllib follows a 302
on a POST with every header, the API key's `Authorization` and a renewal's `Joinplane-Proof`
included. Joinplane's API never redirects, so the CLI follows none and says why it stopped."""

from __future__ import annotations

import http.server
from typing import Any

import pytest

from joinplane_cli import main
from tests.support import serving

KEY = "jpk_01m8r0yd50q39mxq4da14f37wb_" + "0" * 32


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_and_the_key_goes_nowhere(
    status: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a listener that records every request, and a server that redirects everything to it
    seen: list[dict[str, str]] = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(dict(self.headers.items()))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST  # urllib turns a POST's 301/302/303 into a GET, headers and all

        def log_message(self, *_: Any) -> None:
            pass

    with serving(Listener) as elsewhere:

        class Redirector(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(status)
                self.send_header("Location", elsewhere + "/steal")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        with serving(Redirector) as url:
            # When an operator command runs against the redirecting server
            code = main.main(["apikeys", "whoami", "--url", url, "--api-key", KEY])

    # Then it fails, saying the server redirected and nothing was sent there
    err = capsys.readouterr().err
    assert code != 0
    assert "redirect" in err and "nothing was sent there" in err, err
    # And the listener never saw a request, let alone the key
    assert seen == []

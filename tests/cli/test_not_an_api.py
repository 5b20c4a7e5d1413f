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
    # Then it stops with exit 1, as docs/cli.md says of every wrong-URL hint, asking whether that URL,
    # typed as --url, is the API's base URL
    err = capsys.readouterr().err
    assert code == 1, err
    assert "a route every Joinplane API has" in err and f"is {url} (from --url) the API's base URL" in err, (
        err
    )


def test_the_hint_names_the_url_and_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a profile whose URL is a server that is not Joinplane, and no JOINPLANE_URL
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    with serving(NotFound) as url:
        config = tmp_path / "config.toml"
        config.write_text(f'[lab]\nurl = "{url}/v1"\n')
        monkeypatch.setenv("JOINPLANE_CONFIG", str(config))
        monkeypatch.delenv("JOINPLANE_URL", raising=False)
        # When a command runs with that profile named before the command
        code = main.main(["--profile", "lab", "pools", "list", "--api-key", KEY, "--tenant", "t"])
    # Then the hint names the URL used and the profile it came from
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"is {url}/v1 (from url of [lab] in {config}) the API's base URL" in err, err

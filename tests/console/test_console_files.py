"""The console's page and files as the HTTP API serves them: strict headers, caching that
never mixes two deployments, and nothing but the console's own files, whatever the path says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from joinplane import console
from joinplane.errors import NotFound
from tests.support.runtime import Http, Local, Tee, WireReply


def get(http: Http, path: str, headers: list[tuple[str, str]] | None = None) -> WireReply:
    return Local(http.runtime, Tee()).call("GET", path, headers=headers)


def directives(policy: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in (p.strip() for p in policy.split(";")) if part}


def linked(page: bytes) -> list[str]:
    return re.findall(r'(?:href|src)="(console/[^"]+)"', page.decode())


def test_the_page_is_served_with_strict_headers(http: Http) -> None:
    # When a browser asks for the console
    reply = get(http, "/console")
    # Then it gets the page, which no one may frame, sniff, or refer onwards from
    assert reply.status == 200 and reply.header("content-type") == "text/html; charset=utf-8"
    assert b"<title>Joinplane console</title>" in reply.body
    policy = directives(reply.header("content-security-policy") or "")
    assert policy["default-src"] == ["'none'"]
    assert policy["script-src"] == ["'self'"] and policy["style-src"] == ["'self'"]
    assert policy["connect-src"] == ["'self'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"] and policy["form-action"] == ["'none'"]
    assert "unsafe" not in (reply.header("content-security-policy") or "")
    assert reply.header("x-content-type-options") == "nosniff"
    assert reply.header("referrer-policy") == "no-referrer"
    assert reply.header("x-frame-options") == "DENY"
    # And it is revalidated on every load, so it always names the current files
    assert reply.header("cache-control") == "no-cache"
    etag = reply.header("etag")
    assert etag
    again = get(http, "/console", [("If-None-Match", etag)])
    assert again.status == 304 and again.body == b""


def test_every_file_the_page_names_is_served_under_its_version_for_a_year(http: Http) -> None:
    # Given the page and the files it links (stylesheet, icon, the main module)
    page = get(http, "/console").body
    files = linked(page)
    assert len(files) == 3
    version = files[0].split("/")[1]
    assert all(f.split("/")[1] == version for f in files)
    for path in files:
        # When each is fetched
        reply = get(http, "/" + path)
        # Then it is served with its type, cacheable for good, under the same headers as the page
        assert reply.status == 200, path
        assert reply.header("cache-control") == "public, max-age=31536000, immutable"
        assert reply.header("x-content-type-options") == "nosniff"
        assert reply.header("content-security-policy") == console.CONTENT_SECURITY_POLICY
    module = get(http, f"/console/{version}/js/main.js")
    assert module.header("content-type") == "text/javascript; charset=utf-8"
    # And a module the main module imports inherits the version through its relative URL
    assert b'from "./api.js"' in module.body
    assert get(http, f"/console/{version}/js/api.js").status == 200


@pytest.mark.parametrize(
    "tail",
    [
        "../../joinplane/console.py",
        "js/../../joinplane/console.py",
        "%2e%2e/%2e%2e/joinplane/console.py",
        "..%2f..%2fjoinplane%2fconsole.py",
        "js/..%2f..%2f..%2f..%2f..%2ftemplate.yaml",
        "%2fetc%2fpasswd",
        "/etc/passwd",
        "..\\..\\joinplane\\console.py",
        "js/main.js%00.html",
        "index.html",
        "js",
        "js/",
        "nothing.js",
    ],
)
def test_a_path_outside_the_console_files_is_not_found(http: Http, tail: str) -> None:
    # Given the current version (a wrong version is refused on its own, below)
    version = linked(get(http, "/console").body)[0].split("/")[1]
    # When a path tries to climb out of the console's folder, or names no file of it
    reply = get(http, f"/console/{version}/{tail}")
    # Then it is a plain 404 that shows nothing of any file
    assert reply.status == 404, tail
    assert reply.body == b"Not Found"
    assert reply.header("x-content-type-options") == "nosniff"


def test_an_old_version_is_not_found_rather_than_cached_with_new_content(http: Http) -> None:
    reply = get(http, "/console/0123456789abcdef/js/main.js")
    assert reply.status == 404


def test_only_visible_files_of_known_types_inside_the_folder_are_served(tmp_path: Path) -> None:
    # Given a console folder with a page, a module, a hidden file, a file of no known type, and a
    # symlink to a file outside it
    root = tmp_path / "console"
    (root / "js").mkdir(parents=True)
    (root / "index.html").write_text("<link href='console/%VERSION%/a.css'>")
    (root / "js" / "main.js").write_text("export {};")
    (root / "js" / ".secret.js").write_text("hidden")
    (root / "notes.md").write_text("not served")
    (tmp_path / "outside.js").write_text("outside")
    (root / "js" / "link.js").symlink_to(tmp_path / "outside.js")
    version = console.version({"index.html": root / "index.html", "js/main.js": root / "js" / "main.js"})
    # Then the page names the version of what is servable, and only the module is served
    assert console.page(root=root).body == f"<link href='console/{version}/a.css'>".encode()
    assert console.asset(f"{version}/js/main.js", root=root).body == b"export {};"
    for name in ("js/.secret.js", "notes.md", "js/link.js", "../outside.js"):
        with pytest.raises(NotFound):
            console.asset(f"{version}/{name}", root=root)
    # And a change to any file changes the version, so browsers fetch it anew
    (root / "js" / "main.js").write_text("export const changed = 1;")
    with pytest.raises(NotFound):
        console.asset(f"{version}/js/main.js", root=root)
    found = re.search(r"console/([0-9a-f]{16})/", console.page(root=root).body.decode())
    assert found and found[1] != version
    assert console.asset(f"{found[1]}/js/main.js", root=root).body == b"export const changed = 1;"

"""The operator console's files (docs/console.md): the page at `GET /console`, its stylesheet and
modules at `GET /console/<version>/<path>`, with the headers that confine them.

The console has no privileges: every API call it makes carries the operator's own key, so this
serves static files and nothing else. They ship in the domain layer, beside this package
(`layers/domain/joinplane_console/`, `/opt/python/joinplane_console` in Lambda), so the function,
the local runtime and the packaged-artefact tests all find them at one path relative to this file.

What may be served is the set of files under that folder with a known type, listed per request:
a request names a key of that listing or gets a 404, so no `..`, encoded slash or symlink in a path
can reach another file. `<version>` is a digest of every file: the page (never cached without
revalidation) names it, each module's relative imports inherit it, so the assets can be cached
for a year and a deployment still never mixes old and new modules.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joinplane.errors import JoinplaneError, NotFound

ROOT = Path(__file__).resolve().parent.parent / "joinplane_console"
PAGE = "index.html"
# The page's placeholder for the asset version (`console/%VERSION%/console.css`).
VERSION_MARK = b"%VERSION%"

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}

# No inline script or style at all (the page's markup has none; modules build the DOM with
# textContent, never HTML strings, which Trusted Types enforces in browsers that know it); the
# API is the page's own origin; nothing may frame it, submit a form out of it or rebase it.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    )
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "permissions-policy": "camera=(), microphone=(), geolocation=(), usb=(), payment=()",
    "strict-transport-security": "max-age=31536000",
}
# The page is revalidated on every load (it names the current asset version); the versioned assets
# never change under their URL.
PAGE_CACHE = "no-cache"
ASSET_CACHE = "public, max-age=31536000, immutable"


@dataclass(frozen=True)
class Served:
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


def _files(root: Path) -> dict[str, Path]:
    """Every servable file under `root` by its path relative to it (`js/main.js`): regular files
    of a known type, not hidden, reached without following a symlink."""
    found: dict[str, Path] = {}
    for directory, folders, names in os.walk(root, followlinks=False):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in names:
            path = Path(directory) / name
            if name.startswith(".") or path.suffix not in TYPES or path.is_symlink():
                continue
            found[path.relative_to(root).as_posix()] = path
    return found


def version(files: dict[str, Path]) -> str:
    """A digest of every file's name and content: changes whenever any asset does."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _answer(body: bytes, content_type: str, cache: str, if_none_match: str | None) -> Served:
    etag = _etag(body)
    headers = {**SECURITY_HEADERS, "cache-control": cache, "etag": etag}
    if if_none_match is not None and etag in (tag.strip() for tag in if_none_match.split(",")):
        return Served(304, content_type, b"", headers)
    return Served(200, content_type, body, headers)


def page(if_none_match: str | None = None, root: Path = ROOT) -> Served:
    """`GET /console`: its relative URLs (`console/<version>/...`, the API's `api/compute/...`)
    resolve from there, whatever prefix a custom domain puts before it."""
    files = _files(root)
    if PAGE not in files:
        raise NotFound("the console is not installed")
    body = files[PAGE].read_bytes().replace(VERSION_MARK, version(files).encode())
    return _answer(body, TYPES[".html"], PAGE_CACHE, if_none_match)


def asset(path: str, if_none_match: str | None = None, root: Path = ROOT) -> Served:
    """`GET /console/{path+}`: `<version>/<file>`, the file only under the current version."""
    wanted_version, _, name = path.partition("/")
    files = _files(root)
    if name == PAGE or name not in files or wanted_version != version(files):
        # An old version is gone rather than answered with new content that a browser would keep
        # for a year under the old URL; reloading the page names the current one.
        raise NotFound("no such console file")
    content_type = TYPES[files[name].suffix]
    return _answer(files[name].read_bytes(), content_type, ASSET_CACHE, if_none_match)


def render_error(error: JoinplaneError) -> dict[str, Any]:
    """A refusal as plain text, under the same headers as the files: a 404 for a missing file,
    a 500 for anything else (the console takes no input that could be wrong)."""
    status = 404 if isinstance(error, NotFound) else 500
    text = "Not Found" if status == 404 else "Internal Server Error"
    return {
        "statusCode": status,
        "headers": {
            "content-type": "text/plain; charset=utf-8",
            "cache-control": "no-store",
            **SECURITY_HEADERS,
        },
        "body": text,
        "isBase64Encoded": False,
    }

"""The operator console in a real browser: Debian's Chromium driven by playwright's Python API
(`browser()`), pages that record every console error (`Watched`), axe-core run in the page
(`axe_violations`), and join requests made the way a machine makes them (`pending_request`)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .csr import openssl_csr
from .runtime import Http

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("JOINPLANE_CHROMIUM", "/usr/bin/chromium"))
# axe-core, pinned by tests/console/package-lock.json and installed by `make tools` (npm ci).
AXE = ROOT / "tests" / "console" / "node_modules" / "axe-core" / "axe.min.js"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 800}
WIDE = {"width": 1920, "height": 1080}
PHONE = {"width": 390, "height": 844}


@contextmanager
def browser() -> Iterator[Any]:
    """One headless Chromium, the system's own (never a browser playwright downloads)."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} is missing: `make tools` installs Debian's chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Watched:
    """A page in a context of its own (its own sessionStorage), with every console error, page
    error and CSP violation it reported."""

    page: Any
    errors: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.page.context.close()


def open_page(running_browser: Any, url: str, viewport: dict[str, int], dark: bool = False) -> Watched:
    context = running_browser.new_context(viewport=viewport, color_scheme="dark" if dark else "light")
    # A step that fails fails in seconds, not playwright's default 30.
    context.set_default_timeout(10_000)
    page = context.new_page()
    watched = Watched(page)
    page.on("console", lambda m: watched.errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: watched.errors.append(f"page error: {e}"))
    page.goto(url)
    return watched


def sign_in(page: Any, key: str) -> None:
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()


def axe_violations(page: Any, impacts: tuple[str, ...] = ("serious", "critical")) -> list[dict[str, Any]]:
    """axe-core's violations of the page as it is now, at the given impacts (WCAG 2.x A and AA
    rules and axe's best practices), each with the elements it names."""
    if not AXE.exists():
        raise RuntimeError(f"{AXE} is missing: `make tools` installs it (npm ci in tests/console)")
    page.evaluate(AXE.read_text())
    found = page.evaluate("async () => JSON.stringify((await axe.run(document)).violations)")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]]}
        for v in json.loads(found)
        if v["impact"] in impacts
    ]


def no_horizontal_scroll(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


# Every rendered word (a run of non-space characters in one text node) whose glyphs sit on more than
# one line: a label broken as "Appro/ve", an id or a pool name cut in two. With `fit`, a word wider
# than the block it is laid out in (a phone's card, whose width no neighbour squeezes) is not
# reported: it cannot fit on one line there. A table cell is no such block (its neighbours squeeze
# it), so a word broken in one is always reported.
_BROKEN_WORDS = """(fit) => {
  const broken = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  const block = (el) => {
    while (el.parentElement && getComputedStyle(el).display.startsWith("inline")) el = el.parentElement;
    return el;
  };
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!el || el.closest("option, script, style, .visually-hidden") || !el.getClientRects().length) continue;
    for (const match of node.data.matchAll(/\\S{2,}/g)) {
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const rects = [...range.getClientRects()].filter((r) => r.width > 0);
      const tops = rects.map((r) => r.top);
      if (tops.length < 2 || Math.max(...tops) - Math.min(...tops) <= 2) continue;
      const width = rects.reduce((sum, r) => sum + r.width, 0);
      const holder = block(el);
      if (fit && getComputedStyle(holder).display !== "table-cell" && width > holder.clientWidth) continue;
      broken.push(`${match[0]} (${el.tagName.toLowerCase()}.${el.className})`);
    }
  }
  return broken;
}"""


def broken_words(page: Any, fit: bool = False) -> list[str]:
    """The words the page shows broken across lines (see _BROKEN_WORDS); none, on a page that
    lays out well. `fit`: except the words too wide for their block (on a phone)."""
    return list(page.evaluate(_BROKEN_WORDS, fit))


def page_width(page: Any) -> int:
    """How wide the page's content is, in CSS pixels: more than the window's means it scrolls sideways."""
    return int(page.evaluate("document.documentElement.scrollWidth"))


def new_pool(http: Http, pool: str, site: str = "console-site") -> str:
    status, body = http.post(
        "/api/compute/pools/create",
        {"tenantId": "dev", "poolId": pool, "siteId": site, "name": pool.title(), "workspaceId": "w"},
        http.admin,
    )
    assert status == 200, body
    return pool


def pending_request(
    http: Http,
    pool: str | None,
    workdir: Path,
    hostname: str,
    site: str | None = None,
    description: str = "",
    **facts: Any,
) -> str:
    """A machine's join that waits for an operator (a token that requires approval, described by
    `description`), as the agent sends it; the join request's id. With `site` instead of `pool`: a
    site token's, which no pool has claimed yet."""
    where = {"poolId": pool} if pool else {"siteId": site}
    created = {"tenantId": "dev", **where, "requireApproval": True, "description": description}
    _, token = http.post("/api/compute/joinTokens/create", created, http.admin)
    directory = workdir / uuid.uuid4().hex[:8]
    directory.mkdir(parents=True)
    csr = openssl_csr(directory, f"/CN={hostname}")
    body = {"joinToken": token["token"], "csr": csr, "hostname": hostname, **facts}
    status, answer = http.post("/machines/join", body)
    assert status == 202, answer
    return str(answer["joinRequest"]["requestId"])


def request_of(http: Http, request_id: str) -> dict[str, Any]:
    status, body = http.post(
        "/api/compute/joinRequests/get", {"tenantId": "dev", "requestId": request_id}, http.admin
    )
    assert status == 200, body
    return dict(body)

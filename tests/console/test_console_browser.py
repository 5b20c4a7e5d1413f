"""The operator console in a real browser: Debian's Chromium against the local runtime, as an operator uses
the console: sign in, the queue across pools, approve, reject on a phone, a wrong key, the other
views, keyboard only, and axe-core finding no serious or critical accessibility violation."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.console import (
    DESKTOP,
    PHONE,
    Watched,
    axe_violations,
    new_pool,
    no_horizontal_scroll,
    open_page,
    page_width,
    pending_request,
    request_of,
    sign_in,
)
from tests.support.csr import openssl_csr
from tests.support.polling import wait_until
from tests.support.runtime import Http

# `make console-screenshot` sets this to docs/console-queue.png (the README's picture of the queue).
SCREENSHOT = os.environ.get("JOINPLANE_CONSOLE_SCREENSHOT")


@pytest.fixture
def pages(chromium: Any, http: Http) -> Iterator[list[Watched]]:
    """Pages a test opens; each closes with its test, and none may have logged an error unless the
    test took it out of `errors` itself."""
    opened: list[Watched] = []
    yield opened
    for watched in opened:
        watched.close()
    for watched in opened:
        assert watched.errors == [], watched.errors


def console(
    chromium: Any, http: Http, pages: list[Watched], viewport: dict[str, int], dark: bool = False
) -> Any:
    watched = open_page(chromium, http.runtime.url + "/console", viewport, dark)
    pages.append(watched)
    return watched


def queue_rows(page: Any) -> Any:
    return page.get_by_role("table").locator("tbody tr")


def test_a_wrong_key_is_told_plainly_and_kept_nowhere(
    chromium: Any, http: Http, pages: list[Watched]
) -> None:
    # Given the console, signed out
    watched = console(chromium, http, pages, DESKTOP)
    page = watched.page
    assert axe_violations(page) == []
    # When a key that is not valid is used
    sign_in(page, "jpk_01m8qz7dc73fxgbcde80whpnhj_00000000000000000000000000000000")
    # Then the operator is told so in plain words, and the key is kept nowhere
    page.get_by_text("This API key is not valid.").wait_for()
    assert page.get_by_label("API key").get_attribute("aria-invalid") == "true"
    assert page.evaluate("sessionStorage.length + localStorage.length") == 0
    assert page.context.cookies() == [] and "jpk_" not in page.url
    # And so is a key that was revoked, even one the API's authorizer still has cached
    _, created = http.post(
        "/api/compute/apiKeys/create", {"tenantId": "dev", "grants": ["compute:*@tenant"]}, http.admin
    )
    assert http.post("/api/compute/pools/list", {"tenantId": "dev"}, created["key"])[0] == 200
    revoke = {"tenantId": "dev", "keyId": created["keyId"]}
    assert http.post("/api/compute/apiKeys/revoke", revoke, http.admin)[0] == 200
    sign_in(page, created["key"])
    page.get_by_text("This API key is not valid.").wait_for()
    assert page.evaluate("sessionStorage.length") == 0
    # (the browser reports the API's 401s itself: the only console lines this test expects)
    assert len(watched.errors) == 2 and all("401" in e for e in watched.errors), watched.errors
    watched.errors.clear()


def test_the_queue_across_two_pools_and_an_approval(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given pending requests in two pools, the older first
    new_pool(http, "racks"), new_pool(http, "gpus")
    older = pending_request(
        http, "racks", tmp_path, "rack-a12", cpuCount=16, memoryMb=65536, os="linux", arch="amd64"
    )
    newer = pending_request(
        http, "gpus", tmp_path, "gpu-b07", cpuCount=64, memoryMb=262144, gpuCount=8, os="linux", arch="amd64"
    )
    # When an operator signs in on a laptop-sized window
    page = console(chromium, http, pages, DESKTOP).page
    sign_in(page, http.admin)
    page.get_by_role("button", name="Approve gpu-b07").wait_for()
    # Then the queue is one table, oldest first, each row with host, pool, resources, the
    # attestors' reasons, age, expiry and its own Approve and Reject buttons
    rows = queue_rows(page)
    hosts = [rows.nth(i).locator("td a.host").inner_text() for i in range(rows.count())]
    assert hosts.index("rack-a12") < hosts.index("gpu-b07")
    row = page.locator(f'tr[data-request="{newer}"]')
    cells = row.locator("td")
    assert [cells.nth(i).get_attribute("data-label") for i in range(cells.count())] == [
        "Select", "Machine", "Pool and token", "Attestors", "State", "Actions",
    ]  # fmt: skip
    text = row.inner_text()
    assert "gpus" in text and "64 CPU" in text and "256 GiB" in text and "8 GPU" in text
    assert newer in text and "requires an operator's approval" in text
    when = cells.nth(4).inner_text()
    assert re.search(r"requested .* ago\b", when) and "expires in " in when
    assert axe_violations(page) == []
    assert no_horizontal_scroll(page)
    if SCREENSHOT:
        page.screenshot(path=SCREENSHOT)
    # When the newer one is approved for 4 hours with a reason, through the dialog
    row.get_by_role("button", name="Approve").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Reason (optional)").fill("known rack, ticket 4711")
    dialog.get_by_label("Approval valid for").select_option(label="4 hours")
    assert axe_violations(page) == []
    dialog.get_by_role("button", name="Approve").click()
    # Then the console says what happened, the API has it approved by this key, and it stays in
    # the queue, approved, until the machine comes back for it
    page.get_by_role("status").get_by_text("Approved gpu-b07 into gpus.").wait_for()
    approved = request_of(http, newer)
    assert approved["state"] == "approved" and approved["reason"] == "known rack, ticket 4711"
    assert approved["decidedBy"].startswith("key_")
    assert request_of(http, older)["state"] == "pending"
    row.locator(".badge.approved").wait_for()
    assert "known rack, ticket 4711" in row.inner_text()
    # And the other states are a filter away
    page.get_by_label("Show requests").select_option("pending")
    row.wait_for(state="detached")
    page.get_by_label("Show requests").select_option("approved")
    page.locator(f'tr[data-request="{newer}"]').wait_for()


def test_a_sites_unclaimed_request_is_approved_into_a_pool_of_that_site(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given two pools of one site and a request made with the site's token, which no pool has claimed
    new_pool(http, "floor-a", site="floor"), new_pool(http, "floor-b", site="floor")
    request_id = pending_request(http, None, tmp_path, "floor-scanner", site="floor")
    page = console(chromium, http, pages, DESKTOP).page
    sign_in(page, http.admin)
    # Then the queue shows it as the site's, unclaimed
    row = page.locator(f'tr[data-request="{request_id}"]')
    assert "site floor unclaimed" in row.locator('td[data-label="Pool and token"]').inner_text()
    # When it is approved, the dialog asks which of the site's pools gets it
    row.get_by_role("button", name="Approve").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Pool").select_option("floor-b")
    dialog.get_by_role("button", name="Approve").click()
    page.get_by_text("Approved floor-scanner into floor-b.").wait_for()
    # Then that pool has claimed it, approved
    approved = request_of(http, request_id)
    assert (approved["state"], approved["poolId"]) == ("approved", "floor-b")


def test_a_rejection_with_a_reason_on_a_phone_in_the_dark(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given a pending request, and an operator on a phone with a dark theme
    new_pool(http, "edge")
    request_id = pending_request(http, "edge", tmp_path, "edge-kiosk-3", cpuCount=4, memoryMb=8192)
    page = console(chromium, http, pages, PHONE, dark=True).page
    sign_in(page, http.admin)
    row = page.locator(f'tr[data-request="{request_id}"]')
    row.wait_for()
    # Then nothing scrolls sideways and nothing is inaccessible
    assert no_horizontal_scroll(page)
    assert axe_violations(page) == []
    # When Reject is chosen without a reason, the dialog says one is needed and stays open
    row.get_by_role("button", name="Reject").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Reject").click()
    dialog.get_by_text("Give a reason for the rejection.").wait_for()
    assert request_of(http, request_id)["state"] == "pending"
    assert no_horizontal_scroll(page)
    # And with one, the request is rejected with that reason
    dialog.get_by_label("Reason").fill("not one of ours")
    dialog.get_by_role("button", name="Reject").click()
    row.wait_for(state="detached")
    rejected = request_of(http, request_id)
    assert rejected["state"] == "rejected" and rejected["reason"] == "not one of ours"


def test_the_queue_refreshes_itself_and_says_what_changed(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given a signed-in operator looking at the queue
    new_pool(http, "lab")
    first = pending_request(http, "lab", tmp_path, "lab-01")
    page = console(chromium, http, pages, DESKTOP).page
    sign_in(page, http.admin)
    page.locator(f'tr[data-request="{first}"]').wait_for()
    # When a machine asks to join and another operator decides the first request elsewhere
    arrived = pending_request(http, "lab", tmp_path, "lab-02")
    status, _ = http.post(
        "/api/compute/joinRequests/reject",
        {"tenantId": "dev", "poolId": "lab", "requestId": first, "reason": "elsewhere"},
        http.admin,
    )
    assert status == 200
    # Then within 10 s, without a reload, the new one shows up marked new and the queue says so
    # (one refresh may see the arrival alone, never the rejection alone: it happened after)
    page.locator(f'tr[data-request="{arrived}"].fresh').wait_for(timeout=10_000)
    page.locator("#queue-changes", has_text="1 new request").wait_for(timeout=10_000)
    # And the decided one leaves, and the queue says that too
    page.locator(f'tr[data-request="{first}"]').wait_for(state="detached", timeout=10_000)
    page.locator("#queue-changes", has_text="1 left the open list").wait_for(timeout=10_000)


def test_keyboard_only(chromium: Any, http: Http, pages: list[Watched], tmp_path: Path) -> None:
    # Given a pending request and an operator without a mouse
    new_pool(http, "keys")
    request_id = pending_request(http, "keys", tmp_path, "kbd-host")
    page = console(chromium, http, pages, DESKTOP).page
    # When they type the key (the field has focus) and press Enter
    page.keyboard.type(http.admin)
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Approve kbd-host").wait_for()
    # And Tab to the request's Approve button and press Enter
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.getAttribute('aria-label')") == "Approve kbd-host":
            break
    else:
        raise AssertionError("Tab never reached Approve kbd-host")
    page.keyboard.press("Enter")
    # Then the dialog has focus in its first field; Escape closes it and focus goes back
    page.get_by_role("dialog").wait_for()
    assert page.evaluate("document.activeElement.name") == "reason"
    page.keyboard.press("Escape")
    page.get_by_role("dialog").wait_for(state="detached")
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == "Approve kbd-host"
    # And Enter, a reason and Enter again approves it
    page.keyboard.press("Enter")
    page.keyboard.type("keyboard approval")
    page.keyboard.press("Enter")
    page.get_by_text("Approved kbd-host into keys.").wait_for()
    assert request_of(http, request_id)["state"] == "approved"


def test_sign_out_forgets_the_key(chromium: Any, http: Http, pages: list[Watched]) -> None:
    # Given a signed-in operator: the key is in this tab's sessionStorage only
    page = console(chromium, http, pages, DESKTOP).page
    sign_in(page, http.admin)
    page.get_by_role("button", name="Sign out").wait_for()
    assert page.evaluate("Object.values(sessionStorage)") == [http.admin]
    assert page.evaluate("localStorage.length") == 0 and page.context.cookies() == []
    assert http.admin not in page.url
    # And it says whose key it is, as the API told it
    assert "tenant dev" in page.locator("#who").inner_text()
    # When they sign out
    page.get_by_role("button", name="Sign out").click()
    # Then the key is gone, also after a reload
    page.get_by_label("API key").wait_for()
    assert page.evaluate("sessionStorage.length") == 0
    page.reload()
    page.get_by_label("API key").wait_for()
    assert page.get_by_role("button", name="Sign out").is_hidden()


def test_tokens_machines_pools_and_the_audit_trail(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given a pool, signed in, on the join tokens view (clipboard allowed, as a user would)
    new_pool(http, "views")
    page = console(chromium, http, pages, DESKTOP).page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    sign_in(page, http.admin)
    page.get_by_role("link", name="Join tokens").click()
    page.get_by_label("Pool").select_option("views")
    # When a token is created
    page.get_by_label("Description").fill("rack 12 batch")
    page.get_by_role("button", name="Create token").click()
    # Then its secret is shown once, with a button that copies it
    secret = page.get_by_label("Secret")
    secret.wait_for()
    token = secret.input_value()
    assert token.startswith("jpt_")
    page.get_by_role("button", name="Copy").click()
    page.get_by_text("Copied.").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == token
    assert axe_violations(page) == []
    page.get_by_role("button", name="Done").click()
    assert page.get_by_label("Secret").count() == 0 and token not in page.content()
    # And it is listed, and revoking it (confirmed in a dialog) revokes it
    row = page.get_by_role("row").filter(has_text="rack 12 batch")
    row.get_by_role("button", name="Revoke").click()
    page.get_by_role("dialog").get_by_role("button", name="Revoke").click()
    row.get_by_text("revoked").wait_for()
    # Given a machine that joined the pool with a token that needs no approval
    _, open_token = http.post(
        "/api/compute/joinTokens/create", {"tenantId": "dev", "poolId": "views"}, http.admin
    )
    directory = tmp_path / "machine"
    directory.mkdir()
    csr = openssl_csr(directory, "/CN=node-9")
    status, joined = http.post(
        "/machines/join", {"joinToken": open_token["token"], "csr": csr, "hostname": "node-9", "cpuCount": 2}
    )
    assert status == 200, joined
    # When the machines view shows it, with its facts and certificate expiry
    page.get_by_role("link", name="Machines").click()
    page.get_by_label("Pool").select_option("views")
    page.get_by_role("button", name="Details of node-9").click()
    details = page.get_by_role("region", name="Machine node-9")
    details.get_by_text("Certificate expires").wait_for()
    assert joined["machineId"] in details.inner_text()
    assert axe_violations(page) == []
    # Then revoking it, with a reason, revokes it
    page.get_by_role("button", name="Revoke node-9").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Reason").fill("decommissioned")
    dialog.get_by_role("button", name="Revoke").click()
    page.get_by_role("button", name="Revoke node-9").wait_for(state="detached")
    status, machine = http.post(
        "/api/compute/machines/get", {"tenantId": "dev", "machineId": joined["machineId"]}, http.admin
    )
    assert machine["state"] == "revoked"
    # And the pools view lists the pool, with its details
    page.get_by_role("link", name="Pools").click()
    page.get_by_role("button", name="Details of views").click()
    page.get_by_role("region", name="Pool views").get_by_text("console-site").wait_for()
    assert axe_violations(page) == []
    # And once the revocation has reached the audit trail (asynchronously, through the bus)
    wait_until(
        lambda: http.post(
            "/api/compute/auditEvents/list",
            {"tenantId": "dev", "poolId": "views", "detailType": "security.machine.revoked"},
            http.admin,
        )[1]["events"]
    )
    # Then the audit view shows it in its timeline, filtered by event type
    page.get_by_role("link", name="Audit trail").click()
    page.get_by_label("Event type").select_option("security.machine.revoked")
    timeline = page.get_by_role("list", name="Security events, newest first")
    timeline.get_by_text("machine revoked").first.wait_for()
    assert axe_violations(page) == []


def test_the_phone_layout_of_every_view_has_no_sideways_scroll(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given a pool with a join token in it, a machine that joined it, and that join in the audit trail
    # (long ids, serials and event details are what widened the page, so every view holds some)
    new_pool(http, "phone")
    _, token = http.post("/api/compute/joinTokens/create", {"tenantId": "dev", "poolId": "phone"}, http.admin)
    directory = tmp_path / "machine"
    directory.mkdir()
    csr = openssl_csr(directory, "/CN=phone-node")
    joined = {"joinToken": token["token"], "csr": csr, "hostname": "phone-node", "cpuCount": 4}
    status, machine = http.post("/machines/join", joined)
    assert status == 200, machine
    wait_until(
        lambda: http.post(
            "/api/compute/auditEvents/list",
            {"tenantId": "dev", "poolId": "phone", "detailType": "security.machine.joined"},
            http.admin,
        )[1]["events"]
    )
    # When an operator looks at each view on a phone, with its content showing
    page = console(chromium, http, pages, PHONE).page
    sign_in(page, http.admin)
    page.get_by_role("link", name="Join tokens").click()
    page.get_by_role("heading", level=1, name="Join tokens").wait_for()
    page.get_by_label("Pool", exact=True).select_option("phone")
    page.locator("td", has_text=token["tokenId"]).wait_for()
    widths = {"Join tokens": page_width(page)}
    page.get_by_role("link", name="Machines").click()
    page.get_by_role("heading", level=1, name="Machines").wait_for()
    page.get_by_label("Pool", exact=True).select_option("phone")
    page.get_by_role("button", name="Details of phone-node").click()
    page.get_by_role("region", name="Machine phone-node").get_by_text(machine["machineId"]).wait_for()
    widths["Machines"] = page_width(page)
    page.get_by_role("link", name="Pools").click()
    page.get_by_role("heading", level=1, name="Pools").wait_for()
    page.get_by_role("button", name="Details of phone").click()
    page.get_by_role("region", name="Pool phone").get_by_text("console-site").wait_for()
    widths["Pools"] = page_width(page)
    page.get_by_role("link", name="Audit trail").click()
    page.get_by_role("heading", level=1, name="Audit trail").wait_for()
    page.get_by_label("Pool", exact=True).select_option("phone")
    page.get_by_label("Event type").select_option("security.machine.joined")
    event = page.get_by_role("list", name="Security events, newest first").locator("details").first
    event.locator("summary").click()
    event.get_by_text(machine["machineId"]).first.wait_for()
    widths["Audit trail"] = page_width(page)
    page.get_by_role("link", name="Queue").click()
    page.get_by_role("heading", level=1).wait_for()
    page.wait_for_load_state("networkidle")
    widths["Queue"] = page_width(page)
    # Then none of them is wider than the phone: nothing scrolls sideways
    assert {view: px for view, px in widths.items() if px > PHONE["width"]} == {}
    # And none has a serious accessibility violation on the phone either
    assert axe_violations(page) == []


def test_a_key_limited_to_one_pools_join_tokens_works_in_that_pool(
    chromium: Any, http: Http, pages: list[Watched]
) -> None:
    # Given a key that may manage the join tokens of one pool and read nothing else (not even the pool)
    new_pool(http, "narrow")
    grants = ["compute:join-tokens:*@compute-pool/narrow"]
    _, narrow = http.post("/api/compute/apiKeys/create", {"tenantId": "dev", "grants": grants}, http.admin)
    _, nothing = http.post(
        "/api/compute/apiKeys/create", {"tenantId": "dev", "grants": ["iam:api-keys:read@tenant"]}, http.admin
    )
    page = console(chromium, http, pages, DESKTOP).page
    sign_in(page, narrow["key"])
    # When its operator opens the join tokens view
    page.get_by_role("link", name="Join tokens").click()
    page.get_by_role("heading", level=1, name="Join tokens").wait_for()
    # Then the pool its grant names is offered, and a token can be made there
    picker = page.get_by_label("Pool", exact=True)
    page.locator("#view select option", has_text="narrow").wait_for(state="attached")
    assert picker.input_value() == "narrow"
    page.get_by_label("Description").fill("narrow batch")
    page.get_by_role("button", name="Create token").click()
    page.get_by_label("Secret").wait_for()
    page.get_by_role("button", name="Done").click()
    page.get_by_role("row").filter(has_text="narrow batch").wait_for()
    # And a key whose grants reach no pool is told just that, not to create a pool
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, nothing["key"])
    page.get_by_role("link", name="Join tokens").click()
    page.get_by_text("This API key sees no pools: none of its grants reaches one.").wait_for()
    page.get_by_role("link", name="Machines").click()
    page.get_by_text("This API key sees no pools: none of its grants reaches one.").wait_for()


def test_a_draft_policy_is_simulated_over_a_pools_joins(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given a pool with a saved policy, where one machine waits for an operator and another was admitted
    new_pool(http, "trial")
    pending_request(http, "trial", tmp_path, "gpu-node-1.rack7.example.com", cpuCount=8)
    _, token = http.post("/api/compute/joinTokens/create", {"tenantId": "dev", "poolId": "trial"}, http.admin)
    admitted = {"joinToken": token["token"], "machineFingerprint": "fp-trial-1", "hostname": "cpu-node-1"}
    assert http.post("/machines/join", admitted)[0] == 200
    saved = [{"name": "saved-rule", "when": "false", "decision": "deny", "reason": ""}]
    status, _ = http.post(
        "/api/compute/pools/update", {"tenantId": "dev", "poolId": "trial", "joinPolicy": saved}, http.admin
    )
    assert status == 200
    watched = console(chromium, http, pages, DESKTOP)
    page = watched.page
    sign_in(page, http.admin)
    page.get_by_role("link", name="Policy simulation").click()
    page.get_by_label("Pool", exact=True).select_option("trial")
    draft = page.get_by_label("Draft policy (JSON rules)")
    # Then the draft starts as the pool's saved policy
    wait_until(lambda: "saved-rule" in draft.input_value())
    # When a draft with a rule that does not parse is simulated
    draft.fill('[{"name": "typo", "when": "request.hostname ==", "decision": "approve"}]')
    page.get_by_role("button", name="Simulate").click()
    # Then the API's refusal is shown, naming the rule (the browser logs the 400 it got)
    page.get_by_role("alert").filter(has_text="typo").wait_for()
    assert len(watched.errors) == 1 and "400" in watched.errors[0], watched.errors
    watched.errors.clear()
    # When the draft approves the GPU nodes
    rule = {"name": "gpu-nodes", "when": 'request.hostname.startsWith("gpu-")', "decision": "approve"}
    draft.fill(json.dumps([rule]))
    page.get_by_role("button", name="Simulate").click()
    # Then the counts say one join of two would change, and the table says which and by which rule
    summary = page.locator("#view").get_by_text("2 joins: 2 would be admitted, 0 deferred, 0 denied.")
    assert "1 would change: 1 deferred → admit" in summary.inner_text()
    changed = page.get_by_role("row").filter(has_text="gpu-node-1")
    assert "gpu-nodes" in changed.inner_text() and "changes" in changed.inner_text()
    page.get_by_label("Only joins whose outcome would change").check()
    assert page.get_by_role("row").filter(has_text="cpu-node-1").count() == 0
    assert axe_violations(page) == []
    # And on a phone nothing scrolls sideways
    page.set_viewport_size(PHONE)
    assert page_width(page) <= PHONE["width"]

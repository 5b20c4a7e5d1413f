"""Telling join requests apart in the console: each row names its request and token, a request has a
page of its own with everything it carries and every attestor's verdict (and, in a pool needing two
approvals, who approved so far), several are decided at once, the audit trail speaks in hostnames
and key descriptions, and no view breaks a word in two when it is full of real, long data (at 390,
1280 and 1920 pixels wide)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.console import (
    DESKTOP,
    PHONE,
    WIDE,
    Watched,
    axe_violations,
    broken_words,
    new_pool,
    no_horizontal_scroll,
    open_page,
    pending_request,
    request_of,
    sign_in,
)
from tests.support.csr import openssl_csr
from tests.support.http import sign_proof
from tests.support.polling import wait_until
from tests.support.runtime import Http
from tests.support.tpm_blobs import SoftManufacturer, SoftTpm, with_answer

# What a real fleet looks like: fully qualified hostnames, descriptive pool ids and token texts.
POOL = "gpu-rack-1-frankfurt-hall-b"
SERIAL = "SN-4C4C4544-0051-3510-8052-B4C04F4B4E32"
MACS = ["3c:ec:ef:4a:92:10", "3c:ec:ef:4a:92:11"]
TOKEN_TEXT = "GPU rack 12 batch delivered 2026-11-30, ticket OPS-4711-frankfurt"


@pytest.fixture
def pages(chromium: Any, http: Http) -> Iterator[list[Watched]]:
    opened: list[Watched] = []
    yield opened
    for watched in opened:
        watched.close()
    for watched in opened:
        assert watched.errors == [], watched.errors


def console(chromium: Any, url: str, pages: list[Watched], viewport: dict[str, int] = DESKTOP) -> Any:
    watched = open_page(chromium, url, viewport)
    pages.append(watched)
    return watched.page


def operator_key(http: Http, description: str) -> dict[str, Any]:
    grants = ["compute:*@tenant", "iam:api-keys:read@tenant", "audit:events:read@tenant"]
    body = {"tenantId": "dev", "grants": grants, "description": description}
    status, key = http.post("/api/compute/apiKeys/create", body, http.admin)
    assert status == 200, key
    return dict(key)


def approve(http: Http, key: str, request_id: str, reason: str) -> None:
    body = {"tenantId": "dev", "requestId": request_id, "reason": reason}
    status, answer = http.post("/api/compute/joinRequests/approve", body, key)
    assert status == 200, answer


def test_a_request_has_its_own_page_and_several_are_approved_at_once(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given three machines of one batch waiting in a pool, indistinguishable but for their ids
    new_pool(http, POOL)
    hosts = [f"gpu-node-0{n}.fra2.compute.example.internal" for n in (7, 8, 9)]
    ids = [
        pending_request(
            http, POOL, tmp_path, host, description=TOKEN_TEXT, cpuCount=64, memoryMb=262144, gpuCount=8,
            hardware={"serialNumber": f"{SERIAL}-{n}", "macAddresses": MACS},
        )
        for n, host in enumerate(hosts)
    ]  # fmt: skip
    key = operator_key(http, "night-shift operator, Frankfurt hall B")
    page = console(chromium, http.runtime.url + "/console", pages)
    sign_in(page, key["key"])
    # Then each row names its request and the token's description
    row = page.locator(f'tr[data-request="{ids[0]}"]')
    row.wait_for()
    assert ids[0] in row.inner_text() and TOKEN_TEXT in row.inner_text()
    # When the operator opens the first request's page
    row.get_by_role("link", name=hosts[0]).click()
    page.get_by_role("heading", level=1, name=hosts[0]).wait_for()
    # Then it has its own URL, and shows everything the request carries and every attestor's verdict
    assert page.url.endswith(f"#/requests/{ids[0]}")
    facts = page.locator("#view").inner_text()
    stored = request_of(http, ids[0])
    for shown in (ids[0], stored["tokenId"], TOKEN_TEXT, "127.0.0.1", f"{SERIAL}-0", *MACS):
        assert shown in facts, shown
    assert stored["csrPublicKeySha256"] in facts
    verdicts = page.get_by_role("table", name="Attestors' verdicts")
    # (token, hardware ids, discovery, tpm, identity, aws)
    assert verdicts.locator("tbody tr").count() == len(stored["verdicts"]) == 6
    assert "this join token requires an operator's approval" in verdicts.inner_text()
    assert {"attestor": "token", "verdict": "defer"} in stored["verdicts"]
    assert axe_violations(page) == []
    # And that URL, pasted into another operator's browser, opens the same page once signed in
    other = console(chromium, page.url, pages)
    sign_in(other, key["key"])
    other.get_by_role("heading", level=1, name=hosts[0]).wait_for()
    # When two requests are selected in the queue and approved with one confirmation
    page.get_by_role("link", name="Approval queue").click()
    page.get_by_role("checkbox", name=f"Select {hosts[0]}").check()
    page.get_by_role("checkbox", name=f"Select {hosts[1]}").check()
    page.get_by_role("button", name="Approve selected").click()
    dialog = page.get_by_role("dialog", name="Approve 2 requests?")
    listed = dialog.inner_text()
    assert ids[0] in listed and ids[1] in listed and ids[2] not in listed
    dialog.get_by_label("Reason (optional)").fill("batch checked against the delivery note")
    dialog.get_by_role("button", name="Approve 2").click()
    # Then the console says what happened, in hostnames and the pool
    page.get_by_text(f"Approved {hosts[0]} and {hosts[1]} into {POOL}.").wait_for()
    assert [request_of(http, i)["state"] for i in ids] == ["approved", "approved", "pending"]
    # And the approved ones, not yet used, stay in the queue with their reason and deciding key
    approved = page.locator(f'tr[data-request="{ids[1]}"]')
    approved.get_by_text("night-shift operator, Frankfurt hall B").wait_for()
    text = approved.inner_text()
    assert "approved" in text and "batch checked against the delivery note" in text
    # When the third is rejected from its row, the same dialog asks for a reason
    page.get_by_role("button", name=f"Reject {hosts[2]}").click()
    page.get_by_role("dialog").get_by_label("Reason").fill("serial not on the delivery note")
    page.get_by_role("dialog").get_by_role("button", name="Reject").click()
    page.get_by_text(f"Rejected {hosts[2]}.").wait_for()

    # Then the audit trail tells it in hostnames, the deciding key's description and the reasons
    def events(detail_type: str) -> list[Any]:
        body = {"tenantId": "dev", "poolId": POOL, "detailType": f"security.join-request.{detail_type}"}
        return list(http.post("/api/compute/auditEvents/list", body, http.admin)[1]["events"])

    wait_until(lambda: len(events("approved")) == 2 and len(events("rejected")) == 1)
    page.get_by_role("link", name="Audit trail").click()
    page.get_by_label("Pool", exact=True).select_option(POOL)
    timeline = page.get_by_role("list", name="Security events, newest first")
    timeline.get_by_text(
        f"join approved {hosts[0]} in {POOL} by night-shift operator, Frankfurt hall B: "
        "“batch checked against the delivery note”"
    ).wait_for()
    timeline.get_by_text(f"join rejected {hosts[2]} in {POOL}").wait_for()


def test_a_tpm_joins_facts_are_shown_in_words(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given a machine whose TPM activated its EK (certified by a manufacturer) and which waits for
    # approval
    pool = new_pool(http, "gpu-rack-1")
    created = {"tenantId": "dev", "poolId": pool, "requireApproval": True}
    _, token = http.post("/api/compute/joinTokens/create", created, http.admin)
    tpm = SoftTpm.make("ecc")
    certificate = SoftManufacturer.make().ek_certificate(tpm.ek)
    csr = openssl_csr(tmp_path, "/CN=tpm-node-01")
    body = {
        "joinToken": token["token"], "csr": csr, "hostname": "tpm-node-01",
        "tpm": {"ekCertificatePem": certificate},
    }  # fmt: skip
    # (the challenge is asked for with the key's proof, as the CLI asks for it)
    asking = json.dumps({**body, "tpm": {**body["tpm"], **tpm.presented()}}).encode()
    signed = sign_proof(tmp_path / "key.pem", purpose="join", credential=token["token"], body=asking)
    status, first = http.post("/machines/join", None, headers={"joinplane-proof": signed}, raw=asking)
    assert status == 202 and first.get("tpmChallenge"), first
    payload = json.dumps(with_answer(body, tpm, tpm.answer(first["tpmChallenge"]))).encode()
    proof = sign_proof(tmp_path / "key.pem", purpose="join", credential=token["token"], body=payload)
    status, deferred = http.post("/machines/join", None, headers={"joinplane-proof": proof}, raw=payload)
    assert status == 202, deferred
    request_id = deferred["joinRequest"]["requestId"]
    stored = request_of(http, request_id)["machine"]["tpm"]
    assert stored["activated"] is True and stored["akName"] and stored["ekCertificateIssuer"]
    # When an operator opens its page
    page = console(chromium, http.runtime.url + f"/console#/requests/{request_id}", pages)
    sign_in(page, http.admin)
    page.get_by_role("heading", level=1, name="tpm-node-01").wait_for()
    facts = page.locator("#view").inner_text()
    # Then every TPM fact is labelled in words, none by the API's field name
    for label, value in (
        ("TPM endorsement key SHA-256", stored["ekPublicKeySha256"]),
        ("TPM activated", "true"),
        ("EK certificate issuer", stored["ekCertificateIssuer"]),
        ("EK certificate serial", stored["ekCertificateSerial"]),
        ("TPM attestation key name", stored["akName"]),
    ):
        assert f"{label}\n{value}" in facts, label
    assert not [field for field in stored if field != field.lower() and field in facts], facts
    # And on a phone, the pool's name at the end of the page's first line stays whole
    page.set_viewport_size(PHONE)
    assert broken_words(page, True) == []
    # (decided, so the other tests' queue does not show it)
    status, _ = http.post(
        "/api/compute/joinRequests/reject",
        {"tenantId": "dev", "requestId": request_id, "reason": "test over"},
        http.admin,
    )
    assert status == 200


def test_every_view_full_of_long_real_data_breaks_no_word(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given a pool with long names holding requests in every state an operator sees, a machine
    # that joined through an approval, a join token and their audit trail
    pool = "inference-pool-frankfurt-hall-b-rack-12"
    new_pool(http, pool)
    key = operator_key(http, "platform on-call (Frankfurt), rotation B")
    host = "inference-node-0042.fra2.compute.example.internal"
    facts = {"cpuCount": 128, "memoryMb": 1048576, "gpuCount": 8, "os": "linux", "arch": "amd64"}
    hardware = {"hardware": {"serialNumber": SERIAL, "macAddresses": MACS}}
    waiting = pending_request(http, pool, tmp_path, host, description=TOKEN_TEXT, **facts, **hardware)
    approved = pending_request(http, pool, tmp_path, f"a-{host}", description=TOKEN_TEXT, **facts)
    approve(http, key["key"], approved, "delivery note OPS-4711 matches the serial numbers")
    # (the machine joined through an approval: it came back once approved, using its request)
    _, token = http.post(
        "/api/compute/joinTokens/create",
        {"tenantId": "dev", "poolId": pool, "description": TOKEN_TEXT, "requireApproval": True},
        http.admin,
    )
    directory = tmp_path / "joined"
    directory.mkdir()
    csr = openssl_csr(directory, f"/CN=j-{host}")
    joined = {"joinToken": token["token"], "csr": csr, "hostname": f"j-{host}", **facts, **hardware}
    status, deferred = http.post("/machines/join", joined)
    assert status == 202, deferred
    approve(http, key["key"], deferred["joinRequest"]["requestId"], "racked by the night shift")
    payload = json.dumps(joined).encode()
    proof = sign_proof(directory / "key.pem", purpose="join", credential=token["token"], body=payload)
    status, machine = http.post("/machines/join", None, headers={"joinplane-proof": proof}, raw=payload)
    assert status == 200, machine
    wait_until(
        lambda: http.post(
            "/api/compute/auditEvents/list",
            {"tenantId": "dev", "poolId": pool, "detailType": "security.machine.joined"},
            http.admin,
        )[1]["events"]
    )
    page = console(chromium, http.runtime.url + "/console", pages)
    sign_in(page, key["key"])
    page.locator(f'tr[data-request="{waiting}"]').wait_for()

    def views() -> Iterator[str]:
        """Each view with its content showing; yields the view's name."""
        page.get_by_role("link", name="Queue").click()
        page.locator(f'tr[data-request="{approved}"]').get_by_text("platform on-call").wait_for()
        yield "queue"
        page.goto(f"{http.runtime.url}/console#/requests/{waiting}")
        page.get_by_role("table", name="Attestors' verdicts").wait_for()
        yield "request"
        page.get_by_role("link", name="Join tokens").click()
        page.get_by_label("Pool", exact=True).select_option(pool)
        page.locator("td", has_text=token["tokenId"]).wait_for()
        yield "tokens"
        page.get_by_role("link", name="Machines").click()
        page.get_by_label("Pool", exact=True).select_option(pool)
        page.get_by_role("button", name=f"Details of j-{host}").click()
        page.get_by_role("region", name=f"Machine j-{host}").get_by_text(machine["machineId"]).wait_for()
        yield "machines"
        page.get_by_role("link", name="Pools").click()
        page.get_by_role("button", name=f"Details of {pool}").click()
        page.get_by_role("region", name=f"Pool {pool}").get_by_text("console-site").wait_for()
        yield "pools"
        page.get_by_role("link", name="Audit trail").click()
        page.get_by_label("Pool", exact=True).select_option(pool)
        # (a machine an operator let in, and the request it used, say who approved it)
        timeline = page.get_by_role("list", name="Security events, newest first")
        approver = "approved by platform on-call (Frankfurt), rotation B: “racked by the night shift”"
        timeline.get_by_text(f"machine joined j-{host} in {pool}, {approver}").wait_for()
        timeline.get_by_text(f"approved join used j-{host} in {pool}, {approver}").wait_for()
        for summary in page.locator(".timeline summary").all()[:3]:
            summary.click()
        yield "audit"

    # When each view is looked at on a phone, a laptop and a wide screen
    broken: dict[str, list[str]] = {}
    scrolls: list[str] = []
    for size, fit in ((PHONE, True), (DESKTOP, False), (WIDE, False)):
        page.set_viewport_size(size)
        for view in views():
            # Then no word is broken in two (on a phone, only one too long for its screen may be)
            if found := broken_words(page, fit):
                broken[f"{view}@{size['width']}"] = found
            # And nothing scrolls sideways
            if not no_horizontal_scroll(page):
                scrolls.append(f"{view}@{size['width']}")
    assert broken == {} and scrolls == []


def test_a_two_approval_pools_request_shows_who_approved_until_the_second_key_does(
    chromium: Any, http: Http, pages: list[Watched], tmp_path: Path
) -> None:
    # Given a pool that needs two approvals, a machine waiting in it, and one operator's approval
    pool = new_pool(http, "vault-rack-frankfurt")
    status, body = http.post(
        "/api/compute/pools/update", {"tenantId": "dev", "poolId": pool, "approvalsRequired": 2}, http.admin
    )
    assert status == 200, body
    host = "vault-node-01.fra2.compute.example.internal"
    request_id = pending_request(http, pool, tmp_path, host)
    day = operator_key(http, "day-shift operator, Frankfurt hall B")
    night = operator_key(http, "night-shift operator, Frankfurt hall B")
    approve(http, day["key"], request_id, "serial on the delivery note")
    # When the second operator opens the request's page
    page = console(chromium, f"{http.runtime.url}/console#/requests/{request_id}", pages)
    sign_in(page, night["key"])
    page.get_by_role("heading", level=1, name=host).wait_for()
    # Then it says one approval of two, by the first operator's key
    page.get_by_text("1 of 2 approvals, by day-shift operator, Frankfurt hall B").wait_for()
    assert request_of(http, request_id)["state"] == "pending"
    # When they approve it there, Then it is approved, by both
    page.get_by_role("button", name=f"Approve {host}").click()
    page.get_by_role("dialog").get_by_role("button", name="Approve").click()
    page.get_by_text(f"Approved {host} into {pool}.").wait_for()
    approved = request_of(http, request_id)
    assert approved["state"] == "approved"
    assert [a["by"] for a in approved["approvals"]] == [day["keyId"], night["keyId"]]
    page.get_by_text("2 of 2 approvals, by day-shift operator").wait_for()

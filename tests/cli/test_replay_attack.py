"""Replaying captured credentials, as an attacker runs it: a proxy captures a real agent's joins and renewals
(body and every header), then the attacker replays them, as they were and with the pool's other tokens, within
the proof window and after it. None of it is worth a machine token or a certificate, and the real machine is
never locked out."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from joinplane import container
from tests.support import openssl_csr, serving
from tests.support.runtime import Cli

FORWARDED = ("content-type", "authorization", "joinplane-proof", "user-agent", "accept")


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class Proxy:
    """A man in the middle that forwards everything and keeps a copy."""

    upstream: str
    seen: list[Captured] = field(default_factory=list)
    url: str = ""

    def joins(self, path: str = "/machines/join") -> list[Captured]:
        return [c for c in self.seen if c.path == path]


def send(url: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(url + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as failed:
        with failed:
            return failed.code, json.loads(failed.read() or b"null")


@pytest.fixture
def proxy(cli: Cli) -> Iterator[Proxy]:
    state = Proxy(cli.runtime.url)

    class Forward(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items() if k.lower() in FORWARDED}
            request = urllib.request.Request(
                state.upstream + self.path, data=body, headers=headers, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    status, raw, answer_headers = answer.status, answer.read(), dict(answer.headers.items())
            except urllib.error.HTTPError as failed:
                with failed:
                    status, raw, answer_headers = failed.code, failed.read(), dict(failed.headers.items())
            state.seen.append(Captured(self.path, headers, body, status))
            self.send_response(status)
            for name in ("Content-Type", "Date", "Retry-After"):
                if name in answer_headers:
                    self.send_header(name, answer_headers[name])
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Forward) as url:
        state.url = url
        yield state


def with_token(captured: Captured, token: str) -> dict[str, str]:
    return {**captured.headers, "authorization": f"Bearer {token}"}


def without_proof(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k != "joinplane-proof"}


def assert_worthless(status: int, answer: Any) -> None:
    assert status in (400, 401, 403, 409), (status, answer)
    text = json.dumps(answer)
    assert "jpm_" not in text and "BEGIN CERTIFICATE" not in text, answer


def test_a_captured_join_and_renewal_replayed_with_every_token_gets_nothing(
    cli: Cli, proxy: Proxy, tmp_path: Path
) -> None:
    # Given a real agent that joined and renewed through the attacker's proxy
    pool = cli.new_pool()
    token = cli.new_token(pool, "--max-uses", "5")
    others = [cli.new_token(pool, "--max-uses", "5") for _ in range(2)]
    machine = tmp_path / "machine"
    cli.ok("join", "--token", token, "--dir", str(machine), "--url", proxy.url)
    cli.ok("renew", "--dir", str(machine), "--url", proxy.url)
    [join], [renew] = proxy.joins(), proxy.joins("/machines/renew")
    assert join.status == 200 and renew.status == 200 and "joinplane-proof" in join.headers
    # And the attacker also reads the agent's world-readable CSR
    csr = (machine / "machine.csr").read_text()
    upstream = cli.runtime.url
    attempts: list[tuple[str, dict[str, str], bytes]] = []
    # When it replays the join: as captured, and with each token of the pool, with and without the proof
    for credential in (token, *others):
        attempts.append(("/machines/join", with_token(join, credential), join.body))
        attempts.append(("/machines/join", without_proof(with_token(join, credential)), join.body))
        # and a body of its own around the stolen CSR
        fresh = json.dumps({"csr": csr, "hostname": "attacker"}).encode()
        attempts.append(("/machines/join", without_proof(with_token(join, credential)), fresh))
        attempts.append(("/machines/join", with_token(join, credential), fresh))
    # And the renewal: as captured, without its proof, and with the attacker's CSR under the proof
    attacker_csr = openssl_csr(tmp_path / "attacker")
    stolen = json.loads(renew.body)
    swapped = json.dumps({"machineToken": stolen["machineToken"], "csr": attacker_csr}).encode()
    attempts += [
        ("/machines/renew", renew.headers, renew.body),
        ("/machines/renew", without_proof(renew.headers), renew.body),
        ("/machines/renew", renew.headers, swapped),
    ]
    # Then within the window every attempt is refused without credentials
    for path, headers, body in attempts:
        assert_worthless(*send(upstream, path, headers, body))
    # And the real machine was never locked out: it renews and re-joins as itself
    cli.ok("renew", "--dir", str(machine), "--url", upstream)
    cli.ok("join", "--token", token, "--dir", str(machine), "--url", upstream, "--rejoin")
    # And after the window the captures are refused too
    assert (
        send(upstream, "/_local/clock", {"content-type": "application/json"}, b'{"advanceSeconds": 301}')[0]
        == 200
    )
    for path, headers, body in attempts:
        assert_worthless(*send(upstream, path, headers, body))
    # (the server's clock went forward, the agent's did not: put it back before the machine's turn)
    container.reset(keep_clients=True)
    cli.ok("renew", "--dir", str(machine), "--url", upstream)


def test_a_captured_pending_retry_cannot_consume_the_approval(cli: Cli, proxy: Proxy, tmp_path: Path) -> None:
    # Given an agent deferred for approval whose retry the attacker captured (proof included)
    pool = cli.new_pool()
    token = cli.new_token(pool, "--require-approval")
    machine = tmp_path / "machine"
    first = cli.run("join", "--token", token, "--dir", str(machine), "--url", proxy.url)
    retry = cli.run("join", "--token", token, "--dir", str(machine), "--url", proxy.url)
    assert first.code == retry.code != 0, first.err + retry.err
    captured = proxy.joins()[-1]
    assert captured.status == 202 and "joinplane-proof" in captured.headers
    listed = cli.ok("requests", "list", "--pool", pool, "-o", "json").json()
    request_id = listed["requests"][0]["requestId"]
    # When the operator approves, and the attacker replays the captured retry first
    cli.ok("requests", "approve", request_id, "--pool", pool)
    status, answer = send(cli.runtime.url, "/machines/join", captured.headers, captured.body)
    # Then it gets nothing and the approval is still the machine's
    assert_worthless(status, answer)
    admitted = cli.run("join", "--token", token, "--dir", str(machine), "--url", cli.runtime.url)
    assert admitted.code == 0, admitted.err + admitted.out
    assert (machine / "machine.token").exists()

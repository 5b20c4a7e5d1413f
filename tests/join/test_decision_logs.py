"""What on-call sees of a join, an approval and a refusal: one JSON line per decision, naming the
API request and route, the tenant, pool, token or key and the machine or request, and one EMF
count per decision. Never a secret: every secret the test minted is searched for in the output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from joinplane import clock, keyauth
from tests.support import LambdaContext, call, http_event, load_function, route_handler, sign_proof
from tests.support.logs import counted, log_lines, metrics

NAMESPACE = "Joinplane/local"


def join_with_id(
    request_id: str, body: dict[str, Any], signed_by: Path | None = None
) -> tuple[int, dict[str, Any]]:
    """POST /machines/join with a given API Gateway request id (and a proof of `signed_by`'s key)."""
    payload = json.dumps(body).encode()
    headers = {}
    if signed_by is not None:
        headers["joinplane-proof"] = sign_proof(
            signed_by, purpose="join", credential=body["joinToken"], body=payload
        )
    event = http_event("/machines/join", payload, headers)
    event["requestContext"]["requestId"] = request_id
    result = route_handler("/machines/join")(event, LambdaContext())
    return result["statusCode"], json.loads(result["body"])


def decisions(output: str) -> list[dict[str, Any]]:
    return [line for line in log_lines(output) if "outcome" in line]


def without_time(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k not in ("timestamp", "location")}


def test_an_admitted_join_is_one_line_and_one_count(make_token, machine_factory, capsys) -> None:
    # Given a join token that admits without approval
    token = make_token(maxUses=1)
    capsys.readouterr()
    # When a machine joins with it
    status, body = join_with_id("api-req-1", {"joinToken": token["token"], "csr": machine_factory().csr})
    # Then the decision is one INFO line naming the request, route, tenant, pool, token and machine
    assert status == 200
    out = capsys.readouterr().out
    [line] = decisions(out)
    assert without_time(line) == {
        "level": "INFO",
        "service": "joinplane",
        "message": "join admitted",
        "outcome": "admitted",
        "correlationId": "api-req-1",
        "route": "POST /machines/join",
        "tenantId": "acme",
        "siteId": "rack-1",
        "poolId": "gpu",
        "tokenId": token["tokenId"],
        "machineId": body["machineId"],
    }
    assert line["location"].startswith("_told:")
    # And one EMF count of Joins by outcome, with low-cardinality dimensions only
    [blob] = metrics(out)
    assert blob["_aws"]["CloudWatchMetrics"][0] == {
        "Namespace": NAMESPACE,
        "Dimensions": [["service", "outcome"]],
        "Metrics": [{"Name": "Joins", "Unit": "Count"}],
    }
    assert (blob["service"], blob["outcome"], blob["Joins"]) == ("joinplane", "admitted", [1.0])
    # And neither the join token nor the machine token is anywhere in the output
    assert token["token"] not in out and body["machineToken"] not in out


def test_a_deferral_its_approval_and_the_admission_each_log_a_decision(
    make_token, machine_factory, admin_key, capsys
) -> None:
    # Given a machine whose join was deferred
    token = make_token(requireApproval=True)
    machine = machine_factory()
    capsys.readouterr()
    status, deferred = join_with_id("api-req-2", {"joinToken": token["token"], "csr": machine.csr})
    assert status == 202
    request_id = deferred["joinRequest"]["requestId"]
    out = capsys.readouterr().out
    [line] = decisions(out)
    assert (line["message"], line["requestId"], line["tokenId"]) == (
        "join deferred",
        request_id,
        token["tokenId"],
    )
    assert counted(out) == [("Joins", "deferred", 1.0)]
    # When an operator approves it
    approved = call(
        "/api/compute/joinRequests/approve",
        {"tenantId": "acme", "poolId": "gpu", "requestId": request_id, "reason": "known rack"},
        admin_key,
    )
    assert approved.status == 200
    out = capsys.readouterr().out
    # Then the approval names the request, the pool, the key that decided and the approvals counted,
    # on its route
    [line] = decisions(out)
    assert without_time(line) | {"correlationId": "?"} == {
        "level": "INFO",
        "service": "joinplane",
        "message": "join request approved",
        "outcome": "approved",
        "correlationId": "?",
        "route": "POST /api/compute/joinRequests/approve",
        "keyId": approved.body["decidedBy"],
        "keyTenantId": "acme",
        "tenantId": "acme",
        "poolId": "gpu",
        "requestId": request_id,
        "approvals": 1,
        "approvalsRequired": 1,
    }
    assert line["correlationId"]  # API Gateway's request id, whatever it is
    assert counted(out) == [("RequestDecisions", "approved", 1.0)]
    assert admin_key not in out
    # And when the machine retries, the approval is consumed and the machine admitted
    status, admitted = join_with_id(
        "api-req-3", {"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key
    )
    assert status == 200
    out = capsys.readouterr().out
    assert [(d["message"], d["correlationId"]) for d in decisions(out)] == [
        ("join request consumed", "api-req-3"),
        ("join admitted", "api-req-3"),
    ]
    assert counted(out) == [("RequestDecisions", "consumed", 1.0), ("Joins", "admitted", 1.0)]
    assert token["token"] not in out and admitted["machineToken"] not in out


def test_a_refused_join_names_its_reason_and_counts_as_refused(make_token, machine_factory, capsys) -> None:
    # Given a token whose secret part is wrong (its id is real)
    token = make_token()
    forged = token["token"][:-4] + ("aaaa" if not token["token"].endswith("aaaa") else "bbbb")
    capsys.readouterr()
    # When a machine joins with it
    status, _ = join_with_id("api-req-4", {"joinToken": forged, "csr": machine_factory().csr})
    # Then one line says refused, with the code and reason, and no other line repeats it
    assert status == 401
    out = capsys.readouterr().out
    [line] = log_lines(out)
    assert (line["message"], line["outcome"], line["code"], line["correlationId"]) == (
        "join refused",
        "refused",
        "UNAUTHENTICATED",
        "api-req-4",
    )
    assert line["reason"]
    assert counted(out) == [("Joins", "refused", 1.0)]
    # And neither the presented secret nor the real one is printed
    assert forged not in out and token["token"] not in out


def test_a_revoked_machine_rejoining_is_denied(make_token, machine_factory, admin_key, capsys) -> None:
    # Given a machine that joined and was revoked
    token = make_token(maxUses=5)
    machine = machine_factory()
    _, joined = join_with_id("api-req-5", {"joinToken": token["token"], "csr": machine.csr})
    revoked = call(
        "/api/compute/machines/revoke",
        {"tenantId": "acme", "machineId": joined["machineId"], "reason": "stolen"},
        admin_key,
    )
    assert revoked.status == 200, revoked.body
    out = capsys.readouterr().out
    assert [d["message"] for d in decisions(out)][-1] == "machine revoked"
    assert counted(out)[-1] == ("Revocations", "revoked", 1.0)
    # When the same key tries to join again
    status, _ = join_with_id(
        "api-req-6", {"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key
    )
    # Then that is a denial (a decision about this machine), not a malformed call
    assert status == 403
    out = capsys.readouterr().out
    [line] = decisions(out)
    assert (line["message"], line["code"]) == ("join denied", "PERMISSION_DENIED")
    assert counted(out) == [("Joins", "denied", 1.0)]


def test_an_unknown_api_key_is_counted_by_the_authorizer_without_its_secret(admin_key, capsys) -> None:
    # Given an API key secret of the right shape that was never issued, and a real one with a wrong secret
    parsed_id = keyauth.verify(admin_key)
    assert parsed_id is not None
    wrong = admin_key[:-4] + ("aaaa" if not admin_key.endswith("aaaa") else "bbbb")
    capsys.readouterr()
    # When each calls an operator route
    reply = call("/api/compute/pools/list", {"tenantId": "acme"}, wrong)
    # Then the route answers 401, and the authorizer logged why, naming the key id, never the secret
    assert reply.status == 401
    out = capsys.readouterr().out
    refusal = next(d for d in decisions(out) if d["message"] == "api key refused")
    assert (refusal["outcome"], refusal["presentedKeyId"]) == ("mismatch", parsed_id.key_id)
    assert ("AuthorizerRefusals", "mismatch", 1.0) in counted(out)
    assert wrong not in out and admin_key not in out


def test_the_retention_job_logs_each_request_it_expires(make_token, machine_factory, capsys) -> None:
    # Given a deferred join whose request has outlived its expiry
    token = make_token(requireApproval=True)
    _, deferred = join_with_id("api-req-7", {"joinToken": token["token"], "csr": machine_factory().csr})
    request_id = deferred["joinRequest"]["requestId"]
    clock.advance(8 * 24 * 3600)
    capsys.readouterr()
    # When the scheduled retention function runs
    assert load_function("retention").lambda_handler({}, LambdaContext()) == {"expired": 1}
    # Then its line names the request (no API request: a schedule), and RequestDecisions counts it
    out = capsys.readouterr().out
    [line] = decisions(out)
    assert (line["message"], line["requestId"], line["tenantId"], line["poolId"]) == (
        "join request expired",
        request_id,
        "acme",
        "gpu",
    )
    assert "correlationId" not in line
    assert counted(out) == [("RequestDecisions", "expired", 1.0)]


def test_a_retry_while_pending_is_logged_but_not_counted_again(make_token, machine_factory, capsys) -> None:
    # Given a deferred join
    token = make_token(requireApproval=True)
    machine = machine_factory()
    _, deferred = join_with_id("api-req-8", {"joinToken": token["token"], "csr": machine.csr})
    capsys.readouterr()
    # When the machine polls again, as join --wait does
    status, _ = join_with_id(
        "api-req-9", {"joinToken": token["token"], "csr": machine.new_csr()}, signed_by=machine.key
    )
    # Then the poll is a line saying it is still pending, and no second deferral is counted
    assert status == 202
    out = capsys.readouterr().out
    [line] = decisions(out)
    assert (line["message"], line["outcome"], line["requestId"]) == (
        "join still pending",
        "pending",
        deferred["joinRequest"]["requestId"],
    )
    assert counted(out) == []


def test_a_revoked_token_in_use_is_logged_with_its_id(make_token, machine_factory, admin_key, capsys) -> None:
    # Given a join token its operator revoked
    token = make_token()
    assert (
        call(
            "/api/compute/joinTokens/revoke", {"tenantId": "acme", "tokenId": token["tokenId"]}, admin_key
        ).status
        == 200
    )
    capsys.readouterr()
    # When someone joins with it (they hold the real secret: worth knowing)
    status, _ = join_with_id("api-req-10", {"joinToken": token["token"], "csr": machine_factory().csr})
    # Then the refusal names the token and why, and the secret is not printed
    assert status == 401
    out = capsys.readouterr().out
    [line] = decisions(out)
    assert (line["message"], line["tokenId"], line["credentialRefusal"]) == (
        "join refused",
        token["tokenId"],
        "revoked",
    )
    assert token["token"] not in out


def test_a_bug_is_answered_500_and_counted_for_its_alarm(make_token, monkeypatch, capsys) -> None:
    # Given a join path that fails with an unexpected error carrying a secret in its message
    token = make_token()
    from joinplane import join_facts

    def broken(secret: str) -> None:
        raise RuntimeError(f"boom while reading {secret}")

    monkeypatch.setattr(join_facts, "load_token", broken)
    capsys.readouterr()
    # When a machine joins
    status, _ = join_with_id("api-req-11", {"joinToken": token["token"], "csr": "x"})
    # Then it is a 500, one ERROR line with the traceback (secret redacted) and one UnhandledErrors count
    assert status == 500
    out = capsys.readouterr().out
    [line] = [line for line in log_lines(out) if line["level"] == "ERROR"]
    assert line["message"] == "unhandled error" and "RuntimeError" in line["exception"]
    assert token["token"] not in out and "[redacted]" in line["exception"]
    assert ("UnhandledErrors", "internal", 1.0) in counted(out)

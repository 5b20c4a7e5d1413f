"""A CA rotation in phases, over the HTTP API and checked with `openssl verify` as a verifier runs it:
`certificateAuthorities/rotate` prepares the next CA (in the bundle, signing nothing), which signs
once the pool's propagation period has passed (the local clock is moved, nobody sleeps) or on
`certificateAuthorities/activate`. A verifier that fetched the pool's public bundle right after the
rotation accepts every machine certificate issued before, during and after the activation, and the
retired CA leaves the bundle only once everything it signed has expired."""

from __future__ import annotations

import base64
import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cryptography import x509

from joinplane import ca, clock, container
from joinplane.dal import authorities as authorities_db
from joinplane.errors import Aborted, InvalidState, JoinplaneError, Unavailable
from tests.support import call, join, key_id_of, openssl_csr, release_together, sign_proof
from tests.support.crl import fetched_bundle, get_bundle
from tests.support.csr import openssl
from tests.support.events import SCHEMAS, publish_table_stream

TENANT = {"tenantId": "acme"}
POOL = {**TENANT, "poolId": "phases"}
GET = "/api/compute/certificateAuthorities/get"
ROTATE = "/api/compute/certificateAuthorities/rotate"
ACTIVATE = "/api/compute/certificateAuthorities/activate"
DAY = 86_400
MONTH = 30 * DAY
THREADS = 8


@pytest.fixture
def phases(admin_key: str) -> str:
    """A pool whose certificates live as long as any may (30 days): the retired CA's worst case."""
    body = {**POOL, "siteId": "s1", "name": "Phases", "workspaceId": "w", "certificateTtlSeconds": MONTH}
    reply = call("/api/compute/pools/create", body, admin_key)
    assert reply.status == 200, reply.body
    assert reply.body["caPropagationSeconds"] == DAY  # the default
    return "phases"


def admit(admin_key: str, directory: Path) -> dict[str, Any]:
    """A machine joined now, with a one-use token made now (tokens expire; the clock moves here)."""
    token = call("/api/compute/joinTokens/create", {**POOL, "maxUses": 1}, admin_key)
    assert token.status == 200, token.body
    directory.mkdir()
    reply = join({"joinToken": token.body["token"], "csr": openssl_csr(directory, "/CN=m")})
    assert reply.status == 200, reply.body
    return dict(reply.body)


def renew(machine: dict[str, Any], directory: Path) -> dict[str, Any]:
    body = {"machineToken": machine["machineToken"], "csr": (directory / "csr.pem").read_text()}
    proof = sign_proof(
        directory / "key.pem",
        purpose="renew",
        credential=machine["machineToken"],
        body=json.dumps(body).encode(),
        timestamp_ms=int(clock.epoch() * 1000),  # the machine's clock is the moved one
    )
    reply = join(body, path="/machines/renew", proof=proof)
    assert reply.status == 200, reply.body
    return dict(reply.body)


def verify(directory: Path, bundle: str, certificate: str) -> Any:
    """`openssl verify -CAfile bundle.pem` at the moved clock's time."""
    (directory / "verifier.pem").write_text(bundle)
    (directory / "machine.crt").write_text(certificate)
    return openssl(
        "verify", "-attime", str(int(clock.epoch())), "-CAfile", str(directory / "verifier.pem"),
        str(directory / "machine.crt"), check=False,
    )  # fmt: skip


def issuer_ou(certificate: str) -> str:
    """The caId of the CA that signed `certificate` (each CA's name holds its caId as OU)."""
    issuer = x509.load_pem_x509_certificate(certificate.encode()).issuer
    return str(issuer.get_attributes_for_oid(x509.NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value)


def seconds_from_now(timestamp: str) -> int:
    return int(datetime.fromisoformat(timestamp).timestamp() - clock.epoch())


def not_after(certificate: str) -> int:
    return int(x509.load_pem_x509_certificate(certificate.encode()).not_valid_after_utc.timestamp())


def test_a_verifier_that_fetched_the_bundle_after_rotate_accepts_every_machine_before_during_and_after(
    admin_key: str, phases: str, tmp_path: Path
) -> None:
    # Given a machine joined under the pool's first CA, and the bundle a verifier held then
    before = admit(admin_key, tmp_path / "before")
    first = call(GET, POOL, admin_key).body
    old_bundle = "".join(first["bundle"])
    a = first["active"]["caId"]

    # When the operator rotates the CA
    rotated = call(ROTATE, POOL, admin_key)
    # Then the new CA is prepared: published after the active CA, signing nothing for a day
    assert rotated.status == 200, rotated.body
    prepared = rotated.body["next"]
    b = prepared["caId"]
    assert (prepared["state"], rotated.body["active"]["caId"]) == ("prepared", a)
    assert seconds_from_now(prepared["activatesAt"]) in range(DAY - 2, DAY + 1)
    assert rotated.body["bundle"] == [first["active"]["certificate"], prepared["certificate"]]
    assert "breaks" not in rotated.body
    # And a verifier fetches the bundle from the pool's public URL right after, and keeps it
    assert rotated.body["bundleUrl"] == first["bundleUrl"]
    kept = fetched_bundle(rotated.body["bundleUrl"])
    assert kept == "".join(rotated.body["bundle"])

    # When machines join and renew during the propagation period (the last second of it included)
    during = admit(admin_key, tmp_path / "during")
    # (moved to instants counted from activatesAt, not from now: on a loaded machine the calls
    # between the rotation and these take seconds of the real clock too)
    clock.advance(seconds_from_now(prepared["activatesAt"]) - 10)
    renewed_before = renew(before, tmp_path / "before")
    clock.advance(max(seconds_from_now(prepared["activatesAt"]) - 1, 0))
    last = admit(admin_key, tmp_path / "last")
    # Then the old CA signed them all, and they were handed the bundle with the next CA in it
    for machine in (during, renewed_before, last):
        assert issuer_ou(machine["certificate"]) == a
        assert machine["caCertificates"] == kept

    # When the period has passed, and the next machine joins (the first use activates the next CA)
    clock.advance(max(seconds_from_now(prepared["activatesAt"]) + 2, 0))
    after = admit(admin_key, tmp_path / "after")
    renewed_during = renew(during, tmp_path / "during")
    # Then the new CA signed them, and get shows the phases: it active, the old one retired
    assert issuer_ou(after["certificate"]) == issuer_ou(renewed_during["certificate"]) == b
    now = call(GET, POOL, admin_key).body
    assert now["active"]["caId"] == b and "next" not in now
    assert [(r["caId"], r["state"]) for r in now["retired"]] == [(a, "retired")]

    # And the verifier's bundle, fetched right after the rotation, accepts every one of them
    machines = (before, during, renewed_before, last, after, renewed_during)
    for machine in machines:
        done = verify(tmp_path, kept, machine["certificate"])
        assert done.returncode == 0, done.stdout + done.stderr
    # And a verifier that never refreshed since before the rotation rejects the new CA's: the
    # reason a bundle must be fetched within the propagation period
    stale = verify(tmp_path, old_bundle, after["certificate"])
    assert stale.returncode != 0 and "error 20" in stale.stdout + stale.stderr

    # And the retired CA stays in the public bundle until every certificate it signed has expired
    retired = authorities_db.get(a)
    assert retired is not None and retired.bundle_until is not None
    until = retired.bundle_until
    assert abs(until - (int(clock.epoch()) + ca.BUNDLE_GRACE_SECONDS)) <= 2
    assert now["retired"][0]["bundleUntil"] == clock.rfc3339(until)
    signed_by_a = [m["certificate"] for m in machines if issuer_ou(m["certificate"]) == a]
    latest = max(not_after(certificate) for certificate in signed_by_a)
    assert latest < until
    clock.advance(latest - int(clock.epoch()) - 1)
    still = fetched_bundle(rotated.body["bundleUrl"])
    assert first["active"]["certificate"] in still
    youngest = next(c for c in signed_by_a if not_after(c) == latest)
    assert verify(tmp_path, still, youngest).returncode == 0
    # And once its bundleUntil has passed it is gone (all it signed having expired by then)
    clock.advance(until - int(clock.epoch()) + 1)
    gone = fetched_bundle(rotated.body["bundleUrl"])
    assert first["active"]["certificate"] not in gone and prepared["certificate"] in gone
    assert all(not_after(certificate) < clock.epoch() for certificate in signed_by_a)


def test_an_emergency_rotation_signs_at_once_and_says_what_breaks(
    admin_key: str, phases: str, tmp_path: Path
) -> None:
    # Given a machine and the bundle a verifier fetched before
    before = admit(admin_key, tmp_path / "before")
    old_bundle = "".join(call(GET, POOL, admin_key).body["bundle"])
    # When the operator rotates in an emergency
    rotated = call(ROTATE, {**POOL, "emergency": True}, admin_key)
    # Then the new CA is active at once, and the answer says what that breaks
    assert rotated.status == 200, rotated.body
    assert "next" not in rotated.body and rotated.body["active"]["state"] == "active"
    assert "fetches the bundle again" in rotated.body["breaks"]
    # And it is so: the next machine's certificate fails against the old bundle (error 20) ...
    after = admit(admin_key, tmp_path / "after")
    stale = verify(tmp_path, old_bundle, after["certificate"])
    assert stale.returncode != 0 and "error 20" in stale.stdout + stale.stderr
    # ... and passes against the bundle fetched now, as the machine from before does
    fresh = "".join(rotated.body["bundle"])
    for machine in (before, after):
        assert verify(tmp_path, fresh, machine["certificate"]).returncode == 0


def test_activate_signs_with_the_prepared_ca_now_and_a_second_rotation_waits_for_it(
    admin_key: str, phases: str, tmp_path: Path
) -> None:
    # Given a prepared rotation
    first = call(GET, POOL, admin_key).body["active"]
    prepared = call(ROTATE, POOL, admin_key).body["next"]
    # When the operator rotates again / Then it is refused, naming when the prepared CA signs
    again = call(ROTATE, POOL, admin_key)
    assert (again.status, again.reason) == (409, "CA_ROTATION_PREPARED")
    assert prepared["caId"] in again.body["error"]["message"]
    assert prepared["activatesAt"] in again.body["error"]["message"]
    assert call(GET, POOL, admin_key).body["next"] == prepared
    # When the operator activates it (naming it)
    activated = call(ACTIVATE, {**POOL, "caId": prepared["caId"]}, admin_key)
    # Then it signs from now on, and the first CA is retired, still in the bundle
    assert activated.status == 200, activated.body
    assert activated.body["active"]["caId"] == prepared["caId"] and "next" not in activated.body
    assert activated.body["bundle"] == [prepared["certificate"], first["certificate"]]
    machine = admit(admin_key, tmp_path / "m")
    assert issuer_ou(machine["certificate"]) == prepared["caId"]
    # And activating it again answers the same; with nothing prepared, it is refused
    assert call(ACTIVATE, {**POOL, "caId": prepared["caId"]}, admin_key).body == activated.body
    refused = call(ACTIVATE, POOL, admin_key)
    assert (refused.status, refused.reason) == (400, "NO_PREPARED_CA")
    # And the rotation's phases were security events, naming who acted, in their schemas
    published = [e for e in publish_table_stream() if "certificate-authority" in e.detail_type]
    phased = {e.detail_type: e.detail for e in published if e.detail["caId"] == prepared["caId"]}
    assert set(phased) == {
        "security.certificate-authority.prepared",
        "security.certificate-authority.activated",
    }
    for detail_type, detail in phased.items():
        jsonschema.validate(detail, SCHEMAS[detail_type])
        assert (detail["decidedBy"], detail["previousCaId"]) == (key_id_of(admin_key), first["caId"])
        assert detail["activatesAt"] == prepared["activatesAt"]


def test_the_end_of_the_propagation_period_activates_by_schedule(admin_key: str, phases: str) -> None:
    call(GET, POOL, admin_key)
    prepared = call(ROTATE, POOL, admin_key).body["next"]
    clock.advance(DAY)
    assert call(GET, POOL, admin_key).body["active"]["caId"] == prepared["caId"]
    (activated,) = [
        e.detail
        for e in publish_table_stream()
        if e.detail_type == "security.certificate-authority.activated"
    ]
    jsonschema.validate(activated, SCHEMAS["security.certificate-authority.activated"])
    assert (activated["caId"], activated["decidedBy"]) == (prepared["caId"], "schedule")


def test_the_propagation_period_is_a_pool_setting(admin_key: str, phases: str) -> None:
    # When the pool's period is shortened to ten minutes
    updated = call("/api/compute/pools/update", {**POOL, "caPropagationSeconds": 600}, admin_key)
    assert (updated.status, updated.body["caPropagationSeconds"]) == (200, 600)
    # Then a rotation signs ten minutes later
    call(GET, POOL, admin_key)
    prepared = call(ROTATE, POOL, admin_key).body["next"]
    assert seconds_from_now(prepared["activatesAt"]) in range(600 - 2, 600 + 1)
    # And a period shorter than the public bundle's cache life, or longer than a month, is refused
    for seconds in (299, MONTH + 1, "600", None):
        refused = call("/api/compute/pools/update", {**POOL, "caPropagationSeconds": seconds}, admin_key)
        assert refused.status == 400, (seconds, refused.body)
    assert call("/api/compute/pools/get", POOL, admin_key).body["caPropagationSeconds"] == 600


@pytest.mark.parametrize(
    ("route", "body", "status"),
    [
        (ROTATE, {**POOL, "emergency": "yes"}, 400),
        (ROTATE, {**POOL, "emergency": True, "extra": 1}, 400),
        (ACTIVATE, {**POOL, "caId": "not-a-ca"}, 400),
        (ACTIVATE, {**POOL, "caId": 7}, 400),
        (ACTIVATE, {**POOL, "ca": "x"}, 400),
        (ACTIVATE, {**POOL, "caId": "ca_" + "0" * 26}, 400),
        (ACTIVATE, {"tenantId": "globex", "poolId": "phases"}, 404),
        (ACTIVATE, {**TENANT, "poolId": "absent"}, 404),
    ],
)
def test_bad_rotate_and_activate_bodies_are_refused_and_change_nothing(
    admin_key: str, phases: str, route: str, body: dict[str, Any], status: int
) -> None:
    # Given a prepared rotation
    call(GET, POOL, admin_key)
    call(ROTATE, POOL, admin_key)
    before = call(GET, POOL, admin_key).body
    # When a bad body is sent / Then it is refused, and the CAs are as they were
    reply = call(route, body, admin_key)
    assert reply.status == status, reply.body
    assert call(GET, POOL, admin_key).body == before


def test_the_active_ca_named_while_another_is_prepared_is_refused(admin_key: str, phases: str) -> None:
    # Given a prepared rotation
    active = call(GET, POOL, admin_key).body["active"]["caId"]
    call(ROTATE, POOL, admin_key)
    before = call(GET, POOL, admin_key).body
    # When the operator activates the CA that is already active / Then it is refused, and the
    # prepared CA is still the one that signs next
    refused = call(ACTIVATE, {**POOL, "caId": active}, admin_key)
    assert (refused.status, refused.reason) == (400, "NO_PREPARED_CA")
    assert call(GET, POOL, admin_key).body == before


def test_another_pools_prepared_ca_cannot_be_activated_here(admin_key: str, phases: str) -> None:
    # Given a second pool with a prepared CA
    other = {**TENANT, "poolId": "other"}
    body = {**other, "siteId": "s1", "name": "Other", "workspaceId": "w"}
    assert call("/api/compute/pools/create", body, admin_key).status == 200
    call(GET, other, admin_key)
    foreign = call(ROTATE, other, admin_key).body["next"]["caId"]
    call(GET, POOL, admin_key)
    before = call(GET, POOL, admin_key).body
    # When it is named on this pool / Then it is refused, and neither pool changed
    refused = call(ACTIVATE, {**POOL, "caId": foreign}, admin_key)
    assert (refused.status, refused.reason) == (400, "NO_PREPARED_CA")
    assert call(GET, POOL, admin_key).body == before
    assert call(GET, other, admin_key).body["next"]["caId"] == foreign


def test_the_public_bundle_needs_no_credentials_is_cacheable_and_names_nothing_it_should_not(
    admin_key: str, phases: str
) -> None:
    # Given a pool with a CA and a pending CSR
    shown = call(GET, POOL, admin_key).body
    pending = call("/api/compute/certificateAuthorities/createCsr", POOL, admin_key).body["caId"]
    # When a verifier fetches the bundle URL / Then it is the bundle, as PEM, cacheable 5 minutes
    answer = get_bundle(shown["bundleUrl"])
    assert answer["statusCode"] == 200
    assert answer["headers"]["content-type"] == "application/pem-certificate-chain"
    assert answer["headers"]["cache-control"] == "public, max-age=300"
    pem = base64.b64decode(answer["body"]).decode() if answer["isBase64Encoded"] else answer["body"]
    assert pem == "".join(shown["bundle"])
    # And every CA the pool has had names the same bundle, across rotations
    rotated = call(ROTATE, {**POOL, "emergency": True}, admin_key).body
    assert rotated["bundleUrl"] == shown["bundleUrl"]
    assert fetched_bundle("/bundle/" + rotated["active"]["caId"]) == fetched_bundle(shown["bundleUrl"])
    # And anything else is 404, and creates nothing: garbage, an unknown CA, a CSR's CA
    cas = authorities_db.list_pool("acme", "phases")
    for path in ("/bundle/garbage", "/bundle/ca_" + "0" * 26, f"/bundle/{pending}", "/bundle/..%2Fx"):
        missing = get_bundle(path)
        assert missing["statusCode"] == 404, (path, missing)
    assert authorities_db.list_pool("acme", "phases") == cas


# --- races: released together against the one moto server ------------------------------------------


def test_eight_concurrent_rotations_prepare_exactly_one_ca(admin_key: str, phases: str) -> None:
    # Given a pool with its first CA
    first = call(GET, POOL, admin_key).body["active"]["caId"]

    # When eight operators rotate it at once
    def rotating(index: int) -> Any:
        container.reset(keep_clients=True)
        return ca.rotate("acme", "s1", "phases", by=f"key_{index}", propagation_seconds=DAY)

    results = release_together(rotating, THREADS, catch=JoinplaneError)
    # Then exactly one prepared its CA; every other was told a rotation won, or is prepared
    won = [r for r in results if isinstance(r, authorities_db.Authorities)]
    assert len(won) == 1, results
    for lost in (r for r in results if r not in won):
        assert isinstance(lost, Aborted | Unavailable) or (
            isinstance(lost, InvalidState) and lost.reason == "CA_ROTATION_PREPARED"
        ), lost
    # And the pool has one active CA, the first, and one prepared CA, the one the pointer publishes
    states = Counter(c.state for c in authorities_db.list_pool("acme", "phases"))
    assert states == Counter({"active": 1, "prepared": 1})
    stored = authorities_db.read("acme", "phases")
    assert stored is not None and stored.active.ca_id == first
    assert stored.next is not None and won[0].next is not None
    assert stored.next.ca_id == won[0].next.ca_id
    assert stored.pointer.bundle == (first, stored.next.ca_id)


def test_many_containers_and_an_operator_at_the_end_of_the_period_activate_once(
    admin_key: str, phases: str, tmp_path: Path
) -> None:
    # Given a prepared CA whose propagation period has just ended
    first = call(GET, POOL, admin_key).body["active"]["caId"]
    prepared = call(ROTATE, POOL, admin_key).body["next"]["caId"]
    clock.advance(DAY)

    # When seven containers use the pool's CA and an operator activates it, all at once (each
    # container's cached CA is stale once the period has ended: no cache to clear)
    def using(index: int) -> str:
        if index == 0:
            return ca.activate("acme", "phases", by="key_operator", ca_id=prepared).active.ca_id
        return ca.pool_authorities("acme", "s1", "phases").authorities.active.ca_id

    seen = release_together(using, THREADS)
    # Then every one of them sees the prepared CA active, and it was activated exactly once
    assert seen == [prepared] * THREADS
    states = Counter(c.state for c in authorities_db.list_pool("acme", "phases"))
    assert states == Counter({"active": 1, "retired": 1})
    activated = authorities_db.get(prepared)
    assert activated is not None and activated.activated_by in ("schedule", "key_operator")
    retired = authorities_db.get(first)
    assert retired is not None and retired.state == "retired"
    events = [
        e for e in publish_table_stream() if e.detail_type == "security.certificate-authority.activated"
    ]
    assert [e.detail["caId"] for e in events] == [prepared]


def test_rotations_released_with_activations_leave_one_active_and_at_most_one_published_next(
    admin_key: str, phases: str
) -> None:
    # Given a prepared CA, its period not yet over
    call(GET, POOL, admin_key)
    prepared = call(ROTATE, POOL, admin_key).body["next"]["caId"]

    # When four operators activate it and four rotate again, all at once
    def acting(index: int) -> Any:
        if index % 2 == 0:
            return ca.activate("acme", "phases", by=f"key_{index}", ca_id=prepared)
        return ca.rotate("acme", "s1", "phases", by=f"key_{index}", propagation_seconds=DAY)

    results = release_together(acting, THREADS, catch=JoinplaneError)
    # Then every activation answered the prepared CA active; a rotation either prepared the CA after
    # it (at most one did) or was told one was prepared, or that it lost
    for activated in results[0::2]:
        assert isinstance(activated, authorities_db.Authorities) and activated.active.ca_id == prepared
    rotations = [r for r in results[1::2] if isinstance(r, authorities_db.Authorities)]
    assert len(rotations) <= 1
    for lost in (r for r in results[1::2] if r not in rotations):
        assert isinstance(lost, Aborted | Unavailable | InvalidState), lost
    # And the table agrees: one active CA (the prepared one), its predecessor retired once, and any
    # CA prepared after it named next by the pointer and published in the bundle
    states = Counter(c.state for c in authorities_db.list_pool("acme", "phases"))
    assert states == Counter({"active": 1, "retired": 1, "prepared": len(rotations)})
    stored = authorities_db.read("acme", "phases")
    assert stored is not None and stored.active.ca_id == prepared
    if rotations:
        assert stored.next is not None and stored.next.previous_ca_id == prepared
        assert stored.next.ca_id in stored.pointer.bundle
    else:
        assert stored.next is None

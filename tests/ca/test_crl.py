"""Revocation that clients honour. Machines join and are revoked over the HTTP API
(authorizer and functions as API Gateway calls them); each certificate's CRL distribution point is
fetched from the route that serves it, and every verdict is the openssl CLI's."""

from __future__ import annotations

import base64
import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cryptography import x509

from joinplane import aws, ca, ca_keys, clock, container, crl
from joinplane.dal import dynamo, revocations
from joinplane_local.runtime import Runtime
from tests.support import call, join, openssl_csr, release_together
from tests.support.crl import crl_url_of, fetched_crl
from tests.support.crl import get_crl as get
from tests.support.csr import make_csr, openssl
from tests.support.events import publish_table_stream
from tests.support.http import sign_proof
from tests.support.runtime import Http, local_runtime

TENANT = {"tenantId": "acme"}
POOL = {**TENANT, "poolId": "gpu"}


@pytest.fixture
def token(admin_key: str) -> str:
    created = call(
        "/api/compute/pools/create", {**POOL, "siteId": "s1", "name": "GPU", "workspaceId": "w"}, admin_key
    )
    assert created.status == 200, created.body
    reply = call("/api/compute/joinTokens/create", {**POOL, "maxUses": 10}, admin_key)
    assert reply.status == 200, reply.body
    return str(reply.body["token"])


@pytest.fixture
def kms_signs() -> Iterator[list[str]]:
    """Every kms:Sign this process makes while the test runs (the key ids)."""
    signed: list[str] = []
    client = aws.client("kms")

    def count(params: dict[str, Any], **_: Any) -> None:
        signed.append(str(params["KeyId"]))

    client.meta.events.register("provide-client-params.kms.Sign", count)
    yield signed
    client.meta.events.unregister("provide-client-params.kms.Sign", count)


def admitted(token: str, directory: Path) -> dict[str, Any]:
    directory.mkdir()
    reply = join({"joinToken": token, "csr": openssl_csr(directory, "/CN=m")})
    assert reply.status == 200, reply.body
    (directory / "machine.crt").write_text(reply.body["certificate"])
    (directory / "ca.crt").write_text(reply.body["caCertificates"])
    return dict(reply.body)


def verify_with_crl(directory: Path, crl_pem: Path) -> Any:
    return openssl(
        "verify", "-crl_check", "-CRLfile", str(crl_pem), "-CAfile", str(directory / "ca.crt"),
        str(directory / "machine.crt"), check=False,
    )  # fmt: skip


def revoke(admin_key: str, machine: dict[str, Any]) -> None:
    reply = call("/api/compute/machines/revoke", {**TENANT, "machineId": machine["machineId"]}, admin_key)
    assert reply.status == 200 and reply.body["state"] == "revoked", reply.body


def test_a_revoked_machine_fails_crl_check_and_its_pool_mate_verifies(
    admin_key: str, token: str, tmp_path: Path, kms_signs: list[str]
) -> None:
    # Given two machines of one pool
    revoked, kept = admitted(token, tmp_path / "revoked"), admitted(token, tmp_path / "kept")
    # And each certificate names its CA's CRL on this API
    url = crl_url_of(revoked["certificate"])
    assert url == crl_url_of(kept["certificate"]) and url.startswith("https://localhost/crl/ca_")
    # When the operator revokes one
    kms_signs.clear()
    revoke(admin_key, revoked)
    # Then the revocation signed the CA's CRL once
    assert len(kms_signs) == 1
    # And the CRL the distribution point serves says so, to openssl
    crl_pem = fetched_crl(revoked["certificate"], tmp_path / "revoked")
    assert len(kms_signs) == 1  # served as stored: no signing on the way out
    result = verify_with_crl(tmp_path / "revoked", crl_pem)
    assert result.returncode != 0 and "certificate revoked" in result.stdout + result.stderr
    # And the other machine verifies OK with the same CRL
    result = verify_with_crl(tmp_path / "kept", crl_pem)
    assert result.returncode == 0 and ": OK" in result.stdout, result.stdout + result.stderr


def test_the_crl_is_signed_by_the_issuing_ca_and_due_within_seven_days(
    admin_key: str, token: str, tmp_path: Path
) -> None:
    # Given a machine, revoked
    machine = admitted(token, tmp_path / "m")
    revoke(admin_key, machine)
    # When its CRL is fetched
    crl_pem = fetched_crl(machine["certificate"], tmp_path / "m")
    # Then openssl verifies the CRL's signature with the CA certificate (whose key is in KMS)
    checked = openssl("crl", "-in", str(crl_pem), "-CAfile", str(tmp_path / "m" / "ca.crt"), "-noout")
    assert "verify OK" in checked.stdout + checked.stderr
    # And its issuer is the machine certificate's issuer, nextUpdate at most 7 days out, numbered
    text = openssl("crl", "-in", str(crl_pem), "-noout", "-text").stdout
    certificate = x509.load_pem_x509_certificate(machine["certificate"].encode())
    listed = x509.load_pem_x509_crl(crl_pem.read_bytes())
    assert listed.issuer == certificate.issuer
    assert listed.next_update_utc is not None
    assert timedelta(days=2) < listed.next_update_utc - clock.now() <= timedelta(days=7)
    assert "X509v3 CRL Number" in text and "X509v3 Authority Key Identifier" in text
    serial = format(certificate.serial_number, "X")
    assert serial in text.replace(":", "").upper()


def test_a_verifier_whose_clock_is_two_seconds_behind_accepts_a_crl_rebuilt_just_now(
    admin_key: str, token: str, tmp_path: Path
) -> None:
    # Given two machines of one pool, one of them revoked: the revocation rebuilds the CA's CRL now
    kept, revoked = admitted(token, tmp_path / "kept"), admitted(token, tmp_path / "revoked")
    revoke(admin_key, revoked)
    crl_pem = fetched_crl(kept["certificate"], tmp_path / "kept")
    built = x509.load_pem_x509_crl(crl_pem.read_bytes())

    # When a verifier whose clock runs 2 s behind checks each machine against that CRL
    def verify_two_seconds_behind(directory: Path) -> Any:
        return openssl(
            "verify", "-crl_check", "-attime", str(int(clock.epoch()) - 2), "-CRLfile", str(crl_pem),
            "-CAfile", str(directory / "ca.crt"), str(directory / "machine.crt"), check=False,
        )  # fmt: skip

    # Then the CRL is already valid for it (back-dated as certificates are): the kept machine is OK
    result = verify_two_seconds_behind(tmp_path / "kept")
    assert result.returncode == 0 and ": OK" in result.stdout, result.stdout + result.stderr
    # And the revoked one is refused as revoked, not for a CRL "not yet valid"
    result = verify_two_seconds_behind(tmp_path / "revoked")
    assert "certificate revoked" in result.stdout + result.stderr, result.stdout + result.stderr
    # And thisUpdate is the certificates' clock allowance before the build
    stored = revocations.get_crl(crl_url_of(kept["certificate"]).rsplit("/", 1)[1])
    assert stored is not None
    assert built.last_update_utc.timestamp() == stored.built_at - ca.CLOCK_SKEW.total_seconds()
    assert stored.this_update == stored.built_at - ca.CLOCK_SKEW.total_seconds()


def test_a_key_rotating_renewal_puts_the_old_certificate_on_the_crl_as_superseded(
    token: str, tmp_path: Path
) -> None:
    # Given a machine
    old = tmp_path / "old"
    machine = admitted(token, old)
    new = make_csr(tmp_path, "p256", "/CN=m", key_name="new.key", csr_name="new.csr")
    # When it renews onto a new key (signed by both keys)
    raw = json.dumps({"machineToken": machine["machineToken"], "csr": new.pem}).encode()
    proof = sign_proof(
        old / "key.pem",
        purpose="renew",
        credential=machine["machineToken"],
        body=raw,
        public_key=old / "key.pem",
        new_key=new.key_path,
    )
    renewed = join(None, raw=raw, proof=proof, path="/machines/renew")
    assert renewed.status == 200, renewed.body
    # Then the CRL lists the old certificate as superseded: openssl refuses it
    crl_pem = fetched_crl(renewed.body["certificate"], old)
    result = verify_with_crl(old, crl_pem)
    assert result.returncode != 0 and "certificate revoked" in result.stdout + result.stderr
    assert "Superseded" in openssl("crl", "-in", str(crl_pem), "-noout", "-text").stdout
    # And the new certificate verifies with the same CRL
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "machine.crt").write_text(renewed.body["certificate"])
    (fresh / "ca.crt").write_text(renewed.body["caCertificates"])
    result = verify_with_crl(fresh, crl_pem)
    assert result.returncode == 0, result.stdout + result.stderr


def renew_same_key(machine: dict[str, Any], directory: Path, *, at_clock: bool = False) -> Any:
    """A renewal that keeps the machine's key (a new CSR for the same key, signed by it); its proof
    made at the process's clock (`at_clock`, when a test moved it) or, by default, strictly later
    than the previous proof."""
    csr = openssl("req", "-new", "-key", str(directory / "key.pem"), "-subj", "/CN=m").stdout
    raw = json.dumps({"machineToken": machine["machineToken"], "csr": csr}).encode()
    proof = sign_proof(
        directory / "key.pem",
        purpose="renew",
        credential=machine["machineToken"],
        body=raw,
        timestamp_ms=int(clock.epoch() * 1000) if at_clock else None,
    )
    return join(None, raw=raw, proof=proof, path="/machines/renew")


def test_a_revocation_lists_every_certificate_the_machine_holds_that_still_verifies(
    admin_key: str, token: str, tmp_path: Path
) -> None:
    # Given a machine that renewed twice with the same key: three certificates, all still valid
    directory = tmp_path / "m"
    machine = admitted(token, directory)
    certificates = [machine["certificate"]]
    for _ in range(2):
        renewed = renew_same_key(machine, directory)
        assert renewed.status == 200, renewed.body
        certificates.append(renewed.body["certificate"])
    # When the machine is revoked
    revoke(admin_key, machine)
    # Then its CA's CRL lists all three: openssl refuses each one
    crl_pem = fetched_crl(certificates[-1], directory)
    for index, certificate in enumerate(certificates):
        (directory / "machine.crt").write_text(certificate)
        result = verify_with_crl(directory, crl_pem)
        assert "certificate revoked" in result.stdout + result.stderr, index


def test_concurrent_same_key_renewals_then_a_revocation_leave_no_certificate_off_the_crl(
    admin_key: str, token: str, tmp_path: Path
) -> None:
    # Given machines each renewed by eight renewals with the same key released together (each
    # proof newer than the last, so those committed out of order are refused as replays; rounds
    # until two or more renewals of one machine both got a certificate)
    most = 0
    for round_ in range(4):
        directory = tmp_path / f"m{round_}"
        machine = admitted(token, directory)
        replies = release_together(lambda _: renew_same_key(machine, directory), 8)  # noqa: B023
        issued = [machine["certificate"]] + [r.body["certificate"] for r in replies if r.status == 200]
        most = max(most, len(issued) - 1)
        # When the machine is revoked, every certificate it was given is on the CRL
        revoke(admin_key, machine)
        crl_pem = fetched_crl(issued[-1], directory)
        listed = {format(c.serial_number, "x") for c in x509.load_pem_x509_crl(crl_pem.read_bytes())}
        serials = {format(x509.load_pem_x509_certificate(c.encode()).serial_number, "x") for c in issued}
        assert serials <= listed, round_
        if most >= 2:
            break
    assert most >= 2


def test_a_machine_may_hold_at_most_sixteen_valid_certificates(token: str, tmp_path: Path) -> None:
    from joinplane.dal import machines as machines_db

    # Given a machine that renewed until it holds the most certificates that may verify at once
    directory = tmp_path / "m"
    machine = admitted(token, directory)
    for _ in range(machines_db.MAX_VALID_CERTIFICATES - 1):
        assert renew_same_key(machine, directory).status == 200
    # When it asks for one more, it is refused and told when it may renew
    refused = renew_same_key(machine, directory)
    assert refused.status == 400 and "when the oldest expires" in refused.body["message"], refused.body
    # And once the oldest has expired it renews again
    clock.advance(2 * 86400)
    try:
        assert renew_same_key(machine, directory, at_clock=True).status == 200
    finally:
        container.reset(keep_clients=True)


def test_a_crl_too_large_for_a_raw_kms_signature_is_signed_as_a_digest(
    admin_key: str, token: str, tmp_path: Path, kms_signs: list[str]
) -> None:
    # Given a CA with 150 revoked certificates that have not expired (as revocations list them)
    directory = tmp_path / "m"
    machine = admitted(token, directory)
    ca_id = crl_url_of(machine["certificate"]).rsplit("/", 1)[1]
    expires, at = int(clock.epoch()) + 86400, clock.rfc3339(clock.now())
    for _ in range(150):
        serial = format(secrets.randbits(158) | 1 << 158, "x")
        dynamo.put(revocations.RevocationRecord(ca_id, serial, at, "unspecified", expires).to_item())
    # When one more machine is revoked (its CRL rebuilt at once: one kms:Sign)
    kms_signs.clear()
    revoke(admin_key, machine)
    assert len(kms_signs) == 1
    # Then the CRL's to-be-signed part is over KMS's 4096-byte RAW limit, and it still verifies
    crl_pem = fetched_crl(machine["certificate"], directory)
    listed = x509.load_pem_x509_crl(crl_pem.read_bytes())
    assert len(listed.tbs_certlist_bytes) > ca_keys.MAX_TBS_BYTES and len(listed) == 151
    checked = openssl("crl", "-in", str(crl_pem), "-CAfile", str(directory / "ca.crt"), "-noout")
    assert "verify OK" in checked.stdout + checked.stderr
    result = verify_with_crl(directory, crl_pem)
    assert "certificate revoked" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "ca_id", ["ca_01m8nz6smg0chzvz0b58z6hma5", "nonsense", "ca_../../etc", "ca_" + "0" * 200, ""]
)
def test_an_unknown_or_malformed_ca_id_is_not_found_and_writes_nothing(
    table: str, ca_id: str, kms_signs: list[str]
) -> None:
    before = dynamo.query(pk=revocations.CRL_PREFIX + ca_id, consistent=True).items
    # When a CRL is asked for a CA that does not exist
    answer = get(f"/crl/{ca_id}")
    # Then: 404 NOT_FOUND, nothing signed, nothing stored
    assert answer["statusCode"] == 404, answer
    assert json.loads(answer["body"])["error"]["code"] == "NOT_FOUND"
    assert kms_signs == []
    assert dynamo.query(pk=revocations.CRL_PREFIX + ca_id, consistent=True).items == before == []


def test_a_fetch_signs_only_when_the_crl_is_missing_due_or_missing_a_revocation(
    admin_key: str, token: str, tmp_path: Path, kms_signs: list[str]
) -> None:
    # Given a pool's CA with no CRL yet
    machine = admitted(token, tmp_path / "m")
    path = urlsplit(crl_url_of(machine["certificate"])).path
    ca_id = path.rsplit("/", 1)[1]
    kms_signs.clear()
    # When it is fetched twice: Then the first fetch builds it (one Sign), the second serves it
    first = get(path)
    second = get(path)
    assert first["statusCode"] == second["statusCode"] == 200 and first["body"] == second["body"]
    assert len(kms_signs) == 1
    assert "public, max-age=" in first["headers"]["cache-control"]
    assert 0 < int(first["headers"]["cache-control"].rsplit("=", 1)[1]) <= 3600
    # And a revocation whose own refresh did not happen (an entry only) is picked up by the next fetch
    stored = revocations.get_crl(ca_id)
    assert stored is not None and stored.crl_number == 1
    dynamo.put(
        revocations.RevocationRecord(
            ca_id, "7" * 40, clock.rfc3339(clock.now()), "unspecified", int(clock.epoch()) + 600
        ).to_item()
    )
    third = get(path)
    assert len(kms_signs) == 2
    assert int("7" * 40, 16) in {
        e.serial_number for e in x509.load_der_x509_crl(base64.b64decode(third["body"]))
    }
    # And a day later it is rebuilt with a higher number
    clock.advance(crl.REBUILD_AFTER_SECONDS)
    get(path)
    assert len(kms_signs) == 3
    rebuilt = revocations.get_crl(ca_id)
    assert rebuilt is not None and rebuilt.crl_number == 3


def test_concurrent_rebuilds_never_store_a_lower_crl_number(token: str, tmp_path: Path) -> None:
    # Given a pool's CA
    machine = admitted(token, tmp_path / "m")
    ca_id = urlsplit(crl_url_of(machine["certificate"])).path.rsplit("/", 1)[1]
    seen: list[int] = []
    # When eight rebuilds are released together, twice
    for _ in range(2):
        built = release_together(lambda _: crl.refresh(ca_id).crl_number, 8)
        stored = revocations.get_crl(ca_id)
        assert stored is not None
        # Then every build answers a CRL no newer than what is stored, and the stored number only grows
        assert max(built) <= stored.crl_number
        seen.append(stored.crl_number)
    assert seen[0] < seen[1]
    # And the stored CRL's own CRLNumber is the item's
    stored = revocations.get_crl(ca_id)
    assert stored is not None
    number = x509.load_der_x509_crl(stored.der).extensions.get_extension_for_class(x509.CRLNumber).value
    assert number.crl_number == stored.crl_number


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    # Not module-scoped: a runtime left running imports its functions lazily, and each import sets
    # that function's environment (the runtime's table) in this process, under the next test's feet.
    with local_runtime() as running:
        yield running


def test_over_http_the_distribution_point_serves_the_crl_that_revokes_the_machine(
    runtime: Runtime, tmp_path: Path
) -> None:
    # Given a pool of the local runtime (`make run`) and two machines joined over HTTP
    api = Http(runtime)
    pool = {"tenantId": "dev", "poolId": "crl-pool"}
    created = api.post(
        "/api/compute/pools/create", {**pool, "siteId": "s1", "name": "CRL", "workspaceId": "w"}, api.admin
    )
    assert created[0] == 200, created
    status, body = api.post("/api/compute/joinTokens/create", {**pool, "maxUses": 2}, api.admin)
    assert status == 200, body
    machines = {}
    for name in ("revoked", "kept"):
        (tmp_path / name).mkdir()
        status, joined = api.post(
            "/machines/join", {"joinToken": body["token"], "csr": openssl_csr(tmp_path / name, "/CN=m")}
        )
        assert status == 200, joined
        (tmp_path / name / "machine.crt").write_text(joined["certificate"])
        (tmp_path / name / "ca.crt").write_text(joined["caCertificates"])
        machines[name] = joined
    # And their certificates name the CRL on this runtime's own address
    url = crl_url_of(machines["revoked"]["certificate"])
    assert url.startswith(f"{runtime.url}/crl/ca_"), url
    # When one is revoked and a verifier fetches the distribution point with no credentials
    status, revoked = api.post(
        "/api/compute/machines/revoke",
        {"tenantId": "dev", "machineId": machines["revoked"]["machineId"]},
        api.admin,
    )
    assert status == 200 and revoked["state"] == "revoked", revoked
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert response.headers["content-type"] == "application/pkix-crl"
        assert response.headers["cache-control"].startswith("public, max-age=")
        (tmp_path / "crl.der").write_bytes(response.read())
    openssl("crl", "-inform", "DER", "-in", str(tmp_path / "crl.der"), "-out", str(tmp_path / "crl.pem"))
    # Then openssl says the revoked machine's certificate is revoked, and the other one is OK
    result = verify_with_crl(tmp_path / "revoked", tmp_path / "crl.pem")
    assert result.returncode != 0 and "certificate revoked" in result.stdout + result.stderr
    result = verify_with_crl(tmp_path / "kept", tmp_path / "crl.pem")
    assert result.returncode == 0, result.stdout + result.stderr
    # And an unknown CA's CRL is a 404
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{runtime.url}/crl/ca_01m8nz6smg0chzvz0b58z6hma5", timeout=30)
    assert missing.value.code == 404


def test_the_revocation_is_the_audit_event_and_the_crl_makes_none(
    admin_key: str, token: str, tmp_path: Path
) -> None:
    # Given a machine revoked, its CRL refreshed by the revocation and fetched again
    machine = admitted(token, tmp_path / "m")
    revoke(admin_key, machine)
    fetched_crl(machine["certificate"], tmp_path / "m")
    # When the table's stream is published
    published = [event.detail_type for event in publish_table_stream()]
    # Then the revocation is its one security event, and neither the CRL nor its entries are any
    assert published.count("security.machine.revoked") == 1, published
    assert not [kind for kind in published if "crl" in kind.lower() or "revokedcert" in kind.lower()]

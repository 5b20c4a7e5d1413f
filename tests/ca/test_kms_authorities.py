"""Each pool's CA key is a KMS key that never leaves KMS, rotation keeps a
trust bundle, and every change is one transaction. Checked against the session's moto server (KMS
and DynamoDB) and with the openssl CLI, as a machine or a verifier would."""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from joinplane import aws, ca, ca_keys, clock, container, csr_checks, der, expiry, machine_certificates
from joinplane.dal import authorities as authorities_db
from joinplane.dal import ca_retention as ca_retention_db
from joinplane.dal import dynamo
from joinplane.dal.pools import pool_key
from joinplane.errors import Aborted, Internal, InvalidState, JoinplaneError, RetryLater, Unavailable
from joinplane_local import iam
from tests.support import release_together
from tests.support.csr import Csrs, OpensslTool, openssl

TENANT, SITE = "acme", "s1"
THREADS = 8


@pytest.fixture
def pool(table: str) -> str:
    """A fresh active pool (the rotation transaction checks the pool is active)."""
    pool_id = f"pool-{uuid.uuid4().hex[:8]}"
    pk, sk = pool_key(TENANT, pool_id)
    dynamo.put({"pk": pk, "sk": sk, "state": "active", "tenantId": TENANT, "poolId": pool_id})
    return pool_id


@pytest.fixture
def kms_calls() -> Iterator[Counter[str]]:
    counted: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        counted[event_name.rsplit(".", 1)[-1]] += 1

    for service in ("kms", "dynamodb"):
        aws.client(service).meta.events.register(f"before-call.{service}.*", count, unique_id="kms-calls")
    yield counted
    for service in ("kms", "dynamodb"):
        aws.client(service).meta.events.unregister(f"before-call.{service}.*", unique_id="kms-calls")


def issue(
    csrs: Csrs, pool: str, machine: str = "mach_01", kind: str = "p256"
) -> machine_certificates.IssuedCertificate:
    return machine_certificates.issue_machine_certificate(
        tenant_id=TENANT,
        site_id=SITE,
        pool_id=pool,
        machine_id=machine,
        csr=csr_checks.parse_csr(csrs[kind].pem),
        lifetime_seconds=3600,
    )


def rotate(pool: str, by: str = "jpk_admin", *, emergency: bool = False) -> authorities_db.Authorities:
    return ca.rotate(TENANT, SITE, pool, by=by, propagation_seconds=3600, emergency=emergency)


def stored(pool: str) -> authorities_db.Authorities:
    found = authorities_db.read(TENANT, pool)
    assert found is not None
    return found


def kms_public_key_pem(key_id: str) -> str:
    der_bytes = aws.client("kms").get_public_key(KeyId=key_id)["PublicKey"]
    key = serialization.load_der_public_key(der_bytes)
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def key_state(key_id: str) -> str:
    return str(aws.client("kms").describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"])


# --- the key never leaves KMS ------------------------------------------------------------------


def test_a_pools_first_certificate_makes_a_tagged_p256_kms_key_whose_public_key_the_ca_holds(
    csrs: Csrs, ossl: OpensslTool, pool: str
) -> None:
    # When a pool's first certificate is issued
    issued = issue(csrs, pool)
    # Then the pool has one active CA, made by a join, whose key is a KMS signing key on P-256
    authorities = stored(pool)
    active = authorities.active
    assert (active.state, active.created_by, authorities.pointer.bundle) == (
        "active",
        "join",
        (active.ca_id,),
    )
    metadata = aws.client("kms").describe_key(KeyId=active.key_id)["KeyMetadata"]
    assert (metadata["KeySpec"], metadata["KeyUsage"]) == ("ECC_NIST_P256", "SIGN_VERIFY")
    tags = {
        t["TagKey"]: t["TagValue"] for t in aws.client("kms").list_resource_tags(KeyId=active.key_id)["Tags"]
    }
    assert tags == {
        "joinplane:stack": "joinplane-local",
        "joinplane:tenant": TENANT,
        "joinplane:pool": pool,
        "joinplane:ca": active.ca_id,
    }
    aliases = aws.client("kms").list_aliases(KeyId=metadata["KeyId"])["Aliases"]
    assert [a["AliasName"] for a in aliases] == [f"alias/joinplane/joinplane-local/{active.ca_id}"]
    # And openssl reads the KMS key's public key out of the CA certificate the machine was handed
    ca_file = ossl.write("ca.pem", issued.ca_certificates_pem)
    assert openssl("x509", "-in", str(ca_file), "-noout", "-pubkey").stdout == kms_public_key_pem(
        active.key_id
    )
    # And the machine's certificate verifies under it, signed by that key (no private key anywhere)
    assert ossl.verify(issued.ca_certificates_pem, issued.certificate_pem).returncode == 0
    assert issued.ca_id == active.ca_id
    ca_cert = x509.load_pem_x509_certificate(active.certificate_pem.encode())
    assert ca_cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value == active.ca_id
    ca_cert.verify_directly_issued_by(ca_cert)


def test_the_alias_prefix_and_stack_tag_come_from_settings(
    csrs: Csrs, pool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KMS_ALIAS_PREFIX", "alias/joinplane/prod")
    monkeypatch.setenv("KMS_STACK_TAG", "prod")
    container.reset(keep_clients=True)
    issue(csrs, pool)
    key_id = stored(pool).active.key_id
    tags = {t["TagKey"]: t["TagValue"] for t in aws.client("kms").list_resource_tags(KeyId=key_id)["Tags"]}
    assert tags["joinplane:stack"] == "prod"
    aliases = aws.client("kms").list_aliases(KeyId=key_id)["Aliases"]
    assert [a["AliasName"] for a in aliases] == [f"alias/joinplane/prod/{stored(pool).active.ca_id}"]


def test_a_warm_container_issues_with_one_kms_sign_and_no_other_call(
    csrs: Csrs, ossl: OpensslTool, pool: str, kms_calls: Counter[str]
) -> None:
    # Given a container that issued the pool's first certificate
    first = issue(csrs, pool)
    kms_calls.clear()
    # When it issues three more
    later = [
        issue(csrs, pool, machine=f"mach_0{n}", kind=kind)
        for n, kind in ((2, "p256"), (3, "ed25519"), (4, "rsa2048"))
    ]
    # Then each cost exactly one kms:Sign, and nothing else (no DynamoDB, no GetPublicKey)
    assert kms_calls == Counter({"Sign": 3})
    for issued in later:
        assert ossl.verify(first.ca_certificates_pem, issued.certificate_pem).returncode == 0


def test_a_cold_container_reads_the_stored_ca_and_signs_once(
    csrs: Csrs, pool: str, kms_calls: Counter[str]
) -> None:
    first = issue(csrs, pool)
    container.reset(keep_clients=True)  # a new container; its clients are still the counted ones
    kms_calls.clear()
    again = issue(csrs, pool, machine="mach_02")
    # Then: the pointer, the bundle's CAs in one batch, one signature; no key made, no public key read
    assert kms_calls == Counter({"GetItem": 1, "BatchGetItem": 1, "Sign": 1})
    assert again.ca_certificates_pem == first.ca_certificates_pem


def test_after_the_cache_time_a_container_reads_the_ca_again(
    csrs: Csrs, pool: str, kms_calls: Counter[str]
) -> None:
    issue(csrs, pool)
    kms_calls.clear()
    clock.advance(ca.CA_CACHE_SECONDS)
    issue(csrs, pool, machine="mach_02")
    assert kms_calls == Counter({"GetItem": 1, "BatchGetItem": 1, "Sign": 1})


def test_a_signature_that_does_not_verify_under_the_ca_key_fails_loudly(csrs: Csrs, pool: str) -> None:
    # Given the pool's CA, and a certificate builder signed by a KMS key that is not the CA's
    issue(csrs, pool)
    loaded = ca.pool_authorities(TENANT, SITE, pool)
    other = aws.client("kms").create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"][
        "Arn"
    ]
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(loaded.public_key)
        .serial_number(1)
        .not_valid_before(clock.now())
        .not_valid_after(clock.now())
    )
    # When it is "signed" with the wrong key / Then nothing is returned: an Internal error
    with pytest.raises(Internal, match="does not verify"):
        ca_keys.sign_certificate(builder, other, loaded.public_key)


def test_the_der_wrapping_is_what_cryptography_itself_writes() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "der")])
    from cryptography.hazmat.primitives import hashes

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(clock.now())
        .not_valid_after(clock.now())
        .sign(key, hashes.SHA256())
    )
    wrapped = der.signed(cert.tbs_certificate_bytes, der.ECDSA_WITH_SHA256, cert.signature)
    assert wrapped == cert.public_bytes(serialization.Encoding.DER)
    assert (
        der.length(0x7F) == b"\x7f"
        and der.length(0x80) == b"\x81\x80"
        and der.length(0x1234) == b"\x82\x12\x34"
    )


@pytest.mark.parametrize(
    "code",
    ["ThrottlingException", "KMSInternalException", "DependencyTimeoutException"],
)
def test_kms_throttling_and_outages_are_unavailable_with_when_to_retry(code: str) -> None:
    client = aws.client("kms")
    with Stubber(client) as stub:
        stub.add_client_error("sign", code, http_status_code=500 if code == "KMSInternalException" else 400)
        with pytest.raises(RetryLater, match="KMS") as raised:
            ca_keys.kms_sign_tbs("key", b"tbs")
    assert raised.value.retry_after_seconds == 1


@pytest.mark.parametrize("operation", ["CreateAlias", "GetPublicKey"])
def test_kms_throttled_after_a_ca_key_was_made_hands_the_key_to_the_retention_job(
    csrs: Csrs, pool: str, operation: str
) -> None:
    # Given KMS that makes the pool's first CA key and then throttles the next call about it
    client = aws.client("kms")
    made: list[str] = []

    def throttle(**_: Any) -> None:
        error = {"Code": "ThrottlingException", "Message": "Rate exceeded"}
        raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)

    def record(parsed: dict[str, Any], **_: Any) -> None:
        made.append(parsed["KeyMetadata"]["KeyId"])

    client.meta.events.register(f"before-call.kms.{operation}", throttle, unique_id="throttle")
    client.meta.events.register("after-call.kms.CreateKey", record, unique_id="made")
    try:
        # When a certificate is asked for (the caller is told to retry: a 503)
        with pytest.raises(RetryLater):
            issue(csrs, pool)
    finally:
        client.meta.events.unregister(f"before-call.kms.{operation}", unique_id="throttle")
        client.meta.events.unregister("after-call.kms.CreateKey", unique_id="made")
    # Then the key no CA holds is on its way out, so a caller retrying through throttling does not
    # leave a KMS key ($1 a month) behind at every attempt
    assert len(made) == 1
    later = clock.now() + timedelta(seconds=1)
    assert made[0] in ca_retention_db.abandoned_keys(before=later).key_ids


def test_a_first_ca_the_store_could_not_record_hands_its_key_to_the_retention_job(
    csrs: Csrs, pool: str
) -> None:
    # Given a DynamoDB that refuses the write of the pool's first CA (throughput: a 503, retried)
    table, kms = aws.client("dynamodb"), aws.client("kms")
    made: list[str] = []

    def refuse(**_: Any) -> None:
        error = {"Code": "InternalServerError", "Message": "try again"}
        raise table.exceptions.InternalServerError({"Error": error}, "TransactWriteItems")

    def record(parsed: dict[str, Any], **_: Any) -> None:
        made.append(parsed["KeyMetadata"]["KeyId"])

    table.meta.events.register("before-call.dynamodb.TransactWriteItems", refuse, unique_id="refuse")
    kms.meta.events.register("after-call.kms.CreateKey", record, unique_id="made")
    try:
        # When a certificate is asked for, Then the caller is told to retry
        with pytest.raises(Unavailable):
            issue(csrs, pool)
    finally:
        table.meta.events.unregister("before-call.dynamodb.TransactWriteItems", unique_id="refuse")
        kms.meta.events.unregister("after-call.kms.CreateKey", unique_id="made")
    # And the key of the CA never recorded is on its way out, not left behind at every retry
    assert len(made) == 1
    later = clock.now() + timedelta(seconds=1)
    assert made[0] in ca_retention_db.abandoned_keys(before=later).key_ids


def test_a_kms_quota_on_keys_is_not_told_to_retry_in_a_second() -> None:
    # Given an account whose KMS keys (or aliases) are at their quota: KMS answers
    # LimitExceededException, which waiting a second does not lift (its request rates throttle
    # with ThrottlingException instead)
    client = aws.client("kms")
    with Stubber(client) as stub:
        stub.add_client_error("create_key", "LimitExceededException", http_status_code=400)
        # When a pool's CA key is made, Then the failure is not a 503 with Retry-After: 1, which
        # every caller would retry for ever, but a server fault an operator's alarms see
        with pytest.raises(client.exceptions.ClientError) as raised:
            ca_keys.create_key("ca_01", TENANT, "pool")
    assert not isinstance(raised.value, Unavailable)


def test_access_denied_by_kms_is_not_disguised_as_unavailable() -> None:
    client = aws.client("kms")
    with Stubber(client) as stub:
        stub.add_client_error("sign", "AccessDeniedException", http_status_code=400)
        with pytest.raises(client.exceptions.ClientError) as raised:
            ca_keys.kms_sign_tbs("key", b"tbs")
    assert not isinstance(raised.value, Unavailable)


# --- rotation and the bundle -------------------------------------------------------------------


def test_an_emergency_rotation_keeps_machines_issued_before_it_verifying_with_the_bundle(
    csrs: Csrs, ossl: OpensslTool, pool: str
) -> None:
    # Given a machine certificate from the pool's first CA
    before = issue(csrs, pool, machine="mach_before")
    first = stored(pool).active
    # When the CA is rotated in an emergency (active at once)
    rotated = rotate(pool, emergency=True)
    # Then a new key and CA are active, the first is retired and stays in the bundle (active first)
    assert rotated.active.ca_id != first.ca_id and rotated.active.key_id != first.key_id
    assert rotated.active.previous_ca_id == first.ca_id and rotated.active.created_by == "jpk_admin"
    assert rotated.pointer.bundle == (rotated.active.ca_id, first.ca_id)
    retired = authorities_db.get(first.ca_id)
    assert retired is not None and retired.state == "retired"
    assert retired.bundle_until is not None
    assert abs(retired.bundle_until - int(clock.epoch()) - ca.BUNDLE_GRACE_SECONDS) <= 2
    # And the same container's next certificate comes from the new CA, with the bundle of both
    after = issue(csrs, pool, machine="mach_after")
    assert after.ca_id == rotated.active.ca_id
    bundle = after.ca_certificates_pem
    assert bundle.count("BEGIN CERTIFICATE") == 2
    assert bundle.startswith(rotated.active.certificate_pem)
    # And openssl verifies both machines with the bundle, and each only under its own CA
    for issued in (before, after):
        result = ossl.verify(bundle, issued.certificate_pem)
        assert result.returncode == 0, result.stderr
    assert ossl.verify(first.certificate_pem, after.certificate_pem).returncode != 0
    assert ossl.verify(rotated.active.certificate_pem, before.certificate_pem).returncode != 0
    # And the two CAs have distinct names (verifiers find issuers by name)
    names = {
        x509.load_pem_x509_certificate(c.certificate_pem.encode()).subject for c in (first, rotated.active)
    }
    assert len(names) == 2


def test_a_retired_ca_leaves_the_bundle_once_its_certificates_expired_and_its_key_is_scheduled_for_deletion(
    csrs: Csrs, ossl: OpensslTool, pool: str
) -> None:
    # Given a rotated pool
    issue(csrs, pool)
    first = stored(pool).active
    rotate(pool, emergency=True)
    # When the retention job runs before bundleUntil / Then nothing changes
    assert expiry.expire_retired_authorities() == 0
    assert stored(pool).pointer.bundle[1:] == (first.ca_id,)
    # When the clock passes bundleUntil (30 days + skew + cache) and the job runs
    clock.advance(ca.BUNDLE_GRACE_SECONDS + 1)
    with iam.acting_as("RetentionFunction"):  # as the scheduled job's role allows
        assert expiry.expire_retired_authorities() >= 1
    # Then the first CA is expired, out of the bundle, and its key is pending deletion in KMS
    expired = authorities_db.get(first.ca_id)
    assert expired is not None and expired.state == "expired"
    assert stored(pool).pointer.bundle == (stored(pool).active.ca_id,)
    assert key_state(first.key_id) == "PendingDeletion"
    # And a new certificate's bundle is the active CA alone
    container.reset(keep_clients=True)
    assert issue(csrs, pool).ca_certificates_pem.count("BEGIN CERTIFICATE") == 1
    # And a second run finds nothing more to do
    assert expiry.expire_retired_authorities() == 0


def test_a_retired_ca_past_bundle_until_is_left_out_even_before_the_job_runs(csrs: Csrs, pool: str) -> None:
    issue(csrs, pool)
    rotate(pool, emergency=True)
    clock.advance(ca.BUNDLE_GRACE_SECONDS + 1)
    assert issue(csrs, pool).ca_certificates_pem.count("BEGIN CERTIFICATE") == 1


@pytest.mark.parametrize("emergency", [False, True], ids=["prepared", "emergency"])
def test_rotating_an_archived_pool_is_refused_and_changes_nothing(
    csrs: Csrs, pool: str, emergency: bool
) -> None:
    issue(csrs, pool)
    before = stored(pool)
    dynamo.update(
        *pool_key(TENANT, pool), update="SET #s = :a", names={"#s": "state"}, values={":a": "archived"}
    )
    with pytest.raises(InvalidState) as refused:
        rotate(pool, emergency=emergency)
    assert refused.value.reason == "POOL_ARCHIVED"
    assert stored(pool) == before
    assert [c.ca_id for c in authorities_db.list_pool(TENANT, pool)] == [before.active.ca_id]
    # And the key it made for the refused rotation is scheduled for deletion by the retention job
    clock.advance(expiry.ABANDONED_KEY_GRACE_SECONDS + 1)
    with iam.acting_as("RetentionFunction"):
        assert expiry.delete_abandoned_keys() == 1
    keys = aws.client("kms").list_keys()["Keys"]
    pending = [
        k["KeyId"]
        for k in keys
        if key_state(k["KeyId"]) == "PendingDeletion"
        and {t["TagValue"] for t in aws.client("kms").list_resource_tags(KeyId=k["KeyId"])["Tags"]} >= {pool}
    ]
    assert len(pending) == 1


# --- races: released together against the one moto server --------------------------------------


def test_eight_first_joins_of_a_new_pool_converge_on_one_ca_and_the_losers_keys_are_deleted(
    csrs: Csrs, pool: str
) -> None:
    # Given eight containers that have never seen the pool, each with a machine's CSR in hand
    csr = csr_checks.parse_csr(csrs["p256"].pem)

    def first_join(index: int) -> str:
        container.reset(keep_clients=True)
        return machine_certificates.issue_machine_certificate(
            tenant_id=TENANT,
            site_id=SITE,
            pool_id=pool,
            machine_id=f"mach_{index}",
            csr=csr,
            lifetime_seconds=3600,
        ).ca_id

    # When all eight issue its first certificate at once
    ca_ids = release_together(first_join, THREADS)
    # Then every one of them signed with the one CA the table holds
    assert len(set(ca_ids)) == 1 and ca_ids[0] == stored(pool).active.ca_id
    assert len(authorities_db.list_pool(TENANT, pool)) == 1
    # And once the retention job ran, every key a loser made is pending deletion; the winner's is enabled
    clock.advance(expiry.ABANDONED_KEY_GRACE_SECONDS + 1)
    with iam.acting_as("RetentionFunction"):
        expiry.delete_abandoned_keys()
    made = [
        k["KeyId"]
        for k in aws.client("kms").list_keys()["Keys"]
        if {"TagKey": "joinplane:pool", "TagValue": pool}
        in aws.client("kms").list_resource_tags(KeyId=k["KeyId"])["Tags"]
    ]
    states = Counter(key_state(key_id) for key_id in made)
    assert states["Enabled"] == 1 and states["PendingDeletion"] == len(made) - 1


def test_eight_concurrent_emergency_rotations_make_exactly_one_new_active_ca(csrs: Csrs, pool: str) -> None:
    # Given a pool with its first CA
    issue(csrs, pool)
    first = stored(pool).active

    # When eight operators rotate it at once, in an emergency
    def rotating(index: int) -> Any:
        container.reset(keep_clients=True)
        return rotate(pool, f"jpk_{index}", emergency=True)

    results = release_together(rotating, THREADS, catch=JoinplaneError)
    won = [r for r in results if isinstance(r, authorities_db.Authorities)]
    # Then at least one won, and every other was told the CA changed under it (or to retry); a
    # caller that read after a rotation committed rotates again, legitimately, from the new CA
    assert won, results
    assert all(isinstance(r, Aborted | Unavailable) for r in results if r not in won)
    # And the pool has exactly one active CA, never two: each winner retired the one before it
    all_cas = authorities_db.list_pool(TENANT, pool)
    assert Counter(c.state for c in all_cas) == Counter({"active": 1, "retired": len(won)})
    chain = {c.previous_ca_id: c.ca_id for c in all_cas if c.previous_ca_id}
    walked = [first.ca_id]
    while walked[-1] in chain:
        walked.append(chain[walked[-1]])
    assert len(walked) == len(won) + 1
    assert stored(pool).active.ca_id == walked[-1]
    assert stored(pool).pointer.bundle == tuple(reversed(walked))


def test_the_emulator_signs_as_kms_does_raw_up_to_4096_bytes_and_digests_as_hashes(table: str) -> None:
    # Given a P-256 signing key in the emulator's KMS
    client = aws.client("kms")
    key_id = client.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]["KeyId"]
    public_key = serialization.load_der_public_key(bytes(client.get_public_key(KeyId=key_id)["PublicKey"]))
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    message = b"x" * 5000

    def signed(body: bytes, kind: str) -> bytes:
        reply = client.sign(KeyId=key_id, Message=body, MessageType=kind, SigningAlgorithm="ECDSA_SHA_256")
        return bytes(reply["Signature"])

    # Then a RAW message over 4096 bytes is refused, as KMS refuses it
    with pytest.raises(client.exceptions.ClientError, match="4096"):
        signed(message, "RAW")
    # And the SHA-256 of it, sent as a DIGEST, is signed as that message's signature
    from cryptography.hazmat.primitives import hashes

    public_key.verify(signed(hashlib.sha256(message).digest(), "DIGEST"), message, ec.ECDSA(hashes.SHA256()))
    # And ca_keys.kms_sign_tbs takes that path by itself for a TBS over the limit
    public_key.verify(ca_keys.kms_sign_tbs(key_id, message), message, ec.ECDSA(hashes.SHA256()))
    # And a RAW message at the limit is signed as before
    public_key.verify(signed(message[:4096], "RAW"), message[:4096], ec.ECDSA(hashes.SHA256()))

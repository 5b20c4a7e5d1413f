"""Machine join (seed 002): decide admit, defer or deny, and make the decision stick.

The order of the decision is the issue's: token, CSR, the join identity's history, revocation,
attestors, then exactly one transaction. Nothing is written before that transaction, so a refusal
at any step leaves no trace and takes no token use.

Fresh joins are optimistic: the transaction that admits or defers also creates the join identity
record (`attribute_not_exists`), decrements the token (`usesRemaining > 0`, unexpired, active) and
checks the pool is still the one we read. If the identity turns out to exist, the cancellation
hands back its record and the join continues as a retry or re-join, so the common path needs no
read beyond the token.

DynamoDB calls per path, warm container (docs/join.md has the table; a cold container adds one
GetItem for the pool and one Secrets Manager read for the pool's CA):
- fresh admit or defer: GetItem(token) + TransactWriteItems
- + `discovery: defer-unknown`: + one BatchGetItem; + a TPM policy with an EK: + one GetItem
- retry while pending: GetItem(token) + TransactWriteItems (cancelled) + GetItem(request)
- retry after approval: the above + TransactWriteItems (consume)
- re-join: GetItem(token) + TransactWriteItems (cancelled) + GetItem(machine) + TransactWriteItems
- expired or used-up token: GetItem(token) + GetItem(identity), then as a retry or re-join
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from joinplane import (
    attestors,
    clock,
    credentials,
    deadline,
    errors,
    ids,
    join_requests,
    join_wire,
    machines,
    pools,
    proof,
    store,
    tokens,
)
from joinplane.errors import (
    Aborted,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from joinplane.join_wire import JoinMachineRequest

# One message for every token refusal: unknown, revoked, expired and used up look alike.
REFUSED = "join token is not valid"
RETRY_AFTER_SECONDS = 30
# Told to the holder of another pool's token: the same words whether the key has a machine or a
# request elsewhere, so the answer does not say where (or that) this key is known.
ELSEWHERE = "this join token cannot be used for this key; join with a token of the key's own pool"
KEY_REPLACED = "this key was replaced when the machine renewed with a new key"
# Identities without a key: `fp-` + SHA-256 of the machineFingerprint. Nothing to prove with.
FINGERPRINT_PREFIX = "fp-"

_pool_cache: dict[tuple[str, str], dict[str, Any]] = {}


def reset_caches() -> None:
    _pool_cache.clear()


def _pool(tenant_id: str, pool_id: str, *, fresh: bool = False) -> dict[str, Any]:
    """The pool, cached per container: every transaction below re-checks its `version`, so a stale
    copy can only cost a retry, never a join under old settings."""
    key = (tenant_id, pool_id)
    if fresh or key not in _pool_cache:
        item = store.get(*pools.pool_key(tenant_id, pool_id))
        if item is None:
            raise FailedPrecondition(
                "the pool of this join token no longer exists", reason=errors.POOL_NOT_FOUND
            )
        _pool_cache[key] = item
    pool = _pool_cache[key]
    if pool["state"] != "active":
        raise FailedPrecondition("the pool is archived and takes no new joins", reason=errors.POOL_ARCHIVED)
    return pool


def _pool_is_current(pool: dict[str, Any]) -> store.Write:
    return store.Write(
        "ConditionCheck",
        *pools.pool_key(pool["tenantId"], pool["poolId"]),
        condition="#state = :active AND version = :version",
        names={"#state": "state"},
        values={":active": "active", ":version": pool["version"]},
    )


@dataclass(frozen=True)
class Attempt:
    request: JoinMachineRequest
    token: dict[str, Any]
    identity: str
    csr: Any  # ca.Csr | None; typed loosely so this module does not import cryptography
    ek_sha256: str
    key_proof: proof.VerifiedProof | None = None

    @property
    def tenant(self) -> str:
        return str(self.token["tenantId"])


class _IdentityTaken(Exception):
    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__("identity exists")
        self.record = record


def _rejection(request_item: dict[str, Any]) -> dict[str, str]:
    """ErrorInfo metadata of a refused join request: its id, and the operator's reason if given."""
    metadata = {"requestId": str(request_item["requestId"])}
    if request_item.get("reason"):
        metadata["rejectionReason"] = str(request_item["reason"])
    return metadata


def bearer(authorization: str) -> str:
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _load_token(secret: str) -> dict[str, Any]:
    parsed = credentials.parse(secret, tokens.SECRET_PREFIX)
    if parsed is None:
        raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
    token = store.get(*tokens.token_key(f"{tokens.ID_PREFIX}_{parsed.ulid}"))
    if (
        token is None
        or not credentials.matches(parsed.secret, token["secretSha256"])
        or token["state"] != "active"
    ):
        raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
    return token


def _usable(token: dict[str, Any]) -> bool:
    return bool(token["expiresAtEpoch"] > clock.epoch() and token["usesRemaining"] > 0)


def _check_preflight(request: JoinMachineRequest) -> None:
    fatal = [c for c in request.preflight if not c.ok and c.severity.lower() == "fatal"]
    if fatal:
        names = ", ".join(f"{c.name}: {c.message}" if c.message else c.name for c in fatal)
        raise FailedPrecondition(f"fatal preflight check failed: {names}", reason=errors.PREFLIGHT_FAILED)


def _schedulable(request: JoinMachineRequest) -> bool:
    errors = [c for c in request.preflight if not c.ok and c.severity.lower() == "error"]
    return request.schedulable and not errors


def _ek_sha256(request: JoinMachineRequest) -> str:
    given = request.tpm.ekPublicKeySha256
    if request.tpm.ekCertificatePem:
        from joinplane import tpm_allow

        computed = tpm_allow.ek_hash_from_certificate(request.tpm.ekCertificatePem)
        if given and given != computed:
            raise InvalidArgument("tpm.ekPublicKeySha256 does not match tpm.ekCertificatePem")
        return computed
    return given


def _identity_of(request: JoinMachineRequest, csr: Any) -> str:
    if csr is not None:
        return str(csr.public_key_sha256)
    if not request.machineFingerprint:
        raise InvalidArgument("csr or machineFingerprint is required to identify the machine")
    return FINGERPRINT_PREFIX + hashlib.sha256(request.machineFingerprint.encode()).hexdigest()


def _hardware_claims(request: JoinMachineRequest) -> list[tuple[str, str]]:
    """The serial and system UUID this machine will hold, unless they are placeholders."""
    from joinplane import hardware

    placeholders = {field for field, _ in _placeholders(request)}
    claims = []
    try:
        if request.hardware.serialNumber and "serialNumber" not in placeholders:
            claims.append(("serial", hardware.normalize_serial(request.hardware.serialNumber)))
        if request.hardware.systemUuid and "systemUuid" not in placeholders:
            claims.append(("uuid", hardware.normalize_uuid(request.hardware.systemUuid)))
    except ValueError as invalid:
        raise InvalidArgument(f"invalid value for hardware: {invalid}") from None
    return claims


def _placeholders(request: JoinMachineRequest) -> list[tuple[str, str]]:
    from joinplane import hardware

    return hardware.placeholder_reasons(
        request.hardware.serialNumber or None,
        request.hardware.systemUuid or None,
        list(request.hardware.macAddresses),
    )


def _facts(attempt: Attempt, site_id: str, held: tuple[tuple[str, str], ...] = ()) -> attestors.Facts:
    request, policy = attempt.request, attempt.token.get("attestation") or {}
    known = None
    if policy.get("discovery") == "defer-unknown":
        from joinplane import discovery

        known = (
            discovery.lookup(
                attempt.tenant,
                site_id,
                serial=request.hardware.serialNumber or None,
                system_uuid=request.hardware.systemUuid or None,
                macs=list(request.hardware.macAddresses),
                fingerprint=request.machineFingerprint or None,
            )
            is not None
        )
    listed = None
    if policy.get("tpm", "off") != "off" and attempt.ek_sha256:
        from joinplane import tpm_allow

        listed = tpm_allow.is_listed(attempt.tenant, site_id, attempt.ek_sha256)
    return attestors.Facts(
        placeholders=tuple(_placeholders(request)),
        held_by_others=held,
        discovery_known=known,
        ek_sha256=attempt.ek_sha256,
        ek_listed=listed,
        key_bound=attempt.csr is not None,
    )


def _worker_image(pool: dict[str, Any], baseline: str | None, sent: str) -> tuple[str, str | None]:
    """Seed 002: the first image a machine sends is its baseline; sending the baseline (or nothing)
    follows the pool's current image, anything else is pinned and handed back as sent."""
    if baseline is None and sent:
        baseline = sent
    if not sent or sent == baseline:
        return str((pool.get("bootstrap") or {}).get("workerImage", "")), baseline
    return sent, baseline


def _certificate(csr: Any, pool: dict[str, Any], machine_id: str) -> dict[str, str]:
    if csr is None:
        return {"certificate": "", "caCertificates": "", "certificateExpiresAt": "", "serial": ""}
    from joinplane import ca

    issued = ca.issue_machine_certificate(
        tenant_id=pool["tenantId"],
        pool_id=pool["poolId"],
        machine_id=machine_id,
        csr=csr,
        lifetime_seconds=int(pool["certificateTtlSeconds"]),
    )
    return {
        "certificate": issued.certificate_pem,
        "caCertificates": issued.ca_certificates_pem,
        "certificateExpiresAt": clock.rfc3339(issued.expires_at),
        "serial": issued.serial,
    }


def _admitted(
    pool: dict[str, Any], machine_id: str, token: str, cert: dict[str, str], image: str, schedulable: bool
) -> tuple[int, dict[str, Any]]:
    return 200, join_wire.join_response(
        ok=True,
        workspaceId=pool["workspaceId"],
        poolName=pool["name"],
        machineId=machine_id,
        machineToken=token,
        bootstrap=join_wire.bootstrap(pool, image),
        certificate=cert["certificate"],
        caCertificates=cert["caCertificates"],
        certificateExpiresAt=cert["certificateExpiresAt"],
        schedulable=schedulable,
    )


def _deferred(request_item: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    reasons = "; ".join(r["message"] for r in request_item.get("reasons", [])) or "an operator must decide"
    return 202, join_wire.join_response(
        ok=False,
        errMsg=f"join deferred: {reasons}. An operator must approve {request_item['requestId']}.",
        joinRequest={
            "requestId": request_item["requestId"],
            "state": "pending",
            "expiresAt": request_item["expiresAt"],
        },
        retryAfterSeconds=RETRY_AFTER_SECONDS,
    )


def _new_machine(
    attempt: Attempt,
    pool: dict[str, Any],
    machine_id: str,
    token_secret: str,
    cert: dict[str, str],
    baseline: str | None,
    claims: list[tuple[str, str]],
    request_id: str | None,
) -> dict[str, Any]:
    pk, sk = machines.machine_key(machine_id)
    return {
        "pk": pk,
        "sk": sk,
        "gsi1pk": machines.pool_partition(pool["tenantId"], pool["poolId"]),
        "gsi1sk": machine_id,
        "machineId": machine_id,
        "tenantId": pool["tenantId"],
        "siteId": pool["siteId"],
        "poolId": pool["poolId"],
        "identity": attempt.identity,
        "tokenId": attempt.token["tokenId"],
        "requestId": request_id,
        "state": "active",
        "machineTokenSha256": credentials.digest(token_secret),
        "tokenGeneration": 1,
        "schedulable": _schedulable(attempt.request),
        "facts": attempt.request.facts(),
        "workerImageBaseline": baseline,
        "claims": [list(c) for c in claims],
        "certificateSerial": cert["serial"] or None,
        "certificateExpiresAt": cert["certificateExpiresAt"] or None,
        "joinedAt": clock.rfc3339(clock.now()),
    }


def _claim_writes(tenant: str, machine_id: str, claims: list[tuple[str, str]]) -> list[store.Write]:
    writes = []
    for kind, value in claims:
        pk, sk = machines.claim_key(tenant, kind, value)
        writes.append(
            store.Write(
                "Put",
                item={"pk": pk, "sk": sk, "machineId": machine_id, "kind": kind, "value": value},
                condition="attribute_not_exists(pk) OR machineId = :me",
                values={":me": machine_id},
            )
        )
    return writes


def _failed(labelled: list[tuple[str, store.Write]], cancelled: store.TransactionCanceled) -> dict[str, Any]:
    """Which labelled writes' conditions failed, with each item as it is now."""
    return {
        label: current
        for (label, _), reason, current in zip(labelled, cancelled.reasons, cancelled.current, strict=False)
        if reason == "ConditionalCheckFailed"
    }


def _claims_taken_elsewhere(failed: dict[str, Any]) -> set[tuple[str, str]]:
    """Hardware-id claims whose condition failed: another active machine holds them."""
    return {(k, v) for label in failed if label.startswith("claim:") for _, k, v in [label.split(":", 2)]}


def _proof_required(attempt: Attempt) -> None:
    """Credentials for an identity that already exists need fresh possession of its key
    (docs/join.md, "Proof of possession"). A fingerprint identity has no key to prove with: the
    token setting `attestation.identity: key` is how a pool refuses those."""
    if attempt.key_proof is None and not attempt.identity.startswith(FINGERPRINT_PREFIX):
        raise Unauthenticated(proof.REQUIRED, reason=errors.PROOF_REQUIRED)


def _marked(write: store.Write, key_proof: proof.VerifiedProof | None) -> store.Write:
    """An identity record's Update that also moves its proof mark, on the condition that this
    proof is newer than every one accepted before: a proof is accepted once, and an older one
    (a signed request that was withheld, or failed) never after a newer one."""
    if key_proof is None:
        return write
    return replace(
        write,
        update=f"{write.update}, {proof.MARK} = :proofAt",
        condition=f"({write.condition}) AND {key_proof.newer_than_mark()}",
        values={**write.values, ":proofAt": key_proof.timestamp_ms},
    )


def _identity_lost(attempt: Attempt, version: int, current: dict[str, Any] | None) -> Exception:
    """Why an identity record's conditional write failed: another join moved it on (retry), or this
    proof is not newer than one already accepted (a replay)."""
    same = current is not None and current.get("version") == version
    if same and attempt.key_proof is not None and attempt.key_proof.is_behind(current):
        return Unauthenticated(proof.REPLAYED, reason=errors.PROOF_REPLAYED)
    return Aborted("a concurrent join for this machine won; retry")


# --- fresh joins -----------------------------------------------------------------------------


def _fresh(attempt: Attempt) -> tuple[int, dict[str, Any]]:
    token = attempt.token
    pool = _pool(attempt.tenant, token["poolId"]) if token.get("poolId") else None
    site_id = str(token["siteId"])
    held: tuple[tuple[str, str], ...] = ()
    facts = _facts(attempt, site_id)
    for _ in range(3):
        deadline.check()  # a retry that cannot finish answers 503, not a gateway timeout
        votes = attestors.evaluate(attempt.request, token, replace(facts, held_by_others=held))
        verdict = attestors.verdict(votes)
        if verdict == attestors.DENY:
            raise PermissionDenied(
                "join denied: " + "; ".join(v.message for v in votes if v.verdict == "deny"),
                reason=errors.JOIN_DENIED,
            )
        now = clock.rfc3339(clock.now())
        id_pk, id_sk = machines.identity_key(attempt.tenant, attempt.identity)
        record: dict[str, Any] = {
            "pk": id_pk,
            "sk": id_sk,
            "tenantId": attempt.tenant,
            "identity": attempt.identity,
            "tokenId": token["tokenId"],
            "siteId": site_id,
            "version": 1,
            "createdAt": now,
            "updatedAt": now,
        }
        labelled: list[tuple[str, store.Write]] = [
            (
                "token",
                store.Write(
                    "Update",
                    *tokens.token_key(token["tokenId"]),
                    update="SET usesRemaining = usesRemaining - :one",
                    condition="#state = :active AND expiresAtEpoch > :now AND usesRemaining > :zero",
                    names={"#state": "state"},
                    values={":one": 1, ":zero": 0, ":active": "active", ":now": int(clock.epoch())},
                ),
            ),
        ]
        if pool is not None:
            labelled.append(("pool", _pool_is_current(pool)))
        if attempt.key_proof is not None:
            record[proof.MARK] = attempt.key_proof.timestamp_ms
        if verdict == attestors.DEFER:
            ttl = int(pool["joinRequestTtlSeconds"]) if pool else pools.DEFAULT_JOIN_REQUEST_TTL
            request_item = join_requests.new_item(
                request_id=ids.new_id(join_requests.ID_PREFIX),
                tenant_id=attempt.tenant,
                site_id=site_id,
                pool_id=token.get("poolId"),
                token_id=token["tokenId"],
                identity=attempt.identity,
                csr_public_key_sha256=attempt.csr.public_key_sha256 if attempt.csr else None,
                reasons=[v.reason() for v in votes],
                machine=attempt.request.facts(),
                ttl_seconds=ttl,
            )
            record["requestId"] = request_item["requestId"]
            labelled.append(
                ("identity", store.Write("Put", item=record, condition="attribute_not_exists(pk)"))
            )
            labelled.append(
                ("request", store.Write("Put", item=request_item, condition="attribute_not_exists(pk)"))
            )
            outcome = _deferred(request_item)
        else:
            assert pool is not None  # a site token always defers
            machine_id = ids.new_id(machines.ID_PREFIX)
            secret = machines.mint_token(machine_id)
            cert = _certificate(attempt.csr, pool, machine_id)
            image, baseline = _worker_image(pool, None, attempt.request.workerImage)
            claims = _hardware_claims(attempt.request)
            record.update(machineId=machine_id, poolId=pool["poolId"])
            labelled.append(
                ("identity", store.Write("Put", item=record, condition="attribute_not_exists(pk)"))
            )
            labelled.append(
                (
                    "machine",
                    store.Write(
                        "Put",
                        item=_new_machine(attempt, pool, machine_id, secret, cert, baseline, claims, None),
                        condition="attribute_not_exists(pk)",
                    ),
                )
            )
            labelled += [
                (f"claim:{k}:{v}", w)
                for (k, v), w in zip(claims, _claim_writes(attempt.tenant, machine_id, claims), strict=True)
            ]
            outcome = _admitted(pool, machine_id, secret, cert, image, _schedulable(attempt.request))
        try:
            store.transact([w for _, w in labelled])
            return outcome
        except store.TransactionCanceled as cancelled:
            failed = _failed(labelled, cancelled)
            if "identity" in failed and failed["identity"] is not None:
                raise _IdentityTaken(failed["identity"]) from None
            if "token" in failed:
                raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID) from None
            if "pool" in failed:
                pool = _pool(attempt.tenant, token["poolId"], fresh=True)
                continue
            taken = tuple(sorted(_claims_taken_elsewhere(failed)))
            if taken:
                held = tuple(("serialNumber" if k == "serial" else "systemUuid", v) for k, v in taken)
                continue
            raise Unavailable("the join could not be recorded, retry") from None
    raise Aborted("the pool or the hardware ids changed while joining; retry")


# --- retries and re-joins --------------------------------------------------------------------


def _check_place(token: dict[str, Any], site_id: str, pool_id: str | None) -> None:
    """A retry or re-join must come through a token of the same site, and of the same pool when
    both name one: another pool's token cannot consume, peek at or re-join this machine's history."""
    if token["siteId"] != site_id or (token.get("poolId") and pool_id and token["poolId"] != pool_id):
        raise FailedPrecondition(ELSEWHERE, reason=errors.WRONG_POOL)


def _known(attempt: Attempt, record: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    # First: another pool's token learns nothing of this key, not even that it was revoked or
    # replaced (a request's pool, set when a pool claims it, is checked again below).
    _check_place(attempt.token, record["siteId"], record.get("poolId"))
    if record.get("retired"):
        raise PermissionDenied(KEY_REPLACED, reason=errors.KEY_RETIRED)
    if record.get("machineId"):
        machine = store.get(*machines.machine_key(record["machineId"]))
        if machine is None:
            raise Internal("join identity points at a missing machine")
        if machine["state"] != "active":
            raise PermissionDenied("this machine has been revoked", reason=errors.MACHINE_REVOKED)
        return _rejoin(attempt, record, machine)
    request_item = store.get(*join_requests.request_key(record["requestId"]))
    if request_item is None:
        raise PermissionDenied(
            "the join request of this key no longer exists; join again with a new key",
            reason=errors.JOIN_REQUEST_EXPIRED,
        )
    _check_place(attempt.token, request_item["siteId"], request_item.get("poolId"))
    state = join_requests.state_now(request_item)
    if state == "pending":
        if attempt.key_proof is not None:
            _accept_while_pending(attempt)
        return _deferred(request_item)
    if state == "approved":
        return _consume(attempt, record, request_item)
    if state == "rejected":
        why = f": {request_item['reason']}" if request_item.get("reason") else ""
        raise PermissionDenied(
            f"join request {request_item['requestId']} was rejected{why}",
            reason=errors.JOIN_REQUEST_REJECTED,
            metadata=_rejection(request_item),
        )
    if state == "expired":
        raise PermissionDenied(
            f"join request {request_item['requestId']} has expired; join again with a new key",
            reason=errors.JOIN_REQUEST_EXPIRED,
            metadata={"requestId": str(request_item["requestId"])},
        )
    raise Aborted("this join request was consumed by a concurrent join; retry")


def _accept_while_pending(attempt: Attempt) -> None:
    """A pending retry writes nothing else, but its proof must still move the identity's mark: the
    same signed request, replayed after the approval, would otherwise consume it (one UpdateItem)."""
    assert attempt.key_proof is not None
    try:
        store.update(
            *machines.identity_key(attempt.tenant, attempt.identity),
            update=f"SET {proof.MARK} = :proofAt",
            condition=f"attribute_exists(pk) AND {attempt.key_proof.newer_than_mark()}",
            values={":proofAt": attempt.key_proof.timestamp_ms},
        )
    except store.ConditionFailed:
        raise Unauthenticated(proof.REPLAYED, reason=errors.PROOF_REPLAYED) from None


def _consume(
    attempt: Attempt, record: dict[str, Any], request_item: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """An approved request admits exactly one join: the request's state change, the machine and the
    identity's new version are one transaction; concurrent retries lose it and get ABORTED."""
    _proof_required(attempt)
    pool = _pool(attempt.tenant, request_item["poolId"])
    machine_id = ids.new_id(machines.ID_PREFIX)
    secret = machines.mint_token(machine_id)
    claims = _hardware_claims(attempt.request)
    for _ in range(3):
        deadline.check()  # a retry that cannot finish answers 503, not a gateway timeout
        # From the pool as read on this attempt: a pool changed since the cache was filled fails the
        # pool check below and is read again, so no machine leaves with the old pool's settings.
        cert = _certificate(attempt.csr, pool, machine_id)
        image, baseline = _worker_image(pool, None, attempt.request.workerImage)
        now = clock.rfc3339(clock.now())
        labelled: list[tuple[str, store.Write]] = [
            (
                "request",
                store.Write(
                    "Update",
                    *join_requests.request_key(request_item["requestId"]),
                    update=(
                        "SET #state = :consumed, consumedAt = :now, machineId = :machine, "
                        "gsi1pk = :partition REMOVE gsi2pk, gsi2sk"
                    ),
                    condition="#state = :approved AND expiresAtEpoch > :epoch",
                    names={"#state": "state"},
                    values={
                        ":consumed": "consumed",
                        ":approved": "approved",
                        ":now": now,
                        ":machine": machine_id,
                        ":epoch": int(clock.epoch()),
                        ":partition": join_requests.list_partition(
                            attempt.tenant, pool["siteId"], pool["poolId"], "consumed"
                        ),
                    },
                ),
            ),
            (
                "identity",
                _marked(
                    store.Write(
                        "Update",
                        *machines.identity_key(attempt.tenant, attempt.identity),
                        update=(
                            "SET machineId = :machine, poolId = :pool, version = version + :one, "
                            "updatedAt = :now"
                        ),
                        condition="version = :version",
                        values={
                            ":machine": machine_id,
                            ":pool": pool["poolId"],
                            ":one": 1,
                            ":now": now,
                            ":version": record["version"],
                        },
                    ),
                    attempt.key_proof,
                ),
            ),
            (
                "machine",
                store.Write(
                    "Put",
                    item=_new_machine(
                        attempt, pool, machine_id, secret, cert, baseline, claims, request_item["requestId"]
                    ),
                    condition="attribute_not_exists(pk)",
                ),
            ),
            ("pool", _pool_is_current(pool)),
        ]
        labelled += [
            (f"claim:{k}:{v}", w)
            for (k, v), w in zip(claims, _claim_writes(attempt.tenant, machine_id, claims), strict=True)
        ]
        try:
            store.transact([w for _, w in labelled])
            return _admitted(pool, machine_id, secret, cert, image, _schedulable(attempt.request))
        except store.TransactionCanceled as cancelled:
            failed = _failed(labelled, cancelled)
            if "request" in failed:
                current = store.get(*join_requests.request_key(request_item["requestId"]))
                state = join_requests.state_now(current) if current else "expired"
                if state in ("rejected", "expired"):
                    raise PermissionDenied(
                        f"join request {request_item['requestId']} is {state}",
                        reason=errors.JOIN_REQUEST_REJECTED
                        if state == "rejected"
                        else errors.JOIN_REQUEST_EXPIRED,
                        metadata=_rejection(current or request_item),
                    ) from None
                raise Aborted("this approval was consumed by a concurrent join; retry") from None
            if "identity" in failed:
                raise _identity_lost(attempt, record["version"], failed["identity"]) from None
            if "pool" in failed:
                pool = _pool(attempt.tenant, request_item["poolId"], fresh=True)
                continue
            # An operator approved this machine: a hardware id held elsewhere is not claimed again.
            taken = _claims_taken_elsewhere(failed)
            if taken:
                claims = [c for c in claims if c not in taken]
                continue
            raise Unavailable("the join could not be recorded, retry") from None
    raise Aborted("the pool changed while joining; retry")


def _rejoin(attempt: Attempt, record: dict[str, Any], machine: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Same identity, same pool: the same machineId, a new machine token (the old one stops
    working) and a new certificate. The machine was admitted before, so only a deny can stop it."""
    token = attempt.token
    _check_place(token, machine["siteId"], machine["poolId"])
    _proof_required(attempt)
    votes = attestors.evaluate(attempt.request, token, _facts(attempt, machine["siteId"]))
    denials = [v.message for v in votes if v.verdict == attestors.DENY]
    if denials:
        raise PermissionDenied("join denied: " + "; ".join(denials), reason=errors.JOIN_DENIED)
    pool = _pool(attempt.tenant, machine["poolId"])
    secret = machines.mint_token(machine["machineId"])
    # The hardware ids a machine holds follow what it reports now: new ones are claimed, ones it no
    # longer reports are released (so a clone of its new serial is noticed, its old one freed).
    held = [(str(k), str(v)) for k, v in machine.get("claims", [])]
    claims = _hardware_claims(attempt.request)
    for _ in range(3):
        deadline.check()  # a retry that cannot finish answers 503, not a gateway timeout
        # From the pool as read on this attempt (see _consume): never the old pool's settings.
        cert = _certificate(attempt.csr, pool, machine["machineId"])
        image, baseline = _worker_image(pool, machine.get("workerImageBaseline"), attempt.request.workerImage)
        now = clock.rfc3339(clock.now())
        labelled: list[tuple[str, store.Write]] = [
            (
                "machine",
                store.Write(
                    "Update",
                    *machines.machine_key(machine["machineId"]),
                    update=(
                        "SET machineTokenSha256 = :digest, tokenGeneration = tokenGeneration + :one, "
                        "certificateSerial = :serial, certificateExpiresAt = :expires, rejoinedAt = :now, "
                        "facts = :facts, schedulable = :schedulable, workerImageBaseline = :baseline, "
                        "claims = :claims"
                    ),
                    condition="#state = :active AND tokenGeneration = :generation",
                    names={"#state": "state"},
                    values={
                        ":digest": credentials.digest(secret),
                        ":one": 1,
                        ":serial": cert["serial"] or None,
                        ":expires": cert["certificateExpiresAt"] or None,
                        ":now": now,
                        ":facts": attempt.request.facts(),
                        ":schedulable": _schedulable(attempt.request),
                        ":baseline": baseline,
                        ":active": "active",
                        ":generation": machine["tokenGeneration"],
                        ":claims": [list(c) for c in claims],
                    },
                ),
            ),
            (
                "identity",
                _marked(
                    store.Write(
                        "Update",
                        *machines.identity_key(attempt.tenant, attempt.identity),
                        update="SET version = version + :one, updatedAt = :now",
                        condition="version = :version",
                        values={":one": 1, ":now": now, ":version": record["version"]},
                    ),
                    attempt.key_proof,
                ),
            ),
            ("pool", _pool_is_current(pool)),
        ]
        added = [c for c in claims if c not in held]
        labelled += [
            (f"claim:{k}:{v}", w)
            for (k, v), w in zip(
                added, _claim_writes(attempt.tenant, machine["machineId"], added), strict=True
            )
        ]
        for kind, value in (c for c in held if c not in claims):
            labelled.append(
                (
                    f"release:{kind}:{value}",
                    store.Write(
                        "Delete",
                        *machines.claim_key(attempt.tenant, kind, value),
                        condition="attribute_not_exists(pk) OR machineId = :me",
                        values={":me": machine["machineId"]},
                    ),
                )
            )
        try:
            store.transact([w for _, w in labelled])
            return _admitted(pool, machine["machineId"], secret, cert, image, _schedulable(attempt.request))
        except store.TransactionCanceled as cancelled:
            failed = _failed(labelled, cancelled)
            if "machine" in failed:
                current = store.get(*machines.machine_key(machine["machineId"]))
                if current is None or current["state"] != "active":
                    raise PermissionDenied(
                        "this machine has been revoked", reason=errors.MACHINE_REVOKED
                    ) from None
                raise Aborted("a concurrent join for this machine won; retry") from None
            if "identity" in failed:
                raise _identity_lost(attempt, record["version"], failed["identity"]) from None
            if "pool" in failed:
                pool = _pool(attempt.tenant, machine["poolId"], fresh=True)
                continue
            # A hardware id another machine holds is not claimed by this one (it was admitted before).
            taken = _claims_taken_elsewhere(failed)
            if taken:
                claims = [c for c in claims if c not in taken]
                continue
            raise Unavailable("the join could not be recorded, retry") from None
    raise Aborted("the pool changed while joining; retry")


# --- entry points ----------------------------------------------------------------------------


def _dry_run(attempt: Attempt) -> tuple[int, dict[str, Any]]:
    """Everything evaluated, nothing changed: the verdict and its reasons."""
    record = store.get(*machines.identity_key(attempt.tenant, attempt.identity))
    token = attempt.token
    votes: list[attestors.Vote] = []
    if record is None:
        if not _usable(token):
            raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
        if token.get("poolId"):
            _pool(attempt.tenant, token["poolId"])
        votes = attestors.evaluate(attempt.request, token, _facts(attempt, str(token["siteId"])))
        verdict = attestors.verdict(votes)
        message = "; ".join(v.message for v in votes)
    else:
        # The checks a real join makes before it looks at the history, so a dry run never says
        # more than the join would: a used-up token, another pool's token, a retired key.
        if not _usable(token) and record.get("tokenId") != token["tokenId"]:
            raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
        _check_place(token, record["siteId"], record.get("poolId"))
        try:
            if record.get("retired"):
                raise PermissionDenied(KEY_REPLACED, reason=errors.KEY_RETIRED)
            if record.get("machineId"):
                machine = store.get(*machines.machine_key(record["machineId"]))
                if machine is None or machine["state"] != "active":
                    raise PermissionDenied("this machine has been revoked", reason=errors.MACHINE_REVOKED)
                _check_place(token, machine["siteId"], machine["poolId"])
                _proof_required(attempt)
                verdict, message = "admit", "re-join of this machine"
            else:
                request_item = store.get(*join_requests.request_key(record["requestId"]))
                if request_item is not None:
                    _check_place(token, request_item["siteId"], request_item.get("poolId"))
                state = join_requests.state_now(request_item) if request_item else "expired"
                if state == "approved":
                    _proof_required(attempt)
                verdict = {"pending": "defer", "approved": "admit"}.get(state, "deny")
                message = f"join request {record['requestId']} is {state}"
        except (PermissionDenied, Unauthenticated) as denied:
            verdict, message = "deny", denied.message
    body = join_wire.join_response(ok=verdict == "admit", errMsg="" if verdict == "admit" else message)
    body.update(dryRun=True, verdict=verdict, reasons=[v.reason() for v in votes])
    return 200, body


def _token_secret(request: JoinMachineRequest, authorization: str) -> str:
    """The join token from the body or the Authorization header; both given must agree (a proxy
    or client that adds one must not silently lose to the other)."""
    from_header = bearer(authorization)
    if request.joinToken and from_header and request.joinToken != from_header:
        raise InvalidArgument("joinToken in the body and the Authorization bearer token differ; send one")
    return request.joinToken or from_header


def _verified_proof(header: str, purpose: str, credential: str, body: bytes, csr: Any) -> Any:
    parsed = proof.parse(header)
    if parsed is None:
        return None
    if csr is None:
        raise InvalidArgument(
            "a Joinplane-Proof needs a csr: the proof is made with the csr's key",
            reason=errors.PROOF_MALFORMED,
        )
    return proof.verify(
        parsed,
        purpose=purpose,
        credential=credential,
        body=body,
        csr_key=csr.public_key,
        identity=csr.public_key_sha256,
    )


def join_machine(body: bytes, authorization: str, proof_header: str = "") -> tuple[int, dict[str, Any]]:
    from joinplane import ca

    request = join_wire.decode_join(body)
    secret = _token_secret(request, authorization)
    token = _load_token(secret)
    csr = ca.parse_csr(request.csr) if request.csr else None
    attempt = Attempt(
        request,
        token,
        _identity_of(request, csr),
        csr,
        _ek_sha256(request),
        _verified_proof(proof_header, "join", secret, body, csr),
    )
    _hardware_claims(request)  # refuses malformed hardware ids before anything is decided
    _check_preflight(request)
    if request.dryRun:
        return _dry_run(attempt)
    if _usable(token):
        try:
            return _fresh(attempt)
        except _IdentityTaken as taken:
            record = taken.record
    else:
        found = store.get(*machines.identity_key(attempt.tenant, attempt.identity))
        # An expired or used-up token still serves the retries and re-joins it started.
        if found is None or found.get("tokenId") != token["tokenId"]:
            raise Unauthenticated(REFUSED, reason=errors.JOIN_TOKEN_INVALID)
        record = found
    return _known(attempt, record)


def renew(body: bytes, proof_header: str = "") -> tuple[int, dict[str, Any]]:
    """A new certificate for a machine's token and a fresh CSR (the key may change: the machine's
    join identity moves with it, in the same transaction).

    The body carries the machine token, so a captured renewal must not be worth a certificate for
    another key: the renewal proves fresh possession of the machine's current key (and, when the
    key changes, of the new one too), and moves the identity's proof mark like a re-join. A machine
    that joined with a fingerprint only has no key and no certificate: it cannot renew into one
    (nothing would tie the new key to the machine but its bearer token)."""
    from joinplane import ca

    machine_token, csr_pem = join_wire.decode_renew(body)
    machine = machines.authenticate(machine_token)
    if str(machine["identity"]).startswith(FINGERPRINT_PREFIX):
        raise FailedPrecondition(
            "this machine joined with a fingerprint only and has no certificate to renew; "
            "join with a csr to get a key-bound identity",
            reason=errors.MACHINE_HAS_NO_KEY,
        )
    csr = ca.parse_csr(csr_pem)
    parsed = proof.parse(proof_header)
    if parsed is None:
        raise Unauthenticated(proof.REQUIRED, reason=errors.PROOF_REQUIRED)
    key_proof = proof.verify(
        parsed,
        purpose="renew",
        credential=machine_token,
        body=body,
        csr_key=csr.public_key,
        identity=machine["identity"],
    )
    rotating = csr.public_key_sha256 != machine["identity"]
    current_pk, current_sk = machines.identity_key(machine["tenantId"], machine["identity"])
    pool = _pool(machine["tenantId"], machine["poolId"])
    for _ in range(3):
        deadline.check()
        cert = _certificate(csr, pool, machine["machineId"])
        now = clock.rfc3339(clock.now())
        labelled: list[tuple[str, store.Write]] = [
            (
                "machine",
                store.Write(
                    "Update",
                    *machines.machine_key(machine["machineId"]),
                    update=(
                        "SET certificateSerial = :serial, certificateExpiresAt = :expires, "
                        "#identity = :identity"
                    ),
                    condition="#state = :active AND machineTokenSha256 = :digest",
                    names={"#state": "state", "#identity": "identity"},
                    values={
                        ":serial": cert["serial"],
                        ":expires": cert["certificateExpiresAt"],
                        ":identity": csr.public_key_sha256,
                        ":active": "active",
                        ":digest": machine["machineTokenSha256"],
                    },
                ),
            ),
            # The certificate's lifetime comes from the pool: the pool as read, or read again.
            ("pool", _pool_is_current(pool)),
            # The current key's record: its proof mark moves (and it is retired when the key changes,
            # so that key can never join again; a revoked machine's earlier key stays banned too).
            (
                "identity",
                _marked(
                    store.Write(
                        "Update",
                        current_pk,
                        current_sk,
                        update="SET updatedAt = :now"
                        + (", retired = :yes, retiredAt = :now" if rotating else ""),
                        condition="machineId = :me",
                        values={
                            ":now": now,
                            ":me": machine["machineId"],
                            **({":yes": True} if rotating else {}),
                        },
                    ),
                    key_proof,
                ),
            ),
        ]
        if rotating:
            new_pk, new_sk = machines.identity_key(machine["tenantId"], csr.public_key_sha256)
            labelled.append(
                (
                    "new-identity",
                    store.Write(
                        "Put",
                        item={
                            "pk": new_pk,
                            "sk": new_sk,
                            "tenantId": machine["tenantId"],
                            "identity": csr.public_key_sha256,
                            "tokenId": machine["tokenId"],
                            "siteId": machine["siteId"],
                            "poolId": machine["poolId"],
                            "machineId": machine["machineId"],
                            "version": 1,
                            proof.MARK: key_proof.timestamp_ms,
                            "createdAt": now,
                            "updatedAt": now,
                        },
                        condition="attribute_not_exists(pk)",
                    ),
                )
            )
        try:
            store.transact([w for _, w in labelled])
        except store.TransactionCanceled as cancelled:
            failed = _failed(labelled, cancelled)
            if "machine" in failed:
                raise PermissionDenied(
                    "this machine has been revoked or its token replaced", reason=errors.MACHINE_REVOKED
                ) from None
            if "identity" in failed:
                current = failed["identity"]
                if current is not None and current.get("machineId") == machine["machineId"]:
                    raise Unauthenticated(proof.REPLAYED, reason=errors.PROOF_REPLAYED) from None
                raise PermissionDenied(
                    "this machine has been revoked or its token replaced", reason=errors.MACHINE_REVOKED
                ) from None
            if "new-identity" in failed:
                raise FailedPrecondition(
                    "this key already belongs to another machine identity", reason=errors.KEY_IN_USE
                ) from None
            if "pool" in failed:
                pool = _pool(machine["tenantId"], machine["poolId"], fresh=True)
                continue
            raise Unavailable("the renewal could not be recorded, retry") from None
        return 200, {
            "machineId": machine["machineId"],
            "certificate": cert["certificate"],
            "caCertificates": cert["caCertificates"],
            "certificateExpiresAt": cert["certificateExpiresAt"],
        }
    raise Aborted("the pool changed while renewing; retry")

"""Machine join (levers9's JoinMachine): read the facts, decide, commit, and on a lost condition
read again and decide again. Renewal, which shares its helpers, is joinplane.renewal; the branch of
a join that presents a TPM is joinplane.tpm_join, loaded only then.

- `joinplane.join_facts` reads what the call presents (token, identity, proof, hardware ids,
  preflight, the attestors' lookups); `joinplane.join_decide` decides over typed facts, without
  I/O; `joinplane.dal.joins` commits each outcome in exactly one transaction. Nothing is written
  before that transaction, so a refusal at any step leaves no trace and takes no token use.
- The key's record is read first (one GetItem): a key with a history goes straight to its retry,
  re-join or consumption, without signing a certificate or writing. A key without one is admitted
  or deferred by the transaction that also creates its record; if a concurrent join created it
  since the read, the transaction hands it back (`IdentityTaken`) and the join goes on from it.

DynamoDB calls per path, warm container (docs/join.md has the table; a cold container adds one
GetItem for the pool, one GetItem for the pool's CA pointer and one BatchGetItem for its CAs; every
certificate is one kms:Sign):
- fresh admit or defer: GetItem(token) + GetItem(identity) + TransactWriteItems
- + `discovery: defer-unknown`: + one BatchGetItem; + a TPM policy with an EK: + one GetItem
- retry while pending: GetItem(token) + GetItem(identity) + GetItem(request) (+ the proof mark)
- retry after approval: GetItem(token) + GetItem(identity) + GetItem(request) + TransactWriteItems
- re-join: GetItem(token) + GetItem(identity) + GetItem(machine) + TransactWriteItems (an expired or
  used-up token: the same reads, then as a retry or re-join)
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from joinplane import (
    attestors,
    clock,
    credentials,
    ids,
    join_decide,
    join_facts,
    join_requests,
    join_wire,
    machines,
    observe,
    pools,
)
from joinplane.attestors import Vote
from joinplane.dal import joins as joins_db
from joinplane.dal import machines as machines_db
from joinplane.dal import pools as pools_db
from joinplane.dal import requests as requests_db
from joinplane.dal.machines import Claim, IdentityRecord, MachineRecord, TpmFactsRecord
from joinplane.dal.pools import PoolRecord
from joinplane.dal.requests import JoinRequestRecord, VoteReasonRecord
from joinplane.deadline import attempts
from joinplane.errors import Aborted, JoinplaneError, PermissionDenied, RetryLater
from joinplane.join_decide import (
    AdmitByPolicy,
    ConsumeApproval,
    Decided,
    Defer,
    Deferral,
    Refuse,
    Rejoin,
    StillPending,
    Verdict,
)
from joinplane.join_facts import Attempt

if TYPE_CHECKING:
    from joinplane import join_views

Response = tuple[int, "join_views.JoinMachineResponse"]

# A transaction cancelled only by other joins on the same token or pool item: retry (docs/fleet.md).
NOT_RECORDED = "the join could not be recorded, retry"


def _refuse(refusal: Refuse | None) -> None:
    if refusal is not None:
        raise refusal.error


def _pool(tenant_id: str, pool_id: str, *, fresh: bool = False) -> PoolRecord:
    """The pool, cached per container: every transaction re-checks its version (`is_current`), so
    a stale copy can only cost a retry (`fresh=True`), never a join under old settings."""
    pool = pools_db.cached(tenant_id, pool_id, fresh=fresh)
    _refuse(join_decide.pool_usable(pool))
    assert pool is not None
    return pool


# --- what a join hands out ---------------------------------------------------------------------


class Certificate(NamedTuple):
    """A machine's client certificate from its pool's CA; all empty for a fingerprint identity.
    `ca_certificates` is the pool's bundle (the issuing CA first), `ca_id` the issuing CA."""

    certificate: str = ""
    ca_certificates: str = ""
    expires_at: str = ""
    serial: str = ""
    ca_id: str = ""


# The API's public base URL (`https://<domain>`) of the request being served: the CRL distribution
# point of the certificates it issues. Set by the entry points; a context variable, so concurrent
# in-process invocations of the local runtime each see their own.
_base_url: ContextVar[str] = ContextVar("base_url", default="")
# The caller's address as API Gateway saw it, kept on a deferred join's request for the operator.
_source_ip: ContextVar[str | None] = ContextVar("source_ip", default=None)


def issue_certificate(
    csr: Any, pool: PoolRecord, machine_id: str, base_url: str | None = None
) -> Certificate:
    """The certificate for `csr`'s key, with the lifetime of the pool as read; its CRL distribution
    point is under `base_url` (default: the request's)."""
    if csr is None:
        return Certificate()
    from joinplane import machine_certificates

    issued = machine_certificates.issue_machine_certificate(
        crl_base_url=_base_url.get() if base_url is None else base_url,
        tenant_id=pool.tenant_id,
        site_id=pool.site_id,
        pool_id=pool.pool_id,
        machine_id=machine_id,
        csr=csr,
        lifetime_seconds=pool.certificate_ttl_seconds,
    )
    return Certificate(
        issued.certificate_pem,
        issued.ca_certificates_pem,
        clock.rfc3339(issued.expires_at),
        issued.serial,
        issued.ca_id,
    )


def _admitted(
    pool: PoolRecord, machine_id: str, token: str, cert: Certificate, image: str, schedulable: bool
) -> Response:
    return 200, join_wire.join_response(
        pool,
        ok=True,
        machineId=machine_id,
        machineToken=token,
        bootstrap=pools.bootstrap_config(pool, image),
        certificate=cert.certificate,
        caCertificates=cert.ca_certificates,
        certificateExpiresAt=cert.expires_at,
        schedulable=schedulable,
    )


def _told(response: Response) -> Response:
    """Log and count the answer a join gives once its outcome is stored (an answer is built
    before its transaction runs, and is not a decision until that transaction commits)."""
    status, body = response
    if status == 200:
        observe.decision("join admitted", "Joins", "admitted", machineId=body.get("machineId"))
    else:
        pending = body.get("joinRequest")
        observe.decision("join deferred", "Joins", "deferred", requestId=pending and pending["requestId"])
    return response


def _deferred(request: JoinRequestRecord) -> Response:
    reasons = "; ".join(r.message for r in request.reasons) or "an operator must decide"
    # Who decides: the pool's operators, or (a site token's request, unclaimed) those of a pool of the site.
    who = f"of pool {request.pool_id}" if request.pool_id else f"of a pool of site {request.site_id}"
    return 202, join_wire.join_response(
        ok=False,
        errMsg=f"join deferred: {reasons}. An operator {who} must approve {request.request_id}.",
        joinRequest={
            "requestId": request.request_id,
            "state": "pending",
            "expiresAt": request.expires_at,
            "poolId": request.pool_id,
            "siteId": request.site_id,
        },
        retryAfterSeconds=join_decide.retry_after(request, clock.now()),
    )


def _new_machine(
    attempt: Attempt,
    pool: PoolRecord,
    machine_id: str,
    secret: str,
    cert: Certificate,
    baseline: str | None,
    claims: list[Claim],
    request_id: str | None,
    tpm: TpmFactsRecord,
) -> MachineRecord:
    return MachineRecord(
        machine_id=machine_id,
        tenant_id=pool.tenant_id,
        site_id=pool.site_id,
        pool_id=pool.pool_id,
        identity=attempt.identity,
        token_id=attempt.token.token_id,
        request_id=request_id,
        state="active",
        machine_token_sha256=credentials.digest(secret),
        token_generation=1,
        schedulable=join_decide.schedulable(attempt.request.schedulable, attempt.request.preflight),
        facts=machines.facts_of(attempt.request)._replace(tpm=tpm, aws=join_facts.aws_facts(attempt)),
        worker_image_baseline=baseline,
        claims=tuple(claims),
        certificate_serial=cert.serial or None,
        certificate_expires_at=cert.expires_at or None,
        certificate_ca_id=cert.ca_id or None,
        joined_at=clock.rfc3339(clock.now()),
    )


def _new_request(
    attempt: Attempt, pool: PoolRecord | None, votes: list[Vote], tpm: TpmFactsRecord, why: Deferral
) -> JoinRequestRecord:
    """A deferral's request: `why.votes` deferred it (a policy rule's among them, if one did)."""
    token, now = attempt.token, clock.now()
    expires = now + timedelta(
        seconds=pool.join_request_ttl_seconds if pool else pools.DEFAULT_JOIN_REQUEST_TTL
    )
    return JoinRequestRecord(
        request_id=ids.new_id(join_requests.ID_PREFIX),
        tenant_id=attempt.tenant,
        site_id=token.site_id,
        pool_id=token.pool_id,
        token_id=token.token_id,
        identity=attempt.identity,
        state="pending",
        reasons=tuple(VoteReasonRecord(v.attestor, v.code, v.message) for v in why.votes),
        verdicts=tuple(
            requests_db.VerdictRecord(name, verdict) for name, verdict in attestors.verdicts(votes)
        ),
        token_description=token.description or None,
        source_ip=_source_ip.get(),
        machine=machines.facts_of(attempt.request)._replace(tpm=tpm, aws=join_facts.aws_facts(attempt)),
        csr_public_key_sha256=attempt.csr.public_key_sha256 if attempt.csr else None,
        created_at=clock.rfc3339(now),
        expires_at=clock.rfc3339(expires),
        expires_at_epoch=clock.seconds(expires),
        policy_rule=(why.rule if isinstance(why, AdmitByPolicy) else why.policy_rule) or None,
        **join_decide.first_approval(why, clock.rfc3339(now), pool),
    )


# --- a key seen for the first time -------------------------------------------------------------


def _fresh(attempt: Attempt) -> Response | IdentityRecord:
    """Admit or defer in one transaction; the key's record instead when it turns out to have one."""
    token = attempt.token
    pool = _pool(attempt.tenant, token.pool_id) if token.pool_id else None
    facts = join_facts.attestor_facts(attempt, token.site_id)
    held: tuple[Claim, ...] = ()
    for _ in attempts(3, exhausted=Aborted("the pool or the hardware ids changed while joining; retry")):
        votes = join_facts.votes(attempt, replace(facts, held_by_others=join_facts.held_by_others(held)))
        decided: Decided | Refuse = join_decide.fresh(votes)
        tpm = join_facts.tpm_facts(attempt, facts)
        if pool is not None and pool.join_policy:
            from joinplane import join_policy  # only here: no policy, none of its code

            decided = join_policy.decide(attempt, decided, pool, votes, facts, tpm)
        if isinstance(decided, Refuse):
            raise decided.error
        outcome, response = _commit_fresh(attempt, decided, pool, votes, tpm)
        match outcome:
            case joins_db.Committed():
                return _told(response)
            case joins_db.IdentityTaken(current):
                return current
            case joins_db.TokenSpent():
                raise join_decide.token_lost(token)
            case joins_db.PoolChanged():
                assert token.pool_id is not None
                pool = _pool(attempt.tenant, token.pool_id, fresh=True)
            case joins_db.ClaimsHeld(claims_held):
                held = claims_held  # decide again: a held id defers
    raise AssertionError("unreachable: attempts() raises when exhausted")


def _commit_fresh(
    attempt: Attempt, decided: Decided, pool: PoolRecord | None, votes: list[Vote], tpm: TpmFactsRecord
) -> tuple[joins_db.FreshOutcome, Response]:
    """The transaction of a fresh admit or deferral, and the answer it gives if it commits."""
    token, now = attempt.token, clock.now()
    record = IdentityRecord.new(
        tenant_id=attempt.tenant,
        identity=attempt.identity,
        token_id=token.token_id,
        site_id=token.site_id,
        now=now,
        proof_at=attempt.proof_ms,
    )
    try:
        if isinstance(decided, Defer):
            request = _new_request(attempt, pool, votes, tpm, decided)
            record = record._replace(request_id=request.request_id)
            deferred = joins_db.defer(token, now=now, pool=pool, identity=record, request=request)
            return deferred, _deferred(request)
        assert pool is not None  # a site token always defers
        machine_id = ids.new_id(machines.ID_PREFIX)
        secret = machines.mint_token(machine_id)
        cert = issue_certificate(attempt.csr, pool, machine_id)
        image, baseline = join_decide.worker_image(pool, None, attempt.request.workerImage)
        claims = join_facts.hardware_claims(attempt.request) + join_facts.ek_claims(attempt)
        req = None  # a deferral a policy rule approved: its request, consumed by this machine
        if isinstance(decided, AdmitByPolicy):
            pending = _new_request(attempt, pool, votes, tpm, decided)
            req = join_decide.approved_by_policy(pending, decided, machine_id, clock.rfc3339(now))
        request_id = req.request_id if req else None
        machine = _new_machine(attempt, pool, machine_id, secret, cert, baseline, claims, request_id, tpm)
        machine = machine._replace(policy_rule=req.policy_rule if req else None)
        record = record._replace(machine_id=machine_id, pool_id=pool.pool_id)
        admitted = joins_db.admit(token, now=now, pool=pool, identity=record, machine=machine, request=req)
        return admitted, _admitted(pool, machine_id, secret, cert, image, machine.schedulable)
    except joins_db.NotRecorded:
        raise RetryLater(NOT_RECORDED) from None


# --- a key with a history ----------------------------------------------------------------------


def _history(attempt: Attempt, record: IdentityRecord) -> join_decide.History:
    """What the key's history decides: its machine or its request is read only once `screen` lets
    this token see it. The join and its dry run both ask here."""
    refused = join_decide.screen(attempt.token, record)
    if refused:
        return refused
    machine = request = None
    if record.machine_id:
        machine = machines_db.get(record.machine_id)
    elif record.request_id:
        request = requests_db.get(record.request_id)
    return join_decide.history(
        attempt.token, attempt.presented, record, machine=machine, request=request, now=clock.now()
    )


def _known(attempt: Attempt, record: IdentityRecord) -> Response:
    decided = _history(attempt, record)
    match decided:
        case Refuse(error):
            raise error
        case Rejoin(active):
            return _rejoin(attempt, record, active)
        case ConsumeApproval(approved):
            return _consume(attempt, record, approved)
        case StillPending(pending, accept_proof):
            # A pending retry writes nothing else, but its proof must still move the identity's
            # mark: the same signed request, replayed after the approval, would otherwise consume it.
            if accept_proof:
                assert attempt.proof_ms is not None
                accepted = joins_db.accept_proof(attempt.tenant, attempt.identity, attempt.proof_ms)
                _refuse(join_decide.pending_proof(accepted))
            # The request was deferred when it was made: a retry is logged, not counted again.
            observe.log("INFO", "join still pending", outcome="pending", requestId=pending.request_id)
            return _deferred(pending)
    raise AssertionError(f"undecided: {decided}")


def _consume(attempt: Attempt, record: IdentityRecord, request: JoinRequestRecord) -> Response:
    """An approved request admits exactly one join; concurrent retries lose it and get ABORTED."""
    assert request.pool_id is not None  # approving a request gives it a pool
    pool = _pool(attempt.tenant, request.pool_id)
    machine_id = ids.new_id(machines.ID_PREFIX)
    secret = machines.mint_token(machine_id)
    # What the TPM proved when the join was deferred is the request's: the approved machine keeps it.
    tpm = request.machine.tpm
    claims = join_facts.hardware_claims(attempt.request)
    if tpm.activated:
        claims.append(("ek", tpm.ek_public_key_sha256))
    for _ in attempts(3, exhausted=Aborted("the pool changed while joining; retry")):
        # From the pool as read on this attempt: a pool changed since the cache was filled fails the
        # pool check and is read again, so no machine leaves with the old pool's settings.
        cert = issue_certificate(attempt.csr, pool, machine_id)
        image, baseline = join_decide.worker_image(pool, None, attempt.request.workerImage)
        machine = _new_machine(
            attempt, pool, machine_id, secret, cert, baseline, claims, request.request_id, tpm
        )
        try:
            outcome = joins_db.consume(
                request,
                record=record,
                proof_ms=attempt.proof_ms,
                machine=machine,
                pool=pool,
                now=clock.now(),
            )
        except joins_db.NotRecorded:
            raise RetryLater(NOT_RECORDED) from None
        match outcome:
            case joins_db.Committed():
                observe.decision(
                    "join request consumed",
                    "RequestDecisions",
                    "consumed",
                    requestId=request.request_id,
                    machineId=machine_id,
                )
                return _told(_admitted(pool, machine_id, secret, cert, image, machine.schedulable))
            case joins_db.RequestChanged():
                current = requests_db.get(request.request_id)
                raise join_decide.approval_lost(current, request, clock.now())
            case joins_db.IdentityMoved(current_record):
                raise join_decide.identity_moved(attempt.presented, record.version, current_record)
            case joins_db.PoolChanged():
                pool = _pool(attempt.tenant, request.pool_id, fresh=True)
            case joins_db.ClaimsHeld(claims_held):
                # An operator approved this machine: a hardware id held elsewhere is not claimed.
                claims = [c for c in claims if c not in claims_held]
    raise AssertionError("unreachable: attempts() raises when exhausted")


def _rejoin(attempt: Attempt, record: IdentityRecord, machine: MachineRecord) -> Response:
    """Same identity, same pool: the same machineId, a new machine token (the old one stops
    working) and a new certificate. The machine was admitted before, so only a deny can stop it."""
    facts = join_facts.attestor_facts(attempt, machine.site_id)
    votes = join_facts.votes(attempt, facts)
    _refuse(join_decide.rejoin_votes(votes))
    verified = attempt.tpm.ek_sha256 if attempt.tpm is not None else ""
    _refuse(join_decide.tpm_rejoin(attempt.token, machine.facts.tpm, verified))
    # A re-join without a TPM activation keeps what the TPM proved before; one with it, what it proves now.
    tpm = join_facts.tpm_facts(attempt, facts) if attempt.tpm is not None else machine.facts.tpm
    pool = _pool(attempt.tenant, machine.pool_id)
    secret = machines.mint_token(machine.machine_id)
    # The hardware ids a machine holds follow what it reports now: new ones are claimed, ones it no
    # longer reports are released (so a clone of its new serial is noticed, its old one freed).
    claims = join_facts.hardware_claims(attempt.request)
    if tpm.activated:
        claims.append(("ek", tpm.ek_public_key_sha256))
    for _ in attempts(3, exhausted=Aborted("the pool changed while joining; retry")):
        cert = issue_certificate(attempt.csr, pool, machine.machine_id)
        image, baseline = join_decide.worker_image(
            pool, machine.worker_image_baseline, attempt.request.workerImage
        )
        renewed = machine._replace(
            machine_token_sha256=credentials.digest(secret),
            certificate_serial=cert.serial or None,
            certificate_expires_at=cert.expires_at or None,
            certificate_ca_id=cert.ca_id or None,
            # The same key keeps its earlier certificates valid: tracked, so a revocation lists them.
            earlier_certificates=machines.replaced_certificates(machine),
            facts=machines.facts_of(attempt.request)._replace(tpm=tpm, aws=join_facts.aws_facts(attempt)),
            schedulable=join_decide.schedulable(attempt.request.schedulable, attempt.request.preflight),
            worker_image_baseline=baseline,
            claims=tuple(claims),
        )
        try:
            outcome = joins_db.rejoin(
                machine,
                renewed,
                record=record,
                proof_ms=attempt.proof_ms,
                pool=pool,
                now=clock.now(),
            )
        except joins_db.NotRecorded:
            raise RetryLater(NOT_RECORDED) from None
        match outcome:
            case joins_db.Committed():
                return _told(_admitted(pool, machine.machine_id, secret, cert, image, renewed.schedulable))
            case joins_db.MachineChanged():
                raise join_decide.machine_lost(machines_db.get(machine.machine_id))
            case joins_db.IdentityMoved(current_record):
                raise join_decide.identity_moved(attempt.presented, record.version, current_record)
            case joins_db.PoolChanged():
                pool = _pool(attempt.tenant, machine.pool_id, fresh=True)
            case joins_db.ClaimsHeld(claims_held):
                # Admitted before: a hardware id another machine holds is not claimed by this one.
                claims = [c for c in claims if c not in claims_held]
    raise AssertionError("unreachable: attempts() raises when exhausted")


# --- entry points ------------------------------------------------------------------------------


def _dry_run(attempt: Attempt) -> Response:
    """Everything evaluated, nothing changed: the verdict and its reasons. Each step is the join's
    own, in its order, so a dry run never says more than the join would."""
    token, now = attempt.token, clock.now()
    record = machines_db.get_identity(attempt.tenant, attempt.identity)
    voted_first = token.usable_at(now)
    votes: list[Vote] = []
    if voted_first:
        if token.pool_id:
            _pool(attempt.tenant, token.pool_id)
        votes = join_facts.votes(attempt, join_facts.attestor_facts(attempt, token.site_id))
    else:
        _refuse(join_decide.spent_token(token, record))
    if record is None:
        decided: Verdict | Refuse = join_decide.dry_run_fresh(votes)
    else:
        known = _history(attempt, record)
        if isinstance(known, Rejoin) and not voted_first:
            votes = join_facts.votes(attempt, join_facts.attestor_facts(attempt, known.machine.site_id))
        decided = join_decide.dry_run_known(votes, known, voted_first=voted_first)
        if isinstance(decided, Verdict) and decided.verdict == "admit":
            # An admitted history is committed into its pool, which must still take joins.
            match known:
                case Rejoin(machine):
                    _pool(attempt.tenant, machine.pool_id)
                case ConsumeApproval(request):
                    assert request.pool_id is not None
                    _pool(attempt.tenant, request.pool_id)
    if isinstance(decided, Refuse):
        raise decided.error
    admitted = decided.verdict == "admit"
    return 200, join_wire.dry_run_response(
        ok=admitted,
        errMsg="" if admitted else decided.message,
        verdict=decided.verdict,
        reasons=[v.reason() for v in votes],
    )


def _refused(action: str, metric: str, error: JoinplaneError) -> None:
    # denied: a decision about this machine (attestors, revoked, retired key); refused: the call
    # itself could not be served (malformed, bad token, lost race, unavailable).
    outcome = "denied" if isinstance(error, PermissionDenied) and metric == "Joins" else "refused"
    observe.decision(f"{action} {outcome}", metric, outcome, code=error.code, reason=error.reason)


def join_machine(
    body: bytes, authorization: str, proof_header: str = "", base_url: str = "", source_ip: str | None = None
) -> Response:
    _base_url.set(base_url)
    _source_ip.set(source_ip)
    try:
        return _join_machine(body, authorization, proof_header)
    except JoinplaneError as error:
        _refused("join", "Joins", error)
        raise


def _join_machine(body: bytes, authorization: str, proof_header: str) -> Response:
    from joinplane import csr_checks

    request = join_wire.decode_join(body)
    if request.awsIam is not None:
        from joinplane import aws_iam

        token, secret = aws_iam.token(request, authorization)  # named by id: docs/aws.md
    else:
        secret = join_facts.token_secret(request, authorization)
        token = join_facts.load_token(secret)
    observe.note(tenantId=token.tenant_id, siteId=token.site_id, poolId=token.pool_id, tokenId=token.token_id)
    csr = csr_checks.parse_csr(request.csr) if request.csr else None
    attempt = Attempt(
        request,
        token,
        join_facts.identity_of(request, csr),
        csr,
        join_facts.ek_sha256(request),
        join_facts.verified_proof(proof_header, "join", secret, body, csr),
    )
    if request.awsIam is not None:
        from joinplane import aws_iam

        attempt = attempt._replace(aws=aws_iam.verify(request.awsIam, csr, attempt.proof_ms))
    polled: IdentityRecord | None = None
    if join_facts.presents_tpm(request):
        # Loaded only here: a join without a TPM pays nothing for the TPM code.
        from joinplane import tpm_join

        challenged = tpm_join.challenge_or_activate(attempt)
        if isinstance(challenged, IdentityRecord):
            polled = challenged
        elif not isinstance(challenged, Attempt):
            return challenged
        else:
            attempt = challenged
    join_facts.hardware_claims(request)  # refuses malformed hardware ids before anything is decided
    _refuse(join_decide.preflight(request.preflight))
    if request.dryRun:
        observe.note(dryRun=True)
        return _dry_run(attempt)
    if polled is not None:
        return _known(attempt, polled)
    if token.usable_at(clock.now()):
        # The key's record is read before anything is signed or written: a retry, a re-join or a
        # consumption would otherwise start with the admit it is not (a signature and a cancelled
        # transaction, ~20 times this read's price). Its absence is not trusted: the admit's
        # transaction still hands back a record written since (`IdentityTaken`).
        record = machines_db.get_identity(attempt.tenant, attempt.identity)
        if record is None:
            fresh = _fresh(attempt)
            if not isinstance(fresh, IdentityRecord):
                return fresh
            record = fresh
    else:
        # An expired or used-up token still serves the retries and re-joins it started.
        record = machines_db.get_identity(attempt.tenant, attempt.identity)
        _refuse(join_decide.spent_token(token, record))
    assert record is not None
    return _known(attempt, record)

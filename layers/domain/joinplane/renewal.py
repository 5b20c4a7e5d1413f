"""Renewal (`POST /machines/renew`): a new certificate for a machine's token and a fresh CSR.

The join's sibling, apart from it because a renewal starts from a machine, not a join token: it
shares the join's pool check, refusal metrics and certificate issuance (joinplane.join) and commits
in one transaction of joinplane.dal.joins, as every join outcome does.

DynamoDB calls, warm container: GetItem(machine) + TransactWriteItems (tests/join/test_join_budget.py);
the certificate is one kms:Sign.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from joinplane import clock, errors, join_decide, join_wire, machines, observe, proof
from joinplane.dal import joins as joins_db
from joinplane.dal.machines import IdentityRecord
from joinplane.deadline import attempts
from joinplane.errors import Aborted, JoinplaneError, RetryLater, Unauthenticated
from joinplane.join import _base_url, _pool, _refuse, _refused, issue_certificate

if TYPE_CHECKING:
    from joinplane import join_views


def renew(
    body: bytes, proof_header: str = "", base_url: str = ""
) -> tuple[int, join_views.RenewMachineResponse]:
    _base_url.set(base_url)
    try:
        return _renew(body, proof_header)
    except JoinplaneError as error:
        _refused("renewal", "Renewals", error)
        raise


def _renew(body: bytes, proof_header: str) -> tuple[int, join_views.RenewMachineResponse]:
    """A new certificate for a machine's token and a fresh CSR (the key may change: the machine's
    join identity moves with it, in the same transaction).

    The body carries the machine token, so a captured renewal must not be worth a certificate for
    another key: the renewal proves fresh possession of the machine's current key (and, when the
    key changes, of the new one too), and moves the identity's proof mark like a re-join. A machine
    that joined with a fingerprint only has no key and no certificate: it cannot renew into one
    (nothing would tie the new key to the machine but its bearer token)."""
    from joinplane import csr_checks

    machine_token, csr_pem = join_wire.decode_renew(body)
    machine = machines.authenticate(machine_token)
    observe.note(
        tenantId=machine.tenant_id,
        siteId=machine.site_id,
        poolId=machine.pool_id,
        machineId=machine.machine_id,
    )
    _refuse(join_decide.renewable(machine))
    csr = csr_checks.parse_csr(csr_pem)
    parsed = proof.parse(proof_header)
    if parsed is None:
        raise Unauthenticated(join_decide.PROOF_REQUIRED, reason=errors.PROOF_REQUIRED)
    proof_ms = proof.verify(
        parsed,
        purpose="renew",
        credential=machine_token,
        body=body,
        csr_key=csr.public_key,
        identity=machine.identity,
    ).timestamp_ms
    rotating = csr.public_key_sha256 != machine.identity
    pool = _pool(machine.tenant_id, machine.pool_id)
    for _ in attempts(3, exhausted=Aborted("the pool changed while renewing; retry")):
        # The certificate's lifetime comes from the pool: the pool as read, or read again.
        cert = issue_certificate(csr, pool, machine.machine_id)
        now = clock.now()
        # The new key's record moves to the machine; the current key's is retired by the same
        # transaction, so that key can never join again (a revoked machine's earlier key neither).
        new_identity = (
            IdentityRecord.new(
                tenant_id=machine.tenant_id,
                identity=csr.public_key_sha256,
                token_id=machine.token_id,
                site_id=machine.site_id,
                now=now,
                pool_id=machine.pool_id,
                machine_id=machine.machine_id,
                proof_at=proof_ms,
            )
            if rotating
            else None
        )
        try:
            outcome = joins_db.renew(
                machine,
                identity=csr.public_key_sha256,
                certificate_serial=cert.serial,
                certificate_expires_at=cert.expires_at,
                certificate_ca_id=cert.ca_id,
                new_identity=new_identity,
                # The replaced key may be compromised (the usual reason to rotate): its certificates
                # go on the CRL. A renewal that keeps the key leaves them valid, and tracked.
                earlier=() if rotating else machines.replaced_certificates(machine),
                superseded=machines.superseded_certificates(machine, now) if rotating else (),
                proof_ms=proof_ms,
                pool=pool,
                now=now,
            )
        except joins_db.NotRecorded:
            raise RetryLater("the renewal could not be recorded, retry") from None
        match outcome:
            case joins_db.Committed():
                # Counted apart: a rotation is also an event, a routine renewal only this count.
                observe.decision(
                    "machine renewed", "Renewals", "rotated" if rotating else "renewed", keyRotated=rotating
                )
                return 200, join_wire.renew_response(
                    machine.machine_id, cert.certificate, cert.ca_certificates, cert.expires_at
                )
            case joins_db.MachineChanged():
                raise join_decide.renewal_machine_lost()
            case joins_db.CertificateChanged():
                # A concurrent renewal of this machine won: renew on top of it (with the key read).
                machine = machines.authenticate(machine_token)
                if (csr.public_key_sha256 != machine.identity) != rotating:
                    raise Aborted("the machine's key changed while renewing; retry")
            case joins_db.IdentityMoved(current_record):
                raise join_decide.renewal_identity_lost(machine, current_record)
            case joins_db.KeyTaken():
                raise join_decide.key_in_use()
            case joins_db.PoolChanged():
                pool = _pool(machine.tenant_id, machine.pool_id, fresh=True)
    raise AssertionError("unreachable: attempts() raises when exhausted")

"""A re-join racing a renewal of the same machine (found in review): a renewal changes neither the
machine token nor its generation, so a re-join that read the machine before the renewal committed
must still notice it. Otherwise it overwrites the machine's certificate record (the renewal's
certificate is never listed when the machine is revoked) or, after a key-rotating renewal, issues a
certificate for the key the renewal retired. The renewal is made to commit between the re-join's
read and its transaction by running it from inside `joins_db.rejoin`, just before the real one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from joinplane import clock
from joinplane.dal import joins as joins_db
from tests.support import call, join, sign_proof
from tests.support.crl import fetched_crl
from tests.support.csr import make_csr


def renewal_slipped_in(monkeypatch: pytest.MonkeyPatch, renew: Callable[[], Any], renewed: list[Any]) -> None:
    """The next re-join's transaction runs only after `renew()` committed (its answer in `renewed`)."""
    original = joins_db.rejoin

    def rejoin_after_a_renewal(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(joins_db, "rejoin", original)
        reply = renew()
        assert reply.status == 200, reply.body
        renewed.append(reply.body)
        return original(*args, **kwargs)

    monkeypatch.setattr(joins_db, "rejoin", rejoin_after_a_renewal)


def rejoin(token: str, machine: Any) -> Any:
    # Dated ahead (the proof window allows it), so it is newer than the renewal's proof.
    raw = json.dumps({"joinToken": token, "csr": machine.new_csr(), "hostname": "gpu-01"}).encode()
    proof = sign_proof(
        machine.key,
        purpose="join",
        credential=token,
        body=raw,
        timestamp_ms=int(clock.epoch() * 1000) + 30_000,
    )
    return join(None, raw=raw, proof=proof)


def renewal(machine: Any, machine_token: str, new: Any = None) -> Callable[[], Any]:
    """A renewal of the machine: with its own key, or (`new`: a CsrFile) onto a new key, signed by both."""

    def renew() -> Any:
        csr = new.pem if new is not None else machine.new_csr()
        raw = json.dumps({"machineToken": machine_token, "csr": csr}).encode()
        rotation = {"public_key": machine.key, "new_key": new.key_path} if new is not None else {}
        proof = sign_proof(
            machine.key,
            purpose="renew",
            credential=machine_token,
            body=raw,
            timestamp_ms=int(clock.epoch() * 1000),
            **rotation,
        )
        return join(None, raw=raw, proof=proof, path="/machines/renew")

    return renew


def serial(pem: str) -> int:
    return x509.load_pem_x509_certificate(pem.encode()).serial_number


def test_a_rejoin_racing_a_same_key_renewal_loses_no_certificate_from_revocation(
    admin_key: str, make_token: Any, machine_factory: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given an admitted machine
    token = make_token(maxUses=5)["token"]
    machine = machine_factory()
    first = join({"joinToken": token, "csr": machine.csr, "hostname": "gpu-01"})
    assert first.status == 200, first.body
    # When it re-joins while a same-key renewal commits between the re-join's read and its write
    renewed: list[Any] = []
    renewal_slipped_in(monkeypatch, renewal(machine, first.body["machineToken"]), renewed)
    again = rejoin(token, machine)
    # Then the re-join does not commit over the renewal: it is told to retry (409, as a concurrent change)
    assert (again.status, again.body["code"]) == (409, 10), again.body
    handed_out = [first.body["certificate"], renewed[0]["certificate"]]
    # And a retry re-joins on top of the renewal
    retried = rejoin(token, machine)
    assert retried.status == 200, retried.body
    handed_out.append(retried.body["certificate"])
    # And when the machine is revoked, every certificate it was handed is on the CRL
    reply = call(
        "/api/compute/machines/revoke", {"tenantId": "acme", "machineId": first.body["machineId"]}, admin_key
    )
    assert reply.status == 200, reply.body
    (tmp_path / "v").mkdir()
    crl = x509.load_pem_x509_crl(fetched_crl(retried.body["certificate"], tmp_path / "v").read_bytes())
    assert {serial(pem) for pem in handed_out} <= {entry.serial_number for entry in crl}


def test_a_rejoin_with_the_old_key_racing_a_key_rotating_renewal_gets_no_certificate(
    admin_key: str, make_token: Any, machine_factory: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given an admitted machine, and a new key it renews onto
    token = make_token(maxUses=5)["token"]
    machine = machine_factory()
    first = join({"joinToken": token, "csr": machine.csr, "hostname": "gpu-01"})
    assert first.status == 200, first.body
    new = make_csr(tmp_path / "new", "p256", "/CN=m", key_name="new.key", csr_name="new.csr")

    # When the old key re-joins while the key-rotating renewal commits between its read and write
    renewed: list[Any] = []
    renewal_slipped_in(monkeypatch, renewal(machine, first.body["machineToken"], new), renewed)
    again = rejoin(token, machine)
    # Then the old key gets no certificate, now or on a retry: the renewal retired it
    assert again.status == 409, again.body
    retried = rejoin(token, machine)
    assert retried.status == 403 and "certificate" not in retried.body, retried.body

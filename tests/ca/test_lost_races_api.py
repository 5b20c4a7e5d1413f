"""A lost race is a 409 over the API, never a 500: concurrent operator calls on one pool's CA, released
together against the moto server through the authorizer and the function as API Gateway calls them.
Every caller gets 200 or 409 `ABORTED` / `CONCURRENT_CHANGE` (retry as is), so the API's 5xx alarm
stays for bugs. That the CA's writes keep their guarantees under the same races is tests/ca's
test_kms_authorities and tests/harness; here only the answers a client sees are checked."""

from __future__ import annotations

from collections import Counter

from joinplane import container
from joinplane.dal import authorities as authorities_db
from tests.support import Reply, call, release_together

POOL = {"tenantId": "acme", "poolId": "gpu"}
GET = "/api/compute/certificateAuthorities/get"
CREATE_CSR = "/api/compute/certificateAuthorities/createCsr"
ROTATE = "/api/compute/certificateAuthorities/rotate"
THREADS = 8


def racing(path: str, admin_key: str) -> list[Reply]:
    """`path` on the pool, THREADS times at once, each thread a cold container (no shared cache)."""

    def once(_: int) -> Reply:
        container.reset(keep_clients=True)
        return call(path, POOL, admin_key)

    return release_together(once, THREADS)


def assert_lost_races_are_409(replies: list[Reply]) -> None:
    statuses = Counter(reply.status for reply in replies)
    assert set(statuses) <= {200, 409}, [(r.status, r.body) for r in replies]
    for reply in replies:
        if reply.status == 409:
            assert (reply.code, reply.reason) == ("ABORTED", "CONCURRENT_CHANGE"), reply.body


def test_concurrent_create_csr_calls_answer_200_or_409_and_one_request_stays_pending(
    admin_key: str, pool: str
) -> None:
    # Given a pool with its CA
    assert call(GET, POOL, admin_key).status == 200
    # When eight operators ask for a CSR at once (each replaces the pending one it read)
    replies = racing(CREATE_CSR, admin_key)
    # Then each is told it won or lost the race, never an internal error
    assert_lost_races_are_409(replies)
    won = [reply for reply in replies if reply.status == 200]
    # And the race really happened: every caller read "no request yet", so only one could write it
    assert len(won) >= 1 and len(won) < THREADS, Counter(reply.status for reply in replies)
    # And the pool's pending request is one of the winners'
    pending = authorities_db.get_pending("acme", "gpu")
    assert pending is not None and pending.ca_id in {reply.body["caId"] for reply in won}


def test_concurrent_rotations_answer_200_or_409(admin_key: str, pool: str) -> None:
    # Given a pool with its CA
    assert call(GET, POOL, admin_key).status == 200
    # When eight operators rotate it at once
    replies = racing(ROTATE, admin_key)
    # Then each gets 200 or 409 (CONCURRENT_CHANGE), and at least one rotated
    assert_lost_races_are_409(replies)
    assert any(reply.status == 200 for reply in replies)

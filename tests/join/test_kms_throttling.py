"""KMS past its request-rate quota: the emulator's KMS throttles Sign as KMS does
(joinplane_local.moto_patches.kms_sign_quota), and a join that needs a signature is answered 503
UNAVAILABLE with Retry-After and gRPC's RetryInfo, never a 500, and takes nothing (docs/fleet.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from joinplane_local import moto_patches
from tests.support import join
from tests.support.table import all_items


@pytest.fixture
def kms_quota() -> Iterator[None]:
    """Lifts the emulator's KMS quota whatever the test set."""
    try:
        yield
    finally:
        moto_patches.kms_sign_quota(None)


def test_a_join_kms_throttles_is_a_503_with_retry_after_and_takes_nothing(
    make_token, machine_factory, kms_quota
) -> None:
    # Given a pool whose CA exists (a first machine joined), a token of one use that admits at once,
    # and KMS throttling every Sign, as past the account's quota
    first = join({"joinToken": make_token()["token"], "csr": machine_factory().csr})
    assert first.status == 200, first.body
    token = make_token(maxUses=1)
    machine = machine_factory()
    moto_patches.kms_sign_quota(0)
    before = all_items()
    # When the machine joins
    reply = join({"joinToken": token["token"], "csr": machine.csr})
    # Then the answer is UNAVAILABLE (503, gRPC 14) with when to retry, in the header and in RetryInfo
    assert (reply.status, reply.body["code"]) == (503, 14), reply.body
    assert reply.headers["retry-after"] == "1"
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"} in reply.body["details"]
    # And nothing was written: the token's one use is still there
    assert all_items() == before
    # When KMS has room again and the machine asks again, Then it is admitted with that one use
    moto_patches.kms_sign_quota(None)
    again = join({"joinToken": token["token"], "csr": machine.csr})
    assert (again.status, again.body.get("ok")) == (200, True), again.body

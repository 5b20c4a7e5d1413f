"""The intermediate signing mode's KMS side, pinned as `make cost` measures it (SigningMode
`intermediate`): once a container has its intermediate, an admission makes no KMS call at all, and
a new intermediate (a container's first certificate of its hour) adds exactly one kms:Sign and one
transaction of three items to the certificate that makes it. What the flows write besides is the
KMS mode's, pinned in test_flow_budget; a renewal's lack of KMS calls is tests/ca's
(test_intermediate_mode).

One local runtime for the module; two admissions, an hour apart, measured once each (~8 s)."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator

import pytest

from joinplane import intermediates
from joinplane_local.cost import Flows, Lines, measure_once
from joinplane_local.meter import Meter
from joinplane_local.runtime import start_runtime


@pytest.fixture(scope="module")
def measured() -> Iterator[dict[str, Lines]]:
    meter = Meter()
    meter.install()
    try:
        with start_runtime(port=0, log=io.StringIO(), parameters={"SigningMode": "intermediate"}) as runtime:
            meter.attach(runtime)
            flows = Flows(runtime)
            flows.admit()()  # unmeasured: the pool's CA and this container's intermediate are made
            warm = measure_once(flows, meter, ["admit"])
            # An hour on, the container's intermediate may no longer sign: the next admission makes one.
            flows._advance(intermediates.SIGNING_WINDOW.total_seconds() + 1)
            yield warm | {"admitMakingAnIntermediate": measure_once(flows, meter, ["admit"])["admit"]}
    finally:
        meter.uninstall()


def calls(lines: Lines) -> Counter[str]:
    """Each AWS call by its line, as test_flow_budget counts them (log lines left out)."""
    counted: Counter[str] = Counter()
    for charge in lines.charges:
        if charge.service != "CloudWatch Logs":
            counted[f"{charge.service} {charge.line}"] += charge.calls
    return counted


def touched(lines: Lines) -> set[str]:
    """The DynamoDB items (by key prefix) and index entries each call read or wrote."""
    return {name for charge in lines.charges if charge.service == "DynamoDB" for name in charge.detail}


def kms(lines: Lines) -> Counter[str]:
    return Counter({line: n for line, n in calls(lines).items() if line.startswith("KMS")})


def test_an_admission_makes_no_kms_call(measured: dict[str, Lines]) -> None:
    # Given a container that has its intermediate
    # When a machine is admitted
    # Then no KMS call is made: the certificate is signed in memory
    assert kms(measured["admit"]) == Counter()


def test_a_new_intermediate_is_one_sign_and_one_transaction(measured: dict[str, Lines]) -> None:
    # When the container's first admission after its signing window makes a new intermediate
    making, warm = measured["admitMakingAnIntermediate"], measured["admit"]
    # Then it costs what a warm admission costs, plus one kms:Sign and one transaction (the
    # intermediate's record, its CA's listing of it, and the check that the CA is still active),
    # plus the pool's CAs read again (an hour on, the container's 60-second copy has lapsed, as it
    # does every minute in a busy container)
    assert calls(making) - calls(warm) == Counter(
        {
            "KMS Sign (MachineJoinFunction)": 1,
            "DynamoDB TransactWriteItems (MachineJoinFunction)": 1,
            "DynamoDB GetItem (MachineJoinFunction)": 1,
            "DynamoDB BatchGetItem (MachineJoinFunction)": 1,
        }
    )
    assert calls(warm) - calls(making) == Counter()
    assert touched(making) - touched(warm) == {
        "INTERMEDIATE Put",
        "CAINTERMEDIATES Put",
        "CA ConditionCheck",
        "CAPOOL read",
        "CA read",
    }

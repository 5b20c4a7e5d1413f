"""The policy simulation's answer (pools/simulatePolicy, docs/policy.md, Simulation), field for field:
a view like those of `joinplane.views`, which names `PolicySimulation` for the route table, kept in a
module of its own as `fact_views` is. Imported only by type checkers and the OpenAPI generator, like
every view."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from joinplane.wire import POOL_ID, TENANT_ID, TIMESTAMP

VIEW = ConfigDict(extra="forbid")
Timestamp = Annotated[str, Field(pattern=TIMESTAMP, description="RFC 3339, UTC, with `Z`")]


Decision = Literal["admit", "defer", "deny"]


@with_config(VIEW)
class SimulatedJoin(TypedDict):
    kind: Annotated[
        Literal["request", "join"],
        Field(
            description="`request`: a deferred join (its join request, the machine it became named by "
            "`machineId`); `join`: a machine the attestors admitted without a request"
        ),
    ]
    id: Annotated[str, Field(description="the request's id (`jreq_…`) or the machine's (`mach_…`)")]
    machineId: str | None
    hostname: str
    tokenId: str | None
    at: Annotated[Timestamp, Field(description="when the join was made (the request's or the machine's)")]
    attestors: Annotated[Decision, Field(description="what the attestors decided, as stored with the join")]
    actual: Annotated[
        Literal["admitted", "deferred"], Field(description="what the join decided when it was made")
    ]
    state: Annotated[
        str,
        Field(
            description="the request's state now (`pending`, `approved`, …) "
            "or the machine's (`active`, `revoked`)"
        ),
    ]
    decidedBy: Annotated[str | None, Field(description="who approved or rejected the request")]
    decision: Annotated[Decision, Field(description="what the join would decide under the draft policy")]
    rule: Annotated[
        str | None,
        Field(description="the rule that decided; null: no rule matched, the attestors' outcome stands"),
    ]
    reason: Annotated[str | None, Field(description="the rule's reason, or why its evaluation failed")]
    error: Annotated[bool, Field(description="the rule's evaluation failed: the join would defer")]
    changed: Annotated[bool, Field(description="`decision` differs from what the join decided")]


@with_config(VIEW)
class SimulationCounts(TypedDict):
    total: int
    wouldAdmit: int
    wouldDefer: int
    wouldDeny: int
    unchanged: int
    changed: int
    deferredWouldAdmit: Annotated[int, Field(description="deferred joins the draft would admit at once")]
    deferredWouldDeny: int
    admittedWouldDefer: Annotated[int, Field(description="admitted joins the draft would hold for a person")]
    admittedWouldDeny: int
    noMatch: Annotated[int, Field(description="joins no rule matched (the attestors' outcome stands)")]
    errors: Annotated[int, Field(description="joins where a rule's evaluation failed (they would defer)")]


@with_config(VIEW)
class PolicySimulation(TypedDict):
    tenantId: Annotated[str, Field(pattern=TENANT_ID)]
    poolId: Annotated[str, Field(pattern=POOL_ID)]
    simulatedAt: Timestamp
    limit: Annotated[int, Field(description="at most this many requests and this many machines were read")]
    complete: Annotated[
        bool, Field(description="false: the pool has older requests or machines than those simulated")
    ]
    counts: SimulationCounts
    items: Annotated[list[SimulatedJoin], Field(description="newest first")]

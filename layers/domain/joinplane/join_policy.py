"""A fresh join's outcome under its pool's join policy (docs/policy.md): the activation built from
what the join read, the policy evaluated, and `join_decide.apply_policy` over the attestors'
outcome. Loaded by `joinplane.join` only for a pool that has a policy, and loads the engine
(`joinplane.policy`) only then: a join to a pool without one imports neither.
"""

from __future__ import annotations

from joinplane import attestors, clock, join_decide, join_facts, machines, observe, policy
from joinplane.attestors import Vote
from joinplane.dal.machines import TpmFactsRecord
from joinplane.dal.pools import PoolRecord
from joinplane.join_decide import Admit, Decided, Defer, Refuse
from joinplane.join_facts import Attempt


def decide(
    attempt: Attempt,
    decided: Decided | Refuse,
    pool: PoolRecord,
    votes: list[Vote],
    facts: attestors.Facts,
    tpm: TpmFactsRecord,
) -> Decided | Refuse:
    """The pool's policy over the attestors' outcome `decided` of this join, which `votes` are
    (an attestor's deny stands: a policy never admits what an attestor denied). The policy came
    with the pool the join read: evaluating it reads nothing more."""
    if not isinstance(decided, Admit | Defer):
        return decided
    activation = policy.variables(
        machines.facts_of(attempt.request)._replace(tpm=tpm, aws=join_facts.aws_facts(attempt)),
        token=attempt.token,
        verdicts=attestors.verdicts(votes),
        reasons=votes,
        site_id=attempt.token.site_id,
        discovery=policy.DiscoveryEntry(*facts.discovery_entry) if facts.discovery_entry else None,
        now=clock.now(),
    )
    outcome = policy.outcome_of(pool.join_policy, activation)
    if outcome is not None:
        observe.note(policyRule=outcome.rule, policyDecision=outcome.decision)
    return join_decide.apply_policy(decided, outcome, pool.approvals_required)

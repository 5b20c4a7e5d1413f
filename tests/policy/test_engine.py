"""joinplane.policy without the API: what the simulation and the join share (the activation from
stored facts, the first match deciding, errors and the budget deferring), table-driven."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from joinplane import attestors, policy
from joinplane.dal.machines import HardwareFactsRecord, MachineFactsRecord, TpmFactsRecord
from joinplane.dal.requests import VoteReasonRecord
from joinplane.policy_rules import PolicyRule


def compiled(*rules: tuple[str, str, str]) -> policy.CompiledPolicy:
    return policy.compile_policy([PolicyRule(name=n, when=w, decision=d) for n, w, d in rules])


def stored_request_activation(hostname: str, serial: str | None, hour: int) -> dict:
    """The activation of a join request as stored: its facts, verdicts and reasons, no token."""
    facts = MachineFactsRecord(
        hostname=hostname, gpu_count=8, hardware=HardwareFactsRecord(serial_number=serial)
    )
    return policy.variables(
        facts,
        token=None,
        verdicts=[("token", "defer"), ("tpm", "admit")],
        reasons=[
            VoteReasonRecord("token", "approval_required", "this join token requires an operator's approval")
        ],
        site_id="lab",
        discovery=None,
        now=datetime(2026, 3, 2, hour, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("when", "hostname", "serial", "hour", "decided"),
    [
        (
            'request.hardware.serialNumber in ["SN-7A01", "SN-7A02"] && request.gpuCount > 0',
            "n",
            "SN-7A02",
            9,
            "r",
        ),
        ('request.hardware.serialNumber in ["SN-7A01"]', "n", None, 9, None),  # not reported: ""
        ('site.id == "lab" && site.discovery == null', "n", None, 9, "r"),
        (
            'attestors.token.verdict == "defer" && attestors.token.code == "approval_required"',
            "n",
            None,
            9,
            "r",
        ),
        ('attestors["hardware-ids"].verdict == "admit" && token == null', "n", None, 9, "r"),
        ("now.getHours() < 7 || now.getHours() >= 19", "n", None, 20, "r"),
        ("now.getHours() < 7 || now.getHours() >= 19", "n", None, 12, None),
        ('request.hostname.matches("^gpu-[0-9]{3}$")', "gpu-007", None, 9, "r"),
        ('request.hostname.matches("^gpu-[0-9]{3}$")', "gpu-7", None, 9, None),
    ],
)
def test_a_rule_reads_a_stored_request(
    when: str, hostname: str, serial: str | None, hour: int, decided: str | None
) -> None:
    # Given a rule, and the activation of a stored join request
    activation = stored_request_activation(hostname, serial, hour)
    # When it is evaluated
    outcome = policy.evaluate(compiled(("r", when, "approve")), activation)
    # Then it matches or not
    assert (outcome.rule if outcome else None) == decided
    assert outcome is None or (outcome.decision, outcome.error) == ("approve", "")


def test_the_first_matching_rule_decides() -> None:
    # Given three rules, the first not matching, the next two matching
    rules = compiled(("no", "false", "deny"), ("first", "true", "defer"), ("second", "true", "approve"))
    # When evaluated, then the first that matched decides
    outcome = policy.evaluate(rules, policy.sample_activation())
    assert outcome is not None and (outcome.rule, outcome.position, outcome.decision) == ("first", 1, "defer")


def test_a_policy_over_its_budget_defers_naming_the_rule_that_crossed_it() -> None:
    # Given a policy whose rules all hold, and no time to evaluate them in
    rules = compiled(("slow", "request.gpu.all(g, g.size() > 0)", "approve"), ("later", "true", "approve"))
    # When it is evaluated with a budget already spent by its first rule
    outcome = policy.evaluate(rules, policy.sample_activation(), budget_seconds=0.0)
    # Then the rule that crossed it defers, with the error, and no later rule decides
    assert outcome is not None and (outcome.rule, outcome.decision) == ("slow", "defer")
    assert "budget" in outcome.error


def test_a_condition_that_is_not_a_bool_at_join_time_defers() -> None:
    # Given a rule that is a bool on the sample but a string where the field holds one
    rules = compiled(("odd", "request.tpm.activated ? true : request.hostname", "approve"))
    activation = policy.sample_activation()
    activation["request"]["tpm"]["activated"] = False
    # When evaluated, then it defers naming the rule
    outcome = policy.evaluate(rules, activation)
    assert (
        outcome is not None
        and (outcome.rule, outcome.decision) == ("odd", "defer")
        and "bool" in outcome.error
    )


def test_a_stored_rule_that_no_longer_compiles_defers_the_join() -> None:
    # Given a stored policy whose second rule does not compile (an engine upgrade, say)
    stored = [
        PolicyRule(name="fine", when="false", decision="approve"),
        PolicyRule(name="old", when="(", decision="approve"),
    ]
    # When a join evaluates it
    outcome = policy.outcome_of(stored, policy.sample_activation())
    # Then that rule defers, naming itself
    assert outcome is not None and (outcome.rule, outcome.position, outcome.decision) == ("old", 1, "defer")


def test_every_attestor_has_a_verdict_and_a_code_in_the_activation() -> None:
    activation = stored_request_activation("n", None, 9)
    assert set(activation["attestors"]) == set(attestors.ATTESTORS)
    assert activation["attestors"]["tpm"] == {"verdict": "admit", "code": "", "codes": [], "messages": []}


@pytest.mark.parametrize(
    "when",
    [
        # a bracket in a comment closes the outer comprehension early for a reader ignoring comments
        "request.gpuIds.all(a, // )\n false || request.gpuIds.all(b, a != b || true))",
        # a raw string's backslash escapes nothing: read as an escape, the nesting hides in "a string"
        'r"\\" != "" && request.gpuIds.all(a, request.gpuIds.all(b, a != b || true)) && "" == ""',
    ],
)
def test_a_nested_comprehension_hidden_from_the_bounds_is_still_refused(when: str) -> None:
    # Given a rule nesting one comprehension in another, disguised by a comment or a raw string
    # (nested four deep over the 64 gpuIds a join may report: 9 s of CPU per join, per rule)
    rule = PolicyRule(name="nested", when=when, decision="approve")
    # When it is saved, then it is refused for its cost
    with pytest.raises(policy.PolicyInvalid, match="comprehension"):
        policy.compile_policy([rule])


@pytest.mark.parametrize(("activated", "matched"), [(False, None), (True, "listed-ek")])
def test_an_endorsement_key_only_named_does_not_meet_a_rule_listing_it(
    activated: bool, matched: str | None
) -> None:
    # Given a rule approving one endorsement key, and a join naming that key's hash, proved or not
    ek = "ab" * 32
    rules = compiled(("listed-ek", f'request.tpm.ekPublicKeySha256 == "{ek}"', "approve"))
    facts = MachineFactsRecord(hostname="n", tpm=TpmFactsRecord(ek, activated=activated))
    activation = policy.variables(
        facts, token=None, verdicts=[], reasons=[], site_id="lab", discovery=None, now=datetime.now(UTC)
    )
    # When it is evaluated
    outcome = policy.evaluate(rules, activation)
    # Then only a TPM that proved it holds the key meets it: a hash is public, anyone can copy it
    assert (outcome.rule if outcome else None) == matched

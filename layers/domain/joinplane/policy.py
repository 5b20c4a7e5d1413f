"""Join policies: a pool's ordered CEL rules, compiled when an operator saves them and evaluated
when a machine joins the pool (docs/policy.md).

- `compile_policy(rules)` parses every rule, holds it to the cost bounds below, and tries it on a
  sample activation of the documented shape, so a typo (`reqest.hostname`), an unknown field or a
  type error (`request.gpuCount > "4"`) is refused when the policy is saved, with the rule's name
  and the position: never found at join time.
- `variables(...)` builds the activation from a join's stored facts: a live join's, a join
  request's or a machine's, so a simulation over stored requests sees what the join saw.
- `evaluate(compiled, activation)`: the first rule whose condition holds decides; none: None. An
  error while evaluating (a null where a string was expected, a regex that does not compile, a
  budget exceeded) is a `defer` naming the rule: a policy that fails never admits.

The CEL engine is the Rust implementation's Python binding (common-expression-language; docs/policy.md
has the measurements that chose it), loaded on first use: only a join to a pool with a policy pays
for it. Its package's `__init__` imports the package's command-line tool (typer, rich and
prompt_toolkit: 0.7 s of imports measured on a warm disk); the engine needs only the compiled
extension beside it, which `_cel` loads alone.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from joinplane import attestors
from joinplane.dal.machines import (
    AwsFactsRecord,
    HardwareFactsRecord,
    MachineFactsRecord,
    PreflightCheckRecord,
    TpmFactsRecord,
)
from joinplane.dal.tokens import JoinTokenRecord
from joinplane.errors import InvalidArgument
from joinplane.policy_rules import (
    DECISIONS,
    MAX_EXPRESSION,
    MAX_RULES,
    JoinPolicy,
    PolicyRule,
    PolicyRuleLike,
)

__all__ = [
    "DECISIONS",
    "MAX_COMPREHENSIONS",
    "MAX_EXPRESSION",
    "MAX_RULES",
    "CompiledPolicy",
    "CompiledRule",
    "JoinPolicy",
    "PolicyInvalid",
    "PolicyOutcome",
    "PolicyRule",
    "PolicyRuleLike",
    "compile_policy",
    "evaluate",
    "sample_activation",
    "variables",
]

# The cost bounds. CEL has no loops and no recursion: what can make an expression expensive is a
# comprehension (all, exists, exists_one, map, filter) iterating over another's result or inside
# another's body, which multiplies sizes. Forbidding both keeps every rule's cost linear in the
# size of the activation times the size of the expression; the budgets below catch what is left.
MAX_COMPREHENSIONS = 4
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
# Wall-clock budgets, far above what a rule within the bounds takes (microseconds): a rule's
# trial on the sample activation when saved, and the whole policy at join time.
SAVE_BUDGET_SECONDS = 0.05
JOIN_BUDGET_SECONDS = 0.1
VARIABLES = ("request", "token", "attestors", "site", "now")

Activation = dict[str, Any]


class PolicyInvalid(InvalidArgument):
    """A policy refused when saved (400): its detail names the rule (`field`: `joinPolicy.<i>.when`,
    `rule`: its name), says why (`reason`) and, for a parse error, where (`line`, `column`,
    1-based; the reason starts with them too)."""


class CompiledRule(NamedTuple):
    position: int
    name: str
    decision: str
    reason: str
    program: Any  # the CEL engine's Program


class CompiledPolicy(NamedTuple):
    rules: tuple[CompiledRule, ...]


class PolicyOutcome(NamedTuple):
    """What a policy decided: the rule that matched (by name and position) and its decision. An
    evaluation error is a `defer` carrying the error (`error`), with the failing rule's name."""

    rule: str
    position: int  # the rule's place in the policy, from 0
    decision: str
    reason: str
    error: str = ""


# --- the engine --------------------------------------------------------------------------------

_engine: Any = None


def _cel() -> Any:
    """The compiled CEL extension, without its package's command-line tool (see the module's
    docstring). Loaded once per process, as an import would be."""
    global _engine
    if _engine is None:
        package = importlib.util.find_spec("cel")
        if package is None or not package.submodule_search_locations:
            raise ImportError("the CEL engine (common-expression-language) is not installed")
        finder = importlib.machinery.FileFinder(
            package.submodule_search_locations[0],
            (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
        )
        spec = finder.find_spec("cel.cel")
        if spec is None or spec.loader is None:
            raise ImportError("the CEL engine's compiled extension is missing")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _engine = module
    return _engine


# --- compiling ---------------------------------------------------------------------------------

_POSITION = re.compile(r"<input>:(\d+):(\d+):\s*(.*)", re.DOTALL)
# A raw string (r"...") takes no escapes: read as an ordinary one, its `\"` would end it later
# than the engine does, and hide the source after it from the bounds. A comment (`//` to the end
# of the line) is no code: read as code, a bracket in it would misplace a comprehension's end.
_TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*)"""
    r"""|(?P<string>(?:[bB]?[rR]|[rR][bB])(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|"[^"\n]*"|'[^'\n]*'))"""
    r"""|(?P<escaped>[bB]?(?:\"\"\"(?:\\.|[^\\])*?\"\"\"|'''(?:\\.|[^\\])*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))"""
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>[0-9][0-9a-fA-FxX.eE+u-]*)"
    r"|(?P<space>\s+)"
    r"|(?P<punct>.)",
    re.DOTALL,
)
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {")", "]", "}"}
_OPERATOR_WORDS = frozenset({"in", "true", "false", "null"})


def _refuse(
    index: int, name: str, reason: str, line: int | None = None, column: int | None = None
) -> PolicyInvalid:
    where = f"line {line}, column {column}: " if line is not None else ""
    detail: dict[str, Any] = {"field": f"joinPolicy.{index}.when", "rule": name, "reason": where + reason}
    if line is not None:
        detail["line"], detail["column"] = line, column
    return PolicyInvalid(f"rule {index} ({name}) is not a valid condition: {where}{reason}", [detail])


def _parse_error(index: int, name: str, error: BaseException) -> PolicyInvalid:
    message = str(error)
    found = _POSITION.search(message)
    if found is None:
        return _refuse(index, name, message)
    line, column, why = int(found[1]), int(found[2]), found[3]
    # The engine quotes the source with a caret under the position: the position says it.
    why = why.split("\n|", 1)[0].strip()
    return _refuse(index, name, why, line, column)


def _tokens(source: str) -> list[str]:
    """CEL's tokens, well enough to find comprehensions: string literals are one token each, so a
    macro's name inside a string is not a macro."""
    return [m.group() for m in _TOKEN.finditer(source) if m.lastgroup not in ("space", "comment")]


def _cost_bounds(source: str) -> str | None:
    """Why `source` may cost more than the bounds allow, or None. Applied to a source that parsed."""
    tokens = _tokens(source)
    match_of: dict[int, int] = {}
    stack: list[int] = []
    for i, token in enumerate(tokens):
        if token in _OPENERS:
            stack.append(i)
        elif token in _CLOSERS and stack:
            match_of[i] = stack.pop()
    macro_at = [
        i
        for i in range(1, len(tokens) - 1)
        if tokens[i] in MACROS and tokens[i - 1] == "." and tokens[i + 1] == "("
    ]
    if len(macro_at) > MAX_COMPREHENSIONS:
        return f"at most {MAX_COMPREHENSIONS} comprehensions (all, exists, exists_one, map, filter) per rule"
    macro_set = set(macro_at)
    spans = [(i + 1, _closing(match_of, i + 1, len(tokens))) for i in macro_at]

    def holds_macro(start: int, end: int) -> bool:
        return any(start <= m <= end for m in macro_at)

    for (open_at, close_at), at in zip(spans, macro_at, strict=True):
        if holds_macro(open_at, close_at):
            return "a comprehension inside another comprehension multiplies its cost: not allowed"
        # The receiver: the chain of names, literals and bracketed groups before `.macro(`.
        j = at - 2
        while j >= 0:
            token = tokens[j]
            if token in _CLOSERS and j in match_of:
                if holds_macro(match_of[j], j):
                    return (
                        "a comprehension over another comprehension's result multiplies its cost: not allowed"
                    )
                j = match_of[j] - 1
            elif j in macro_set:
                return "a comprehension over another comprehension's result multiplies its cost: not allowed"
            elif token == "." or (
                (token[0].isalnum() or token[0] in "_'\"") and token not in _OPERATOR_WORDS
            ):
                j -= 1
            else:
                break
    return None


def _closing(match_of: dict[int, int], open_at: int, length: int) -> int:
    for close, opened in match_of.items():
        if opened == open_at:
            return close
    return length - 1


def compile_policy(rules: Sequence[PolicyRuleLike], *, trial: bool = True) -> CompiledPolicy:
    """Every rule compiled, or PolicyInvalid naming the first that is not. `trial`: also run each
    on the sample activation (saving and simulating do; a join, whose policy was tried when
    saved, does not), refusing errors that no activation of the documented shape could avoid."""
    if len(rules) > MAX_RULES:
        raise PolicyInvalid(f"a join policy has at most {MAX_RULES} rules", [{"field": "joinPolicy"}])
    cel = _cel()
    compiled = []
    for index, rule in enumerate(rules):
        if rule.decision not in DECISIONS:
            raise _refuse(index, rule.name, f"decision must be one of {', '.join(DECISIONS)}")
        if len(rule.when) > MAX_EXPRESSION:
            raise _refuse(index, rule.name, f"at most {MAX_EXPRESSION} characters")
        try:
            program = cel.compile(rule.when)
        except BaseException as error:  # the engine raises ValueError, or panics
            _reraise_fatal(error)
            raise _parse_error(index, rule.name, error) from None
        too_costly = _cost_bounds(rule.when)
        if too_costly:
            raise _refuse(index, rule.name, too_costly)
        compiled.append(CompiledRule(index, rule.name, rule.decision, rule.reason, program))
    policy = CompiledPolicy(tuple(compiled))
    if trial:
        _try(policy)
    return policy


# What the engine says of an expression that no activation of the documented shape can satisfy:
# a name that is not a variable or function, a field the shape lacks, operands of the wrong types.
_STATIC = (
    re.compile(r"Undefined variable or function"),
    re.compile(r"No such overload"),
)


def _try(policy: CompiledPolicy) -> None:
    cel = _cel()
    context = cel.Context(variables=sample_activation())
    for rule in policy.rules:
        started = time.perf_counter()
        try:
            result = rule.program.execute(context)
        except KeyError as missing:
            raise _refuse(rule.position, rule.name, f"no such field: {missing}") from None
        except BaseException as error:  # the engine raises many kinds, or panics
            _reraise_fatal(error)
            message = str(error)
            if any(p.search(message) for p in _STATIC):
                raise _refuse(rule.position, rule.name, message.split(". ", 1)[0]) from None
            continue  # depends on the data (a null, an index): evaluated at join time, deferring
        spent = time.perf_counter() - started
        if spent > SAVE_BUDGET_SECONDS:
            raise _refuse(
                rule.position,
                rule.name,
                f"took {spent * 1000:.0f} ms on a sample join, over the budget of "
                f"{SAVE_BUDGET_SECONDS * 1000:.0f} ms: too costly",
            )
        if not isinstance(result, bool):
            raise _refuse(
                rule.position, rule.name, f"must be a bool (true or false), not {type(result).__name__}"
            )


def _reraise_fatal(error: BaseException) -> None:
    if isinstance(error, KeyboardInterrupt | SystemExit | GeneratorExit | MemoryError):
        raise error


# --- evaluating --------------------------------------------------------------------------------


def evaluate(
    compiled: CompiledPolicy, activation: Activation, *, budget_seconds: float = JOIN_BUDGET_SECONDS
) -> PolicyOutcome | None:
    """The first rule whose condition holds decides; no rule: None. A rule that fails to evaluate,
    or gives something else than a bool, defers with its name: a policy that fails never admits.
    Past the budget (measured after each rule: a rule within the cost bounds is short), the rule
    that crossed it defers too, and no later rule is evaluated."""
    cel = _cel()
    context = cel.Context(variables=activation)
    started = time.perf_counter()
    for rule in compiled.rules:
        try:
            result = rule.program.execute(context)
        except BaseException as error:  # the engine raises many kinds, or panics
            _reraise_fatal(error)
            return _failed(rule, _error_text(error))
        spent = time.perf_counter() - started
        if spent > budget_seconds:
            return _failed(
                rule,
                f"the policy's evaluation took {spent * 1000:.0f} ms, over its budget of "
                f"{budget_seconds * 1000:.0f} ms",
            )
        if not isinstance(result, bool):
            return _failed(rule, f"the condition gave {type(result).__name__}, not a bool")
        if result:
            return PolicyOutcome(rule.name, rule.position, rule.decision, rule.reason)
    return None


def _error_text(error: BaseException) -> str:
    if isinstance(error, KeyError):
        return f"no such field: {error}"
    # The engine's messages end with advice on CEL in general: the first sentence says what failed.
    return str(error).split(". ", 1)[0][:500]


def _failed(rule: CompiledRule, error: str) -> PolicyOutcome:
    return PolicyOutcome(
        rule.name, rule.position, "defer", f"rule {rule.name} could not be evaluated: {error}", error
    )


# --- the activation ----------------------------------------------------------------------------


class ReasonLike(Protocol):
    """An attestor's vote as the join has it (`attestors.Vote`) or its request stores it."""

    @property
    def attestor(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...


class DiscoveryLike(Protocol):
    """The site's discovery entry a join matched (`discovery.DiscoveryMatch`)."""

    @property
    def entry_id(self) -> str: ...
    @property
    def hostname(self) -> str | None: ...
    @property
    def matched_by(self) -> tuple[str, ...]: ...


def variables(
    facts: MachineFactsRecord,
    *,
    token: JoinTokenRecord | None,
    verdicts: Iterable[tuple[str, str]],
    reasons: Iterable[ReasonLike],
    site_id: str,
    discovery: DiscoveryLike | None,
    now: datetime,
) -> Activation:
    """The activation of a join (docs/policy.md, "Variables"): what the machine reported
    (`facts`, as a join request or a machine stores it), its token (None: no longer stored), each
    attestor's verdict (`verdicts`: (attestor, verdict); an attestor not named admitted) and
    reasons, the site and its discovery entry (None: none matched, or none was looked up), and the
    time. Every documented field is present: a string the machine did not report is "", a list
    [], a number 0, so a rule never fails on a missing key."""
    verdict_of = dict(verdicts)
    codes: dict[str, list[str]] = {}
    messages: dict[str, list[str]] = {}
    for reason in reasons:
        codes.setdefault(reason.attestor, []).append(reason.code)
        messages.setdefault(reason.attestor, []).append(reason.message)
    return {
        "request": _request(facts),
        "token": _token(token),
        "attestors": {
            name: {
                "verdict": verdict_of.get(name, attestors.ADMIT),
                "code": (codes.get(name) or [""])[0],
                "codes": codes.get(name, []),
                "messages": messages.get(name, []),
            }
            for name in attestors.ATTESTORS
        },
        "site": {
            "id": site_id,
            "discovery": None
            if discovery is None
            else {
                "entryId": discovery.entry_id,
                "hostname": discovery.hostname or "",
                "matchedBy": list(discovery.matched_by),
            },
        },
        "now": now.astimezone(UTC),
    }


def _request(facts: MachineFactsRecord) -> dict[str, Any]:
    hardware, tpm, aws = facts.hardware, facts.tpm, facts.aws
    return {
        "hostname": facts.hostname,
        "os": facts.os,
        "arch": facts.arch,
        "machineFingerprint": facts.fingerprint,
        "cpuCount": facts.cpu_count,
        "memoryMb": facts.memory_mb,
        "gpu": list(facts.gpu),
        "gpuCount": facts.gpu_count,
        "gpuIds": list(facts.gpu_ids),
        "executor": facts.executor,
        "cpuMillicores": facts.cpu_millicores,
        "networkSlotPoolSize": facts.network_slot_pool_size,
        "containerStartConcurrency": facts.container_start_concurrency,
        "capabilities": list(facts.capabilities),
        "schedulable": facts.schedulable,
        "workerImage": facts.worker_image,
        "hardware": {
            "serialNumber": hardware.serial_number or "",
            "systemUuid": hardware.system_uuid or "",
            "macAddresses": list(hardware.mac_addresses or ()),
        },
        "tpm": {
            # An EK only named, not proved by credential activation, is public material anyone can
            # copy: it counts as none, as for the TPM attestor, so a rule listing EKs cannot be met
            # by naming one.
            "ekPublicKeySha256": (tpm.ek_public_key_sha256 or "") if tpm.activated else "",
            "activated": tpm.activated,
            "verifiedBy": tpm.verified_by,
            "manufacturer": tpm.manufacturer,
        },
        "preflight": [
            {"name": c.name, "ok": c.ok, "message": c.message, "severity": c.severity}
            for c in facts.preflight
        ],
        "aws": {"account": aws.account, "arn": aws.arn, "userId": aws.user_id, "instanceId": aws.instance_id},
    }


def _token(token: JoinTokenRecord | None) -> dict[str, Any] | None:
    if token is None:
        return None
    policy = token.attestation
    return {
        "id": token.token_id,
        "description": token.description,
        "siteToken": token.pool_id is None,
        "requireApproval": token.require_approval,
        "attestation": {
            "discovery": policy.discovery,
            "tpm": policy.tpm,
            "tpmTrust": policy.tpm_trust or "allow-list",
            "identity": policy.identity_policy,
            "tpmRejoin": policy.tpm_rejoin or "any",
            "aws": policy.aws is not None,
        },
    }


def sample_activation() -> Activation:
    """An activation of the documented shape with a value in every field, on which a rule is tried
    when saved: an expression that fails on it for its shape fails on every join."""
    facts = MachineFactsRecord(
        fingerprint="sample",
        hostname="gpu-sample-1",
        os="linux",
        arch="amd64",
        cpu_count=8,
        memory_mb=16384,
        gpu=("nvidia-a100",),
        gpu_count=1,
        gpu_ids=("GPU-0",),
        executor="sample",
        cpu_millicores=8000,
        network_slot_pool_size=1,
        container_start_concurrency=1,
        capabilities=("sample",),
        worker_image="sample:1",
    )
    facts = facts._replace(
        hardware=HardwareFactsRecord("SN-1", "00000000-0000-4000-8000-000000000001", ("02:00:00:00:00:01",)),
        tpm=TpmFactsRecord("0" * 64, activated=True, verified_by="allow-list", manufacturer="sample"),
        preflight=(PreflightCheckRecord("sample", True, "", "error"),),
        aws=AwsFactsRecord("123456789012", "arn:aws:iam::123456789012:role/sample", "AROASAMPLE", "i-0"),
    )
    activation = variables(
        facts,
        token=None,
        verdicts=[(name, attestors.ADMIT) for name in attestors.ATTESTORS],
        reasons=[attestors.Vote(name, attestors.DEFER, "sample", "sample") for name in attestors.ATTESTORS],
        site_id="sample",
        discovery=DiscoveryEntry("sample", "gpu-sample-1", ("serialNumber",)),
        now=datetime(2026, 1, 1, 12, tzinfo=UTC),
    )
    activation["token"] = {
        "id": "jt_sample",
        "description": "sample",
        "siteToken": False,
        "requireApproval": True,
        "attestation": {
            "discovery": "off",
            "tpm": "off",
            "tpmTrust": "allow-list",
            "identity": "any",
            "tpmRejoin": "any",
            "aws": False,
        },
    }
    return activation


class DiscoveryEntry(NamedTuple):
    """A site's discovery entry as a join matched it (the join keeps only these of the match)."""

    entry_id: str
    hostname: str | None
    matched_by: tuple[str, ...]


def rule_views(rules: Iterable[PolicyRuleLike]) -> list[dict[str, str]]:
    """Rules as the API shows and stores them."""
    return [{"name": r.name, "when": r.when, "decision": r.decision, "reason": r.reason} for r in rules]


def outcome_of(rules: Sequence[PolicyRuleLike], activation: Mapping[str, Any]) -> PolicyOutcome | None:
    """A join's evaluation of its pool's stored policy. The policy was compiled and tried when
    saved; if a rule no longer compiles (an engine upgrade), that rule defers, naming itself."""
    try:
        compiled = compile_policy(rules, trial=False)
    except PolicyInvalid as invalid:
        detail = invalid.details[0] if invalid.details else {}
        name, index = str(detail.get("rule", "")), _index_of(str(detail.get("field", "")))
        return PolicyOutcome(
            name, index, "defer", f"rule {name} could not be compiled: {invalid.message}", invalid.message
        )
    return evaluate(compiled, dict(activation))


def _index_of(field: str) -> int:
    found = re.search(r"\.(\d+)\.", field)
    return int(found[1]) if found else 0

"""Shared fixtures: one embedded moto server per test session, a fresh table per test created from
template.yaml's own definition, and the clock put back after each test."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import asdict

import pytest

from joinplane import aws, container
from joinplane_local import emulator as local_emulator
from joinplane_local import iam
from joinplane_local.seed import install_admin_key
from joinplane_local.template import Names, Template, create_resources, load

# Run first: `make test` hands whole files to its workers in this order (--no-loadscope-reorder),
# and a long file started last would leave the other worker idle until it ends. The files that take
# longest, longest first (pytest --durations=0 under make test's two workers: the agent's 200 s
# renewal, schemathesis's 30 s budget, the browser, the CLI end to end, ...).
LONGEST_FIRST = (
    "tests/cli/test_agent_service.py",
    "tests/contract/test_openapi_schemathesis.py",
    "tests/console/test_console_browser.py",
    "tests/cli/test_end_to_end.py",
    "tests/cli/test_tpm_join.py",
    "tests/clusters/test_accept_join_input.py",
    "tests/attestation/test_discovery.py",
)


# Every DynamoDB and KMS call a function's handler makes is checked against that function's policy
# in template.yaml, as IAM would (joinplane_local.iam): a write the policy forbids fails here, not
# only once deployed.
ENFORCEMENT = iam.install()


@pytest.fixture(autouse=True)
def _iam_refusals() -> Iterator[None]:
    """A refusal fails the test that caused it, even when the code swallowed the AccessDenied (a
    best-effort call). Tests of the refusals themselves take them first (`ENFORCEMENT.take_denials()`)."""
    ENFORCEMENT.take_denials()
    yield
    refused = ENFORCEMENT.take_denials()
    if refused:
        pytest.fail("IAM would refuse:\n" + "\n\n".join(dict.fromkeys(refused)), pytrace=False)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """JOINPLANE_IAM_RECORD=<dir> (`make test` sets it): each process writes what each function did;
    the process that ran the session (xdist's controller, or the only one) then lists the grants of
    template.yaml that no call used, i.e. wider than the code was seen to need, and fails the run."""
    folder = os.environ.get("JOINPLANE_IAM_RECORD")
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    if ENFORCEMENT.calls:
        with open(os.path.join(folder, f"calls-{os.getpid()}.json"), "w") as out:
            json.dump([asdict(call) for call in ENFORCEMENT.calls], out)
    if hasattr(session.config, "workerinput"):
        return
    calls = set()
    for name in sorted(os.listdir(folder)):
        if name.startswith("calls-"):
            with open(os.path.join(folder, name)) as recorded:
                calls |= {
                    iam.Call(**{**c, "attributes": tuple(c["attributes"])}) for c in json.load(recorded)
                }
    unused = iam.unused_grants(ENFORCEMENT.policies()[1], calls)
    with open(os.path.join(folder, "unused-grants.txt"), "w") as out:
        out.write("".join(f"{line}\n" for line in unused))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if unused:
        # A grant no call needed is as much a finding as a call no grant allows: the role is wider
        # than the code. Fails the run, which only `make test` records (the whole suite).
        if reporter is not None:
            reporter.write_line(
                f"IAM: {len(unused)} grants of template.yaml no function used in this run "
                "(remove them, or test the code that needs them through its handler):"
            )
            for line in unused:
                reporter.write_line(f"  {line}")
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONGEST_FIRST)))


@pytest.fixture(scope="session")
def emulator() -> Iterator[local_emulator.Emulator]:
    local_emulator.use_fake_credentials()
    running = local_emulator.start()
    os.environ["AWS_ENDPOINT_URL"] = running.endpoint_url
    container.reset()
    yield running
    running.stop()


@pytest.fixture
def table(emulator: local_emulator.Emulator) -> Iterator[str]:
    suffix = uuid.uuid4().hex[:10]
    names = Names(physical={"Table": f"jp-{suffix}", "EventBus": f"jp-bus-{suffix}"})
    create_resources(Template(load(), names), aws.client)
    os.environ["TABLE_NAME"] = names.physical["Table"]
    os.environ["EVENT_BUS_NAME"] = names.physical["EventBus"]
    # What a warm container cached belongs to the old table; the clients still reach the same emulator.
    container.reset(keep_clients=True)
    yield names.physical["Table"]
    container.reset(keep_clients=True)  # the clock a test moved goes back too


@pytest.fixture
def admin_key(table: str) -> str:
    """A platform admin of tenant `acme`."""
    return install_admin_key("acme", None, "test admin")

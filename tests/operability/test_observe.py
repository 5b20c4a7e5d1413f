"""The decision log's own guarantees: secrets never written, one invocation's ids never on
another's lines, a dry run decides nothing, every metric has a unit."""

from __future__ import annotations

from joinplane import credentials, observe
from tests.support import release_together
from tests.support.logs import counted, log_lines


def test_a_secret_shaped_value_is_replaced_and_ids_are_kept(capsys) -> None:
    # Given a secret as minted, and ids that share its prefix and ULID
    secret = credentials.mint("jpt", "01hzx3r5v7q9s2t4w6y8a0c2e4")
    # When a caller mistakenly logs the secret among ids
    with observe.bound(correlationId="c1"):
        observe.log("INFO", "oops", tokenId="jtok_01hzx3r5v7q9s2t4w6y8a0c2e4", detail=f"token {secret} seen")
    # Then the secret is replaced, the ids are as given
    out = capsys.readouterr().out
    [line] = log_lines(out)
    assert secret not in out
    assert line["detail"] == "token [redacted] seen"
    assert line["tokenId"] == "jtok_01hzx3r5v7q9s2t4w6y8a0c2e4"


def test_concurrent_invocations_keep_their_own_ids(capsys) -> None:
    # Given 16 invocations in threads at once (the local runtime runs functions in-process)
    def invocation(i: int) -> None:
        with observe.bound(correlationId=f"req-{i}"):
            observe.note(tenantId=f"tenant-{i}")
            observe.decision("join admitted", "Joins", "admitted", machineId=f"m-{i}")

    # When they all decide together
    release_together(invocation, 16)
    # Then every line names only its own request, tenant and machine
    lines = log_lines(capsys.readouterr().out)
    assert len(lines) == 16
    for line in lines:
        i = line["correlationId"].removeprefix("req-")
        assert (line["tenantId"], line["machineId"]) == (f"tenant-{i}", f"m-{i}")


def test_nothing_bound_outside_an_invocation_and_note_does_not_leak(capsys) -> None:
    # Given a note made outside any invocation (e.g. a scheduled job) and one inside
    observe.note(tenantId="stray")
    with observe.bound(correlationId="c2"):
        observe.note(poolId="gpu")
    # When a line is written afterwards
    observe.log("INFO", "after")
    # Then it carries neither
    [line] = log_lines(capsys.readouterr().out)
    assert "tenantId" not in line and "poolId" not in line and "correlationId" not in line


def test_a_dry_run_logs_its_outcome_but_counts_nothing(capsys) -> None:
    with observe.bound(correlationId="c3"):
        observe.note(dryRun=True)
        observe.decision("join refused", "Joins", "refused", code="INVALID_ARGUMENT")
    out = capsys.readouterr().out
    [line] = log_lines(out)
    assert line["dryRun"] is True and line["outcome"] == "refused"
    assert counted(out) == []


def test_every_metric_is_counted_with_its_unit(capsys) -> None:
    for metric in observe.METRICS:
        observe.count(metric, 2, outcome="x")
    assert [(name, value) for name, _, value in counted(capsys.readouterr().out)] == [
        (name, 2.0) for name in observe.METRICS
    ]

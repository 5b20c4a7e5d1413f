"""The agent's directory is replaced whole or not at all, whatever moment a crash picks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from joinplane_cli import statedir


def _files(**names: str) -> dict[str, statedir.Content]:
    return {
        name.replace("_", "."): statedir.content(name.replace("_", "."), text) for name, text in names.items()
    }


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.parent.iterdir() if p.name.startswith(f".{directory.name}."))


def _pending(tmp_path: Path) -> Path:
    """A machine waiting for approval: DIR holds only its key and CSR."""
    directory = tmp_path / "machine"
    statedir.ensure(directory)
    statedir.write_file(directory, "machine.key", statedir.content("machine.key", "OLD KEY"))
    statedir.write_file(directory, "machine.csr", statedir.content("machine.csr", "OLD CSR"))
    return directory


ADMITTED = _files(
    machine_key="KEY",
    machine_crt="CERT",
    ca_crt="CA",
    bootstrap_json="{}",
    machine_token="jpm_secret",
    machine_json="{}",
)


def _crash_on(count: int, real: Callable[..., Any]) -> Callable[..., Any]:
    calls = 0

    def flaky(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == count:
            raise OSError(5, "simulated crash")
        return real(*args, **kwargs)

    return flaky


def test_a_commit_replaces_the_directory_whole_with_the_right_modes(tmp_path: Path) -> None:
    # Given
    directory = _pending(tmp_path)

    # When
    statedir.commit(directory, ADMITTED)

    # Then
    assert _snapshot(directory) == {name: item.data for name, item in ADMITTED.items()}
    modes = {p.name: p.stat().st_mode & 0o777 for p in directory.iterdir()}
    assert modes == {
        "machine.key": 0o600,
        "machine.crt": 0o644,
        "ca.crt": 0o644,
        "bootstrap.json": 0o600,
        "machine.token": 0o600,
        "machine.json": 0o600,
    }
    assert directory.stat().st_mode & 0o777 == 0o700
    assert _leftovers(directory) == []


def test_a_crash_between_files_leaves_the_old_directory_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pending machine, and a crash while the third file is written
    directory = _pending(tmp_path)
    before = _snapshot(directory)
    monkeypatch.setattr(statedir, "_write", _crash_on(3, statedir._write))

    # When
    with pytest.raises(OSError, match="simulated crash"):
        statedir.commit(directory, ADMITTED)

    # Then DIR is exactly what it was; the half-written copy is beside it, never in it
    assert _snapshot(directory) == before
    assert _leftovers(directory) == [".machine.partial"]
    # And the next run discards the half-written copy and keeps the key
    monkeypatch.undo()
    assert statedir.recover(directory) == "discarded an incomplete write"
    assert _snapshot(directory) == before
    assert _leftovers(directory) == []


def test_a_crash_between_the_renames_is_completed_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a crash after DIR was moved aside and before the new copy was moved in
    directory = _pending(tmp_path)
    monkeypatch.setattr(statedir.os, "rename", _crash_on(3, os.rename))
    with pytest.raises(OSError, match="simulated crash"):
        statedir.commit(directory, ADMITTED)
    monkeypatch.undo()
    assert not directory.exists()
    assert _leftovers(directory) == [".machine.new", ".machine.old"]

    # When
    done = statedir.recover(directory)

    # Then the complete new identity is in place: the server already admitted it
    assert done == "completed an interrupted write of the joined identity"
    assert _snapshot(directory) == {name: item.data for name, item in ADMITTED.items()}
    assert _leftovers(directory) == []


def test_a_crash_before_the_old_directory_moved_also_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a crash right after the new copy became complete
    directory = _pending(tmp_path)
    monkeypatch.setattr(statedir.os, "rename", _crash_on(2, os.rename))
    with pytest.raises(OSError):
        statedir.commit(directory, ADMITTED)
    monkeypatch.undo()
    assert _snapshot(directory)["machine.key"] == b"OLD KEY"

    # When
    statedir.recover(directory)

    # Then
    assert _snapshot(directory)["machine.token"] == b"jpm_secret"
    assert _leftovers(directory) == []


def test_an_old_copy_alone_is_restored(tmp_path: Path) -> None:
    # Given DIR missing and only its previous contents beside it
    directory = _pending(tmp_path)
    before = _snapshot(directory)
    os.rename(directory, tmp_path / ".machine.old")

    # When
    done = statedir.recover(directory)

    # Then
    assert done == "restored the previous contents"
    assert _snapshot(directory) == before


def test_a_directory_with_foreign_files_is_refused_rather_than_wiped(tmp_path: Path) -> None:
    # Given
    directory = tmp_path / "machine"
    directory.mkdir()
    (directory / "notes.txt").write_text("mine")

    # When / Then
    with pytest.raises(FileExistsError, match=r"notes\.txt"):
        statedir.ensure(directory)


def test_two_agents_cannot_hold_one_directory(tmp_path: Path) -> None:
    # Given
    directory = tmp_path / "machine"

    # When / Then
    with statedir.locked(directory), pytest.raises(statedir.Busy), statedir.locked(directory):
        pass


def test_a_mount_point_is_refused_before_anything_is_asked_or_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a directory that is a mount point (a container's volume mounted at --dir): os.path.ismount
    # is what the check asks, so the test says it is one, as mounting needs privileges tests lack
    directory = tmp_path / "volume"
    directory.mkdir()
    real = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == directory or real(path))
    # When joinplane would make it its directory, or replace it whole
    for step in (lambda: statedir.ensure(directory), lambda: statedir.commit(directory, {})):
        # Then it is refused with the way out, and nothing is written beside or inside it
        with pytest.raises(OSError, match=r"is a mount point.*--dir .*volume/identity"):
            step()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["volume"]
    assert list(directory.iterdir()) == []

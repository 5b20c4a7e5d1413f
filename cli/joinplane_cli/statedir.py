"""The agent's directory (`--dir`): its key before admission, its whole identity after.

A machine must never be left with half an identity (a certificate without its key, a token from one
join beside a certificate from another), whatever moment a crash, a power cut or Ctrl-C picks.
So the directory is only ever replaced whole:

1. every file is written into `.<name>.partial` beside DIR, each fsynced, then the directory;
2. `.<name>.partial` is renamed `.<name>.new`: from here on the new identity is complete on disk;
3. DIR (if any) is renamed `.<name>.old`, then `.<name>.new` is renamed DIR, and the parent fsynced;
4. `.<name>.old` is removed.

`recover()`, run before anything reads DIR, finishes or undoes whatever step 1-4 a crash stopped
in: a `.partial` is discarded; a `.new` is complete, so it is moved into place (the server already
admitted the machine with the token it holds); an `.old` is restored only if DIR is missing.

Before admission DIR holds just the key and CSR, each written by write-to-temp-and-rename, so a
retry after any crash finds either no key (and makes one) or the whole key.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

KEY = "machine.key"
CSR = "machine.csr"
CERTIFICATE = "machine.crt"
CA = "ca.crt"
BOOTSTRAP = "bootstrap.json"
TOKEN = "machine.token"
MACHINE = "machine.json"
OURS = frozenset({KEY, CSR, CERTIFICATE, CA, BOOTSTRAP, TOKEN, MACHINE})
PUBLIC = frozenset({CERTIFICATE, CA, CSR})  # everything else is a secret or says where they are


@dataclass(frozen=True)
class Content:
    data: bytes
    mode: int


def content(name: str, data: str | bytes) -> Content:
    return Content(data.encode() if isinstance(data, str) else data, 0o644 if name in PUBLIC else 0o600)


class Busy(Exception):
    """Another joinplane process holds the directory."""


def _siblings(directory: Path) -> tuple[Path, Path, Path]:
    parent, name = directory.parent, directory.name
    return parent / f".{name}.partial", parent / f".{name}.new", parent / f".{name}.old"


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write(path: Path, item: Content) -> None:
    # O_EXCL: a file of ours is only ever created fresh, never written through someone's symlink.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, item.mode)
    try:
        os.fchmod(descriptor, item.mode)  # the umask must not widen or narrow what we asked for
        view = memoryview(item.data)
        while view:
            view = view[os.write(descriptor, view) :]
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def _no_interrupt() -> Iterator[None]:
    """Hold Ctrl-C until the renames are done: the recovery would cope, but a person who pressed it
    right after "admitted" should still find the identity in DIR, not beside it."""
    blocked = hasattr(signal, "pthread_sigmask")
    if blocked:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def write_file(directory: Path, name: str, item: Content) -> None:
    """One file into an existing directory, atomically (temp file, fsync, rename, fsync dir)."""
    temporary = directory / f".{name}.tmp"
    _remove(temporary)
    _write(temporary, item)
    os.replace(temporary, directory / name)
    _fsync_dir(directory)


def _not_a_mount_point(directory: Path) -> None:
    # DIR is replaced whole, by renaming a sibling over it: a mount point cannot be renamed (EBUSY),
    # so a machine would be admitted and its identity never land. Refused before anything is asked.
    if directory.is_dir() and os.path.ismount(directory):
        raise OSError(
            f"{directory} is a mount point, and joinplane replaces its directory whole (a rename) "
            "when a machine is admitted or renewed: use a directory inside it, "
            f"e.g. --dir {directory / 'identity'}"
        )


def ensure(directory: Path) -> None:
    """DIR exists, is ours (0700), holds nothing we did not write, and is not a mount point."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _not_a_mount_point(directory)
    if directory.is_symlink() or not directory.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory")
    foreign = sorted(p.name for p in directory.iterdir() if p.name not in OURS and not p.name.startswith("."))
    if foreign:
        # The directory is replaced whole on admission: anything else in it would be lost.
        raise FileExistsError(
            f"{directory} holds files joinplane did not write ({', '.join(foreign[:5])}); "
            "use an empty or new directory"
        )
    os.chmod(directory, 0o700)


def recover(directory: Path) -> str | None:
    """Finish or undo an interrupted `commit`; says what it did, if anything."""
    partial, new, old = _siblings(directory)
    done = None
    if partial.exists():
        _remove(partial)
        done = "discarded an incomplete write"
    if new.exists():
        if directory.exists():
            _remove(old)
            os.rename(directory, old)
        os.rename(new, directory)
        _fsync_dir(directory.parent)
        done = "completed an interrupted write of the joined identity"
    elif old.exists() and not directory.exists():
        os.rename(old, directory)
        _fsync_dir(directory.parent)
        done = "restored the previous contents"
    if old.exists():
        _remove(old)
    return done


def commit(directory: Path, files: Mapping[str, Content]) -> None:
    """Replace DIR by exactly `files`, all or nothing (see the module docstring)."""
    _not_a_mount_point(directory)
    partial, new, old = _siblings(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    _remove(partial)
    os.mkdir(partial, 0o700)
    for name, item in files.items():
        _write(partial / name, item)
    _fsync_dir(partial)
    with _no_interrupt():
        _remove(new)
        os.rename(partial, new)
        _fsync_dir(directory.parent)
        if directory.exists():
            _remove(old)
            os.rename(directory, old)
        os.rename(new, directory)
        _fsync_dir(directory.parent)
    _remove(old)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """One agent per DIR: two `join --wait` in one directory would race to replace it."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    lock_path = directory.parent / f".{directory.name}.lock"
    descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as held:
            if held.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise Busy(f"another joinplane process is using {directory}") from None
            raise
        yield
    finally:
        os.close(descriptor)


def read(directory: Path, name: str) -> str | None:
    try:
        return (directory / name).read_text()
    except FileNotFoundError:
        return None

"""One kind of export per folder at a time.

Shards of one export may write into one ``--out`` together (the README says so); an export with
other settings or another input must not, or its files and the first one's manifest would
disagree. Each writer holds a shared lock on a file named after its run (settings, and a hash of
every input text);
a newcomer, under a short lock on the folder itself, refuses if a file of another run is still locked, and
removes those no live process holds. Locks are advisory (``flock``) and vanish with their process,
so a killed run never blocks the next. Without ``fcntl`` (Windows) there is no locking.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from ..errors import InputError
from ..interrupts import on_stop

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_WRITER = ".attnviz.{}.writer"


@contextmanager
def folder_lock(out_dir: Path, run: str) -> Iterator[None]:
    """Hold ``out_dir`` for the run identified by ``run`` (its settings fingerprint and input hash).
    The folder itself is the short-lived guard; the writer file goes with the last writer of its run."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover (Windows)
        yield
        return
    mine = out_dir / _WRITER.format(hashlib.sha256(run.encode()).hexdigest()[:16])
    with _guard(out_dir, fcntl):  # while the writers are looked at
        for other in sorted(out_dir.glob(_WRITER.format("*"))):
            if other.name != mine.name:
                _claim_stale(other, out_dir, fcntl)
        held = _open(mine)
        fcntl.flock(held, fcntl.LOCK_SH)

    def release_on_terminate() -> None:  # SIGTERM ends the process now: the writer file goes if this is the last
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            mine.unlink(missing_ok=True)
        except OSError:
            pass

    try:
        with on_stop(release_on_terminate):
            yield
    finally:
        with _guard(out_dir, fcntl):
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the last writer of this run?
                mine.unlink(missing_ok=True)
            except BlockingIOError:
                pass  # another shard of this run still writes; it removes the file
            finally:
                os.close(held)


@contextmanager
def _guard(out_dir: Path, fcntl: ModuleType) -> Iterator[None]:
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o666)
    except OSError as exc:
        if os.path.islink(path):
            raise InputError(f"{path} is a symbolic link; attnviz never writes through links in [[out]]. "
                             "Remove it") from None
        raise InputError(f"cannot lock {path.parent} for the export: {exc.strerror}") from None


def _claim_stale(other: Path, out_dir: Path, fcntl: ModuleType) -> None:
    """Remove another run's writer file if no process holds it; refuse if one does."""
    fd = _open(other)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"another attnviz export, with other settings or another input, is writing to "
                             f"[[out={out_dir}]]; wait for it to finish, or give this one its own folder") from None
        other.unlink(missing_ok=True)
    finally:
        os.close(fd)

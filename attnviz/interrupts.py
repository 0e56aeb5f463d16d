"""Ctrl-C and SIGTERM as attnviz handles them: the state the entry point, the commands and the server share.

A leaf (standard library only), so the console script installs it before anything else imports,
and ``cli/`` and ``serve`` read it without importing the entry point that imports them.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

INTERRUPTED = False  # set by Ctrl-C, even if a library swallows the KeyboardInterrupt it raised
KEPT = ""  # what the run had kept when Ctrl-C came (:func:`on_stop`'s note then)
LINE = "attnviz: error: interrupted\n"
TERMINATED = "attnviz: error: terminated\n"


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    global INTERRUPTED, KEPT
    INTERRUPTED = True
    KEPT = KEPT or stop_note()  # said by the line that reports it, after the blocks have unwound
    if _importing(frame):  # the same line a command says once its blocks have unwound, what was kept too
        _exit_now(f"attnviz: error: interrupted; {KEPT}\n" if KEPT else LINE)
    raise KeyboardInterrupt


def _importing(frame: FrameType | None) -> bool:
    """Whether the main thread is inside an ``import`` (importlib's frames are on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


_CLEANUPS: list[Callable[[], None]] = []  # what a SIGTERM must undo now (it ends the process without unwinding)


def always_on_stop(cleanup: Callable[[], None]) -> None:
    """``cleanup`` runs on every SIGTERM of this process, first (fileio's temporary files: registered by
    fileio itself, so this leaf imports nothing of attnviz)."""
    _CLEANUPS.insert(0, cleanup)
_NOTES: list[str | None] = []  # what the line that reports a stop says was kept (the outermost that says)


@contextmanager
def on_stop(cleanup: Callable[[], None] | None = None, *, note: str | None = None) -> Iterator[None]:
    """While the block runs: a SIGTERM, which ends the process at once, first calls ``cleanup`` (remove
    a scratch folder, release a lock); Ctrl-C unwinds through the block, whose own ``finally`` cleans up.
    Either way the line that reports the stop adds ``note`` (what was kept: "rerun to resume"); an
    outer block's note wins (atlas's scratch export keeps nothing, whatever the export inside says)."""
    if cleanup is not None:
        _CLEANUPS.append(cleanup)
    _NOTES.append(note)
    try:
        yield
    finally:
        _NOTES.pop()
        if cleanup is not None:
            _CLEANUPS.remove(cleanup)


def stop_note() -> str:
    """What the run now going on has kept if it stops here ("" when nothing is said)."""
    return next((note for note in _NOTES if note is not None), "")


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (``kill``, a scheduler's time limit): the temporary files being written are removed, as
    after Ctrl-C, and what the run registered to undo (:func:`on_stop`), then one line and exit 143.
    What is finished stays (an export resumes from it), and the line says so."""
    import contextlib

    for cleanup in reversed(_CLEANUPS):
        with contextlib.suppress(Exception):
            cleanup()
    note = stop_note()
    _exit_now(TERMINATED if not note else f"attnviz: error: terminated; {note}\n", 128 + signal.SIGTERM)


def install_handlers() -> None:
    """Ctrl-C and SIGTERM as attnviz handles them, where nobody else has set a handler."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_terminate)


def _exit_now(line: str = LINE, code: int = 130) -> None:
    """The one line and the exit code, now: what was printed so far is flushed, nothing more runs."""
    import contextlib

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # interrupted in the middle of a write to it: a reentrant flush fails
            stream.flush()
    try:
        os.write(2, line.encode())
    finally:
        os._exit(code)


def interrupted() -> bool:
    """Whether Ctrl-C reached this process (a half-imported module may then fail in odd ways)."""
    return INTERRUPTED


def handled() -> None:
    """Ctrl-C was the expected way to stop (``attnviz serve``): the command ends normally."""
    global INTERRUPTED
    INTERRUPTED = False

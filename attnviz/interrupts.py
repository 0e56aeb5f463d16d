"""Ctrl-C and SIGTERM as attnviz handles them: the state the entry point, the commands and the server share.

A leaf (standard library only), so the console script installs it before anything else imports,
and ``cli/`` and ``serve`` read it without importing the entry point that imports them.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED = False  # set by Ctrl-C, even if a library swallows the KeyboardInterrupt it raised
LINE = "attnviz: error: interrupted\n"
TERMINATED = "attnviz: error: terminated\n"


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    global INTERRUPTED
    INTERRUPTED = True
    if _importing(frame):
        _exit_now()
    raise KeyboardInterrupt


def _importing(frame: FrameType | None) -> bool:
    """Whether the main thread is inside an ``import`` (importlib's frames are on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (``kill``, a scheduler's time limit): the temporary files being written are removed, as
    after Ctrl-C, then one line and exit 143. What is finished stays (an export resumes from it)."""
    from .fileio import remove_own_temporaries

    remove_own_temporaries()
    _exit_now(TERMINATED, 128 + signal.SIGTERM)


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

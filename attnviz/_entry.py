"""The ``attnviz`` console script and ``python -m attnviz``: nothing imported before this guard.

Ctrl-C while the command's modules are still importing (typer, torch: the first second or so)
raises KeyboardInterrupt outside any command; caught here, it is the same one line as later.

Ctrl-C in the middle of an import stops the process at once, with that line and exit 130: a
KeyboardInterrupt raised there is swallowed by some libraries, or thrown through torch's C++
(``terminate called after throwing an instance of 'pybind11::error_already_set'``, SIGABRT).
No file of ours is being written while a module imports; ``fileio.atomic_write`` never leaves
half a file under its final name in any case.
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


def main() -> None:
    try:
        install_handlers()
        from .cli import main as run

        run()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # said once; a second Ctrl-C while exiting changes nothing
        sys.stderr.write(LINE)
        sys.stderr.flush()
        raise SystemExit(130) from None
    finally:
        # Exiting (torch's and matplotlib's clean-up can take a moment): a Ctrl-C now must neither print a
        # traceback nor kill the process by the signal after its one line was said.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if INTERRUPTED:
            # A KeyboardInterrupt that escaped an exec() of a string (dataclasses and namedtuple build their
            # methods so) leaves CPython's "unhandled KeyboardInterrupt" flag set, and `python -m attnviz`
            # then kills itself by SIGINT after its exit 130. An exec of a string clears that flag.
            exec("")

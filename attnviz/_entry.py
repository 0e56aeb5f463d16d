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

import gc
import signal
import sys

from . import interrupts, threads
from .interrupts import LINE, install_handlers

__all__ = ["install_handlers", "main"]


def main() -> None:
    try:
        install_handlers()
        threads.configure()  # before torch or a BLAS library starts its threads
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
        # What the command made goes with the process: the interpreter's last collection need not walk it
        # (0.4 s after a 2,048-token GPT-2 export, a model's and torch's objects).
        gc.freeze()
        if interrupts.INTERRUPTED:
            # A KeyboardInterrupt that escaped an exec() of a string (dataclasses and namedtuple build their
            # methods so) leaves CPython's "unhandled KeyboardInterrupt" flag set, and `python -m attnviz`
            # then kills itself by SIGINT after its exit 130. An exec of a string clears that flag.
            exec("")

"""The ``attnviz`` console script and ``python -m attnviz``: nothing imported before this guard.

Ctrl-C while the command's modules are still importing (typer, torch: the first second or so)
raises KeyboardInterrupt outside any command; caught here, it is the same one line as later.
"""

from __future__ import annotations

import signal
import sys

INTERRUPTED = False  # set by Ctrl-C, even if a library swallows the KeyboardInterrupt it raised


def _on_interrupt(signum: int, frame: object) -> None:
    global INTERRUPTED
    INTERRUPTED = True
    raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether Ctrl-C reached this process (a half-imported module may then fail in odd ways)."""
    return INTERRUPTED


def handled() -> None:
    """Ctrl-C was the expected way to stop (``attnviz serve``): the command ends normally."""
    global INTERRUPTED
    INTERRUPTED = False


def main() -> None:
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_interrupt)
        from .cli import main as run

        run()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # said once; a second Ctrl-C while exiting changes nothing
        sys.stderr.write("attnviz: error: interrupted\n")
        sys.stderr.flush()
        raise SystemExit(130) from None
    finally:
        # Exiting (torch's and matplotlib's clean-up can take a moment): a Ctrl-C now must neither print a
        # traceback nor kill the process by the signal after its one line was said.
        signal.signal(signal.SIGINT, signal.SIG_IGN)

"""Running attnviz as users do, in fresh processes, at the cost of as few start-ups as a test needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_EACH = """
import json, sys
from attnviz.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["attnviz", *argv]
    try:
        main()
        codes.append(0)
    except SystemExit as exit:
        codes.append(exit.code or 0)
    for stream in (sys.stdout, sys.stderr):
        stream.write("\\n@@@\\n")
        stream.flush()
print(json.dumps(codes))
"""


SEPARATOR = "@@@"  # written to stdout and stderr after each command of run_each's process


def each_command(commands: list[list[str]]) -> list[str]:
    """The argv of a fresh process that runs attnviz ``commands`` one after the other, writing
    :data:`SEPARATOR` on a line of its own after each, and a JSON list of their exit codes at the end."""
    return [sys.executable, "-c", _EACH, json.dumps(commands)]


def run_each(commands: list[list[str]], env: dict[str, str]) -> list[tuple[int, str, str]]:
    """Several attnviz command lines, one after the other in one fresh process (one start-up, not
    one each): (exit code, stdout, stderr) of each."""
    done = subprocess.run(each_command(commands), capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=180)
    *outs, codes = done.stdout.split("\n@@@\n")
    errs = done.stderr.split("\n@@@\n")
    assert done.returncode == 0 and len(outs) == len(commands), done.stderr
    return list(zip(json.loads(codes), outs, errs, strict=False))


def interruptible() -> None:
    """``preexec_fn`` for a process a test will Ctrl-C: SIGINT as a terminal's shell gives it (caught
    by default, not blocked), whatever the test runner inherited (a runner started in the background
    or by a CI service may ignore SIGINT, and children inherit that)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])

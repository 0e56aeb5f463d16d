"""Running attnviz as users do, in fresh processes, at the cost of as few start-ups as a test needs."""

from __future__ import annotations

import contextlib
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


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (children, their children, ...), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone since the listing
            parents.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _browsers() -> list[int]:
    """This test process's chromium processes (the browser, its zygotes and its pages' renderers)."""
    found = []
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"chromium" in cmdline.read().split(b"\0", 1)[0]:
                    found.append(pid)
        except OSError:
            continue
    return found


def _threads(pids: list[int]) -> list[int]:
    """Every thread of ``pids`` (on Linux a niceness is a thread's, not a process's)."""
    found = []
    for pid in pids:
        try:
            found.extend(int(thread) for thread in os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue  # gone since the listing
    return found


def _set_niceness(thread: int, niceness: int) -> None:
    with contextlib.suppress(OSError):  # gone, or not permitted (not root): it runs at the priority it had
        os.setpriority(os.PRIO_PROCESS, thread, niceness)


@contextlib.contextmanager
def browser_ahead(niceness: int = -10):
    """The browser's threads run ahead of the suite's other work while the block runs (at ``niceness``, or the
    higher priority chromium gave a thread itself; pages opened meanwhile inherit it from the zygote), then at
    the priority each had. For a test that times what a page does, not what the machine lets it do: a 70 ms task
    of the page, descheduled while the other worker and its processes held both cores, once measured 201 ms.
    Raising a priority needs root (CI's case); without it, nothing changes."""
    saved = {}
    for thread in _threads(_browsers()):
        try:
            saved[thread] = os.getpriority(os.PRIO_PROCESS, thread)
        except OSError:
            continue
        _set_niceness(thread, min(saved[thread], niceness))
    try:
        yield
    finally:
        for thread in _threads(_browsers()):  # a thread started meanwhile inherited the raised priority
            try:
                if thread in saved or os.getpriority(os.PRIO_PROCESS, thread) == niceness:
                    _set_niceness(thread, saved.get(thread, 0))
            except OSError:
                continue  # gone

"""Progress of a long command (export's items, needle's cells): a bar at a terminal; elsewhere (a log file, a
cluster job) a plain line on stderr now and then. Both say the items done, items per second and the time left."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeRemainingColumn
from rich.text import Text


class RateColumn(ProgressColumn):
    """Items per second over the recent past (rich's own estimate)."""

    def __init__(self, unit: str = "items") -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.speed
        return Text(f"– {self.unit}/s" if speed is None else f"{speed:.2f} {self.unit}/s", style="cyan")


PLAIN_INTERVAL = 30.0  # seconds between plain progress lines when the output is not a terminal


def _duration(seconds: float) -> str:
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@contextmanager
def plain_progress(stream: TextIO, *, interval: float | None = None, clock: Callable[[], float] = time.monotonic,
                   doing: str = "export", unit: str = "items",
                   ) -> Iterator[tuple[Callable[[int, int], None], Callable[[], None]]]:
    """Yield ``(start(total, already_done), advance())`` that write a line such as
    ``attnviz: export 120/1000 items (12%), 4.20 items/s, ETA 3:29`` to ``stream`` every ``interval`` seconds
    (``doing`` and ``unit``: what the command does, and to what)."""
    every = PLAIN_INTERVAL if interval is None else interval
    state = {"total": 0, "done": 0, "first": 0, "since": clock(), "last": clock()}

    def start(total: int, done: int) -> None:
        state.update(total=total, done=done, first=done, since=clock(), last=clock())

    def advance() -> None:
        state["done"] += 1
        now = clock()
        if now - state["last"] < every:
            return  # (no forced last line: the command's summary says how it ended)
        state["last"] = now
        total, done = state["total"], state["done"]
        rate = (done - state["first"]) / max(now - state["since"], 1e-9)
        eta = _duration((total - done) / rate) if rate > 0 and done < total else "0:00"
        share = f" ({100 * done // total}%)" if total else ""
        stream.write(f"attnviz: {doing} {done}/{total} {unit}{share}, {rate:.2f} {unit}/s, ETA {eta}\n")
        stream.flush()

    yield start, advance


@contextmanager
def export_progress(console: Console, *, enabled: bool, doing: str = "export", label: str = "exporting",
                    unit: str = "items") -> Iterator[tuple[Callable[[int, int], None], Callable[[], None]]]:
    """Yield ``(start(total, already_done), advance())``: a bar when ``console`` is a terminal, else plain
    lines on stderr every :data:`PLAIN_INTERVAL` seconds; nothing when not ``enabled`` (``--quiet``).
    ``label`` heads the bar and ``doing`` the plain lines (what the command does), ``unit`` is what it counts."""
    if enabled and not console.is_terminal:
        import sys

        with plain_progress(sys.stderr, doing=doing, unit=unit) as callbacks:
            yield callbacks
        return
    columns = [TextColumn(label), BarColumn(), MofNCompleteColumn(), RateColumn(unit), TextColumn("ETA"),
               TimeRemainingColumn()]
    with Progress(*columns, console=console, disable=not enabled) as progress:
        task = progress.add_task(doing, total=None)

        def start(total: int, done: int) -> None:
            progress.update(task, total=total, completed=done)

        def advance() -> None:
            progress.advance(task)

        yield start, advance

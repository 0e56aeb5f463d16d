"""The processes that draw export's images, and what they run.

Kept apart from the pipeline (run.py) and light to import: a drawing process starts by importing
this module to find :func:`render_task`, so it loads matplotlib but never torch (a second or two,
and a few hundred MB, less per process).
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from ..errors import AttnvizWarning
from .settings import ExportSettings

FIGURE_RENDERER = "attnviz.render.image:render_image"  # the registry's renderer of labelled figures
_drawer: Any = None  # this process's FigureDrawer: the figure of the last view, kept for the next


def render_task(view: Any, path: str, style: str = "figure") -> str:
    """Run in a worker process: draw one image (its missing-glyph warnings were given by the parent).

    Labelled figures are drawn by one :class:`~attnviz.render.image.FigureDrawer` per process, so
    the layers of a text, which share a layout, reuse one figure (the same files, drawn faster)."""
    from ..render.registry import TILES, for_path

    if style == "tiles":
        return str(TILES.render(view, path))
    fmt = for_path(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if fmt.renderer == FIGURE_RENDERER:
            global _drawer
            if _drawer is None:
                from ..render.image import FigureDrawer

                _drawer = FigureDrawer(keep=4)
            return str(_drawer.draw(view, path))
        return str(fmt.render(view, path))


def render_tasks(tasks: list[tuple[Any, str]], style: str = "figure") -> list[str]:
    """Run in a worker process: draw one text's images in turn (its layers share one figure)."""
    return [render_task(view, path, style) for view, path in tasks]


def release_figures() -> None:
    """Let go of the figure kept by :func:`render_task` in this process."""
    global _drawer
    _drawer = None


def worker_count(jobs: int, items: int, cpus: int | None = None) -> int:
    """Processes worth starting to draw images: no more than asked, than CPUs, or than items to draw
    (each costs a second or more to start, and memory for its own matplotlib)."""
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(jobs, cpus, items))


@contextmanager
def workers(settings: ExportSettings, items: int) -> Iterator[ProcessPoolExecutor | None]:
    if settings.jobs < 2 or not settings.image_formats or settings.style == "tiles":
        try:
            yield None  # images are drawn in this process
        finally:
            release_figures()
        return
    count = worker_count(settings.jobs, items)
    if count < settings.jobs:
        warnings.warn(f"jobs = {settings.jobs}: drawing with {count} processes (this machine has "
                      f"{worker_count(settings.jobs, settings.jobs)} CPUs for it, and {items} items to draw)",
                      AttnvizWarning, stacklevel=3)
    if count < 2:
        try:
            yield None
        finally:
            release_figures()
        return
    pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_interrupts)
    try:
        # Start every worker now, with Ctrl-C ignored for that moment only: they inherit it and so
        # cannot print a traceback while still importing; later Ctrl-C reaches the parent at once.
        with _no_interrupts():
            starting = [pool.submit(os.getpid) for _ in range(count)]
        for future in starting:
            future.result()
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _ignore_interrupts() -> None:
    """Workers leave Ctrl-C to the parent, which stops them cleanly, and die with it if it is killed."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    try:  # Linux: a SIGKILLed parent takes its workers along
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    parent_process = multiprocessing.parent_process()
    if parent_process is not None and parent_process.pid != parent:  # it died before prctl took effect
        os._exit(1)
    import threading

    threading.Thread(target=_follow_parent, args=(parent,), daemon=True, name="attnviz-parent-watch").start()


def _follow_parent(parent: int, every: float = 0.5) -> None:
    """Everywhere (not only Linux): a worker whose parent is gone, in any way, exits."""
    import time

    while os.getppid() == parent:
        time.sleep(every)
    from ..fileio import remove_own_temporaries

    remove_own_temporaries()  # os._exit skips atomic_write's cleanup: a killed run leaves no temporary file
    os._exit(1)


@contextmanager
def _no_interrupts() -> Iterator[None]:
    """Ctrl-C is ignored for the moment worker processes are started: they inherit that, so none
    prints a traceback while it is still importing (its initializer has not run yet)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)



"""One block of an export, as both backends run it (a local process pool, Ray actors): its forward
pass and files (:func:`run_block`), its statistics' Parquet part (:func:`record_parts`), and how an
item that failed is recorded (:func:`fail_item`), with the run's :class:`ExportSummary`."""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, RenderError, ResultFileError, UsageError, in_api_terms
from ..sources.layer_reader import read_layers
from .item_export import ItemExport, Outcome
from .items import Item
from .manifest import Journal, file_sizes
from .settings import ExportSettings
from .workers import render_task, render_tasks


@dataclass
class ExportSummary:
    """What a run did: ``exported`` now, ``skipped`` as already finished, ``failed`` with their errors."""

    items: int
    exported: int = 0
    skipped: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    manifest: Path | None = None
    removed: list[str] = field(default_factory=list)  # files of an earlier run with other settings


@dataclass
class BlockResult:
    """What one block gave: each item's outcome (its files, a summary and the image jobs; or its
    error), and the Parquet parts to write: (the items of a part, their rows), one per block run
    together (a block whose texts failed to encode together runs, and writes, one text at a time)."""

    outcomes: list[tuple[Item, Outcome | str]] = field(default_factory=list)
    parts: list[tuple[list[Item], list[Any], list[bool]]] = field(default_factory=list)

    def extend(self, other: BlockResult) -> None:
        self.outcomes.extend(other.outcomes)
        self.parts.extend(other.parts)


def run_block(source: Any, batch: list[Item], out_dir: Path, settings: ExportSettings,
               done: list[bool]) -> BlockResult:
    """One padded batch, its layers written out as they are computed; if a text cannot be encoded
    (too long, say), each text alone, so only the bad ones fail. ``done`` flags the items an earlier
    run finished: they are not exported again, but give their statistics for the block's Parquet part."""
    layers = None if settings.layers is None else list(settings.layers)
    texts = [item.text for item in batch]
    try:
        stream = read_layers(source, texts, reading=settings.reading, truncate=settings.truncate, layers=layers,
                             float16=settings.float16,
                             pairs=None if settings.pair is None else [settings.pair] * len(texts), purpose="export")
    except UsageError:
        raise  # a bad --layers is wrong for every item alike
    except AttnvizError as exc:
        if len(batch) == 1:
            return BlockResult([] if done[0] else [(batch[0], exc.template)])
        result = BlockResult()
        for item, finished in zip(batch, done, strict=True):
            result.extend(run_block(source, [item], out_dir, settings, [finished]))
        return result
    table = "parquet" in settings.formats
    # A finished item of a block that runs again gives its statistics again (the same numbers): the block's part holds every item.
    exports = [ItemExport(item, header, out_dir, replace(settings, formats=("parquet",)) if finished else settings,
                          len(stream.layers)) if table or not finished else None
               for item, header, finished in zip(batch, stream.results, done, strict=True)]
    failed: dict[int, str] = {}  # an item whose own file could not be written (a full disk): its own error
    taker = _Taker()
    try:
        for position, parts in stream:
            taker.take(exports, position, parts, stream.results, failed)
            del parts  # taken (on the taker's thread): not held here while the next is computed
        taker.finish()
        result = BlockResult()
        rows = []
        for i, (item, export) in enumerate(zip(batch, exports, strict=True)):
            if export is not None and i not in failed:
                try:
                    outcome: Outcome | str = export.finish(stream.unread[i] if stream.whole else None)
                except (RenderError, ResultFileError) as exc:
                    export.abort()
                    failed[i] = exc.template
                else:
                    if table:
                        rows.append(export.text_rows())
            if i in failed:
                outcome = failed[i]
            if export is not None and not done[i]:
                result.outcomes.append((item, outcome))
        kept = [i for i in range(len(batch)) if i not in failed]
        if table and kept:
            result.parts.append(([batch[i] for i in kept], rows, [done[i] for i in kept]))
        return result
    except AttnvizError as exc:
        taker.settle()  # (the layer being taken finishes before its files are removed)
        for export in exports:
            if export is not None:
                export.abort()
        if isinstance(exc, UsageError):
            raise  # e.g. --heads beyond the model's heads: wrong for every item alike
        return BlockResult([(item, exc.template) for item, export, finished in zip(batch, exports, done, strict=True)
                            if export is not None and not finished])
    except BaseException:
        taker.settle()
        for export in exports:
            if export is not None:
                export.abort()
        raise
    finally:
        taker.close()


class _Taker:
    """A block's layers taken by its items (statistics, the npz's bytes, the page, image views) on a thread of its
    own while the engine computes the next layer. Layer l + 1 is handed over once layer l is taken and its npz bytes
    are on disk, so at most two layers are held, as when each was taken before the next was computed. The thread's
    torch operations run on one core's thread: no second team of OpenMP threads against the forward's (a 2,048-token
    GPT-2 export: 8.9 -> 8.3 s on 2 cores)."""

    def __init__(self) -> None:
        import torch

        self.threads = torch.get_num_threads()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="attnviz-export-layers",
                                       initializer=torch.set_num_threads, initargs=(1,))
        self.pending: Future[None] | None = None

    def take(self, exports: list[ItemExport | None], position: int, parts: list[Any], shown: list[Any],
             failed: dict[int, str]) -> None:
        self.finish()  # the layer before, taken and written (its errors raised here)
        # The layer goes in a list the thread empties: the pool's work item keeps its arguments until after the future
        # is done, so the layer itself would outlive finish() for as long as the thread took to drop it.
        self.pending = self.pool.submit(_take_held, exports, position, [parts, shown], failed)

    def finish(self) -> None:
        """Wait for the layer being taken (its errors raised here). Interrupted while waiting (Ctrl-C), the layer is
        still pending, so :meth:`settle` waits for it again before the block's files are removed: removing them while
        the thread still writes them left it waiting on a stopped writer, and the process hung at exit joining it."""
        pending = self.pending
        if pending is None:
            return
        try:
            pending.result()
        finally:
            if pending.done():
                self.pending = None

    def settle(self) -> None:
        """Wait for the layer being taken, whatever it raises (the block failed already)."""
        with contextlib.suppress(BaseException):  # the block's own error is the one reported
            self.finish()

    def close(self) -> None:
        import torch

        self.settle()
        self.pool.submit(torch.set_num_threads, self.threads)  # torch's default for new threads, as it was
        self.pool.shutdown(wait=True)


def _take_held(exports: list[ItemExport | None], position: int, held: list[list[Any]], failed: dict[int, str]) -> None:
    parts, shown = held
    held.clear()
    _take_layer(exports, position, parts, shown, failed)


def _take_layer(exports: list[ItemExport | None], position: int, parts: list[Any], shown: list[Any],
                failed: dict[int, str]) -> None:
    """Every item's share of one layer, then its npz bytes written (an item whose file fails, fails alone)."""
    _add_layer(exports, position, parts, shown, failed)
    for i, export in enumerate(exports):
        if export is not None and i not in failed:
            try:
                export.written()
            except (RenderError, ResultFileError) as exc:
                export.abort()
                failed[i] = exc.template


def record_parts(out_dir: Path, block: BlockResult, journal: Journal) -> list[tuple[Item, Outcome | str]]:
    """Write the block's Parquet parts, list each with its items' files, and record again (with the
    part's new size) the items an earlier run finished; returns the outcomes to settle."""
    from .table import write_part

    for batch, rows, done in block.parts:
        name = write_part(out_dir, batch[0].index, rows)
        members = {item.index for item in batch}
        for item, outcome in block.outcomes:
            if item.index in members and not isinstance(outcome, str):
                outcome[0].insert(0, name)
        for item, finished in zip(batch, done, strict=True):
            if finished:
                entry = dict(journal.entries[item.index])
                entry["files"] = list(dict.fromkeys([name, *entry.get("files", [])]))
                entry["sizes"] = file_sizes(out_dir, entry["files"])
                journal.record(entry)
    return block.outcomes


def _add_layer(exports: list[ItemExport | None], position: int, parts: list[Any], shown: list[Any],
               failed: dict[int, str]) -> None:
    """A function of its own, so no loop variable keeps the layer alive after it is written. An item
    whose file cannot be written fails alone, with its own file named; the others go on. ``shown``:
    each text's tokens as read."""
    for i, (export, part) in enumerate(zip(exports, parts, strict=True)):
        if export is not None and i not in failed:
            try:
                export.add(position, part, shown[i])
            except (RenderError, ResultFileError) as exc:
                export.abort()
                failed[i] = exc.template


def submit_item(pool: ProcessPoolExecutor | None, tasks: list[tuple[Any, Path]], style: str) -> list[Future[Any]]:
    """One text's images: to one drawing process together (its layers share one figure there), or
    drawn here one by one."""
    if pool is not None and style != "tiles" and tasks:
        return [pool.submit(render_tasks, [(view, str(path)) for view, path in tasks], style)]
    return [_submit(pool, view, path, style) for view, path in tasks]


def _submit(pool: ProcessPoolExecutor | None, view: Any, path: Path, style: str) -> Future[str]:
    """An image drawn by a worker, or here (tiles take milliseconds: no worker round trip). Either way
    a failure (a full disk) is the item's, recorded when it settles, and the run goes on."""
    if pool is not None and style != "tiles":
        return pool.submit(render_task, view, str(path), style)
    future: Future[str] = Future()
    try:
        future.set_result(render_task(view, str(path), style))
    except Exception as exc:
        future.set_exception(exc)
    return future


def fail_item(journal: Journal, summary: ExportSummary, item: Item, message: str, on_item: Any) -> None:
    """``message`` may hold option markers (see attnviz.errors): the manifest gets the library's terms,
    ``summary.failed`` the message as it is, for the caller to word (the CLI, in its flags)."""
    journal.record(journal.entry(item, files=[], status="failed", error=in_api_terms(message)))
    summary.failed.append((item.index, message))
    on_item()

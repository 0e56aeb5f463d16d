"""The export pipeline: batched forward passes, images rendered in parallel processes, atomic files.

While worker processes draw one batch's images, the main process runs the next batch through the
model. An item is recorded in the journal only once all its files exist; an item that fails is
recorded as failed and the run goes on.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, RenderError, ResultFileError, UsageError, in_api_terms
from ..fileio import remove_stale_temporaries
from .item_export import ItemExport, Outcome
from .items import Item, blocks, input_fingerprint, read_items
from .lock import folder_lock
from .manifest import Journal, file_sizes
from .settings import ExportSettings
from .workers import render_task, render_tasks, workers


@dataclass
class ExportSummary:
    """What a run did: ``exported`` now, ``skipped`` as already finished, ``failed`` with their errors."""

    items: int
    exported: int = 0
    skipped: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    manifest: Path | None = None
    removed: list[str] = field(default_factory=list)  # files of an earlier run with other settings


def run_export(
    source_path: str, out_dir: Path, settings: ExportSettings, *, on_start: Any = None, on_item: Any = None,
    on_source: Any = None,
) -> ExportSummary:
    """Export every item of this shard of ``source_path`` into ``out_dir``; resumable, see the module docs.

    ``on_start(total, already_done)`` and ``on_item()`` report progress (the CLI's progress bar);
    ``on_source(source)`` is told which source runs, once it is loaded (``--verbose``).
    """
    all_items = read_items(source_path, field=settings.field, column=settings.column, kind=settings.input_format)
    my_blocks = blocks(all_items, settings.batch_size, *settings.shard)
    items = [item for block in my_blocks for item in block]
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"[[out={out_dir}]] is a file; give a folder for the exported results")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create [[out={out_dir}]]: {exc.strerror}") from None
    with folder_lock(out_dir, f"{settings.fingerprint()}/{input_fingerprint(all_items)}"):
        return _resume(all_items, my_blocks, items, out_dir, settings, on_start, on_item, on_source)


def _resume(all_items: list[Item], my_blocks: list[list[Item]], items: list[Item], out_dir: Path,
            settings: ExportSettings, on_start: Any, on_item: Any, on_source: Any) -> ExportSummary:
    remove_stale_temporaries(out_dir)
    journal = Journal(out_dir, settings.shard, fingerprint=settings.fingerprint(), total=len(all_items))
    todo = [block for block in my_blocks if not all(journal.finished(item) for item in block)]
    done = sum(journal.finished(item) for item in items)
    summary = ExportSummary(items=len(items), skipped=done)
    if on_start is not None:
        on_start(len(items), done)
    if todo and settings.backend == "ray":
        from .ray_backend import export_on_ray

        export_on_ray(todo, out_dir, settings, journal, summary, on_item or (lambda: None), on_source)
    elif todo:
        _export(todo, out_dir, settings, journal, summary, on_item or (lambda: None), on_source)
    summary.manifest = journal.finish(items)
    from .table import HEADS_TABLE, TEXTS_TABLE, assemble

    if "parquet" in settings.formats:  # the tables, from the parts of every finished item of this shard
        wanted = {item.index for item in items}
        assemble(out_dir, {i: e for i, e in journal.entries.items() if i in wanted})
    else:  # an earlier run's tables: this one makes none, and its rows would not match the manifest
        for name in (HEADS_TABLE, TEXTS_TABLE):
            if (out_dir / name).is_file() and not (out_dir / name).is_symlink():
                (out_dir / name).unlink()
                summary.removed.append(name)
    failed_now = {index for index, _ in summary.failed}
    for path in journal.stale_files(items):  # an earlier run's outputs that these settings no longer make
        path.unlink(missing_ok=True)
        own = path.name[:6].isdigit() and int(path.name[:6]) in failed_now  # a text that failed in this run
        if not own:  # (its partial files are this run's own, not an earlier export's)
            summary.removed.append(path.name)
    remove_stale_temporaries(out_dir)  # again: workers of a killed run may have outlived it by a moment
    summary.failed.sort()  # by index (they ran in the plan's order: texts of similar lengths together)
    return summary


def _export(todo: list[list[Item]], out_dir: Path, settings: ExportSettings, journal: Journal,
            summary: ExportSummary, on_item: Any, on_source: Any = None) -> None:
    from ..sources.resolve import load_source

    source = load_source(settings.model, engine=settings.engine, revision=settings.revision,  # type: ignore[arg-type]
                         device=settings.device, trust_remote_code=settings.trust_remote_code, causal=settings.causal)
    if on_source is not None:
        on_source(source)
    pending: deque[tuple[Item, list[str], dict[str, Any], list[Future[Any]]]] = deque()
    with workers(settings, sum(len(batch) for batch in todo)) as pool:
        for batch in todo:
            # The whole block runs again, so its numbers match an uninterrupted run; finished items keep their files.
            block = run_block(source, batch, out_dir, settings, [journal.finished(item) for item in batch])
            for item, outcome in record_parts(out_dir, block, journal):
                if isinstance(outcome, str):
                    fail_item(journal, summary, item, outcome, on_item)
                    continue
                files, stats, tasks = outcome
                futures = _submit_item(pool, tasks, settings.style)
                pending.append((item, files, stats, futures))
            # Images of the previous batch render while this one ran through the model.
            while len(pending) > settings.batch_size:
                _settle(pending.popleft(), journal, summary, on_item, sync=False)
            journal.sync()  # once a block, not once a text
        while pending:
            _settle(pending.popleft(), journal, summary, on_item, sync=False)
        journal.sync()


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
        stream = source.stream_batch(texts, truncate=settings.truncate, layers=layers, float16=settings.float16,
                                     pairs=None if settings.pair is None else [settings.pair] * len(texts))
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
    try:
        for position, parts in stream:
            _add_layer(exports, position, parts, failed)
            del parts  # this layer is written: drop it before the next is computed
        result = BlockResult()
        rows = []
        for i, (item, export) in enumerate(zip(batch, exports, strict=True)):
            if export is not None and i not in failed:
                try:
                    outcome: Outcome | str = export.finish(stream.results[i] if stream.whole else None)
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
        for export in exports:
            if export is not None:
                export.abort()
        if isinstance(exc, UsageError):
            raise  # e.g. --heads beyond the model's heads: wrong for every item alike
        return BlockResult([(item, exc.template) for item, export, finished in zip(batch, exports, done, strict=True)
                            if export is not None and not finished])
    except BaseException:
        for export in exports:
            if export is not None:
                export.abort()
        raise


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


def _add_layer(exports: list[ItemExport | None], position: int, parts: list[Any], failed: dict[int, str]) -> None:
    """A function of its own, so no loop variable keeps the layer alive after it is written. An item
    whose file cannot be written fails alone, with its own file named; the others go on."""
    for i, (export, part) in enumerate(zip(exports, parts, strict=True)):
        if export is not None and i not in failed:
            try:
                export.add(position, part)
            except (RenderError, ResultFileError) as exc:
                export.abort()
                failed[i] = exc.template


def _submit_item(pool: ProcessPoolExecutor | None, tasks: list[tuple[Any, Path]], style: str) -> list[Future[Any]]:
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


def _settle(job: tuple[Item, list[str], dict[str, Any], list[Future[Any]]], journal: Journal,
            summary: ExportSummary, on_item: Any, *, sync: bool = True) -> None:
    item, files, stats, futures = job
    try:
        for future in futures:
            future.result()
    except AttnvizError as exc:
        fail_item(journal, summary, item, exc.template, on_item)
        return
    except Exception as exc:  # a worker died or a renderer broke: this item fails, the run goes on
        fail_item(journal, summary, item, f"rendering failed ({type(exc).__name__}: {exc})", on_item)
        return
    journal.record(journal.entry(item, files=files, sizes=file_sizes(journal.out_dir, files), stats=stats, status="ok"),
                   sync=sync)
    summary.exported += 1
    on_item()


def fail_item(journal: Journal, summary: ExportSummary, item: Item, message: str, on_item: Any) -> None:
    """``message`` may hold option markers (see attnviz.errors): the manifest gets the library's terms,
    ``summary.failed`` the message as it is, for the caller to word (the CLI, in its flags)."""
    journal.record(journal.entry(item, files=[], status="failed", error=in_api_terms(message)))
    summary.failed.append((item.index, message))
    on_item()


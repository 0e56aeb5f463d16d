"""The export pipeline: batched forward passes, images rendered in parallel processes, atomic files.

While worker processes draw one batch's images, the main process runs the next batch through the
model. An item is recorded in the journal only once all its files exist; an item that fails is
recorded as failed and the run goes on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, UsageError
from ..fileio import remove_stale_temporaries
from ..interrupts import on_stop
from .blocks import ExportSummary, fail_item, record_parts, run_block, submit_item
from .items import Item, blocks, input_fingerprint, read_items
from .lock import folder_lock
from .manifest import Journal, file_sizes
from .settings import ExportSettings, reading_of
from .workers import workers


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
    with held_folder(out_dir, settings, all_items):
        return _resume(all_items, my_blocks, items, out_dir, settings, on_start, on_item, on_source)


@contextmanager
def held_folder(out_dir: Path, settings: ExportSettings, all_items: list[Item]) -> Iterator[None]:
    """``out_dir`` made (a file there refused) and held for this run (its settings and input) until the block
    ends; a Ctrl-C meanwhile says what is kept."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"[[out={out_dir}]] is a file; give a folder for the exported results")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create [[out={out_dir}]]: {exc.strerror}") from None
    kept = f"what is finished is kept in {out_dir}; rerun the same command to resume"
    with on_stop(note=kept), folder_lock(out_dir, f"{settings.fingerprint()}/{input_fingerprint(all_items)}"):
        yield


def _resume(all_items: list[Item], my_blocks: list[list[Item]], items: list[Item], out_dir: Path,
            settings: ExportSettings, on_start: Any, on_item: Any, on_source: Any) -> ExportSummary:
    remove_stale_temporaries(out_dir)
    journal = Journal(out_dir, settings.shard, fingerprint=settings.fingerprint(), total=len(all_items),
                      reading=reading_of(settings))
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
        own = path.name[:6].isascii() and path.name[:6].isdigit() and int(path.name[:6]) in failed_now  # a text that failed in this run
        if not own:  # (its partial files are this run's own, not an earlier export's)
            summary.removed.append(path.name)
    remove_stale_temporaries(out_dir)  # again: workers of a killed run may have outlived it by a moment
    summary.failed.sort()  # by index (they ran in the plan's order: texts of similar lengths together)
    return summary


def _export(todo: list[list[Item]], out_dir: Path, settings: ExportSettings, journal: Journal,
            summary: ExportSummary, on_item: Any, on_source: Any = None) -> None:
    from ..sources.resolve import load_source

    source = load_source(settings.model, engine=settings.engine, revision=settings.revision,
                         device=settings.device, trust_remote_code=settings.trust_remote_code, causal=settings.causal,
                         dtype=settings.dtype)
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
                futures = submit_item(pool, tasks, settings.style)
                pending.append((item, files, stats, futures))
            # Images of the previous batch render while this one ran through the model.
            while len(pending) > settings.batch_size:
                _settle(pending.popleft(), journal, summary, on_item, sync=False)
            journal.sync()  # once a block, not once a text
        while pending:
            _settle(pending.popleft(), journal, summary, on_item, sync=False)
        journal.sync()


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



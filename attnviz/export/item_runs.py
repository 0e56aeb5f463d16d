"""The run of an export whose items each need the model on its own (a text with its pictures, a clip): the folder
held for the run (:func:`attnviz.export.run.held_folder`; refused before anything is written, no folder is left),
this shard's items not yet finished each exported in turn by the model loaded once, a failed item recorded while the
others go on, then the manifest and the run's table. The texts' export runs in blocks of layers instead
(:mod:`.run`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..errors import AttnvizError, UsageError
from ..fileio import remove_stale_temporaries
from .blocks import ExportSummary, fail_item
from .items import Item, blocks
from .manifest import Journal, file_sizes
from .settings import ExportSettings, reading_of

ItemT = TypeVar("ItemT", bound=Item)
ExportOne = Callable[[Any, Any, Path, ExportSettings], tuple[list[str], dict[str, Any]]]


def run_loaded_items(out_dir: Path, settings: ExportSettings, all_items: Sequence[ItemT], load: Callable[[], Any],
                     export_one: ExportOne, table: Callable[[list[ItemT]], None] | None, *, on_start: Any = None,
                     on_item: Any = None) -> ExportSummary:
    """Export this shard of ``all_items`` into ``out_dir``: ``load()`` the model once (only where an item is left),
    ``export_one(model, item, out_dir, settings)`` → (its files, its summary) for each, ``table(finished items)``
    last. A :class:`UsageError` (a layer or head out of range: wrong for every item alike) stops the run; any
    other named error fails its item alone."""
    from .run import held_folder

    planned = blocks(list(all_items), settings.batch_size, *settings.shard)
    items = [all_items[item.index] for block in planned for item in block]
    made = not out_dir.exists()
    try:
        with held_folder(out_dir, settings, list(all_items)):
            summary = _run(out_dir, settings, all_items, items, load, export_one, table, on_start, on_item)
    except BaseException:
        if made and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()  # refused before anything was written: no empty folder left
        raise
    summary.failed.sort()
    return summary


def _run(out_dir: Path, settings: ExportSettings, all_items: Sequence[ItemT], items: list[ItemT], load: Callable[[], Any],
         export_one: ExportOne, table: Callable[[list[ItemT]], None] | None, on_start: Any,
         on_item: Any) -> ExportSummary:
    """The held folder's run: each item not yet finished, then the manifest and the table."""
    remove_stale_temporaries(out_dir)
    journal = Journal(out_dir, settings.shard, fingerprint=settings.fingerprint(), total=len(all_items),
                      reading=reading_of(settings))
    todo = [item for item in items if not journal.finished(item)]
    summary = ExportSummary(items=len(items), skipped=len(items) - len(todo))
    if on_start is not None:
        on_start(len(items), summary.skipped)
    if todo:
        model = load()
        for item in todo:
            try:
                files, stats = export_one(model, item, out_dir, settings)
            except AttnvizError as exc:
                if isinstance(exc, UsageError):
                    raise
                fail_item(journal, summary, item, exc.template, on_item or (lambda: None))
                continue
            journal.record(journal.entry(item, files=files, sizes=file_sizes(out_dir, files), stats=stats,
                                         status="ok"))
            summary.exported += 1
            if on_item is not None:
                on_item()
    summary.manifest = journal.finish(list(items))
    if table is not None:
        table([item for item in items if journal.finished(item)])
    return summary

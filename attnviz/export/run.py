"""The export pipeline: batched forward passes, images rendered in parallel processes, atomic files.

While worker processes draw one batch's images, the main process runs the next batch through the
model. An item is recorded in the journal only once all its files exist; an item that fails is
recorded as failed and the run goes on.
"""

from __future__ import annotations

from collections import Counter, deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import AttnvizError, UsageError, in_api_terms
from ..fileio import atomic_write, remove_stale_temporaries
from ..result import AttentionResult
from .items import Item, blocks, read_items
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
    with folder_lock(out_dir, f"{settings.fingerprint()}/{len(all_items)}"):
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
    if todo:
        _export(todo, out_dir, settings, journal, summary, on_item or (lambda: None), on_source)
    summary.manifest = journal.finish(items)
    if "parquet" in settings.formats:  # the tables, from the parts of every finished item of this shard
        from .table import assemble

        wanted = {item.index for item in items}
        assemble(out_dir, {i: e for i, e in journal.entries.items() if i in wanted})
    for path in journal.stale_files(items):  # an earlier run's outputs that these settings no longer make
        path.unlink(missing_ok=True)
        summary.removed.append(path.name)
    remove_stale_temporaries(out_dir)  # again: workers of a killed run may have outlived it by a moment
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
            for item, outcome in _run_block(source, batch, out_dir, settings, journal):
                if isinstance(outcome, str):
                    _fail(journal, summary, item, outcome, on_item)
                    continue
                files, stats, tasks = outcome
                futures = _submit_item(pool, tasks, settings.style)
                pending.append((item, files, stats, futures))
            # Images of the previous batch render while this one ran through the model.
            while len(pending) > settings.batch_size:
                _settle(pending.popleft(), journal, summary, on_item)
        while pending:
            _settle(pending.popleft(), journal, summary, on_item)


Outcome = tuple[list[str], dict[str, Any], list[tuple[Any, Path]]]


def _run_block(source: Any, batch: list[Item], out_dir: Path, settings: ExportSettings,
               journal: Journal) -> list[tuple[Item, Outcome | str]]:
    """One padded batch, its layers written out as they are computed; if a text cannot be encoded
    (too long, say), each text alone, so only the bad ones fail."""
    layers = None if settings.layers is None else list(settings.layers)
    texts = [item.text for item in batch]
    try:
        stream = source.stream_batch(texts, truncate=settings.truncate, layers=layers, float16=settings.float16,
                                     pairs=None if settings.pair is None else [settings.pair] * len(texts))
    except UsageError:
        raise  # a bad --layers is wrong for every item alike
    except AttnvizError as exc:
        if len(batch) == 1:
            return [(batch[0], exc.template)]
        return [pair for item in batch for pair in _run_block(source, [item], out_dir, settings, journal)]
    table = "parquet" in settings.formats
    done = [journal.finished(item) for item in batch]
    # A finished item of a block that runs again gives its statistics again (the same numbers): the block's part holds every item.
    exports = [ItemExport(item, header, out_dir, replace(settings, formats=("parquet",)) if finished else settings,
                          len(stream.layers)) if table or not finished else None
               for item, header, finished in zip(batch, stream.results, done, strict=True)]
    try:
        for position, parts in stream:
            _add_layer(exports, position, parts)
            del parts  # this layer is written: drop it before the next is computed
        outcomes: list[tuple[Item, Outcome | str]] = []
        rows = []
        for i, (item, export) in enumerate(zip(batch, exports, strict=True)):
            if export is not None:
                outcome = export.finish(stream.results[i] if stream.whole else None)
                if table:
                    rows.append(export.text_rows())
                if not done[i]:
                    outcomes.append((item, outcome))
        if table:
            _write_part(out_dir, batch, rows, outcomes, done, journal)
        return outcomes
    except AttnvizError as exc:
        for export in exports:
            if export is not None:
                export.abort()
        if isinstance(exc, UsageError):
            raise  # e.g. --heads beyond the model's heads: wrong for every item alike
        return [(item, exc.template) for item, export, finished in zip(batch, exports, done, strict=True)
                if export is not None and not finished]
    except BaseException:
        for export in exports:
            if export is not None:
                export.abort()
        raise


def _write_part(out_dir: Path, batch: list[Item], rows: list[Any], outcomes: list[tuple[Item, Any]],
                done: list[bool], journal: Journal) -> None:
    """The block's statistics as one Parquet part, listed with each of its items; the items finished
    by an earlier run are recorded again, with the part's new size."""
    from .table import write_part

    name = write_part(out_dir, batch[0].index, rows)
    for _, (files, _stats, _tasks) in outcomes:
        files.insert(0, name)
    for item, finished in zip(batch, done, strict=True):
        if finished:
            entry = dict(journal.entries[item.index])
            entry["files"] = list(dict.fromkeys([name, *entry.get("files", [])]))
            entry["sizes"] = file_sizes(out_dir, entry["files"])
            journal.record(entry)


def _add_layer(exports: list[ItemExport | None], position: int, parts: list[Any]) -> None:
    """A function of its own, so no loop variable keeps the layer alive after it is written."""
    for export, part in zip(exports, parts, strict=True):
        if export is not None:
            export.add(position, part)


class ItemExport:
    """One text's outputs, written as its layers arrive: the npz streamed to disk, the head
    statistics accumulated, one image job per layer (and head) drawn by the workers later."""

    def __init__(self, item: Item, header: AttentionResult, out_dir: Path, settings: ExportSettings,
                 n_layers: int) -> None:
        from ..heads import HeadTableBuilder

        self.item, self.header, self.out_dir, self.settings = item, header, out_dir, settings
        self.reading, self.n_layers = settings.reading, n_layers
        self.shown = header  # the tokens as read (without special tokens, or words)
        self.stats = HeadTableBuilder()
        self.layers: list[int] = []
        self.images: list[tuple[Any, Path]] = []
        self.npz = None
        # Streamed to disk as the layers come; read another way, once the first layer gives its tokens.
        self.streams_npz = "npz" in settings.formats and not header.attentions.numel() and header.cross_attentions is None
        if self.streams_npz and self.reading.plain:
            self._open_npz(header)
        self.page: Any = None  # one page per text (html), its layers added as they come, compressed

    def _open_npz(self, header: AttentionResult) -> None:
        from ..result_writer import ResultWriter

        self.npz = ResultWriter(self.out_dir / f"{self.item.stem}.npz", header, self.n_layers,
                                float16=self.settings.float16)

    def add(self, position: int, part: Any) -> None:
        """Layer number ``part.layer`` (the ``position``-th exported): ``part.attentions`` ``[heads, n, n]``."""
        heads = part.n_heads
        if self.settings.heads is not None and max(self.settings.heads) >= heads:
            raise UsageError(f"[[heads={max(self.settings.heads)}]] is out of range; {self.header.model_name} has "
                             f"heads 0 to {heads - 1}")
        self.layers.append(part.layer)
        if self.reading.plain and self.npz is None and not self.settings.page_formats and not self.settings.image_formats:
            self.stats.add_layer(self.shown, position, part)  # statistics alone: a block of rows at a time
            return
        attentions, norms = part.attentions, part.value_norms
        if not self.reading.plain:
            self.shown = self.reading.layer(self.header, attentions)
            attentions, norms = self.shown.attentions[0], None  # value norms are per token: not of words
            if self.streams_npz and self.npz is None:
                self._open_npz(self.shown)
        if self.npz is not None:
            self.npz.add(attentions, norms)
        self.stats.add_layer(self.shown, position, attentions)
        if self.settings.page_formats:
            tokens, special = self.shown.tokens, self.shown.special
            if self.page is None:
                from ..render.page import PageBuilder

                self.page = PageBuilder(f"{self.header.model_name} · text {self.item.index}", self.header.model_name,
                                        cells=self.n_layers * attentions.numel())
            self.page.add_layer(part.layer, attentions, rows=tokens, cols=tokens, causal=self.shown.causal,
                                row_special=special, col_special=special)
        if self.settings.image_formats:
            self._views(part.layer, attentions)

    def _views(self, layer: int, attentions: Any) -> None:
        from dataclasses import replace

        from ..render.view import FIGURE_CELLS, heatmap_view, max_pool

        one = replace(self.shown, attentions=attentions[None], cross_attentions=None, decoder_attentions=None,
                      scores=None, values=None, value_norms=None, queries=None, keys=None, metadata={**self.header.metadata, "layers": [layer]})
        drawn: list[int | str] = (["all"] if self.settings.grid else []) + list(self.settings.heads or [])
        for head in drawn:
            view = heatmap_view(one, layer=layer, head=head, cmap=self.settings.cmap)
            n = max(view.panels.shape[1:])
            if self.settings.style == "figure" and n > FIGURE_CELLS:
                # The figure pools to this size anyway; pooled here, a long input's views stay small in the queue.
                view = max_pool(view, -(-n // FIGURE_CELLS))
            name = f"L{layer}" if head == "all" else f"L{layer}H{head}"
            for fmt in self.settings.image_formats:
                self.images.append((view, self.out_dir / f"{self.item.stem}.{name}.{fmt}"))

    def finish(self, full: AttentionResult | None = None) -> Outcome:
        """Close the npz, write the statistics JSON; return the files, a summary and the image jobs."""
        files: list[str] = []
        if "npz" in self.settings.formats:
            if self.npz is not None:
                files.append(self.npz.close().name)
            elif full is not None:
                files.append(self.reading.apply(full).save(self.out_dir / f"{self.item.stem}.npz",
                                                           float16=self.settings.float16).name)
        rows = self.stats.table().rows()
        for row in rows:
            row["layer"] = self.layers[int(row["layer"])]  # numbered as in the model
        if self.page is not None:
            files.extend(path.name for path in self._write_pages(rows))
        if "json" in self.settings.formats:
            import json

            doc = {"index": self.item.index, "hash": self.item.hash, "text": self.item.text,
                   "model": self.header.model_name, "tokens": self.shown.tokens, "heads": rows}
            path = self.out_dir / f"{self.item.stem}.stats.json"
            text = json.dumps(doc, ensure_ascii=False, sort_keys=True, indent=1) + "\n"
            atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
            files.append(path.name)
        # Images are listed by layer, then head, then format, as they were queued.
        files.extend(path.name for _, path in self.images)
        self.rows = rows
        labels = Counter(label for row in rows for label in row["labels"])  # type: ignore[union-attr]
        stats = {"tokens": len(self.shown.tokens), "labels": dict(sorted(labels.items())),
                 "entropy_norm_mean": round(sum(float(r["entropy_norm"]) for r in rows) / len(rows), 6)}
        return files, stats, self.images

    def text_rows(self) -> Any:
        """This text's head rows for the Parquet tables (after :meth:`finish`)."""
        from .table import TextRows

        return TextRows(self.item.index, self.item.hash, self.item.text, self.header.model_name,
                        len(self.shown.tokens), self.rows)

    def _write_pages(self, rows: list[dict[str, Any]]) -> list[Path]:
        """The text's page in each per-text format (the registry's), every exported layer on it."""
        from ..render.page import stats_table
        from ..render.registry import FORMATS

        page = self.page.finish(stats=stats_table(rows), initial={"view": "head", "layer": 0, "head": 0})
        return [FORMATS[fmt].render(page, self.out_dir / f"{self.item.stem}{FORMATS[fmt].suffix}", cmap=self.settings.cmap)
                for fmt in self.settings.page_formats]

    def abort(self) -> None:
        if self.npz is not None:
            self.npz.abort()


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
            summary: ExportSummary, on_item: Any) -> None:
    item, files, stats, futures = job
    try:
        for future in futures:
            future.result()
    except AttnvizError as exc:
        _fail(journal, summary, item, exc.template, on_item)
        return
    except Exception as exc:  # a worker died or a renderer broke: this item fails, the run goes on
        _fail(journal, summary, item, f"rendering failed ({type(exc).__name__}: {exc})", on_item)
        return
    journal.record(journal.entry(item, files=files, sizes=file_sizes(journal.out_dir, files), stats=stats, status="ok"))
    summary.exported += 1
    on_item()


def _fail(journal: Journal, summary: ExportSummary, item: Item, message: str, on_item: Any) -> None:
    """``message`` may hold option markers (see attnviz.errors): the manifest gets the library's terms,
    ``summary.failed`` the message as it is, for the caller to word (the CLI, in its flags)."""
    journal.record(journal.entry(item, files=[], status="failed", error=in_api_terms(message)))
    summary.failed.append((item.index, message))
    on_item()


"""One text's export: its layers written as they arrive (npz streamed to disk, statistics, the page,
image jobs), then its files and a summary (:meth:`ItemExport.finish`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fileio import atomic_write
from ..labels import head_name
from ..result import AttentionResult
from .items import Item
from .settings import ExportSettings

if TYPE_CHECKING:  # pragma: no cover
    from ..render.view import HeadChoice
    from ..result.writer import ResultWriter

Outcome = tuple[list[str], dict[str, Any], list[tuple[Any, Path]]]


class ItemExport:
    """One text's outputs, written as its layers arrive: the npz streamed to disk, the head
    statistics accumulated, one image job per layer (and head) drawn by the workers later."""

    def __init__(self, item: Item, header: AttentionResult, out_dir: Path, settings: ExportSettings,
                 n_layers: int) -> None:
        from ..analysis.heads import HeadTableBuilder

        self.item, self.header, self.out_dir, self.settings = item, header, out_dir, settings
        self.reading, self.n_layers = settings.reading, n_layers
        self.shown = header  # the tokens as read (without special tokens, or words)
        self.stats = HeadTableBuilder()
        self.layers: list[int] = []
        self.images: list[tuple[Any, Path]] = []
        self.npz: ResultWriter | None = None
        # Streamed to disk as the layers come; read another way, once the first layer gives its tokens.
        self.streams_npz = "npz" in settings.formats and not header.attentions.numel() and header.cross_attentions is None
        if self.streams_npz and self.reading.plain:
            self._open_npz(header)
        self.page: Any = None  # one page per text (html), its layers added as they come, compressed

    def _open_npz(self, header: AttentionResult) -> None:
        from ..result.writer import ResultWriter

        self.npz = ResultWriter(self.out_dir / f"{self.item.stem}.npz", header, self.n_layers,
                                float16=self.settings.float16)

    def add(self, position: int, part: Any, shown: AttentionResult) -> None:
        """Layer number ``part.layer`` (the ``position``-th exported): ``part.attentions`` ``[heads, n, n]``,
        read as the settings say (:mod:`attnviz.sources.layer_reader`), over ``shown``'s tokens."""
        heads = part.n_heads
        if self.settings.heads is not None:
            from ..layer_range import check_heads

            check_heads(self.settings.heads, owner=self.header.model_name, count=heads, option="heads")
        self.layers.append(part.layer)
        self.shown = shown
        if self.streams_npz and self.npz is None:  # read another way: opened once the tokens as read are known
            self._open_npz(shown)
        if self.npz is None and not self.settings.page_formats and not self.settings.image_formats:
            self.stats.add_layer(shown, position, part)  # statistics alone: a block of rows at a time
            return
        attentions, norms = part.attentions, part.value_norms  # a read layer has no value norms (not of words)
        if self.npz is not None:
            self.npz.add(attentions, norms)
        self.stats.add_layer(self.shown, position, attentions)
        if self.settings.page_formats:
            tokens, special = self.shown.tokens, self.shown.special
            if self.page is None:
                from ..render.page import PageBuilder
                from ..views.page_parts import page_sinks

                self.page = PageBuilder(f"{self.header.model_name} · text {self.item.index}", self.header.model_name,
                                        cells=self.n_layers * attentions.numel(), layers=self.n_layers,
                                        sinks=page_sinks)
            self.page.add_layer(part.layer, attentions, rows=tokens, cols=tokens, causal=self.shown.causal,
                                row_special=special, col_special=special)
        if self.settings.image_formats:
            self._views(part.layer, attentions)

    def _views(self, layer: int, attentions: Any) -> None:
        from dataclasses import replace

        from ..render.view import FIGURE_CELLS, max_pool
        from ..views.heatmap import heatmap_view

        one = replace(self.shown, attentions=attentions[None], cross_attentions=None, decoder_attentions=None,
                      scores=None, values=None, value_norms=None, queries=None, keys=None, metadata={**self.header.metadata, "layers": [layer]})
        drawn: list[HeadChoice] = ["all"] if self.settings.grid else []
        drawn += self.settings.heads or ()
        for head in drawn:
            view = heatmap_view(one, layer=layer, head=head, cmap=self.settings.cmap)
            n = max(view.panels.shape[1:])
            if self.settings.style == "figure" and n > FIGURE_CELLS:
                # The figure pools to this size anyway; pooled here, a long input's views stay small in the queue.
                view = max_pool(view, -(-n // FIGURE_CELLS))
            name = head_name(layer, head) if isinstance(head, int) else f"L{layer}"  # "all": the layer's grid
            for fmt in self.settings.image_formats:
                self.images.append((view, self.out_dir / f"{self.item.stem}.{name}.{fmt}"))

    def written(self) -> None:
        """Until the layers added so far are in the npz on disk (the writer's error raised, as ``add`` would)."""
        if self.npz is not None:
            self.npz.wait()

    def finish(self, full: AttentionResult | None = None) -> Outcome:
        """Close the npz, write the statistics JSON; return the files, a summary and the image jobs."""
        files: list[str] = []
        if "npz" in self.settings.formats:
            if self.npz is not None:
                files.append(self.npz.close().name)
            elif full is not None:
                files.append(self.reading.apply(full).save(self.out_dir / f"{self.item.stem}.npz",
                                                           float16=self.settings.float16).name)
        self.table = table = self.stats.table()
        heads = [(layer, head) for layer in range(table.shape[0]) for head in range(table.shape[1])]
        self.labels = table.all_labels()
        rows: list[dict[str, Any]] = []
        if self.page is not None or "json" in self.settings.formats:  # per-head dicts only where they are written
            rows = table.rows()
            for row in rows:
                row["layer"] = self.layers[int(row["layer"])]  # numbered as in the model
        if self.page is not None:
            files.extend(path.name for path in self._write_pages(rows))
        if "json" in self.settings.formats:
            import json

            doc = {"index": self.item.index, "hash": self.item.hash, "text": self.item.text,
                   "model": self.header.model_name, "tokens": self.shown.tokens, "heads": rows}
            path = self.out_dir / f"{self.item.stem}.stats.json"
            text = json.dumps(doc, ensure_ascii=False, allow_nan=False, sort_keys=True, indent=1) + "\n"
            atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
            files.append(path.name)
        # Images are listed by layer, then head, then format, as they were queued.
        files.extend(path.name for _, path in self.images)
        labels = Counter(label for found in self.labels for label in found)
        mean = sum(round(float(v), 6) for v in table.stats["entropy_norm"].flatten()) / len(heads)
        stats = {"tokens": len(self.shown.tokens), "labels": dict(sorted(labels.items())),
                 "entropy_norm_mean": round(mean, 6)}
        return files, stats, self.images

    def text_rows(self) -> Any:
        """This text's head rows for the Parquet tables (after :meth:`finish`)."""
        from .table import TextRows

        return TextRows(self.item.index, self.item.hash, self.item.text, self.header.model_name,
                        len(self.shown.tokens), self.table, list(self.layers), self.labels)

    def _write_pages(self, rows: list[dict[str, Any]]) -> list[Path]:
        """The text's page in each per-text format (the registry's), every exported layer on it."""
        from ..render.registry import FORMATS
        from ..views.page_parts import stats_table

        page = self.page.finish(stats=stats_table(rows), initial={"view": "head", "layer": 0, "head": 0})
        return [FORMATS[fmt].render(page, self.out_dir / f"{self.item.stem}{FORMATS[fmt].suffix}", cmap=self.settings.cmap)
                for fmt in self.settings.page_formats]

    def abort(self) -> None:
        if self.npz is not None:
            self.npz.abort()

"""The interactive page of a whole result (what ``AttentionResult._repr_html_`` and :func:`attnviz.show`
display), and the collector every page is built with, one layer at a time: head statistics, each
head's query and key vectors for short texts, and a generated text's steps.

It reads a result by its fields alone and imports nothing that imports :mod:`attnviz.result`, so the
result's notebook display can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..analysis import AttentionResult

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..render.page import Page


def page_of_result(result: AttentionResult, *, head: int | str = 0, kind: str = "self", stats: bool = True,
                   view: str = "head", title: str | None = None) -> Page:
    """The interactive page of a whole result (what ``AttentionResult._repr_html_`` and
    :func:`attnviz.show` display): every layer and head, the decoder's and cross-attention too.

    A cross-only result (:attr:`AttentionResult.cross_only`, a matrices config with a context) has
    its cross-attention alone, open on it, and no head statistics (they read self-attention)."""
    from ..analysis.transforms import kind_tensor, resolved_kind
    from ..render.page_views import check_view

    check_view(view)

    layers = result.metadata.get("layers") or list(range(result.layers_held))
    kind = resolved_kind(result, "self" if kind == "encoder" else kind)
    cross_only = result.cross_only
    if cross_only:
        kind_tensor(result, kind)  # decoder: refused, saying it has cross-attention alone
        if view == "table":
            from ..errors import UsageError

            raise UsageError(f"the heads table holds statistics of self-attention; {result.model_name or 'this result'} "
                             "has one cross-attention layer and no self-attention: open the page on head, model, "
                             "matrix, query or qk")
    collector = PageCollector(layers, stats and not cross_only, title or f"{len(result.tokens)} tokens")
    if max(len(result.tokens), len(result.target_tokens or [])) <= QK_TOKENS:
        collector.qk = qk_vectors(result)
    for position in range(result.n_layers):
        collector.add(result, position, result.attentions[position])
    if collector.builder is None:  # cross-attention alone: no self-attention layer started the page
        cells = result.cross_attentions.numel() if result.cross_attentions is not None else 0
        collector.start(result.model_name, cells)
    for name, tensor, rows, cols in (("decoder", result.decoder_attentions, result.target_tokens, result.target_tokens),
                                     ("cross", result.cross_attentions, result.target_tokens, result.tokens)):
        for position in range(0 if tensor is None else tensor.shape[0]):
            collector.builder.add_layer(
                layers[position] if position < len(layers) else position, tensor[position], rows=rows, cols=cols,
                kind=name, causal=name == "decoder", row_special=result.target_special,
                col_special=result.target_special if name == "decoder" else result.special)
    page = collector.finish(head=head, kind=kind, view=view)
    if cross_only:
        page.notes.append("one cross-attention layer (target queries over source keys) and no self-attention: "
                          "no head statistics, which read self-attention")
    return with_steps(page, result)


def with_steps(page: Page, result: AttentionResult) -> Page:
    """The page with the step slider of a generation result (a saved one too), opened on the first
    generated token (the prompt's last one if nothing was generated)."""
    page.generation = generation_steps(result)
    if page.generation is not None and page.initial["kind"] in page.generation["kinds"]:
        start, generated = page.generation["promptLength"], page.generation["generated"]
        page.initial.setdefault("query", start if generated else start - 1)
    return page


def generation_steps(result: AttentionResult) -> dict[str, Any] | None:
    """What the page's step slider needs of a generated text (:func:`attnviz.generate`), else None.

    ``promptLength`` tokens of the prompt come first, then ``generated`` tokens; row t is token t's
    attention at the step that processed it. ``kinds``: the page's attentions whose rows are these
    tokens; ``keyKinds``: those whose keys are too. A decoder-only model's are its self-attention
    (``metadata["prompt_length"]``); an encoder-decoder's the decoder's target (its decoder and
    cross-attention, ``metadata["target_start"]``). None once tokens were dropped or joined into
    words, where those positions no longer hold."""
    meta = result.metadata
    if not meta.get("generation") or meta.get("words") or meta.get("special_removed"):
        return None
    if result.target_tokens is not None:  # an encoder-decoder: the steps are the decoder's target
        start, total = meta.get("target_start"), len(result.target_tokens)
        kinds, key_kinds = ["decoder", "cross"], ["decoder"]
    else:
        start, total = meta.get("prompt_length"), len(result.tokens)
        kinds, key_kinds = ["self"], ["self"]
    if isinstance(start, bool) or not isinstance(start, int) or not 0 < start <= total:
        return None
    return {"promptLength": start, "generated": total - start, "kinds": kinds, "keyKinds": key_kinds}


QK_TOKENS = 64
"""Tokens up to which a page carries every head's query and key vectors (the query-key view)."""


def qk_vectors(result: AttentionResult, digits: int = 4) -> dict[str, dict[str, dict[str, list[list[float]]]]]:
    """Each layer's and head's query and key vectors, rounded, keyed by the model's layer number."""
    if result.queries is None or result.keys is None:
        return {}
    layers = result.metadata.get("layers") or list(range(result.layers_held))

    def rounded(t: torch.Tensor) -> list[list[float]]:
        return [[float(f"{v:.{digits}g}") for v in row] for row in t.tolist()]

    return {str(layer): {str(h): {"q": rounded(result.queries[i, h]), "k": rounded(result.keys[i, h])}
                         for h in range(result.queries.shape[1])}
            for i, layer in enumerate(layers)}


class PageCollector:
    """A page and its head statistics, built one layer at a time."""

    def __init__(self, layers: Sequence[int], stats: bool, title: str, *, budget: int | None = None,
                 hold: int = 0, checkpoint: Callable[[], None] | None = None) -> None:
        from ..analysis.heads import HeadTableBuilder

        self.layers, self.stats, self.title, self.budget, self.hold = list(layers), stats, title, budget, hold
        self.checkpoint = checkpoint  # called between blocks of rows (it may raise to stop: a server's client gone)
        self.table = HeadTableBuilder()
        self.builder: Any = None
        self.qk: dict[str, Any] | None = None

    def start(self, model: str, cells: int) -> None:
        """The page, titled for ``model``, to hold ``cells`` weights (heads × queries × keys) in all."""
        from ..render.page import PAGE_BUDGET, PageBuilder

        self.builder = PageBuilder(f"{model} · {self.title}", model, cells=cells, layers=len(self.layers),
                                   budget=PAGE_BUDGET if self.budget is None else self.budget, hold=self.hold,
                                   sinks=page_sinks)

    def add(self, header: AttentionResult, position: int, layer: Any) -> None:
        """Layer ``position`` of ``header``'s text: ``[heads, n, n]`` whole, or an engine's
        :class:`~attnviz.sources.stream.ItemLayer`, read a block of rows at a time (once, for the
        page's tiles and the head statistics together)."""
        n = len(header.tokens)
        whole = hasattr(layer, "shape")
        heads = int(layer.shape[0]) if whole else int(layer.n_heads)
        if self.builder is None:
            self.start(header.model_name, len(self.layers) * heads * n * n)
        breaks = [i for i in range(1, n) if header.segment_ids[i] != header.segment_ids[i - 1]]
        pyramid = self.builder.start_layer(heads, rows=header.tokens, cols=header.tokens, causal=header.causal,
                                           row_special=header.special, col_special=header.special, breaks=breaks)
        blocks = TiledLayer(layer, pyramid, causal=header.causal, checkpoint=self.checkpoint)
        if self.stats:
            self.table.add_layer(header, position, blocks)  # its blocks reach the tiles as it reads them
        else:
            for _ in blocks.row_blocks():
                pass
        self.builder.end_layer(pyramid, self.layers[position])

    def finish(self, *, head: int | str, kind: str, view: str) -> Page:

        shown = self.builder.kinds.get(kind) or next(iter(self.builder.kinds.values()))
        heads = shown["heads"]
        if isinstance(head, int):
            from ..layer_range import check_head

            check_head(head, owner=self.builder.model, count=heads)
        stats_data = None
        if self.stats:
            rows = self.table.table().rows()
            for row in rows:
                row["layer"] = self.layers[int(row["layer"])]
            stats_data = stats_table(rows)
        first = {"kind": kind, "layer": 0, "head": head if isinstance(head, int) else 0, "view": view}
        return self.builder.finish(stats=stats_data, initial=first, qk=self.qk or None)


class TiledLayer:
    """A layer's blocks of query rows, each also added to a page's pyramid as it is read: what the
    head statistics read (anything with ``n_heads`` and ``row_blocks()``), so one pass over a long
    input's rows feeds both."""

    def __init__(self, layer: Any, pyramid: Any, *, causal: bool, checkpoint: Callable[[], None] | None = None) -> None:
        self.layer, self.pyramid, self.causal, self.checkpoint = layer, pyramid, causal, checkpoint
        self.n_heads = int(layer.shape[0]) if hasattr(layer, "shape") else int(layer.n_heads)

    def row_blocks(self) -> Any:
        from ..attention.rows import rows_per_block

        # Blocks of whole pooled rows of the finest level kept: pooled in place, never padded (a copy).
        f = self.pyramid.factor
        n = self.pyramid.geometry.cols
        step = max(f, rows_per_block(self.n_heads, n) // f * f)
        if hasattr(self.layer, "shape"):
            from ..analysis.row_statistics import blocks_of

            blocks = blocks_of(self.layer, step, causal_trim=self.causal)
        else:
            blocks = self.layer.row_blocks(step)
        for first, block in blocks:
            block = block.cpu()
            self.pyramid.add(first, block.float().numpy())
            yield first, block
            if self.checkpoint is not None:  # before the next block is computed
                self.checkpoint()


def page_sinks(pyramid: Any, causal: bool) -> list[list[int]]:
    """Each head's attention sinks (Gu et al. 2024), from the key columns' sums a page's
    :class:`~attnviz.render.pyramid.LayerPyramid` added up as blocks of rows arrived (a long layer is never
    whole): key k is a sink where α_k, its mean weight from the rows that see it, exceeds
    :data:`attnviz.analysis.statistics.SINK_THRESHOLD`. The :class:`~attnviz.render.page.PageBuilder`'s marker."""
    import numpy as np

    from ..analysis.statistics import SINK_THRESHOLD  # not at import: the page's modules load no torch

    rows, cols = pyramid.geometry.rows, pyramid.geometry.cols
    seeing = (rows - np.arange(cols)).clip(min=1) if causal and rows == cols else np.full(cols, rows)
    return [np.flatnonzero(pyramid.col_sum[h] / seeing > SINK_THRESHOLD).tolist() for h in range(pyramid.heads)]


def stats_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The page's head-statistics table from :meth:`attnviz.analysis.heads.HeadTable.rows` (layers as the model numbers them)."""
    from ..analysis.statistics import STATISTICS  # not at import: the page's modules load no torch

    columns = ["layer", "head", *STATISTICS]
    return {"columns": columns, "rows": [[row[c] for c in columns] + [row["labels"]] for row in rows],
            "descriptions": {name: statistic.description for name, statistic in STATISTICS.items()}}

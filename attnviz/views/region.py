"""A region of a long input's attention at full resolution: queries ``A:B`` over keys ``C:D``.

A long input's heatmap is a max-pooled overview (:mod:`attnviz.views.pooled`), whose rows and columns
are labelled with the positions they cover; a region of it is drawn here cell by cell. Only the
region's query rows are computed (:meth:`attnviz.sources.stream.ItemLayer.rows`), each block cut to
the region's keys at once, so a region of a 32,768-token text costs its rows, not the whole matrix.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import UsageError
from ..labels import printable
from ..render.view import FIGURE_CELLS, HeadChoice, HeatmapView, matrix_view
from ..spans import Span, resolve_span
from .pooled import chosen_heads, heatmap_layers, panel_titles

REGION_CELLS = FIGURE_CELLS
"""Queries, and keys, a region draws at most: what a picture draws cell by cell (a larger one would be pooled)."""

REGION_TOTAL = 16_000_000
"""Cells of a region's panels at most, all layers and heads together (128 MB of float64)."""


def check_region(rows: int, cols: int, n: int, *, panels: int = 1) -> None:
    """Refuse a region larger than :data:`REGION_CELLS` on a side or :data:`REGION_TOTAL` cells in all, in one
    line naming the limit and what to do."""
    if max(rows, cols) > REGION_CELLS:
        raise UsageError(f"[[rows]] and [[cols]] draw a region cell by cell, at most {REGION_CELLS:,} queries by "
                         f"{REGION_CELLS:,} keys; this one is {rows:,} × {cols:,} of {n:,} tokens: give a smaller "
                         "region, or leave them out for the whole text, max-pooled")
    if panels * rows * cols > REGION_TOTAL:
        raise UsageError(f"a region of {rows:,} × {cols:,} in {panels:,} panels is {panels * rows * cols:,} cells, "
                         f"over {REGION_TOTAL:,}: give [[layer]] N, a single [[head]] or a smaller region")


def region_view(source: Any, text: str | None, *, rows: Span = (None, None), cols: Span = (None, None),
                layer: int | None = None, head: HeadChoice = 0, pair: str | None = None, truncate: bool = False,
                vmax: float | None = None, cmap: str = "viridis") -> HeatmapView:
    """Queries ``rows`` over keys ``cols`` (token positions, the end not included) of self-attention,
    cell by cell: a ``head``, every head (``"all"``) or their ``"mean"``, in ``layer`` or in every
    layer (None). Row labels carry each token's position; the view knows where it starts
    (``row_start``, ``col_start``), so the terminal numbers its columns."""
    reader = heatmap_layers(source, text, layer=layer, pair=pair, truncate=truncate)
    header = reader.results[0]
    n = len(header.tokens)
    r0, r1 = resolve_span(rows, n, "rows")
    c0, c1 = resolve_span(cols, n, "cols")
    check_region(r1 - r0, c1 - c0, n)
    panels: list[torch.Tensor] = []
    titles: list[str] = []
    n_heads = 0
    for position, parts in reader:
        part = parts[0]
        del parts
        n_heads = part.n_heads
        chosen = chosen_heads(head, n_heads, header.model_name)
        if not panels:  # the panels every layer adds, before the first is cut
            check_region(r1 - r0, c1 - c0, n, panels=(1 if chosen is None else len(chosen)) * len(reader.layers))
        block = part.rows(r0, r1, (c0, c1))
        panels.append(block.mean(0, keepdim=True) if chosen is None else block[chosen])
        titles += panel_titles(head, chosen, reader.layers[position], layer is None)
        del part, block  # before the next layer is computed
    labels = [printable(t) for t in header.tokens]
    what = {"all": "every head", "mean": "mean of heads"}.get(str(head), f"head {head}")
    where = "every layer" if layer is None else f"layer {layer}"
    causal = " · causal" if header.causal else ""
    title = f"{header.model_name} · {where} · {what} · queries {r0}–{r1 - 1} × keys {c0}–{c1 - 1}{causal}"
    breaks = [i for i in range(1, n) if header.segment_ids[i] != header.segment_ids[i - 1]]
    view = matrix_view(
        torch.cat(panels).double().numpy(), labels[r0:r1], labels[c0:c1], title=title,
        panel_titles=titles, vmax=vmax, cmap=cmap, columns=n_heads if head == "all" and layer is None else None,
        row_breaks=[b - r0 for b in breaks if r0 < b < r1], col_breaks=[b - c0 for b in breaks if c0 < b < c1],
        notes=[f"a region of {n:,}×{n:,}: queries {r0}–{r1 - 1}, keys {c0}–{c1 - 1}, cell by cell"],
    )
    from dataclasses import replace

    rows_named = [f"{i} {labels[i]}" for i in range(r0, r1)]  # (printable already: its space is not a token's)
    return replace(view, row_labels=rows_named, row_start=r0, col_start=c0)

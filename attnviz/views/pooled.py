"""Heatmaps of inputs too long to draw cell by cell, pooled as each layer is computed.

A picture shows at most :data:`attnviz.render.view.FIGURE_CELLS` cells per axis, so a 4,096-token
input is max-pooled 4×4 before it is drawn. Here the pooling happens while the engine hands the
layer over as blocks of query rows (:meth:`attnviz.sources.stream.ItemLayer.row_blocks`): only the
pooled panels and each panel's column sums (for its attention sinks, found on the tokens
themselves) are kept, never a layer's ``[H, T, T]``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..analysis.metrics import rows_seeing
from ..attention.rows import rows_per_block
from ..errors import UsageError
from ..labels import head_name, printable
from ..render.view import FIGURE_CELLS, HeadChoice, HeatmapView, matrix_view, pooled_labels
from .heatmap import with_sinks

GRID_CELLS = 256  # cells per axis of each panel when every head is shown (a grid draws each one small)


def pooled_view(source: Any, text: str | None, *, layer: int | None, head: HeadChoice, pair: str | None = None,
                truncate: bool = False, vmax: float | None = None, cmap: str = "viridis") -> HeatmapView:
    """What :func:`attnviz.api.attention_view` shows of ``text`` (self-attention, tokens as they are),
    max-pooled to the picture's size block by block; the same titles, labels and sink marks."""
    every = layer is None
    stream = heatmap_layers(source, text, layer=layer, pair=pair, truncate=truncate)
    header = stream.results[0]
    n = len(header.tokens)
    factor = max(1, -(-n // (GRID_CELLS if head == "all" else FIGURE_CELLS)))
    panels: list[torch.Tensor] = []
    importance: list[torch.Tensor] = []
    titles: list[str] = []
    n_heads = 0
    for position, parts in stream:  # (not zip: it would hold the last layer while the next is computed)
        number = stream.layers[position]
        part = parts[0]
        del parts
        n_heads = part.n_heads
        chosen = chosen_heads(head, n_heads, header.model_name)
        pooled, sums = _pool_layer(part, chosen, factor)
        del part  # before the next layer is computed
        panels.append(pooled)
        importance.append(sums / rows_seeing(n, n, causal=header.causal))
        titles += panel_titles(head, chosen, number, every)
    what = {"all": "every head" if every else "all heads", "mean": "mean of heads"}.get(str(head), f"head {head}")
    causal = " · causal" if header.causal else ""
    title = f"{header.model_name} · {what} · every layer{causal}" if every else \
        f"{header.model_name} · layer {layer} · {what}{causal}"
    side = -(-n // factor)
    breaks = [i // factor for i in range(1, n) if header.segment_ids[i] != header.segment_ids[i - 1] and i % factor == 0]
    labels = [printable(t) for t in header.tokens]
    view = matrix_view(
        torch.cat(panels).double().numpy(), labels[::factor], labels[::factor], title=title, panel_titles=titles, vmax=vmax, cmap=cmap,
        columns=n_heads if head == "all" and every else None, row_breaks=breaks, col_breaks=breaks,
        notes=[] if factor == 1 else [f"downsampled {n}×{n} → {side}×{side} by max-pooling blocks of "
                                      f"{factor}×{factor} tokens, as each layer was computed"],
    )
    view = replace(view, row_labels=pooled_labels(labels, factor, ranges=True),  # (printable already)
                   token_step=factor, n_tokens=n)
    return with_sinks(view, causal=header.causal, importance=torch.cat(importance), labels=labels, factor=factor)


def heatmap_layers(source: Any, text: str | None, *, layer: int | None, pair: str | None, truncate: bool) -> Any:
    """The layer reader of a heatmap's text: ``layer`` (checked first) or every one, read as the model reads it."""
    from ..layer_range import check_layer
    from ..sources.layer_reader import read_layers

    if layer is not None:
        check_layer(layer, owner=source.name, count=source.n_layers)
    return read_layers(source, [text], truncate=truncate, layers=None if layer is None else [layer], pairs=[pair],
                       purpose="heatmap")


def chosen_heads(head: HeadChoice, n_heads: int, model_name: str) -> list[int] | None:
    """The heads drawn (None: their mean), checked against the model's."""
    if head == "mean":
        return None
    if head == "all":
        return list(range(n_heads))
    if not isinstance(head, int):
        raise UsageError(f"[[head={head}]] is no head: give a number from 0 to {n_heads - 1}, or all")
    from ..layer_range import check_head

    check_head(head, owner=model_name, count=n_heads)
    return [head]


def panel_titles(head: HeadChoice, chosen: list[int] | None, layer: int, every: bool) -> list[str]:
    """Each panel's title: its layer (every layer shown) and head."""
    if every:
        return [head_name(layer, h) for h in chosen] if head == "all" and chosen else [f"L{layer}"]
    if chosen is None:
        return ["mean of heads"]
    return [f"head {h}" for h in chosen]


def _pool_layer(part: Any, chosen: list[int] | None, factor: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's chosen heads (or their mean) max-pooled by ``factor``, ``[P, side, side]``, and
    their column sums ``[P, n]`` float64, from its blocks of query rows."""
    n = part.n_tokens
    side = -(-n // factor)
    count = 1 if chosen is None else len(chosen)
    pooled = torch.zeros(count, side, side)  # weights are ≥ 0: the columns a block leaves out are 0
    sums = torch.zeros(count, n, dtype=torch.float64)
    step = max(factor, rows_per_block(part.n_heads, n) // factor * factor)  # whole pooling windows per block
    for first, block in part.row_blocks(step):
        picked = block.mean(0, keepdim=True) if chosen is None else block[chosen]
        sums[:, : picked.shape[2]] += picked.sum(1, dtype=torch.float64)
        small = picked if factor == 1 else torch.nn.functional.max_pool2d(picked[None], factor, ceil_mode=True)[0]
        pooled[:, first // factor : first // factor + small.shape[1], : small.shape[2]] = small
    return pooled, sums


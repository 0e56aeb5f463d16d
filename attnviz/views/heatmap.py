"""A result's heatmap as a :class:`~attnviz.render.view.HeatmapView`: which layer, head and kind of
attention, the titles, and each panel's attention sinks (Gu et al. 2024), computed here so the renderers
only draw (docs/development.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError
from ..render.view import HeadChoice, HeatmapView, Kind, every_layer_panels, matrix_view, select_panels

if TYPE_CHECKING:  # pragma: no cover
    from ..result import AttentionResult


def heatmap_view(
    result: AttentionResult,
    *,
    layer: int = 0,
    head: HeadChoice = 0,
    kind: Kind = "self",
    vmax: float | None = None,
    cmap: str = "viridis",
) -> HeatmapView:
    """Select ``kind``, ``layer`` and ``head`` of ``result``; check them against the model's shape.

    ``kind`` is ``self`` (or ``encoder``) for the attentions over the input, and for
    encoder-decoder models ``decoder`` (target over target) or ``cross`` (target queries over
    source keys). A cross-only result (one cross-attention layer) shows its cross-attention for
    ``self``, and is titled so.
    """
    from ..analysis.transforms import (  # torch: not at import (drawing processes never load it)
        kind_tensor,
        resolved_kind,
    )

    tensor, rows, cols = kind_tensor(result, kind)
    kind = resolved_kind(result, kind)
    captured = result.metadata.get("layers")
    if captured is not None and kind in ("self", "encoder", "decoder", "cross"):
        if layer not in captured:
            raise UsageError(f"layer {layer} was not captured; this result holds layers {', '.join(map(str, captured))}")
        position = captured.index(layer)
        panels, titles, what = select_panels(tensor, position, head, result.model_name)
    else:
        panels, titles, what = select_panels(tensor, layer, head, result.model_name)
    where = "" if kind == "self" else f" · {kind}"
    title = f"{result.model_name}{where} · layer {layer} · {what}" + (" · causal" if result.causal and kind == "self" else "")
    breaks = [i for i in range(1, len(result.segment_ids)) if result.segment_ids[i] != result.segment_ids[i - 1]]
    view = matrix_view(
        panels, rows, cols, title=title, panel_titles=titles, vmax=vmax, cmap=cmap,
        row_breaks=breaks if kind in ("self", "encoder") else [],
        col_breaks=breaks if kind in ("self", "encoder", "cross") else [],
    )
    return with_sinks(view, causal=result.causal and kind in ("self", "decoder"))


def head_across_layers_view(
    result: AttentionResult,
    *,
    head: HeadChoice = 0,
    kind: Kind = "self",
    vmax: float | None = None,
    cmap: str = "viridis",
) -> HeatmapView:
    """One head (or the mean of the heads, ``"mean"``) in every layer ``result`` holds: a panel per
    layer; ``head="all"``: every head of every layer, one row of the grid per layer (the model view)."""
    from ..analysis.transforms import (  # torch: not at import (drawing processes never load it)
        kind_tensor,
        resolved_kind,
    )

    tensor, rows, cols = kind_tensor(result, kind)
    kind = resolved_kind(result, kind)  # cross-only: cross, in the title too
    layers = result.metadata.get("layers") or list(range(tensor.shape[0]))
    panels, titles, what, columns = every_layer_panels(tensor, layers, head, result.model_name)
    where = "" if kind in ("self", "encoder") else f" · {kind}"
    title = f"{result.model_name}{where} · {what} · every layer" + (" · causal" if result.causal and kind == "self" else "")
    breaks = [i for i in range(1, len(result.segment_ids)) if result.segment_ids[i] != result.segment_ids[i - 1]]
    view = matrix_view(
        panels, rows, cols, title=title, panel_titles=titles, vmax=vmax, cmap=cmap, columns=columns,
        row_breaks=breaks if kind in ("self", "encoder") else [],
        col_breaks=breaks if kind in ("self", "encoder", "cross") else [],
    )
    return with_sinks(view, causal=result.causal and kind in ("self", "decoder"))


def with_sinks(view: HeatmapView, *, causal: bool, importance: Any = None, labels: list[str] | None = None,
               factor: int = 1) -> HeatmapView:
    """``view`` with each attention panel's sinks marked (keys k with α_k > 0.3, Gu et al. 2024; see
    :func:`attnviz.analysis.metrics.sink_importance`) and named in a note. The mean of heads has none.

    A view already pooled by ``factor`` gives each panel's ``importance`` ``[P, k]`` and the key
    ``labels`` at full resolution: sinks are found on the tokens, and marked on their blocks."""
    import torch

    from ..analysis import metrics

    if importance is None:
        importance = metrics.sink_importance(torch.from_numpy(np.ascontiguousarray(view.panels))[None], causal=causal)[0]
    labels = view.col_labels if labels is None else labels
    found = [[] if title == "mean of heads" else metrics.sink_positions(importance[p])
             for p, title in enumerate(view.panel_titles)]
    marks = [sorted({k // factor for k in keys}) for keys in found]
    # Panels with the same sinks are named together ("[CLS] (0) in head 5, head 6, head 8"): most heads
    # of a model share its first token as their sink, and one item per panel made a note of many lines.
    groups: dict[tuple[int, ...], list[str]] = {}
    for title, keys in zip(view.panel_titles, found, strict=True):
        if keys:
            groups.setdefault(tuple(keys), []).append(title)
    if not groups:
        return replace(view, marks=marks)
    items = []
    for shared, titles in sorted(groups.items(), key=lambda g: -len(g[1]))[:4]:
        where = ", ".join(f"{labels[k]} ({k})" for k in shared[:4]) + (" …" if len(shared) > 4 else "")
        who = ", ".join(titles[:6]) + (f" and {len(titles) - 6} more" if len(titles) > 6 else "")
        items.append(f"{where} in {who}")
    if len(groups) > 4:
        rest = sum(len(t) for k, t in sorted(groups.items(), key=lambda g: -len(g[1]))[4:])
        items.append(f"other sinks in {rest} more panel{'s' if rest > 1 else ''}")
    shown = "; ".join(items)
    return replace(view, marks=marks, notes=[*view.notes, f"▼ attention sinks (α > 0.3, Gu et al. 2024): {shown}"])

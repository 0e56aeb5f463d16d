"""What a heatmap shows, decided once for both renderers: which matrices, labels, titles, scale.

A :class:`HeatmapView` holds numbers already computed; which panels of a result it shows and where its
attention sinks are is :mod:`attnviz.views.heatmap`'s (renderers compute no statistics)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from ..errors import UsageError
from ..labels import head_name, printable
from .colors import ColorScale

HeadChoice = int | Literal["all", "mean"]
Kind = Literal["self", "encoder", "decoder", "cross"]
FIGURE_CELLS = 1024  # cells per axis an image file draws; a longer input is max-pooled to this first


@dataclass(frozen=True)
class HeatmapView:
    """One or more attention matrices ready to draw.

    ``panels`` is ``[P, Q, K]``: one panel for a single head or the mean, one per head for
    ``--head all``. Rows are queries (who looks), columns are keys (who is looked at).
    """

    panels: np.ndarray
    panel_titles: list[str]
    row_labels: list[str]
    col_labels: list[str]
    title: str
    scale: ColorScale
    notes: list[str] = field(default_factory=list)
    row_breaks: list[int] = field(default_factory=list)  # rows where a new segment (--pair) starts
    col_breaks: list[int] = field(default_factory=list)
    row_axis: str = "queries (who attends)"
    col_axis: str = "keys (attended to)"
    value_name: str = "attention weight"
    columns: int | None = None  # panels per row of a grid (every head of every layer: one row per layer)
    marks: list[list[int]] = field(default_factory=list)  # per panel: its attention sinks' key columns
    pool_rows: bool = True  # False: rows are not tokens (layers of a mixing ratio) and are never pooled
    token_step: int = 1  # tokens per row and column already (a long input pooled as it was computed)
    n_tokens: int | None = None  # the tokens before that pooling (token_step > 1)
    row_start: int | None = None  # a region (heatmap --rows/--cols): the positions of its first row and column;
    col_start: int = 0  # its row labels start with their positions


def every_layer_panels(tensor: Any, layers: list[int], head: HeadChoice,
                       model_name: str) -> tuple[np.ndarray, list[str], str, int | None]:
    """Panels of a ``[layers, heads, q, k]`` tensor in every layer: one head or the mean (a panel per
    layer), or every head (``"all"``: a grid with a row per layer). Returns the panels, their
    titles, what they show, and the grid's columns (None: as the renderer likes)."""
    n_heads = tensor.shape[1]
    if head == "all":
        grid = np.asarray(tensor, dtype=np.float64)
        panels = grid.reshape(-1, *grid.shape[2:])
        titles = [head_name(layer, h) for layer in layers for h in range(n_heads)]
        return panels, titles, "every head", n_heads
    if head == "mean":
        return np.asarray(tensor.double().mean(1)), [f"L{la}" for la in layers], "mean of heads", None
    if not isinstance(head, int):
        raise UsageError(f"[[head={head}]] is no head: give a number from 0 to {n_heads - 1}, mean or all")
    from ..layer_range import check_head

    check_head(head, owner=model_name, count=n_heads)
    return np.asarray(tensor[:, head].double()), [f"L{la}" for la in layers], f"head {head}", None


def select_panels(tensor: Any, layer: int, head: HeadChoice, model_name: str) -> tuple[np.ndarray, list[str], str]:
    """Panels ``[P, Q, K]`` of one layer of a ``[layers, heads, q, k]`` tensor: a head, all, or their mean."""
    n_layers, n_heads = tensor.shape[0], tensor.shape[1]
    from ..layer_range import check_layer

    check_layer(layer, owner=model_name, count=n_layers)
    attn = np.asarray(tensor[layer], dtype=np.float64)  # (H, Q, K)
    if head == "all":
        return attn, [f"head {h}" for h in range(n_heads)], "all heads"
    if head == "mean":
        return attn.mean(axis=0, keepdims=True), ["mean of heads"], "mean of heads"
    from ..layer_range import check_head

    check_head(head, owner=model_name, count=n_heads)
    return attn[head : head + 1], [f"head {head}"], f"head {head}"


def matrix_view(
    panels: np.ndarray,
    rows: list[str],
    cols: list[str],
    *,
    title: str,
    panel_titles: list[str],
    vmax: float | None = None,
    cmap: str = "viridis",
    row_breaks: list[int] | None = None,
    col_breaks: list[int] | None = None,
    notes: list[str] | None = None,
    row_axis: str = "queries (who attends)",
    col_axis: str = "keys (attended to)",
    value_name: str = "attention weight",
    columns: int | None = None,
    signed: bool = False,
) -> HeatmapView:
    """A view of any matrices ``[P, Q, K]`` (attention, rollout, distances) with printable labels;
    ``columns``: panels per row of the grid (default: as the renderer likes). ``signed`` values
    (attention × gradient) get a scale symmetric about zero."""
    return HeatmapView(
        panels=np.asarray(panels, dtype=np.float64),
        panel_titles=panel_titles,
        row_labels=[printable(t) for t in rows],
        col_labels=[printable(t) for t in cols],
        title=title,
        scale=ColorScale.symmetric(panels, cmap=cmap) if signed else ColorScale.for_values(panels, vmax=vmax, cmap=cmap),
        notes=list(notes or []),
        row_breaks=list(row_breaks or []),
        col_breaks=list(col_breaks or []),
        row_axis=row_axis,
        col_axis=col_axis,
        value_name=value_name,
        columns=columns,
    )


def max_pool(view: HeatmapView, factor: int) -> HeatmapView:
    """Shrink both axes by ``factor`` with max-pooling, so a strong weight never disappears.

    A pooled cell holds the largest weight of its ``factor × factor`` block; its label is the
    first token of the block, and rows also show the range of positions the block covers. In a
    signed view (a scale below zero: attention × gradient) the cell holds the value of largest
    magnitude, sign kept, so a strong negative survives as well as a strong positive. A view whose
    rows are not tokens (``pool_rows=False``) is pooled along its columns only.
    """
    if factor <= 1:
        return view
    rf = factor if view.pool_rows else 1
    p, q, k = view.panels.shape
    qn, kn = -(-q // rf), -(-k // factor)
    if view.scale.vmin < 0:
        padded = np.zeros((p, qn * rf, kn * factor))
        padded[:, :q, :k] = view.panels
        size = np.full(padded.shape, -1.0)  # padding never wins
        size[:, :q, :k] = np.abs(np.nan_to_num(view.panels, nan=-1.0))
        blocks = padded.reshape(p, qn, rf, kn, factor).transpose(0, 1, 3, 2, 4).reshape(p, qn, kn, -1)
        which = size.reshape(p, qn, rf, kn, factor).transpose(0, 1, 3, 2, 4).reshape(p, qn, kn, -1).argmax(-1)
        pooled = np.take_along_axis(blocks, which[..., None], axis=-1)[..., 0]
    else:
        padded = np.full((p, qn * rf, kn * factor), -np.inf)
        padded[:, :q, :k] = view.panels
        pooled = padded.reshape(p, qn, rf, kn, factor).max(axis=(2, 4))

    how = "the value of largest magnitude in" if view.scale.vmin < 0 else "max-pooling"
    step = view.token_step
    unit = f"{rf * step}×{factor * step} tokens" if view.pool_rows else f"{factor} tokens along the columns"
    if step > 1:  # pooled before (as computed): the note and the row ranges count tokens, not cells
        n = view.n_tokens or q * step
        note = f"downsampled {n}×{n} → {qn}×{kn} by {how} blocks of {unit}"
        rows = [f"{i * rf * step}-{min((i + 1) * rf * step, n) - 1} {view.col_labels[i * rf]}" for i in range(qn)]
        notes = [x for x in view.notes if not x.startswith("downsampled")]
    elif view.row_start is not None:  # a region: positions from its start, its labels' own positions dropped
        note = f"downsampled {q}×{k} → {qn}×{kn} by {how} blocks of {unit}"
        tokens = [label.split(" ", 1)[-1] for label in view.row_labels]
        rows, notes = pooled_labels(tokens, rf, ranges=True, start=view.row_start), view.notes
    else:
        note = f"downsampled {q}×{k} → {qn}×{kn} by {how} blocks of {unit}"
        rows, notes = pooled_labels(view.row_labels, rf, ranges=True), view.notes
    return replace(
        view,
        panels=pooled,
        token_step=step * factor,
        row_labels=rows,
        col_labels=pooled_labels(view.col_labels, factor),
        notes=[*notes, note],
        row_breaks=sorted({b // rf for b in view.row_breaks if b % rf == 0}),
        col_breaks=sorted({b // factor for b in view.col_breaks if b % factor == 0}),
        marks=[sorted({k // factor for k in keys}) for keys in view.marks],
    )


def pooled_labels(names: list[str], step: int, *, ranges: bool = False, start: int = 0) -> list[str]:
    """The label of each block of ``step`` tokens: its first token's, after the positions it covers
    with ``ranges`` (counted from ``start``: a region's first position)."""
    first = [names[i] for i in range(0, len(names), step)]
    if not ranges or step == 1:
        return first
    return [f"{start + i * step}-{start + min((i + 1) * step, len(names)) - 1} {t}" for i, t in enumerate(first)]

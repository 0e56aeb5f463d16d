"""The compare-heads report: computed here, drawn by the renderers, printed or saved by the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.text import Text

from .compare import HeadsOverview, cluster_order, extreme_pairs
from .render.tables import pairs_table, ranking_table
from .render.terminal import render_terminal, render_thumbnails
from .render.view import matrix_view


def comparison_report(
    overview: HeadsOverview,
    *,
    console: Console,
    out: Path | None,
    top: int,
    cmap: str,
    other: HeadsOverview | None = None,
    change: tuple[torch.Tensor, str] | None = None,
    other_name: str | None = None,
) -> None:
    """Small multiples of the overview's heads, then either the clustered head-distance matrix and
    the extreme pairs, or (with ``other`` and ``change``, ``[layers, heads]`` and how it was
    measured) how much each head changes between the two runs."""
    layers, n_heads, names = overview.layers, overview.n_heads, overview.names
    if change is None:
        dist = overview.distance
        order = cluster_order(dist)
        matrix = dist[np.ix_(order, order)]
        rows = cols = [names[i] for i in order]
        matrix_title = "Jensen–Shannon distance between heads (clustered order)"
        pairs = extreme_pairs(dist, names, k=top)
    else:
        matrix = change[0].numpy()[layers]
        rows, cols = [f"L{li}" for li in layers], [f"H{h}" for h in range(n_heads)]
        matrix_title = f"change per head vs {other_name}: {change[1]}"
        pairs = None
    distance_notes = [n for n in overview.notes if n.startswith("head distances")] if change is None else []
    which = "" if len(layers) > 1 else f" of layer {layers[0]}"
    title = f"{overview.model_name} · every head{which}"
    if out is not None:
        from .render.compare_image import render_comparison

        path = render_comparison(overview.display.numpy(), overview.labels, layers, matrix, rows, cols, title=title,
                                 matrix_title="; ".join([matrix_title, *distance_notes]), path=out, cmap=cmap)
        console.print(f"wrote {path}")
    else:
        for run, label in ((overview, "on the text"), (other, f"on {other_name}")):
            if run is None:
                continue
            shown = [n for n in run.notes if not n.startswith("head distances")]
            heads_view = matrix_view(run.display.reshape(-1, *run.display.shape[-2:]).numpy(), run.labels, run.labels,
                                     title=f"{run.model_name} · every head {label}", notes=shown,
                                     panel_titles=[""] * (len(layers) * n_heads), cmap=cmap)
            render_thumbnails(heads_view, console, layers=layers)
        console.print()
        axis = "heads" if change is None else "layers"
        view = matrix_view(matrix[None], rows, cols, title=matrix_title, panel_titles=[""], cmap=cmap,
                           row_axis=axis, col_axis="heads", value_name="distance", notes=distance_notes)
        render_terminal(view, console)
    if pairs is not None:
        console.print(pairs_table("most similar pairs of heads", pairs.most_similar, "JS distance"))
        console.print(pairs_table("most different pairs of heads", pairs.most_different, "JS distance"))
        for note in distance_notes:
            console.print(Text(note, style="dim"))
    else:
        flat = [(f"L{li}H{h}", float(matrix[i, h])) for i, li in enumerate(layers) for h in range(n_heads)]
        flat.sort(key=lambda item: item[1], reverse=True)
        console.print(ranking_table(f"heads that change most vs {other_name}", flat[:top], "change"))

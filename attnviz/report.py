"""The compare-heads report: computed here, drawn by the renderers, printed or saved by the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console

from . import metrics
from .compare import cluster_order, compare_runs, extreme_pairs, head_names
from .errors import UsageError
from .render.tables import pairs_table, ranking_table
from .render.terminal import render_terminal, render_thumbnails
from .render.view import matrix_view
from .result import AttentionResult


def comparison_report(
    result: AttentionResult,
    other: AttentionResult | None,
    layer: int | None,
    *,
    console: Console,
    out: Path | None,
    top: int,
    cmap: str,
    other_name: str | None,
) -> None:
    """Small multiples of the chosen layers' heads, then either the clustered head-distance matrix and
    the extreme pairs, or (with ``other``) how much each head changes between the two runs."""
    n_layers, n_heads = result.n_layers, result.n_heads
    if layer is not None and layer >= n_layers:
        raise UsageError(f"--layer {layer} is out of range; {result.model_name} has layers 0 to {n_layers - 1}")
    layers = list(range(n_layers)) if layer is None else [layer]
    attn = result.attentions[layers]  # (L', H, T, T)
    names = head_names(n_layers, n_heads)
    names = [n for i, n in enumerate(names) if i // n_heads in layers]
    if other is None:
        dist = metrics.head_distance(attn).numpy()
        order = cluster_order(dist)
        matrix = dist[np.ix_(order, order)]
        rows = cols = [names[i] for i in order]
        matrix_title = "Jensen–Shannon distance between heads (clustered order)"
        pairs = extreme_pairs(dist, names, k=top)
    else:
        change, how = compare_runs(result, other)
        if other.tokens != result.tokens and other.attentions.shape == result.attentions.shape:
            import warnings

            from .errors import AttnvizWarning

            warnings.warn("the two runs have the same number of tokens but different tokens; heads are compared "
                          "position by position", AttnvizWarning, stacklevel=2)
        matrix = change.numpy()[layers]
        rows, cols = [f"L{li}" for li in layers], [f"H{h}" for h in range(n_heads)]
        matrix_title = f"change per head vs {other_name}: {how}"
        pairs = None
    title = f"{result.model_name} · every head" + ("" if layer is None else f" of layer {layer}")
    if out is not None:
        from .render.compare_image import render_comparison

        path = render_comparison(attn.numpy(), result.tokens, layers, matrix, rows, cols, title=title,
                                 matrix_title=matrix_title, path=out, cmap=cmap)
        console.print(f"wrote {path}")
    else:
        for run, label in ((result, "on the text"), (other, f"on {other_name}")):
            if run is None:
                continue
            heads_view = matrix_view(run.attentions[layers].reshape(-1, *run.attentions.shape[-2:]).numpy(),
                                     run.tokens, run.tokens, title=f"{run.model_name} · every head {label}",
                                     panel_titles=[""] * (len(layers) * n_heads), cmap=cmap)
            render_thumbnails(heads_view, console, layers=layers)
        console.print()
        axis = "heads" if other is None else "layers"
        view = matrix_view(matrix[None], rows, cols, title=matrix_title, panel_titles=[""], cmap=cmap,
                           row_axis=axis, col_axis="heads", value_name="distance")
        render_terminal(view, console)
    if pairs is not None:
        console.print(pairs_table("most similar pairs of heads", pairs.most_similar, "JS distance"))
        console.print(pairs_table("most different pairs of heads", pairs.most_different, "JS distance"))
    else:
        flat = [(f"L{li}H{h}", float(matrix[i, h])) for i, li in enumerate(layers) for h in range(n_heads)]
        flat.sort(key=lambda item: item[1], reverse=True)
        console.print(ranking_table(f"heads that change most vs {other_name}", flat[:top], "change"))

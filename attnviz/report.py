"""The compare-heads report: the comparison computed (attnviz.analysis.compare), then drawn with the
renderers' pieces (a matrix view, small multiples, tables, the comparison figure). The drawing of a
:class:`~attnviz.analysis.compare.Comparison` is here, above analysis, so the renderers never name an
analysis type (docs/development.md)."""

from __future__ import annotations

from pathlib import Path

import torch
from rich.text import Text

from .analysis.compare import Comparison, HeadsOverview, comparison
from .render.tables import pairs_table, ranking_table
from .render.terminal import Screen, render_terminal, render_thumbnails
from .render.view import matrix_view


def comparison_report(
    overview: HeadsOverview,
    *,
    console: Screen,
    out: Path | None,
    top: int,
    cmap: str,
    other: HeadsOverview | None = None,
    change: tuple[torch.Tensor, str] | None = None,
    other_name: str | None = None,
) -> None:
    """Compute the comparison; the answer first (its pairs, or the heads that change most), then the
    picture: drawn to ``out`` (an image) or to ``console`` below the answer."""
    result = comparison(overview, top=top, other=other, change=change, other_name=other_name)
    render_comparison_lists(result, console)
    if out is not None:
        console.print(f"wrote {render_comparison_image(result, out, cmap=cmap)}")
    else:
        render_comparison_terminal(result, console, cmap=cmap)


def comparison_title(comparison: Comparison) -> str:
    layers = comparison.overview.layers
    which = "" if len(layers) > 1 else f" of layer {layers[0]}"
    return f"{comparison.overview.model_name} · every head{which}"


def render_comparison_image(comparison: Comparison, path: str | Path, *, cmap: str = "viridis") -> Path:
    """The heads as a labelled grid and the matrix beside them, to PNG, SVG or PDF."""
    from .render.compare_image import render_comparison

    overview = comparison.overview
    return render_comparison(overview.display.numpy(), overview.labels, overview.layers, comparison.matrix,
                             comparison.rows, comparison.cols, title=comparison_title(comparison),
                             matrix_title="; ".join([comparison.matrix_title, *comparison.notes]), path=path, cmap=cmap)


def render_comparison_terminal(comparison: Comparison, console: Screen, *, cmap: str = "viridis") -> None:
    """Small multiples of the heads (of both runs, against another), the matrix, and the pairs or ranking."""
    overview, layers = comparison.overview, comparison.overview.layers
    for run, label in ((overview, "on the text"), (comparison.other, f"on {comparison.other_name}")):
        if run is None:
            continue
        shown = [n for n in run.notes if not n.startswith("head distances")]
        heads_view = matrix_view(run.display.reshape(-1, *run.display.shape[-2:]).numpy(), run.labels, run.labels,
                                 title=f"{run.model_name} · every head {label}", notes=shown,
                                 panel_titles=[""] * (len(layers) * overview.n_heads), cmap=cmap)
        render_thumbnails(heads_view, console, layers=layers)
    console.print()
    axis = "heads" if comparison.pairs is not None else "layers"
    view = matrix_view(comparison.matrix[None], comparison.rows, comparison.cols, title=comparison.matrix_title,
                       panel_titles=[""], cmap=cmap, row_axis=axis, col_axis="heads", value_name="distance",
                       notes=comparison.notes)
    render_terminal(view, console)


def render_comparison_lists(comparison: Comparison, console: Screen) -> None:
    """The most similar and most different pairs, or the heads that change most."""
    if comparison.pairs is not None:
        # Clark et al. 2019's head distance: the Jensen–Shannon divergence of each query row, summed over the
        # rows (so it grows with the text; each row's term is at most ln 2).
        column = "JS, sum of rows"
        console.print(pairs_table("most similar pairs of heads", comparison.pairs.most_similar, column))
        console.print(pairs_table("most different pairs of heads", comparison.pairs.most_different, column))
        for note in comparison.notes:
            console.print(Text(note, style="dim"))
    elif comparison.ranking is not None:
        console.print(ranking_table(f"heads that change most vs {comparison.other_name}", comparison.ranking, "change"))

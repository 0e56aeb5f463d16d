"""The compare-heads report: the comparison computed (attnviz.analysis.compare), drawn (attnviz.render.comparison)."""

from __future__ import annotations

from pathlib import Path

import torch
from rich.console import Console

from .analysis.compare import HeadsOverview, comparison
from .render.comparison import render_comparison_image, render_comparison_lists, render_comparison_terminal


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
    """Compute the comparison; the answer first (its pairs, or the heads that change most), then the
    picture: drawn to ``out`` (an image) or to ``console`` below the answer."""
    result = comparison(overview, top=top, other=other, change=change, other_name=other_name)
    render_comparison_lists(result, console)
    if out is not None:
        console.print(f"wrote {render_comparison_image(result, out, cmap=cmap)}")
    else:
        render_comparison_terminal(result, console, cmap=cmap)

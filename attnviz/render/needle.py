"""A needle grid drawn: the depth × length grid of recall and the layers × heads grid of retrieval scores, as
one figure (PNG, SVG, PDF) and as terminal tables. Draws what it is given; computes nothing."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from ..labels import safe_text
from .output import check_output_path


def _percent(value: float) -> str:
    return "·" if math.isnan(value) else f"{round(100 * value)}"


def _recall_style(value: float) -> str:
    if math.isnan(value):
        return "dim"
    return "bold green" if value >= 0.999 else "green" if value >= 0.5 else "yellow" if value > 0 else "red"


def success_table(success: Sequence[Sequence[float]], lengths: Sequence[int], depths: Sequence[float]) -> Table:
    """Recall of the needle (%) per depth (rows) and length (columns): ≥ 50 retrieved."""
    table = Table(box=None, pad_edge=False)
    table.add_column("depth", justify="right", style="dim")
    for length in lengths:
        table.add_column(f"{length:,}", justify="right")
    for depth, row in zip(depths, success, strict=True):
        table.add_row(f"{round(100 * depth)}%", *[Text(_percent(v), style=_recall_style(v)) for v in row])
    return table


def heads_table(rows: Sequence[dict[str, Any]]) -> Table:
    """Heads ranked by retrieval score: rank, head, both scores, and the retrieval label."""
    table = Table(box=None, pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (("#", "right"), ("head", "left"), ("retrieval", "right"),
        ("reasoning", "right"), ("label", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for row in rows:
        table.add_row(str(row["rank"]), str(row["name"]), f"{row['retrieval_score']:.3f}",
                      f"{row['reasoning_score']:.3f}", Text("retrieval", style="bold") if row["retrieval"] else "")
    return table


def runs_table(runs: Sequence[dict[str, Any]], *, width: int) -> Table:
    """Each run's cell, recall, the needle's words its answer missed (why the recall is below 100) and the answer
    itself, whole: wrapped to the terminal's width, never cut."""
    table = Table(box=None, pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (("length", "right"), ("depth", "right"), ("recall", "right"),
        ("missed", "left"), ("answer", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold", ratio=2 if name == "answer" else
                         1 if name == "missed" else None)
    for run in runs:
        answer = safe_text(" ".join(str(run["answer"]).split())) or "(nothing)"
        missed = run.get("missed")
        table.add_row(f"{run['length']:,}", f"{round(100 * run['depth'])}%",
                      Text(_percent(run["recall"]), style=_recall_style(run["recall"])),
                      "—" if not missed else safe_text(" ".join(missed)), answer)
    return table


def needle_figure(success: Sequence[Sequence[float]], lengths: Sequence[int], depths: Sequence[float],
                  scores: Sequence[Sequence[float]], *, title: str, path: str | Path, cmap: str = "viridis") -> Path:
    """Write the recall grid beside the heads' retrieval scores to ``path`` (.png, .svg or .pdf)."""
    import numpy as np
    from matplotlib import colormaps, rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .figure_style import DPI, STABLE_RC, save_figure
    from .fonts import font_chain
    from .image import warn_missing

    path = check_output_path(path)
    grid = np.array(success, dtype=float)
    heads = np.array(scores, dtype=float)
    title = safe_text(title)
    families, missing = font_chain([title])
    warn_missing(missing)
    n_layers, n_heads = heads.shape
    left_w = max(3.0, 0.75 * len(lengths) + 1.4)
    right_w = max(3.0, min(12.0, 0.22 * n_heads + 1.6))
    height = max(3.2, min(12.0, 0.35 * max(len(depths), n_layers) + 1.8))
    with rc_context({"font.family": families, **STABLE_RC}):
        fig = Figure(figsize=(left_w + right_w + 0.6, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        fig.suptitle(textwrap.fill(title, 90), fontsize=9)
        ax1, ax2 = fig.subplots(1, 2, width_ratios=[left_w, right_w])
        shown = ax1.imshow(np.ma.masked_invalid(100 * grid), cmap=colormaps["RdYlGn"], vmin=0.0, vmax=100.0,
                           aspect="auto", interpolation="nearest")  # in percent, as the cells and the terminal say
        ax1.set_xticks(range(len(lengths)), [f"{n:,}" for n in lengths], fontsize=7, rotation=45)
        ax1.set_yticks(range(len(depths)), [f"{round(100 * d)}%" for d in depths], fontsize=7)
        ax1.set_xlabel("prompt length (tokens)", fontsize=8)
        ax1.set_ylabel("needle depth", fontsize=8)
        ax1.set_title("recall of the needle (ROUGE-1)", fontsize=8)
        if grid.size <= 400:
            for (i, j), value in np.ndenumerate(grid):
                ax1.text(j, i, _percent(value), ha="center", va="center", fontsize=6)
        recall_bar = fig.colorbar(shown, ax=ax1, shrink=0.9)
        recall_bar.ax.tick_params(labelsize=6)
        recall_bar.set_label("recall (%)", fontsize=7)
        finite = heads[np.isfinite(heads)]
        top = float(finite.max()) if finite.size else 0.0
        top = top if top > 0 else 1.0  # every head 0 (no run retrieved): the scores' own scale, 0 to 1
        drawn = ax2.imshow(heads, cmap=colormaps[cmap], vmin=0.0, vmax=top, aspect="auto", interpolation="nearest")
        step_x, step_y = max(1, math.ceil(n_heads / 32)), max(1, math.ceil(n_layers / 32))
        ax2.set_xticks(range(0, n_heads, step_x), [str(h) for h in range(0, n_heads, step_x)], fontsize=6)
        ax2.set_yticks(range(0, n_layers, step_y), [str(layer) for layer in range(0, n_layers, step_y)], fontsize=6)
        ax2.set_xlabel("head", fontsize=8)
        ax2.set_ylabel("layer", fontsize=8)
        ax2.set_title("retrieval score (Wu et al. 2024)", fontsize=8)
        fig.colorbar(drawn, ax=ax2, shrink=0.9).ax.tick_params(labelsize=6)
        save_figure(fig, path)
    return path


__all__ = ["heads_table", "needle_figure", "runs_table", "success_table"]

"""What ``attnviz align-heads`` writes (:mod:`.head_search`'s result): JSON (the whole search), CSV (the heads
ranked) and PNG (the layers × heads grid of each head's error, or label-free score, the chosen heads marked)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .head_search import COLUMNS, HeadSearch

SUFFIXES = (".json", ".csv", ".png")


def write_head_search(path: str | os.PathLike[str], search: HeadSearch) -> Path:
    """``search`` written to ``path``, its kind from its extension (:data:`SUFFIXES`)."""
    from ..fileio import write_json
    from ..tables import write_rows

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return write_json(path, search.to_dict())
    if suffix == ".csv":
        write_rows(path, search.rows(), list(COLUMNS))
        return path
    if suffix == ".png":
        return head_grid_figure(search, path)
    from ..errors import UnknownFormatError

    raise UnknownFormatError(f"cannot write {path}: use one of {', '.join(SUFFIXES)}")


def head_grid_figure(search: HeadSearch, path: Path) -> Path:
    """The ``[layers, heads]`` grid of ``search`` drawn to ``path``: a cell per head coloured by its mean boundary
    error (ms; lower is better) or its label-free score, a colour bar, the chosen heads outlined."""
    labelled = search.labelled
    grid = search.grid()
    clips = len(search.clips)
    title = f"{search.model}: " + (f"mean word-boundary error of each head's own timings over {clips} "
                                   f"clip{'s' if clips != 1 else ''}" if labelled
                                   else "label-free score (arXiv 2509.09987)")
    label = ("error (ms), lower is better; red: the set chosen" if labelled
             else "score, higher is better; red: the set chosen")
    return head_grid_png(grid * 1000 if labelled else grid, path, title=title, label=label,
                         cmap="viridis_r" if labelled else "viridis", outlined=search.chosen)


def head_grid_png(values: Any, path: Path, *, title: str, label: str, cmap: str = "viridis",
                  outlined: Sequence[tuple[int, int]] = (), centred: bool = False) -> Path:
    """A ``[layers, heads]`` grid of numbers drawn to ``path``: a cell per decoder head, a colour bar labelled
    ``label``, the heads ``outlined`` in red; ``centred``: a scale symmetric about 0 (a change)."""
    import math
    import textwrap

    import numpy as np
    from matplotlib import colormaps, rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from ..labels import safe_text
    from ..render.figure_style import DPI, STABLE_RC, save_figure

    values = np.asarray(values, dtype=np.float64)
    layers, heads = values.shape
    width = max(3.6, min(14.0, 0.35 * heads + 2.2))
    height = max(2.8, min(12.0, 0.35 * layers + 1.6))
    with rc_context(dict(STABLE_RC)):
        fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        norm = None
        if centred:
            reach = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
            norm = TwoSlopeNorm(0.0, -(reach or 1.0), reach or 1.0)
        drawn = ax.imshow(np.ma.masked_invalid(values), cmap=colormaps[cmap], norm=norm, aspect="auto",
                          interpolation="nearest")
        step_x, step_y = max(1, math.ceil(heads / 32)), max(1, math.ceil(layers / 32))
        ax.set_xticks(range(0, heads, step_x), [str(h) for h in range(0, heads, step_x)], fontsize=7)
        ax.set_yticks(range(0, layers, step_y), [str(layer) for layer in range(0, layers, step_y)], fontsize=7)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("decoder layer", fontsize=8)
        ax.set_title("\n".join(textwrap.wrap(safe_text(title), max(30, int(width * 11)))), fontsize=8)
        for layer, head in outlined:
            ax.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.6))
        bar = fig.colorbar(drawn, ax=ax, shrink=0.9)
        bar.ax.tick_params(labelsize=6)
        bar.set_label(label, fontsize=7)
        save_figure(fig, path)
    return path


def search_text(search: HeadSearch) -> dict[str, Any]:
    """The chosen set's summary as the terminal prints it: the set, its error, and its three forms."""
    from ..labels import head_name

    return {"chosen": ", ".join(head_name(layer, head) for layer, head in search.chosen), **search.forms()}

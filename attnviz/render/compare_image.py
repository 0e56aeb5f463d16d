"""The compare-heads figure: small multiples of every head, and the head-distance matrix beside them."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..fileio import check_output_path
from .colors import ColorScale
from .fonts import clean_label, font_chain
from .image import DPI, STABLE_RC, save_figure, warn_missing


def render_comparison(
    heads: np.ndarray,
    tokens: list[str],
    layers: list[int],
    matrix: np.ndarray,
    matrix_rows: list[str],
    matrix_cols: list[str],
    *,
    title: str,
    matrix_title: str,
    path: str | Path,
    cmap: str = "viridis",
) -> Path:
    """Draw ``heads`` ``[layers, heads, q, k]`` as a labelled grid (one row per layer) and ``matrix`` beside it."""
    from matplotlib import colormaps, rc_context
    from matplotlib.figure import Figure

    path = check_output_path(path)
    n_layers, n_heads = heads.shape[:2]
    labels = [clean_label(t) for t in tokens]
    families, missing = font_chain([*labels, *matrix_rows, title])
    warn_missing(missing)
    cell = 1.6
    width = n_heads * cell + max(6.0, 0.12 * len(matrix_cols) + 3)
    height = max(n_layers * cell + 1.5, 0.12 * len(matrix_rows) + 3, 6.0)
    with rc_context({"font.family": families, **STABLE_RC}):
        fig = Figure(figsize=(min(width, 60), min(height, 60)), dpi=DPI, layout="constrained")
        left, right = fig.subfigures(1, 2, width_ratios=[n_heads * cell, max(6.0, 0.12 * len(matrix_cols) + 3)])
        axes = left.subplots(n_layers, n_heads, squeeze=False)
        tick = max(1, math.ceil(len(labels) / 24))
        heads_scale = ColorScale.for_values(heads, cmap=cmap)  # as every other renderer scales
        for li in range(n_layers):
            for h in range(n_heads):
                ax = axes[li, h]
                ax.imshow(heads[li, h], cmap=colormaps[cmap], vmin=heads_scale.vmin, vmax=heads_scale.vmax,
                          interpolation="nearest")
                ax.set_title(f"L{layers[li]}H{h}", fontsize=6, pad=2)
                ax.set_xticks([])
                ax.set_yticks([])
                if h == 0:
                    ax.set_yticks(range(0, len(labels), tick), labels[::tick], fontsize=4)
                if li == n_layers - 1:
                    ax.set_xticks(range(0, len(labels), tick), labels[::tick], fontsize=4, rotation=90)
                ax.tick_params(length=0, pad=1)
        left.suptitle(title, fontsize=10)
        ax = right.subplots()
        matrix_scale = ColorScale.for_values(matrix, cmap=cmap)
        image = ax.imshow(matrix, cmap=colormaps[cmap], vmin=matrix_scale.vmin, vmax=matrix_scale.vmax,
                          interpolation="nearest", aspect="auto")
        size = 5 if len(matrix_cols) > 40 else 7
        ax.set_xticks(range(len(matrix_cols)), matrix_cols, rotation=90, fontsize=size)
        ax.set_yticks(range(len(matrix_rows)), matrix_rows, fontsize=size)
        ax.tick_params(length=0)
        right.colorbar(image, ax=ax, shrink=0.8)
        import textwrap

        ax.set_title(textwrap.fill(matrix_title, 60), fontsize=9)
        save_figure(fig, path)
    return path

"""The compare-heads figure: small multiples of every head, and the head-distance matrix beside them.

Every head's panel is an image on one Axes that spans the grid (72 Axes, one per head of MiniLM,
with constrained layout, took 7 s to lay out and draw); the positions are computed once from the
figure's size and the widest labels, measured as matplotlib draws them.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import check_output_path
from .colors import ColorScale
from .figure_style import DPI, STABLE_RC, save_figure
from .fonts import clean_label, font_chain
from .image import warn_missing

PANEL = 1.2  # inches: one head's panel
GAP = 0.08  # inches between panels
PAD = 0.1  # inches: around the figure's edge and between a label and what it names
MATRIX_WIDTH = 6.0  # inches at least, for the distance matrix with its labels and colorbar


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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = check_output_path(path)
    n_layers, n_heads = heads.shape[:2]
    labels = [clean_label(t) for t in tokens]
    families, missing = font_chain([*labels, *matrix_rows, title])
    warn_missing(missing)
    tick = max(1, math.ceil(len(labels) / 24))
    shown = labels[::tick]
    wrapped_title = textwrap.fill(matrix_title, 60)
    m_size = 5 if len(matrix_cols) > 40 else 7
    with rc_context({"font.family": families, **STABLE_RC}):
        fig = Figure(dpi=DPI)
        FigureCanvasAgg(fig)
        measure = _Measure(fig)
        label_w = measure.width(shown, 4) + 0.05
        title_h = measure.height(title, 10)
        panel_title_h = measure.height(["L0H0"], 6) + 0.03
        m_left = measure.width(matrix_rows, m_size) + PAD
        m_bottom = measure.width(matrix_cols, m_size) + PAD
        m_top = measure.height(wrapped_title, 9) + PAD
        grid_w = n_heads * PANEL + (n_heads - 1) * GAP
        grid_h = n_layers * (PANEL + panel_title_h) + (n_layers - 1) * GAP
        left_w = PAD + label_w + grid_w + PAD
        right_w = max(MATRIX_WIDTH, 0.12 * len(matrix_cols) + 3)
        width = min(left_w + right_w, 60.0)
        height = min(max(PAD + title_h + PAD + grid_h + label_w + PAD, m_top + 0.12 * len(matrix_rows) + m_bottom + PAD, 6.0),
                     60.0)
        fig.set_size_inches(width, height)

        # The heads: one Axes in inches over the whole figure, each head an image at its place.
        ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
        ax.set_xlim(0.0, width)
        ax.set_ylim(0.0, height)
        ax.set_autoscale_on(False)
        ax.set_axis_off()
        scale = ColorScale.for_values(heads, cmap=cmap)  # as every other renderer scales
        x0, top = PAD + label_w, height - PAD - title_h - PAD
        q, k = heads.shape[2:]
        for li in range(n_layers):
            y_top = top - li * (PANEL + panel_title_h + GAP) - panel_title_h
            for h in range(n_heads):
                x = x0 + h * (PANEL + GAP)
                ax.imshow(heads[li, h], cmap=colormaps[cmap], vmin=scale.vmin, vmax=scale.vmax, interpolation="nearest",
                          extent=(x, x + PANEL, y_top - PANEL, y_top), aspect="auto")
                ax.text(x + PANEL / 2, y_top + 0.02, f"L{layers[li]}H{h}", ha="center", va="bottom", fontsize=6)
            for i in range(0, q, tick):
                ax.text(x0 - 0.03, y_top - (i + 0.5) * PANEL / q, labels[i], ha="right", va="center", fontsize=4)
        bottom = top - grid_h
        for h in range(n_heads):
            x = x0 + h * (PANEL + GAP)
            for j in range(0, k, tick):
                ax.text(x + (j + 0.5) * PANEL / k, bottom - 0.03, labels[j], ha="center", va="top", rotation=90, fontsize=4)
        ax.text(x0 + grid_w / 2, height - PAD, title, ha="center", va="top", fontsize=10)

        # The distance matrix, with its labels and colorbar, to the right.
        m_x = left_w + m_left
        bar = 0.25 + 0.6  # the colorbar and its tick labels
        m_w = m_h = max(min(width - m_x - bar - PAD, height - m_top - m_bottom), 1.0)  # square: heads by heads
        m_ax = fig.add_axes((m_x / width, m_bottom / height, m_w / width, m_h / height))
        matrix_scale = ColorScale.for_values(matrix, cmap=cmap)
        image = m_ax.imshow(matrix, cmap=colormaps[cmap], vmin=matrix_scale.vmin, vmax=matrix_scale.vmax,
                            interpolation="nearest", aspect="auto")
        m_ax.set_xticks(range(len(matrix_cols)), matrix_cols, rotation=90, fontsize=m_size)
        m_ax.set_yticks(range(len(matrix_rows)), matrix_rows, fontsize=m_size)
        m_ax.tick_params(length=0)
        m_ax.set_title(wrapped_title, fontsize=9)
        cax = fig.add_axes(((m_x + m_w + 0.1) / width, (m_bottom + m_h * 0.1) / height, 0.15 / width, m_h * 0.8 / height))
        fig.colorbar(image, cax=cax)
        save_figure(fig, path)
    return path


class _Measure:
    """Sizes of texts in inches, as the figure's renderer draws them."""

    def __init__(self, fig: Any) -> None:
        from matplotlib.text import Text

        self.fig, self.renderer = fig, fig.canvas.get_renderer()
        self.probe = Text(0, 0, "")
        self.probe.set_figure(fig)

    def _box(self, text: str, size: float) -> tuple[float, float]:
        self.probe.set_text(text)
        self.probe.set_fontsize(size)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")  # named once, by the caller
            box = self.probe.get_window_extent(self.renderer)
        return box.width / self.fig.dpi, box.height / self.fig.dpi

    def width(self, texts: list[str], size: float) -> float:
        return max((self._box(t, size)[0] for t in texts), default=0.0)

    def height(self, text: str | list[str], size: float) -> float:
        return max((self._box(t, size)[1] for t in ([text] if isinstance(text, str) else text)), default=0.0)

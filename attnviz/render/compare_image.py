"""The compare-heads figure: small multiples of every head, and the head-distance matrix beside them.

Every head's panel is an image on one Axes that spans the grid (72 Axes, one per head of MiniLM,
with constrained layout, took 7 s to lay out and draw); the positions are computed once from the
figure's size and the widest labels, measured as matplotlib draws them.

The grid is laid out to its content (:func:`plan_grid`): as many heads a row, and panels as large,
as make the grid about as tall as the matrix beside it, in a figure about twice as wide as tall.
One layer's 12 heads were one row of thumbnails over a blank area (3250×900 pixels); they are now
rows of four beside the matrix.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..labels import head_name
from .colors import ColorScale
from .figure_style import DPI, STABLE_RC, save_figure
from .fonts import clean_label, font_chain
from .image import warn_missing
from .output import check_output_path

PANEL_MIN, PANEL_MAX = 0.9, 1.5  # inches: one head's panel, as the layout may size it
GAP = 0.08  # inches between panels
PAD = 0.1  # inches: around the figure's edge and between a label and what it names
MATRIX_WIDTH = 6.0  # inches at least, for the distance matrix with its labels and colorbar
MIN_HEIGHT = 4.0  # inches: a figure lower than this is a strip, however few the heads
MAX_SIDE = 60.0  # inches: the figure's width and height at most
ASPECT = 2.0  # width / height the layout prefers
WRAP_COST = 0.1  # of several layers, each on rows of its own: a layer split over rows counts as this much blank
TICK_ROOM = 0.09  # inches a 6-point token label takes along a panel's side
COLORBAR = 0.25 + 0.6  # inches: the colorbar and its tick labels
MATRIX_LABEL, PANEL_TITLE, TOKEN_LABEL = 7, 7, 6  # points: 15, 15 and 12 pixels at 150 dpi, read at 100 %
MATRIX_ROW = 0.135  # inches a 7-point head name takes beside the matrix: its rows never overlap


@dataclass(frozen=True)
class GridPlan:
    """How the heads' grid is laid out: ``columns`` heads a row (a layer takes ``rows_per_layer`` rows),
    panels of ``panel`` inches, in a figure of ``width`` × ``height`` inches of which ``blank`` (a
    share of its area) holds nothing: neither the grid with its labels nor the matrix with its own."""

    columns: int
    rows_per_layer: int
    panel: float
    width: float
    height: float
    blank: float


def plan_grid(n_layers: int, n_heads: int, *, label: float, title: float, panel_title: float,
              matrix_width: float, matrix_height: float) -> GridPlan:
    """The layout of ``n_layers`` × ``n_heads`` panels beside a matrix block of ``matrix_width`` ×
    ``matrix_height`` inches (its labels and colorbar included): of every count of heads a row, the
    one that leaves least of the figure blank (empty slots of the last row, room under the shorter of
    the grid and the matrix) and keeps it nearest ``ASPECT``; panels are as large as make the grid as
    tall as the matrix, within ``PANEL_MIN`` and ``PANEL_MAX``. ``label`` is the widest token label,
    ``title`` the figure title's height and ``panel_title`` a panel title's, all in inches."""
    target = max(matrix_height, MIN_HEIGHT)
    best: tuple[float, GridPlan] | None = None
    for columns in range(1, n_heads + 1):
        per_layer = math.ceil(n_heads / columns)
        rows = n_layers * per_layer
        fixed_h = PAD + title + PAD + rows * panel_title + (rows - 1) * GAP + label + PAD
        fixed_w = PAD + label + (columns - 1) * GAP + PAD
        panel = min(max((target - fixed_h) / rows, PANEL_MIN), PANEL_MAX)
        room = (MAX_SIDE - matrix_width - fixed_w) / columns  # a figure no wider than MAX_SIDE
        panel = max(min(panel, room), 0.2)
        grid_w, grid_h = fixed_w + columns * panel, fixed_h + rows * panel
        width, height = min(grid_w + matrix_width, MAX_SIDE), min(max(grid_h, target), MAX_SIDE)
        empty = n_layers * (columns * per_layer - n_heads) * (panel + GAP) * (panel + panel_title + GAP)
        used = grid_w * grid_h - empty + matrix_width * min(matrix_height, height)
        blank = max(0.0, 1 - used / (width * height))
        cost = blank + 0.25 * abs(math.log(width / height / ASPECT))
        if n_layers > 1 and columns < n_heads:
            cost += WRAP_COST
        plan = GridPlan(columns, per_layer, panel, width, height, blank)
        if best is None or cost < best[0] - 1e-9:
            best = (cost, plan)
    assert best is not None
    return best[1]


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
    wrapped_title = textwrap.fill(matrix_title, 60)
    m_size = MATRIX_LABEL  # every head's name readable, however many: the matrix grows to give each its row
    with rc_context({"font.family": families, **STABLE_RC}):
        fig = Figure(dpi=DPI)
        FigureCanvasAgg(fig)
        measure = _Measure(fig)
        label_w = measure.width(labels, TOKEN_LABEL) + 0.05
        title_h = measure.height(title, 10)
        panel_title_h = measure.height(["L0H0"], PANEL_TITLE) + 0.03
        m_left = measure.width(matrix_rows, m_size) + PAD
        m_bottom = measure.width(matrix_cols, m_size) + PAD
        m_top = measure.height(wrapped_title, 9) + PAD
        right_w = max(MATRIX_WIDTH, MATRIX_ROW * len(matrix_cols) + m_left + COLORBAR + 2 * PAD)
        m_w = right_w - m_left - COLORBAR - PAD
        shape = len(matrix_rows) / max(len(matrix_cols), 1)  # rows / columns: the matrix drawn with square cells
        plan = plan_grid(n_layers, n_heads, label=label_w, title=title_h, panel_title=panel_title_h,
                         matrix_width=right_w, matrix_height=m_top + m_w * shape + m_bottom + PAD)
        width, height, panel, columns = plan.width, plan.height, plan.panel, plan.columns
        fig.set_size_inches(width, height)
        tick = max(1, math.ceil(len(labels) / max(1, int(panel / TICK_ROOM))))  # labels a panel's side has room for

        # The heads: one Axes in inches over the whole figure, each head an image at its place, in
        # reading order: a layer's heads fill `columns` a row, and each layer starts a row of its own.
        ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
        ax.set_xlim(0.0, width)
        ax.set_ylim(0.0, height)
        ax.set_autoscale_on(False)
        ax.set_axis_off()
        scale = ColorScale.for_values(heads, cmap=cmap)  # as every other renderer scales
        x0, top = PAD + label_w, height - PAD - title_h - PAD
        q, k = heads.shape[2:]
        step = panel + panel_title_h + GAP
        lowest: dict[int, float] = {}  # each column's lowest panel: its bottom, where the key labels go
        for li in range(n_layers):
            for h in range(n_heads):
                row, col = li * plan.rows_per_layer + h // columns, h % columns
                x, y_top = x0 + col * (panel + GAP), top - row * step - panel_title_h
                ax.imshow(heads[li, h], cmap=colormaps[cmap], vmin=scale.vmin, vmax=scale.vmax, interpolation="nearest",
                          extent=(x, x + panel, y_top - panel, y_top), aspect="auto")
                ax.text(x + panel / 2, y_top + 0.02, head_name(layers[li], h), ha="center", va="bottom", fontsize=PANEL_TITLE)
                lowest[col] = y_top - panel
                if col == 0:
                    for i in range(0, q, tick):
                        ax.text(x0 - 0.03, y_top - (i + 0.5) * panel / q, labels[i], ha="right", va="center",
                                fontsize=TOKEN_LABEL)
        for col, bottom in lowest.items():
            x = x0 + col * (panel + GAP)
            for j in range(0, k, tick):
                ax.text(x + (j + 0.5) * panel / k, bottom - 0.03, labels[j], ha="center", va="top", rotation=90,
                        fontsize=TOKEN_LABEL)
        grid_w = columns * panel + (columns - 1) * GAP
        title_x = min(max(x0 + grid_w / 2, PAD + measure.width([title], 10) / 2), width / 2)  # in the figure
        ax.text(title_x, height - PAD, title, ha="center", va="top", fontsize=10)

        # The distance matrix, with its labels and colorbar, to the right, in the middle of the height:
        # square cells, or up to twice as tall as wide where the figure has the height.
        m_x = x0 + grid_w + PAD + m_left
        room_w, room_h = max(width - m_x - COLORBAR - PAD, 1.0), max(height - m_top - m_bottom - PAD, 1.0)
        m_w = min(room_w, room_h / shape)
        m_h = min(room_h, 2 * m_w * shape)
        m_y = m_bottom + (room_h - m_h) / 2
        m_ax = fig.add_axes((m_x / width, m_y / height, m_w / width, m_h / height))
        matrix_scale = ColorScale.for_values(matrix, cmap=cmap)
        image = m_ax.imshow(matrix, cmap=colormaps[cmap], vmin=matrix_scale.vmin, vmax=matrix_scale.vmax,
                            interpolation="nearest", aspect="auto")
        m_ax.set_xticks(range(len(matrix_cols)), matrix_cols, rotation=90, fontsize=m_size)
        m_ax.set_yticks(range(len(matrix_rows)), matrix_rows, fontsize=m_size)
        m_ax.tick_params(length=0)
        m_ax.set_title(wrapped_title, fontsize=9)
        bar_h = max(m_h * 0.8, min(m_h, 1.0))
        cax = fig.add_axes(((m_x + m_w + 0.1) / width, (m_y + (m_h - bar_h) / 2) / height, 0.15 / width, bar_h / height))
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

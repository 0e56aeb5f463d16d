"""A labelled heatmap figure for vector files (SVG, PDF), built once per layout and redrawn for each
view that shares it. PNG files are drawn by :mod:`~attnviz.render.raster`, on the same layout.

A figure has two kinds of parts. The *frame* depends only on the layout (:class:`FigureKey`): the
figure size, the token labels, the axis names, the font chain, the pair breaks' places. The
*content* changes from view to view: the panels' colours, their titles, the title and its notes,
the sink markers, the colour scale (colorbar ticks). Export draws every layer of a text, and the
layers share the frame, so the frame's axes, tick labels and layout are made once and each file
sets only the content: a reused figure gives the same file as a fresh one.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .figure_style import DPI, MAX_TICKS, STABLE_RC, save_figure
from .grid_layout import TICK_PAD, TextSizes, grid_layout, grid_shape
from .view import HeatmapView

if TYPE_CHECKING:
    from matplotlib.collections import PathCollection
    from matplotlib.image import AxesImage
    from matplotlib.text import Text
    from matplotlib.typing import RcKeyType

_MARK_COLOUR = "#e8175d"  # attention-sink markers
_TICK_PAD_POINTS = TICK_PAD * 72


@dataclass(frozen=True)
class FigureKey:
    """Everything a figure's frame depends on: views with equal keys can share one figure."""

    size: tuple[float, float]
    shape: tuple[int, int, int]  # panels, rows (queries), columns (keys)
    columns: int | None
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    row_breaks: tuple[int, ...]
    col_breaks: tuple[int, ...]
    title_lines: int
    row_axis: str
    col_axis: str
    value_name: str
    cmap: str
    families: tuple[str, ...]
    values: bool  # numbers written in the cells
    colorbar_sample: str  # the widest colorbar tick label the scale can show, digits as 0: room kept for it


def colorbar_sample(vmin: float, vmax: float) -> str:
    """The widest tick label a colorbar from ``vmin`` to ``vmax`` shows at most (its densest ticks, as
    matplotlib's AutoLocator and ScalarFormatter pick them), with every digit written 0."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    ticks = np.asarray(MaxNLocator(nbins=9, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax))
    span = vmax - vmin
    ticks = ticks[(ticks >= vmin - 1e-9 * span) & (ticks <= vmax + 1e-9 * span)]
    formatter = ScalarFormatter()
    formatter.create_dummy_axis()
    assert formatter.axis is not None  # the dummy axis just made
    formatter.axis.set_view_interval(vmin, vmax)
    labels = formatter.format_ticks(list(ticks)) or ["0"]
    return re.sub(r"\d", "0", max(labels, key=len))


class LabelledFigure:
    """The matplotlib figure of one :class:`FigureKey`: :meth:`show` a view, then :meth:`save` it."""

    def __init__(self, key: FigureKey) -> None:
        from matplotlib import colormaps, rc_context
        from matplotlib.colors import Normalize

        self.key = key
        self.rc: dict[RcKeyType, Any] = {"font.family": list(key.families), **STABLE_RC}
        n_panels = key.shape[0]
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        with rc_context(self.rc):
            fig = Figure(figsize=key.size, dpi=DPI)
            FigureCanvasAgg(fig)  # measures the texts (the file is drawn by the backend of its format)
            layout = grid_layout(key.size, n_panels, key.columns, _measure(fig, key))
            self.figure, self.norm, self.cmap = fig, Normalize(0.0, 1.0), colormaps[key.cmap]
            self.images: list[AxesImage] = []
            self.marks: list[PathCollection] = []
            self.titles: list[Text] = []
            self.cells: list[list[Text]] = []  # per panel, its cells' value labels (none without --values)
            self.rects: list[tuple[float, float, float, float]] = []
            # One Axes over the whole figure, in figure fractions, holds every panel: 72 Axes (one per
            # head of MiniLM) cost 2 s to create, their ticks and spines unused.
            self.canvas_axes = ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
            ax.set_xlim(0.0, 1.0)
            ax.set_ylim(0.0, 1.0)
            ax.set_autoscale_on(False)
            ax.set_axis_off()
            for p, rect in enumerate(layout.panels):
                self._add_panel(p, rect)
                if n_panels > 1:
                    left, bottom, width, height = rect
                    self.titles.append(fig.text(left + width / 2, bottom + height + layout.panel_title_pad, "",
                                                ha="center", va="bottom", fontsize=8))
            cax = fig.add_axes(layout.colorbar)
            fig.colorbar(self.images[0], cax=cax, label=key.value_name)
            self.title = fig.text(*layout.title_xy, "", ha="center", va="top", fontsize=10)
            fig.text(*layout.col_axis_xy, key.col_axis, ha="center", va="bottom", fontsize=8)
            fig.text(*layout.row_axis_xy, key.row_axis, ha="left", va="center", rotation=90, fontsize=8)

    def _add_panel(self, p: int, rect: tuple[float, float, float, float]) -> None:
        """Panel ``p`` at ``rect`` (figure fractions): its image, token labels (outer panels only), a
        frame, pair breaks, sink markers, cell values."""
        from matplotlib.image import AxesImage
        from matplotlib.lines import Line2D
        from matplotlib.patches import Rectangle
        from matplotlib.transforms import offset_copy

        key, fig, ax = self.key, self.figure, self.canvas_axes
        n_panels, q, k = key.shape
        n_rows, cols = grid_shape(n_panels, key.columns)
        left, bottom, width, height = rect
        top, cw, ch = bottom + height, width / k, height / q
        image = AxesImage(ax, cmap=self.cmap, norm=self.norm, interpolation="nearest",
                              extent=(left, left + width, bottom, top), origin="upper")
        image.set_data(np.zeros((q, k)))
        ax.add_image(image)
        fontsize = 8 if n_panels == 1 else 6
        # Token labels on the outer panels: the left column, and the lowest panel of each column.
        if p // cols == n_rows - 1 or p + cols >= n_panels:
            below = offset_copy(ax.transData, fig=fig, y=-_TICK_PAD_POINTS, units="points")
            step = max(1, math.ceil(k / MAX_TICKS))
            for j in range(0, k, step):
                ax.text(left + (j + 0.5) * cw, bottom, key.col_labels[j], transform=below, rotation=90, ha="center",
                        va="top", fontsize=fontsize)
        if p % cols == 0:
            beside = offset_copy(ax.transData, fig=fig, x=-_TICK_PAD_POINTS, units="points")
            step = max(1, math.ceil(q / MAX_TICKS))
            for i in range(0, q, step):
                ax.text(left, top - (i + 0.5) * ch, key.row_labels[i], transform=beside, ha="right", va="center",
                        fontsize=fontsize)
        lines = [Line2D([left, left + width], [top - b * ch] * 2, color="white", linewidth=1.2) for b in key.row_breaks]
        lines += [Line2D([left + b * cw] * 2, [bottom, top], color="white", linewidth=1.2) for b in key.col_breaks]
        frame = Rectangle((left, bottom), width, height, fill=False, edgecolor="black", linewidth=0.8)
        for artist in (*lines, frame):
            ax.add_artist(artist)
        marks = ax.scatter(np.zeros(0), np.zeros(0), marker="v", s=18, color=_MARK_COLOUR, clip_on=False, zorder=3)
        cells = [ax.text(left + (j + 0.5) * cw, top - (i + 0.5) * ch, "", ha="center", va="center", fontsize=5)
                 for i in range(q) for j in range(k)] if key.values else []
        self.images.append(image)
        self.marks.append(marks)
        self.cells.append(cells)
        self.rects.append(rect)

    def show(self, view: HeatmapView) -> None:
        """Put ``view``'s content in the figure: colours, scale, titles, sink markers, cell values."""
        with self.norm.callbacks.blocked():
            self.norm.vmin, self.norm.vmax = view.scale.vmin, view.scale.vmax
        self.norm.callbacks.process("changed")  # the images and the colorbar follow
        shade = view.scale.normalize(view.panels) if self.key.values else None
        for p, image in enumerate(self.images):
            image.set_data(view.panels[p])
            keys = view.marks[p] if view.marks and view.marks[p] else []
            left, bottom, width, height = self.rects[p]
            xs = left + (np.asarray(keys, dtype=float) + 0.5) * (width / self.key.shape[2])
            self.marks[p].set_offsets(np.column_stack([xs, np.full(len(keys), bottom + height)]))
            for cell, w, s in zip(self.cells[p], view.panels[p].ravel(),
                                  shade[p].ravel() if shade is not None else (), strict=False):
                cell.set_text(f"{w:.2f}")
                cell.set_color("black" if s > 0.6 else "white")
        for text, name in zip(self.titles, view.panel_titles, strict=False):  # one panel: no panel title
            text.set_text(name)
        self.title.set_text(view.title + "".join(f"\n{note}" for note in view.notes))

    def save(self, path: Path) -> None:
        from matplotlib import rc_context

        with rc_context(self.rc):
            save_figure(self.figure, path)


def _measure(fig: Any, key: FigureKey) -> TextSizes:
    """The sizes :func:`grid_layout` needs, in inches, measured as matplotlib will draw the texts."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    probe = Text(0, 0, "")
    probe.set_figure(fig)

    def size(text: str, fontsize: float) -> tuple[float, float]:
        probe.set_text(text)
        probe.set_fontsize(fontsize)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")  # named once, by the caller
            box = probe.get_window_extent(renderer)
        return box.width / fig.dpi, box.height / fig.dpi

    n_panels, q, k = key.shape
    fontsize = 8 if n_panels == 1 else 6
    x_step, y_step = max(1, math.ceil(k / MAX_TICKS)), max(1, math.ceil(q / MAX_TICKS))
    return TextSizes(
        row_labels=max(size(s, fontsize)[0] for s in key.row_labels[::y_step]),
        col_labels=max(size(s, fontsize)[0] for s in key.col_labels[::x_step]),
        title=size("\n".join(["Lp"] * key.title_lines), 10)[1],
        panel_title=size("Lp", 8)[1] if n_panels > 1 else 0.0,
        axis_label=max(size(key.row_axis, 8)[1], size(key.col_axis, 8)[1]),
        colorbar_ticks=size(key.colorbar_sample, 10)[0],
        colorbar_label=size(key.value_name, 10)[1],
    )

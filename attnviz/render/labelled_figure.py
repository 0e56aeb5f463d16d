"""A labelled heatmap figure built once per layout and redrawn for each view that shares it.

A figure has two kinds of parts. The *frame* depends only on the layout (:class:`FigureKey`): the
figure size, the token labels, the axis names, the font chain, the pair breaks' places. The
*content* changes from view to view: the panels' colours, their titles, the title and its notes,
the sink markers, the colour scale (colorbar ticks). Export draws every layer of a text, and the
layers share the frame, so the frame's axes, tick labels and layout are made once, and in PNG its
pixels are drawn once and kept: each file restores them and draws only the content on top
(matplotlib's "blitting", as its animations do). A figure is always drawn this way, fresh or
reused, so a reused figure gives the same pixels as a fresh one.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .grid_layout import TICK_PAD, TextSizes, grid_layout, grid_shape
from .image import DPI, MAX_TICKS, STABLE_RC, save_figure
from .png import encode_png
from .view import HeatmapView

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

    ticks = MaxNLocator(nbins=9, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax)
    span = vmax - vmin
    ticks = ticks[(ticks >= vmin - 1e-9 * span) & (ticks <= vmax + 1e-9 * span)]
    formatter = ScalarFormatter()
    formatter.create_dummy_axis()
    formatter.axis.set_view_interval(vmin, vmax)  # type: ignore[union-attr]
    labels = formatter.format_ticks(list(ticks)) or ["0"]
    return re.sub(r"\d", "0", max(labels, key=len))


class LabelledFigure:
    """The matplotlib figure of one :class:`FigureKey`: :meth:`show` a view, then :meth:`save` it."""

    def __init__(self, key: FigureKey) -> None:
        from matplotlib import colormaps, rc_context
        from matplotlib.colors import Normalize

        self.key = key
        self.rc = {"font.family": list(key.families), **STABLE_RC}
        n_panels = key.shape[0]
        layered_figure, _, png_canvas = _classes()
        with rc_context(self.rc):
            fig = layered_figure(figsize=key.size, dpi=DPI)
            png_canvas(fig)
            layout = grid_layout(key.size, n_panels, key.columns, _measure(fig, key))
            self.figure, self.norm, self.cmap = fig, Normalize(0.0, 1.0), colormaps[key.cmap]
            self.images, self.marks, self.titles, self.cells, self.rects = [], [], [], [], []
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
            fig.dynamic += [*self.titles, self.title, cax]  # drawn over the frame, after it (LayeredFigure.draw)

    def _add_panel(self, p: int, rect: tuple[float, float, float, float]) -> None:
        """Panel ``p`` at ``rect`` (figure fractions): its image, token labels (outer panels only), a
        frame, pair breaks, sink markers, cell values."""
        from matplotlib.lines import Line2D
        from matplotlib.patches import Rectangle
        from matplotlib.transforms import offset_copy

        key, fig, ax = self.key, self.figure, self.canvas_axes
        n_panels, q, k = key.shape
        n_rows, cols = grid_shape(n_panels, key.columns)
        left, bottom, width, height = rect
        top, cw, ch = bottom + height, width / k, height / q
        image = _classes()[1](ax, cmap=self.cmap, norm=self.norm, interpolation="nearest",
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
        fig.dynamic += [image, *lines, frame, marks, *cells]  # in z-order, over the image
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


@functools.cache
def _classes() -> tuple[type, type, type]:
    """The figure, image and canvas classes below, made when matplotlib is first needed (not at import)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
    from matplotlib.figure import Figure
    from matplotlib.image import AxesImage
    from matplotlib.transforms import IdentityTransform

    class LayeredFigure(Figure):
        """A Figure that draws its ``dynamic`` artists over the rest; in PNG it keeps the rest's pixels."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.dynamic: list[Any] = []
            self._frame: tuple[tuple[int, int], Any] | None = None

        def draw(self, renderer: Any) -> None:
            if not isinstance(renderer, RendererAgg):  # a vector file: one pass, in z-order
                super().draw(renderer)
                return
            size = (int(renderer.width), int(renderer.height))
            if self._frame is not None and self._frame[0] == size:
                renderer.restore_region(self._frame[1])
            else:
                with _hidden(self.dynamic):
                    super().draw(renderer)  # the frame: every artist but the dynamic ones
                self._frame = (size, renderer.copy_from_bbox(self.bbox))
            for artist in self.dynamic:
                artist.draw(renderer)

    class CellImage(AxesImage):
        """An image that fills its Axes, one colour per cell, enlarged by repeating pixels.

        matplotlib resamples the values to the output's pixels and colours every pixel (about
        10 ms a panel); colouring the q×k cells and repeating them gives the same picture
        ("nearest" interpolation) in a tenth of the time. Vector files, and panels with more cells
        than pixels, are drawn by matplotlib as usual."""

        def make_image(self, renderer: Any, magnification: float = 1.0, unsampled: bool = False) -> Any:
            left, bottom, right, top = (np.asarray(self.get_window_extent(renderer).extents) * magnification
                                        + 0.5).astype(int)
            width, height = right - left, top - bottom
            q, k = self._A.shape[:2]
            if unsampled or magnification != 1.0 or width < k or height < q:
                return super().make_image(renderer, magnification, unsampled)
            rgba = np.ascontiguousarray(self.to_rgba(self._A, bytes=True))  # [q, k, 4]
            cols = np.minimum(((np.arange(width) + 0.5) * (k / width)).astype(np.intp), k - 1)
            rows = np.minimum(((np.arange(height)[::-1] + 0.5) * (q / height)).astype(np.intp), q - 1)  # Agg: bottom first
            pixels = rgba.view(np.uint32).reshape(q, k)[rows[:, None], cols[None, :]]
            return pixels.view(np.uint8).reshape(height, width, 4), left, bottom, IdentityTransform()

    class PngCanvas(FigureCanvasAgg):
        """Agg, writing PNG with :func:`~attnviz.render.png.encode_png` (half the time of Pillow's)."""

        def print_png(self, filename_or_obj: Any, *, metadata: dict[str, str] | None = None, **_: Any) -> None:
            self.draw()
            text = {"Software": f"Matplotlib version{matplotlib.__version__}, https://matplotlib.org/", **(metadata or {})}
            data = encode_png(np.asarray(self.buffer_rgba()), dpi=self.figure.dpi, text=text)
            if hasattr(filename_or_obj, "write"):
                filename_or_obj.write(data)
            else:
                Path(filename_or_obj).write_bytes(data)

    return LayeredFigure, CellImage, PngCanvas


@contextmanager
def _hidden(artists: list[Any]) -> Iterator[None]:
    """``artists`` left out of a draw (matplotlib draws animated artists too when it saves a file)."""
    for artist in artists:
        artist.set_visible(False)
    try:
        yield
    finally:
        for artist in artists:
            artist.set_visible(True)

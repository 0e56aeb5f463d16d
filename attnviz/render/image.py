"""The file renderer: matplotlib (no pyplot, so no GUI backend), written atomically.

PNG, SVG and PDF are chosen by the file's extension. Labels fall back to an installed font that
has their glyphs; characters that no font has raise a :class:`MissingGlyphsWarning` naming them.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

from ..errors import AttnvizWarning, UsageError
from .figure_style import DPI, MAX_TICKS
from .fonts import clean_label, font_chain
from .grid_layout import TextSizes
from .output import check_output_path
from .view import FIGURE_CELLS, HeatmapView, max_pool

MAX_VALUE_CELLS = 400  # numbers are written into cells only up to this many per panel


class MissingGlyphsWarning(AttnvizWarning):
    """No installed font has some characters of the labels; they would be drawn as boxes."""


def warn_missing(missing: list[str]) -> None:
    """Name the characters no installed font has, once, instead of drawing silent boxes."""
    if missing:
        warnings.warn(
            f"no installed font has {' '.join(missing)} (U+{', U+'.join(f'{ord(c):04X}' for c in missing)}); "
            "those labels show boxes. Install a font that has them (e.g. fonts-noto-cjk)",
            MissingGlyphsWarning,
            stacklevel=3,
        )


def view_label(label: str) -> str:
    """A view's label as images draw it (:func:`~.fonts.clean_label`), its spaces kept: a view's labels are
    printable already (a token's own space is ``␣``), so a space in one is a separator the view put there, between
    a pooled row's positions or a region's position and its token (``0-2 [CLS]``, ``200 moving``)."""
    return " ".join(clean_label(part) if part else "" for part in label.split(" "))


GRID_CELL = 0.11  # inches a token takes along a grid panel's side: room for its 6-point label
GRID_PANEL_MIN = 0.9  # inches: a grid panel's side at least, however few the tokens
GRID_MAX = 30.0  # inches: a grid's width and height at most
CHAR_WIDTH = 0.6  # a character's width, in font sizes (DejaVu Sans averages a little less)
LINE = 1.2 / 72  # inches a line of text takes, per point of font size


def figure_size(view: HeatmapView) -> tuple[float, float]:
    """Width and height in inches: grows with the token count, within sensible bounds.

    A grid (``--head all``) is its panels, ``GRID_CELL`` inches a token, with the room its labels,
    titles and colorbar take once around it (:func:`~.grid_layout.grid_size`); it was 1.2 inches of
    margin for every panel, and 72 panels (MiniLM's every head) a 30 × 23 inch figure."""
    n_panels, q, k = view.panels.shape
    if n_panels == 1:
        width = min(30.0, max(4.5, 1.2 + 0.28 * min(k, MAX_TICKS) + 1.6))
        height = min(30.0, max(3.5, 1.2 + 0.28 * min(q, MAX_TICKS) + 0.8))
        return round(width, 2), round(height, 2)
    from .grid_layout import grid_shape, grid_size

    def label_width(labels: list[str], count: int) -> float:
        step = max(1, math.ceil(count / MAX_TICKS))
        return min(max((len(view_label(s)) for s in labels[::step]), default=1) * CHAR_WIDTH * 6 / 72, 1.5)

    lines = 1 + view.title.count("\n") + sum(1 + note.count("\n") for note in view.notes)
    text = TextSizes(row_labels=label_width(view.row_labels, q), col_labels=label_width(view.col_labels, k),
                     title=lines * 10 * LINE, panel_title=8 * LINE, axis_label=8 * LINE,
                     colorbar_ticks=4 * CHAR_WIDTH * 10 / 72, colorbar_label=10 * LINE)
    panel_w, panel_h = max(GRID_PANEL_MIN, GRID_CELL * min(k, MAX_TICKS)), max(GRID_PANEL_MIN, GRID_CELL * min(q, MAX_TICKS))
    fixed_w, fixed_h = grid_size(n_panels, view.columns, (0.0, 0.0), text)  # the margins and gaps
    rows, cols = grid_shape(n_panels, view.columns)
    # Within GRID_MAX inches, the panels shrink alike (their cells stay square); a few panels of few tokens
    # make a small figure (not one stretched to a minimum size).
    shrink = min(1.0, (GRID_MAX - fixed_w) / (cols * panel_w), (GRID_MAX - fixed_h) / (rows * panel_h))
    width, height = grid_size(n_panels, view.columns, (panel_w * shrink, panel_h * shrink), text)
    return round(max(2.0, width), 2), round(max(2.0, height), 2)


def render_image(view: HeatmapView, path: str | os.PathLike[str], *, values: bool = False) -> Path:
    """Draw ``view`` to ``path`` (.png, .svg or .pdf): token labels, a title, a colorbar.

    To draw many views (the layers of a text), a :class:`FigureDrawer` reuses one figure for them."""
    return FigureDrawer().draw(view, path, values=values)


TITLE_CHARS_PER_INCH = 11.5
"""Characters of the 10-point title per inch of figure width (DejaVu Sans averages about 6 points
a character; a little less than the 12 that fit, so that wide glyphs still fit)."""


def wrap_title(view: HeatmapView, width_in: float) -> HeatmapView:
    """The title and each note wrapped to the figure's width (a line longer than the figure would be
    cut at both edges; CJK characters count double)."""
    import textwrap
    from dataclasses import replace

    from rich.cells import cell_len

    chars = max(20, int(width_in * TITLE_CHARS_PER_INCH))

    def wrap(text: str) -> str:
        if cell_len(text) <= chars:
            return text
        limit = max(10, chars * len(text) // max(1, cell_len(text)))  # fewer characters where they are wide
        return "\n".join(part for line in text.split("\n") for part in (textwrap.wrap(line, limit) or [""]))

    title, notes = wrap(view.title), [wrap(note) for note in view.notes]
    if title == view.title and notes == view.notes:
        return view
    return replace(view, title=title, notes=notes)


class FigureDrawer:
    """Draws views to image files, keeping the last figures for the next views with the same layout.

    The layers of one text share their tokens, grid and labels (a :class:`~.labelled_figure.FigureKey`):
    the second and later are drawn into the first one's figure, which keeps its axes, its tick
    labels and, in PNG, their pixels, so only the panels' content is drawn again. The files are
    the same as :func:`render_image` writes for each view alone, pixel for pixel. ``keep``: how many
    figures of different layouts to keep (export's grid and single heads of one layer take turns),
    within about :data:`KEEP_PIXELS` pixels in all.
    """

    def __init__(self, keep: int = 1) -> None:
        self.keep = keep
        self._figures: dict[Any, Any] = {}  # FigureKey → LabelledFigure, the last used last

    def draw(self, view: HeatmapView, path: str | os.PathLike[str], *, values: bool = False) -> Path:
        """Draw ``view`` to ``path`` (see :func:`render_image`); reuse a kept figure where one fits."""
        from .labelled_figure import FigureKey, LabelledFigure, colorbar_sample
        from .raster import LOG_TICK_SAMPLE, RasterFigure

        path = check_output_path(path)
        _, q, k = view.panels.shape
        if max(q, k) > FIGURE_CELLS:
            view = max_pool(view, math.ceil(max(q, k) / FIGURE_CELLS))
        view = wrap_title(view, figure_size(view)[0])
        rows_l = tuple(view_label(s) for s in view.row_labels)
        cols_l = tuple(view_label(s) for s in view.col_labels)
        families, missing = font_chain([*rows_l, *cols_l, view.title, *view.notes])
        warn_missing(missing)
        n_panels, q, k = view.panels.shape
        key = FigureKey(
            size=figure_size(view), shape=(n_panels, q, k), columns=view.columns, row_labels=rows_l,
            col_labels=cols_l, row_breaks=tuple(view.row_breaks), col_breaks=tuple(view.col_breaks),
            title_lines=1 + view.title.count("\n") + sum(1 + note.count("\n") for note in view.notes),
            row_axis=view.row_axis, col_axis=view.col_axis, value_name=view.value_name, cmap=view.scale.cmap,
            families=tuple(families), values=values and q * k <= MAX_VALUE_CELLS,
            colorbar_sample=LOG_TICK_SAMPLE if view.scale.log else colorbar_sample(view.scale.vmin, view.scale.vmax),
        )
        if view.scale.log and path.suffix.lower() != ".png":
            raise UsageError(f"a log colour scale is drawn in PNG pictures and the terminal; {path.name} is "
                             f"{path.suffix.lower()[1:].upper()}: write a .png, or use a linear scale")
        kind = RasterFigure if path.suffix.lower() == ".png" else LabelledFigure
        figure = self._figures.pop((kind, key), None)
        if figure is None:
            while self._figures and (len(self._figures) >= self.keep
                                     or sum(_pixels(k) for _, k in [(kind, key), *self._figures]) > KEEP_PIXELS):
                del self._figures[next(iter(self._figures))]  # the least recently used goes first
            figure = kind(key)
        self._figures[kind, key] = figure
        figure.show(view)
        figure.save(path)
        return path

    def close(self) -> None:
        """Let the kept figures go (each holds its pixels twice: a few tens of MB)."""
        self._figures.clear()


KEEP_PIXELS = 32_000_000  # a FigureDrawer keeps figures of about this many pixels in all (8 bytes each)


def _pixels(key: Any) -> float:
    return key.size[0] * key.size[1] * DPI * DPI

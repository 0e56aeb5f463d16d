"""The file renderer: matplotlib (no pyplot, so no GUI backend), written atomically.

PNG, SVG and PDF are chosen by the file's extension. Labels fall back to an installed font that
has their glyphs; characters that no font has raise a :class:`MissingGlyphsWarning` naming them.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np

from ..errors import AttnvizWarning
from ..fileio import atomic_write, check_output_path
from .fonts import clean_label, font_chain
from .view import FIGURE_CELLS, HeatmapView, max_pool

DPI = 150
_MAX_TICKS = 64  # labels per axis; beyond, every n-th label is drawn
_MAX_VALUE_CELLS = 400  # numbers are written into cells only up to this many per panel
# The same figure gives the same bytes: no creation dates, fixed SVG ids, glyphs as paths.
_STABLE_METADATA = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}
STABLE_RC = {"svg.fonttype": "path", "svg.hashsalt": "attnviz"}


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


def figure_size(view: HeatmapView) -> tuple[float, float]:
    """Width and height in inches: grows with the token count, within sensible bounds."""
    n_panels, q, k = view.panels.shape
    cols = view.columns or math.ceil(math.sqrt(n_panels))
    rows = math.ceil(n_panels / cols)
    cell = 0.28 if n_panels == 1 else 0.16
    width = min(30.0, max(4.5, cols * (1.2 + cell * min(k, _MAX_TICKS)) + 1.6))
    height = min(30.0, max(3.5, rows * (1.2 + cell * min(q, _MAX_TICKS)) + 0.8))
    return round(width, 2), round(height, 2)


def render_image(view: HeatmapView, path: str | os.PathLike[str], *, values: bool = False) -> Path:
    """Draw ``view`` to ``path`` (.png, .svg or .pdf): token labels, a title, a colorbar."""
    from matplotlib import colormaps, rc_context
    from matplotlib.figure import Figure

    path = check_output_path(path)
    _, q, k = view.panels.shape
    if max(q, k) > FIGURE_CELLS:
        view = max_pool(view, math.ceil(max(q, k) / FIGURE_CELLS))
    rows_l = [clean_label(s) for s in view.row_labels]
    cols_l = [clean_label(s) for s in view.col_labels]
    families, missing = font_chain([*rows_l, *cols_l, view.title])
    warn_missing(missing)
    with rc_context({"font.family": families, **STABLE_RC}):
        fig = Figure(figsize=figure_size(view), dpi=DPI, layout="constrained")
        _draw(fig, view, rows_l, cols_l, values, colormaps[view.scale.cmap])
        save_figure(fig, path)
    return path


def _draw(fig, view: HeatmapView, rows_l: list[str], cols_l: list[str], values: bool, cmap) -> None:
    n_panels, q, k = view.panels.shape
    cols = view.columns or math.ceil(math.sqrt(n_panels))
    n_rows = math.ceil(n_panels / cols)
    # In a grid the panels share their axes: token labels go on the outer panels only (the text
    # of tick labels is most of what a figure costs to lay out and draw).
    axes = np.atleast_1d(fig.subplots(n_rows, cols, squeeze=False, sharex=True, sharey=True)).ravel()
    fontsize = 8 if n_panels == 1 else 6
    image = None
    for p, ax in enumerate(axes):
        if p >= n_panels:
            ax.set_axis_off()
            continue
        image = ax.imshow(view.panels[p], cmap=cmap, vmin=view.scale.vmin, vmax=view.scale.vmax,
                          interpolation="nearest", aspect="auto")
        if n_panels > 1:
            ax.set_title(view.panel_titles[p], fontsize=8)
        x_step, y_step = max(1, math.ceil(k / _MAX_TICKS)), max(1, math.ceil(q / _MAX_TICKS))
        ax.set_xticks(range(0, k, x_step), cols_l[::x_step], rotation=90, fontsize=fontsize)
        ax.set_yticks(range(0, q, y_step), rows_l[::y_step], fontsize=fontsize)
        ax.tick_params(length=0, labelbottom=p // cols == n_rows - 1 or p + cols >= n_panels, labelleft=p % cols == 0)
        for b in view.row_breaks:  # a sentence pair's boundary
            ax.axhline(b - 0.5, color="white", linewidth=1.2)
        for b in view.col_breaks:
            ax.axvline(b - 0.5, color="white", linewidth=1.2)
        if view.marks and view.marks[p]:  # attention sinks: a marker above each one's column
            ax.scatter(view.marks[p], [-0.5] * len(view.marks[p]), marker="v", s=18, color="#e8175d",
                       clip_on=False, zorder=3)
        if values and q * k <= _MAX_VALUE_CELLS:
            _annotate(ax, view.panels[p], view.scale.normalize(view.panels[p]))
    axes[0].figure.colorbar(image, ax=list(axes[:n_panels]), label=view.value_name, shrink=0.9)
    fig.suptitle(view.title + "".join(f"\n{note}" for note in view.notes), fontsize=10)
    fig.supxlabel(view.col_axis, fontsize=8)
    fig.supylabel(view.row_axis, fontsize=8)


def _annotate(ax, matrix: np.ndarray, shade: np.ndarray) -> None:
    for (i, j), w in np.ndenumerate(matrix):
        ax.text(j, i, f"{w:.2f}", ha="center", va="center", fontsize=5,
                color="black" if shade[i, j] > 0.6 else "white")


def save_figure(fig, path: Path) -> None:
    def write(tmp: str) -> None:
        with warnings.catch_warnings():
            # Missing glyphs were already reported once, by name, as a MissingGlyphsWarning.
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            fmt = path.suffix.lower().lstrip(".")
            fig.savefig(tmp, format=fmt, metadata=_STABLE_METADATA.get(fmt))

    atomic_write(path, write)

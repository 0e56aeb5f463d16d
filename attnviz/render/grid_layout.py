"""Where a labelled figure's parts go, computed once from its text sizes: no layout engine at draw time.

matplotlib's constrained layout measures every tick label of every panel on every draw (a third
of a labelled grid's cost) and moves the panels whenever a title or a colorbar label changes width.
Here the positions are a pure function of the figure size, the grid and a few measured text sizes
(the widest token label, the lines of the title), so the layers of one text, which share all of
these, share one layout, and a figure drawn for one layer can be redrawn for the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PT = 1 / 72  # inches per point
PAD = 4 * PT  # between a figure's edge and a label, and between neighbouring labels
TICK_PAD = 3.5 * PT  # matplotlib's default gap between an axis and its tick labels
TITLE_PAD = 6 * PT  # matplotlib's default gap between a panel and its title
PANEL_GAP = 0.12  # inches between the panels of a grid (they share their labels: no text between them)
COLORBAR_GAP = 0.2  # inches between the grid and its colorbar
COLORBAR_SHRINK = 0.9  # the colorbar's height, as a share of the grid's
COLORBAR_ASPECT = 20  # height / width, matplotlib's default
LABEL_SHARE = 0.35  # token labels may take at most this share of the figure's width or height

Rect = tuple[float, float, float, float]  # left, bottom, width, height in figure fractions


@dataclass(frozen=True)
class TextSizes:
    """Measured sizes of a figure's texts, in inches."""

    row_labels: float  # the widest row (query) label
    col_labels: float  # the widest column (key) label, drawn turned by 90°: its height on the page
    title: float  # the figure title with its notes, all lines
    panel_title: float  # one panel title's height; 0 when a figure has one panel and no panel titles
    axis_label: float  # height of one line of the axis names (queries…, keys…)
    colorbar_ticks: float  # room kept for the colorbar's tick labels (the widest its scale can show)
    colorbar_label: float  # height of the colorbar's label


@dataclass(frozen=True)
class GridLayout:
    """Figure-fraction positions: a rectangle per panel, the colorbar's, and the anchors of the texts."""

    panels: list[Rect]
    colorbar: Rect
    panel_title_pad: float  # figure fraction between a panel's top and its title
    title_xy: tuple[float, float]  # top centre of the figure title
    col_axis_xy: tuple[float, float]  # bottom centre of the column axis name
    row_axis_xy: tuple[float, float]  # left centre of the row axis name (turned by 90°)


def grid_shape(n_panels: int, columns: int | None) -> tuple[int, int]:
    """(rows, columns) of the grid: ``columns`` as the view asks, else as square as can be."""
    cols = columns or math.ceil(math.sqrt(n_panels))
    return math.ceil(n_panels / cols), cols


def grid_size(n_panels: int, columns: int | None, panel: tuple[float, float], text: TextSizes) -> tuple[float, float]:
    """The figure size (inches) in which :func:`grid_layout` gives each of ``n_panels`` panels ``panel``
    (width, height) inches, with room for ``text`` once around the grid: the margins are the grid's,
    not each panel's."""
    panel_w, panel_h = panel
    rows, cols = grid_shape(n_panels, columns)
    title_room = text.panel_title + TITLE_PAD if text.panel_title else 0.0
    left = PAD + text.axis_label + PAD + text.row_labels + TICK_PAD
    bottom = PAD + text.axis_label + PAD + text.col_labels + TICK_PAD
    top = PAD + text.title + PAD + title_room
    grid_h = rows * panel_h + (rows - 1) * (PANEL_GAP + title_room)
    bar_w = min(max(COLORBAR_SHRINK * grid_h / COLORBAR_ASPECT, 0.1), 0.3)
    right = COLORBAR_GAP + bar_w + TICK_PAD + text.colorbar_ticks + PAD + text.colorbar_label + PAD
    return left + cols * panel_w + (cols - 1) * PANEL_GAP + right, top + grid_h + bottom


def grid_layout(size: tuple[float, float], n_panels: int, columns: int | None, text: TextSizes) -> GridLayout:
    """Positions of a grid of ``n_panels`` panels in a figure of ``size`` inches, with room for ``text``.

    Panels are laid out in reading order; only the left column carries row labels and only the
    lowest panel of each column carries column labels, so panels sit ``PANEL_GAP`` apart. A
    colorbar of ``COLORBAR_SHRINK`` times the grid's height stands to the right, as matplotlib's
    ``colorbar(shrink=0.9)`` does.
    """
    width, height = size
    rows, cols = grid_shape(n_panels, columns)
    row_labels = min(text.row_labels, LABEL_SHARE * width)
    col_labels = min(text.col_labels, LABEL_SHARE * height)
    left = PAD + text.axis_label + PAD + row_labels + TICK_PAD
    bottom = PAD + text.axis_label + PAD + col_labels + TICK_PAD
    title_room = text.panel_title + TITLE_PAD if text.panel_title else 0.0
    top = PAD + text.title + PAD + title_room
    grid_h = max(height - top - bottom, 0.1)
    bar_h = COLORBAR_SHRINK * grid_h
    bar_w = min(max(bar_h / COLORBAR_ASPECT, 0.1), 0.3)
    right = COLORBAR_GAP + bar_w + TICK_PAD + text.colorbar_ticks + PAD + text.colorbar_label + PAD
    grid_w = max(width - left - right, 0.1)
    v_gap = PANEL_GAP + title_room
    panel_w = max((grid_w - (cols - 1) * PANEL_GAP) / cols, 0.01)
    panel_h = max((grid_h - (rows - 1) * v_gap) / rows, 0.01)
    panels = []
    for p in range(n_panels):
        r, c = divmod(p, cols)
        x = left + c * (panel_w + PANEL_GAP)
        y = height - top - r * (panel_h + v_gap) - panel_h
        panels.append((x / width, y / height, panel_w / width, panel_h / height))
    grid_right = left + cols * panel_w + (cols - 1) * PANEL_GAP
    bar_y = bottom + (grid_h - bar_h) / 2
    colorbar = ((grid_right + COLORBAR_GAP) / width, bar_y / height, bar_w / width, bar_h / height)
    centre_x, centre_y = (left + grid_right) / 2, bottom + grid_h / 2
    return GridLayout(
        panels=panels,
        colorbar=colorbar,
        panel_title_pad=TITLE_PAD / height,
        title_xy=(0.5, 1 - PAD / height),
        col_axis_xy=(centre_x / width, PAD / height),
        row_axis_xy=(PAD / width, centre_y / height),
    )

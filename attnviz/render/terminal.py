"""The terminal renderer: truecolor heatmaps through rich, or shade characters without colour.

Rows are queries, columns are keys; column labels are written vertically above the grid. The
output fits the console's width: wider inputs are max-pooled (``fit="downsample"``) or split into
pages of columns (``fit="page"``), and a note says which. ``NO_COLOR`` and consoles with no
colour get shade characters (`` ░▒▓█``) so the pattern still shows.

Every string a user controls (token labels, titles holding model and file names, notes, panel
titles) is escaped with :func:`attnviz.labels.safe_text` before it is laid out, and printed as
``rich.text.Text``, which never reads ``[bold]`` or ``:smile:`` as markup.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Set
from dataclasses import replace
from typing import Any, Literal, Protocol

import numpy as np
from rich.cells import cell_len
from rich.text import Text

from ..labels import JOINERS, safe_text
from .colors import LOG_DECADES, SHADES, SIGNED_SHADES, ColorScale
from .view import HeatmapView, max_pool


class Screen(Protocol):
    """What the terminal renderers print to: a rich ``Console``, or the terminal app's ``Sink``, which keeps the
    lines it is given."""

    @property
    def width(self) -> int: ...

    @property
    def no_color(self) -> bool: ...

    @property
    def color_system(self) -> str | None: ...

    def print(self, *objects: Any, no_wrap: bool | None = None, crop: bool = True) -> None: ...


Fit = Literal["downsample", "page"]
_LABEL_MAX = 14  # row label width, in cells
_HEADER_MAX = 8  # column label height, in lines
_GAP = 2  # between panels of a grid


def render_terminal(view: HeatmapView, console: Screen, *, values: bool = False, fit: Fit = "downsample") -> None:
    """Print ``view`` to ``console``: one heatmap, or a grid when it has several panels.

    A grid (several heads) is always max-pooled until one panel fits; ``fit="page"`` applies to
    a single heatmap.
    """
    view = terminal_safe(view)
    if values:
        view = _in_readable_units(view)
    colour = not (console.no_color or console.color_system is None)
    cell_w = 4 if values else 2
    n_panels = view.panels.shape[0]
    if n_panels > 1 and fit == "page" and view.row_start is not None:  # a region's panels, each cell by cell in turn
        console.print(Text(view.title, style="bold"))
        print_notes(view.notes, console)
        for p, title in enumerate(view.panel_titles):
            console.print(Text(title, style="bold underline"))
            one = replace(view, panels=view.panels[p : p + 1], panel_titles=[title], notes=[], columns=None,
                          marks=view.marks[p : p + 1])
            _pages(one, console, cell_w, colour, values)
        console.print(_legend(view.scale, colour))
        console.print(Text(f"rows: {view.row_axis} · columns: {view.col_axis}", style="dim"))
        return
    if n_panels > 1 or fit == "downsample":
        view = pool_to_fit(view, console.width, cell_w, grid=n_panels > 1)
    console.print(Text(view.title, style="bold"))
    print_notes(view.notes, console)
    if n_panels > 1:
        _grid(view, console, _label_width(view), cell_w, colour, values)
    else:
        _pages(view, console, cell_w, colour, values)
    console.print(_legend(view.scale, colour))
    console.print(Text(f"rows: {view.row_axis} · columns: {view.col_axis}", style="dim"))


def _pages(view: HeatmapView, console: Screen, cell_w: int, colour: bool, values: bool) -> None:
    """One panel, its columns split into pages of what the console's width holds (one page where it fits);
    a region's pages number its keys from its first position."""
    label_w = _label_width(view)
    max_cols = max(1, (console.width - label_w - 1 - len(view.col_breaks)) // cell_w)
    n_keys = view.panels.shape[2]
    pages = [range(s, min(s + max_cols, n_keys)) for s in range(0, n_keys, max_cols)]
    if len(pages) > 1:
        console.print(Text(f"paged: {n_keys} columns in {len(pages)} pages of ≤{max_cols}", style="dim"))
    start = view.col_start if view.row_start is not None else 0
    for i, cols in enumerate(pages):
        if len(pages) > 1:
            console.print(Text(f"page {i + 1}/{len(pages)}: keys {start + cols.start}–{start + cols.stop - 1}",
                               style="bold"))
        _single(view, console, label_w, cell_w, colour, values, cols)


def terminal_safe(view: HeatmapView) -> HeatmapView:
    """``view`` with its title, notes, panel titles and labels escaped for the terminal (idempotent)."""
    return replace(view, title=safe_text(view.title), notes=[safe_text(n) for n in view.notes],
                   panel_titles=[safe_text(t) for t in view.panel_titles],
                   row_labels=[safe_text(t) for t in view.row_labels], col_labels=[safe_text(t) for t in view.col_labels],
                   row_axis=safe_text(view.row_axis), col_axis=safe_text(view.col_axis))


def _label_width(view: HeatmapView) -> int:
    return min(_LABEL_MAX, max(cell_len(s) for s in view.row_labels))


def pool_to_fit(view: HeatmapView, width: int, cell_w: int, *, grid: bool) -> HeatmapView:
    """The smallest max-pooling factor whose output fits ``width`` (pooled labels are wider)."""
    n_keys = view.panels.shape[2]
    factor = 1
    while True:
        pooled = max_pool(view, factor)
        keys = pooled.panels.shape[2]
        extra = _GAP if grid else len(pooled.col_breaks)
        if _label_width(pooled) + 1 + keys * cell_w + extra <= width or keys == 1:
            return pooled if factor == 1 else _pooled_here(pooled)
        room = max(cell_w, width - _LABEL_MAX - 1 - extra)
        factor = max(factor + 1, math.ceil(n_keys * cell_w / room))


def _pooled_here(view: HeatmapView) -> HeatmapView:
    """A region computed cell by cell, max-pooled here to fit: its note no longer says "cell by cell" beside the
    note of the pooling (one true thing: which cells the terminal shows)."""
    return replace(view, notes=[note.removesuffix(", cell by cell") for note in view.notes])


def _single(view: HeatmapView, console: Screen, label_w: int, cell_w: int, colour: bool, values: bool, cols: range) -> None:
    """One heatmap; a pair's boundary (``--pair``) is drawn as a rule between rows and a bar between columns."""
    matrix = view.panels[0]
    breaks = {j - cols.start for j in view.col_breaks if cols.start < j < cols.stop}
    for line in _column_header([view.col_labels[j] for j in cols], cell_w, breaks):
        console.print(Text(" " * (label_w + 1)) + line, no_wrap=True, crop=False)
    if view.token_step > 1 or view.row_start is not None:  # pooled or a region: where its columns are
        console.print(_ruler(view, cols, label_w, cell_w, breaks), no_wrap=True, crop=False)
    for i, label in enumerate(view.row_labels):
        if i in view.row_breaks:
            console.print(Text(" " * (label_w + 1) + "─" * (len(cols) * cell_w + len(breaks)), style="dim"), crop=False)
        row = Text(_fit_label(label, label_w) + " ")
        _cells(row, matrix[i, cols.start : cols.stop], view.scale, cell_w, colour, values, breaks)
        console.print(row, no_wrap=True, crop=False)


def _grid(view: HeatmapView, console: Screen, label_w: int, cell_w: int, colour: bool, values: bool) -> None:
    n_panels, n_rows, n_keys = view.panels.shape
    breaks = {j for j in view.col_breaks if 0 < j < n_keys}  # a pair's boundary (--pair), as in one panel
    panel_w = n_keys * cell_w + len(breaks) + _GAP
    per_row = max(1, (console.width - label_w - 1 + _GAP) // panel_w)
    if view.columns:  # a row per layer where it fits
        per_row = min(per_row, view.columns)
    for start in range(0, n_panels, per_row):
        chunk = range(start, min(start + per_row, n_panels))
        head = Text(" " * (label_w + 1))
        for p in chunk:
            head.append(_fit_label(view.panel_titles[p], panel_w - _GAP, left=True) + " " * _GAP, style="bold")
        console.print(head, no_wrap=True, crop=False)
        for line in _column_header(view.col_labels, cell_w, breaks):
            row = Text(" " * (label_w + 1))
            for _ in chunk:
                row.append_text(line)
                row.append(" " * _GAP)
            console.print(row, no_wrap=True, crop=False)
        for i in range(n_rows):
            if i in view.row_breaks:
                rule = ("─" * (panel_w - _GAP) + " " * _GAP) * len(chunk)
                console.print(Text(" " * (label_w + 1) + rule, style="dim"), crop=False)
            row = Text(_fit_label(view.row_labels[i], label_w) + " ")
            for p in chunk:
                _cells(row, view.panels[p, i], view.scale, cell_w, colour, values, breaks)
                row.append(" " * _GAP)
            console.print(row, no_wrap=True, crop=False)


def _cells(
    row: Text,
    weights: np.ndarray,
    scale: ColorScale,
    cell_w: int,
    colour: bool,
    values: bool,
    breaks: set[int] | frozenset[int] = frozenset(),
) -> None:
    rgb = scale.rgb(weights)
    shades = scale.shade(weights)
    for j, (w, (r, g, b), s) in enumerate(zip(weights, rgb, shades, strict=True)):
        if j in breaks:
            row.append("│", style="dim")
        if values:
            text = " " * (cell_w - 2) + "· " if w == 0 else _format_value(float(w), cell_w)  # 0: masked, not ".00"
        else:
            text = " " * cell_w if colour else (SHADES[s] if s >= 0 else SIGNED_SHADES[-s - 1]) * cell_w
        if colour:
            ink = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "white"
            row.append(text, style=f"{ink} on rgb({r},{g},{b})")
        else:
            row.append(text)


def _in_readable_units(view: HeatmapView) -> HeatmapView:
    """Values far below 1 (gradients) or signed ones would print as ``.00``: scale them by a power of
    ten that brings the largest magnitude into [1, 10) and say so in a note."""
    top = float(np.nanmax(np.abs(view.panels))) if view.panels.size else 0.0
    if not (math.isfinite(top) and top > 0) or (view.scale.vmin >= 0 and top >= 0.1):
        return view
    exponent = math.floor(math.log10(top))
    if exponent == 0:
        return view
    factor = 10.0 ** -exponent
    scale = replace(view.scale, vmin=view.scale.vmin * factor, vmax=view.scale.vmax * factor)
    return replace(view, panels=view.panels * factor, scale=scale,
                   notes=[*view.notes, f"cell values (and the scale) are in units of 1e{exponent}"])


def _format_value(w: float, cell_w: int) -> str:
    """A weight in ``cell_w`` cells: ``.42``, ``1.0``; ``-.4``, ``3.5``, ``-3``; beyond, as ``±n``."""
    if 0.0 <= w < 0.995:
        body = f"{w:.2f}"[1:]
    elif 0.995 <= w <= 1.0:
        body = "1.0"
    elif -0.95 < w < 0:
        body = "-" + f"{-w:.1f}"[1:]
    elif 1.0 < w < 9.95:
        body = f"{w:.1f}"
    else:
        body = f"{w:.0f}" if abs(w) < 10 ** (cell_w - 1) else "∞"
    return body.rjust(cell_w - 1)[: cell_w - 1] + " "


def print_notes(notes: list[str], console: Screen) -> None:
    """Each note on its line; one too wide for the terminal is broken between its items ("a: x; y"
    → "a:", "  x", "  y"), never inside one, as a plain wrap would."""
    for note in notes:
        head, colon, body = note.partition(": ")
        if cell_len(note) <= console.width or not colon:
            console.print(Text(note, style="dim"))
            continue
        console.print(Text(head + ":", style="dim"))
        for item in body.split("; "):
            console.print(Text("  " + item, style="dim"))


def _fit_label(label: str, width: int, *, left: bool = False) -> str:
    """``label`` cut to ``width`` cells (with "…") and padded, in one pass that stops as soon as the
    label is known to be too wide (a 125,000-character word once took 75 s, cut one character at a time)."""
    sizes, used = [], 0
    for ch in label:
        sizes.append(cell_len(ch))
        used += sizes[-1]
        if used > width:
            break
    if used > width:
        kept, room = 0, 0
        while kept < len(sizes) and room + sizes[kept] <= width - 1:
            room += sizes[kept]
            kept += 1
        label, used = label[:kept] + "…", room + 1
    pad = " " * max(0, width - used)
    return label + pad if left else pad + label


def _column_header(labels: list[str], cell_w: int, breaks: Set[int] = frozenset()) -> list[Text]:
    """Labels written downwards, one character per line, bottom-aligned to touch the grid."""
    columns = []
    for label in labels:
        chars = _glyphs(label[: _HEADER_MAX * 8]) or ["·"]  # a glyph is a few characters at most
        if len(chars) > _HEADER_MAX:
            chars = [*chars[:_HEADER_MAX - 1], "…"]
        columns.append(chars)
    height = max(len(c) for c in columns)
    lines = []
    for row in range(height):
        line = Text()
        for j, chars in enumerate(columns):
            if j in breaks:
                line.append("│", style="dim")
            k = row - (height - len(chars))
            ch = chars[k] if k >= 0 else ""
            width = cell_len(ch)
            line.append((ch if width <= cell_w else "?") + " " * max(0, cell_w - width))
        lines.append(line)
    return lines


def _ruler(view: HeatmapView, cols: range, label_w: int, cell_w: int, breaks: set[int]) -> Text:
    """The position of the first token of every few columns, under the column labels: what a
    region of a pooled overview is asked for by (rows carry their ranges in their labels)."""
    step, start = view.token_step, view.col_start
    widest = len(str(start + (cols.stop - 1) * step))
    every = max(1, -(-(widest + 1) // cell_w))  # numbers one space apart at least
    chars = [" "] * (len(cols) * cell_w)
    for j in range(0, len(cols), every):
        text = str(start + (cols.start + j) * step)
        if j * cell_w + len(text) <= len(chars):  # a number cut at the edge would read as another
            chars[j * cell_w : j * cell_w + len(text)] = text
    line = Text(_fit_label("key at", label_w) + " ", style="dim")
    for j in range(len(cols)):
        if j in breaks:
            line.append("│", style="dim")
        line.append("".join(chars[j * cell_w : (j + 1) * cell_w]), style="dim")
    return line


def _glyphs(label: str) -> list[str]:
    """Split into what a reader sees as one character: marks, joiners and modifiers stay attached."""
    glyphs: list[str] = []
    joined = False
    for ch in label:
        attach = unicodedata.category(ch) in ("Mn", "Me", "Cf") or ch in JOINERS
        if glyphs and (attach or joined):
            glyphs[-1] += ch
        else:
            glyphs.append(ch)
        joined = ch == "\u200d"
    return glyphs


def _legend(scale: ColorScale, colour: bool) -> Text:
    lo, hi = scale.vmin, scale.vmax
    if colour:
        text = Text(f"scale {'≤' if scale.log else ''}{legend_number(scale.floor if scale.log else lo)} ")
        steps = np.geomspace(scale.floor, hi, 24) if scale.log else np.linspace(lo, hi, 24)
        for (r, g, b) in scale.rgb(steps):
            text.append(" ", style=f"on rgb({r},{g},{b})")
        text.append(f" {legend_number(hi)}  ({scale.cmap}{', log scale' if scale.log else ''})")
        return text
    if scale.signed:
        top = max(-lo, hi)
        return Text(f"scale ' ' |x|<{legend_number(top / 8)}  ░▒▓█ positive, {SIGNED_SHADES} negative: |x| up to "
                    f"{legend_number(top / 4)}, {legend_number(top / 2)}, {legend_number(top * 3 / 4)}, "
                    f"{legend_number(top)}")
    step = (hi - lo) / len(SHADES)
    bounds = [lo + step * (i + 1) for i in range(len(SHADES) - 1)]
    if scale.log:  # each shade an equal share of the decades below the top
        bounds = [scale.floor * 10.0 ** (LOG_DECADES * (i + 1) / len(SHADES)) for i in range(len(SHADES) - 1)]
    parts = [f"'{ch}' <{legend_number(bound)}" for ch, bound in zip(SHADES, bounds, strict=False)]
    parts.append(f"'{SHADES[-1]}' ≤{legend_number(hi)}")
    return Text("scale " + "  ".join(parts))


def legend_number(value: float) -> str:
    """Two decimals for the usual weights, a short exponent form for huge or tiny ones (``--vmax 1e308``)."""
    return f"{value:.2f}" if value == 0 or 0.01 <= abs(value) < 1e5 else f"{value:.3g}"


def render_thumbnails(view: HeatmapView, console: Screen, *, layers: list[int], size: int = 8) -> None:
    """Small multiples: one thumbnail per head, one character per cell, a row of thumbnails per layer.

    ``view.panels`` holds every head of ``layers``, layer by layer. Each thumbnail is max-pooled
    to at most ``size``×``size`` cells.
    """
    view = terminal_safe(view)
    colour = not (console.no_color or console.color_system is None)
    n_keys = view.panels.shape[2]
    pooled = max_pool(view, math.ceil(n_keys / size)) if n_keys > size else view
    n_heads = view.panels.shape[0] // len(layers)
    side = pooled.panels.shape[2]
    per_row = max(1, (console.width - 5) // (side + 1))
    console.print(Text(view.title, style="bold"))
    for note in pooled.notes:
        console.print(Text(note.replace("downsampled", "each thumbnail downsampled"), style="dim"))
    for li, layer in enumerate(layers):
        for start in range(0, n_heads, per_row):
            heads = range(start, min(start + per_row, n_heads))
            header = Text(f"L{layer:<3} ", style="bold")
            for h in heads:
                header.append(f"H{h}".ljust(side + 1)[: side + 1], style="dim")
            console.print(header, no_wrap=True, crop=False)
            for row in range(pooled.panels.shape[1]):
                line = Text("     ")
                for h in heads:
                    _cells(line, pooled.panels[li * n_heads + h, row], pooled.scale, 1, colour, False)
                    line.append(" ")
                console.print(line, no_wrap=True, crop=False)
    console.print(_legend(pooled.scale, colour))

"""PNG heatmaps drawn straight to pixels: the cells with numpy, the text with FreeType (Pillow).

matplotlib builds a figure of artists, lays it out and rasterises every artist through Agg; for a
grid of 72 panels, importing and running that machinery cost more than the model's forward pass.
A heatmap is rectangles of colour and a few hundred labels, most of them the same tokens again: here
each panel is its cells enlarged by repeating pixels, each distinct label is drawn once and pasted
wherever it appears, and the file is written by :func:`~attnviz.render.png.encode_png`.

The layout is :func:`~attnviz.render.grid_layout.grid_layout`'s, as for vector files (SVG, PDF),
which matplotlib still draws (:mod:`~attnviz.render.labelled_figure`); the colours are
matplotlib's colormaps, the fonts the chain :func:`~attnviz.render.fonts.font_chain` picks. The
*frame* (token labels, axis names) depends only on the figure's :class:`FigureKey` and is drawn
once; each view's content (cells, titles, colorbar, markers, values) is drawn over a copy of it,
so a figure reused for the next layer gives the same pixels as a fresh one.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import atomic_write
from .colors import LOG_DECADES
from .figure_style import DPI, MAX_TICKS
from .fonts import font_covering, font_files
from .grid_layout import PAD, TICK_PAD, TITLE_PAD, TextSizes, grid_layout, grid_shape
from .labelled_figure import FigureKey
from .png import encode_png
from .view import HeatmapView

PX = DPI / 72  # pixels per point
LINE_SPACING = 1.2  # baseline to baseline, in font sizes (matplotlib's default)
MARK_COLOUR = (0xE8, 0x17, 0x5D)  # attention-sink markers
MARK_SIZE = math.sqrt(18)  # points: matplotlib's scatter size 18 (points²) for a "v" marker
LINE_WIDTH = 1.2  # points: the white lines between the segments of a pair
FRAME_WIDTH = 0.8  # points: the black frame of a panel and of the colorbar
TICK_LENGTH = 2.5  # points: the colorbar's tick marks
BLACK, WHITE = (0, 0, 0), (255, 255, 255)
Box = tuple[int, int, int, int]  # left, top, right, bottom in pixels (right and bottom excluded)


class TextPainter:
    """Text of a font chain at a few sizes, as masks (Pillow "L" images), each drawn once."""

    def __init__(self, families: tuple[str, ...]) -> None:
        self.files = font_files(families)
        self.pick = font_covering(self.files)
        self._faces: dict[tuple[int, float], Any] = {}
        self._masks: dict[tuple[str, float, int], Any] = {}

    def face(self, index: int, size: float) -> Any:
        from PIL import ImageFont

        if (index, size) not in self._faces:
            self._faces[index, size] = ImageFont.truetype(self.files[index], size * PX)
        return self._faces[index, size]

    def runs(self, line: str) -> list[tuple[int, str]]:
        """``line`` cut where the font that has its characters changes: (font index, text)."""
        runs: list[tuple[int, str]] = []
        for ch in line:
            index = self.pick(ch)
            if runs and runs[-1][0] == index:
                runs[-1] = (index, runs[-1][1] + ch)
            else:
                runs.append((index, ch))
        return runs

    def metrics(self, text: str, size: float) -> tuple[int, int]:
        """Ascent and descent in pixels of the fonts ``text`` uses (the default font's at least)."""
        used = {0} | {self.pick(ch) for ch in text}
        ascent = max(self.face(i, size).getmetrics()[0] for i in used)
        descent = max(self.face(i, size).getmetrics()[1] for i in used)
        return ascent, descent

    def width(self, line: str, size: float) -> float:
        return sum(self.face(i, size).getlength(run) for i, run in self.runs(line))

    def height(self, text: str, size: float) -> int:
        ascent, descent = self.metrics(text, size)
        return round((text.count("\n")) * LINE_SPACING * size * PX) + ascent + descent

    def mask(self, text: str, size: float, rotation: int = 0) -> np.ndarray:
        """``text`` (lines centred on each other) as coverage ``uint8 [height, width]``; ``rotation`` 90
        reads from bottom to top."""
        key = (text, size, rotation)
        if key not in self._masks:
            from PIL import Image, ImageDraw

            lines = text.split("\n")
            widths = [self.width(line, size) for line in lines]
            ascent, _ = self.metrics(text, size)
            image = Image.new("L", (max(1, math.ceil(max(widths))), max(1, self.height(text, size))), 0)
            draw = ImageDraw.Draw(image)
            for n, (line, width) in enumerate(zip(lines, widths, strict=True)):
                x, y = (image.width - width) / 2, ascent + n * LINE_SPACING * size * PX
                for index, run in self.runs(line):
                    face = self.face(index, size)
                    draw.text((x, y), run, fill=255, font=face, anchor="ls")
                    x += face.getlength(run)
            self._masks[key] = np.asarray(image.transpose(Image.Transpose.ROTATE_90) if rotation == 90 else image)
        return self._masks[key]


class RasterFigure:
    """The PNG of one :class:`FigureKey`: :meth:`show` a view, then :meth:`save` it."""

    def __init__(self, key: FigureKey) -> None:
        self.key = key
        self.text = TextPainter(key.families)
        self.width, self.height = round(key.size[0] * DPI), round(key.size[1] * DPI)
        self.layout = grid_layout(key.size, key.shape[0], key.columns, self._measure())
        self.panels = [self._pixels(rect) for rect in self.layout.panels]
        self.colorbar = self._pixels(self.layout.colorbar)
        self.frame = np.full((self.height, self.width, 3), 255, dtype=np.uint8)
        self.frame_boxes: list[tuple[str, Box]] = []
        self.boxes: list[tuple[str, Box]] = []  # every text of the last view shown, where it was drawn
        self.pixels = self.frame
        self._draw_frame()

    # -- layout -------------------------------------------------------------------------------------

    def _pixels(self, rect: tuple[float, float, float, float]) -> Box:
        left, bottom, width, height = rect
        return (round(left * self.width), round((1 - bottom - height) * self.height),
                round((left + width) * self.width), round((1 - bottom) * self.height))

    def _measure(self) -> TextSizes:
        key, text = self.key, self.text
        n_panels, q, k = key.shape
        size = _label_size(n_panels)
        x_step, y_step = max(1, math.ceil(k / MAX_TICKS)), max(1, math.ceil(q / MAX_TICKS))
        return TextSizes(
            row_labels=max(text.width(s, size) for s in key.row_labels[::y_step]) / DPI,
            col_labels=max(text.width(s, size) for s in key.col_labels[::x_step]) / DPI,
            title=text.height("\n".join(["Lp"] * key.title_lines), 10) / DPI,
            panel_title=text.height("Lp", 8) / DPI if n_panels > 1 else 0.0,
            axis_label=max(text.height(key.row_axis, 8), text.height(key.col_axis, 8)) / DPI,
            colorbar_ticks=text.width(key.colorbar_sample, 10) / DPI,
            colorbar_label=text.height(key.value_name, 10) / DPI,
        )

    # -- drawing ------------------------------------------------------------------------------------

    def _put(self, pixels: np.ndarray, text: str, size: float, x: float, y: float, *, ha: str, va: str,
             rotation: int = 0, colour: tuple[int, int, int] = BLACK, boxes: list[tuple[str, Box]] | None = None) -> None:
        """Draw ``text`` anchored at pixel (x, y): ``ha`` left/center/right, ``va`` top/center/bottom of
        its (turned) box."""
        if not text:
            return
        mask = self.text.mask(text, size, rotation)
        height, width = mask.shape
        left = round(x - {"left": 0.0, "center": width / 2, "right": width}[ha])
        top = round(y - {"top": 0.0, "center": height / 2, "bottom": height}[va])
        blend(pixels, mask, left, top, colour)
        if boxes is not None:
            boxes.append((text, (left, top, left + width, top + height)))

    def _draw_frame(self) -> None:
        """What every view of this key shares: the token labels and the axis names."""
        key, image, boxes = self.key, self.frame, self.frame_boxes
        n_panels, q, k = key.shape
        n_rows, cols = grid_shape(n_panels, key.columns)
        size, pad = _label_size(n_panels), TICK_PAD * DPI
        for p, (left, top, right, bottom) in enumerate(self.panels):
            if p // cols == n_rows - 1 or p + cols >= n_panels:  # the lowest panel of its column
                step = max(1, math.ceil(k / MAX_TICKS))
                for j in range(0, k, step):
                    self._put(image, key.col_labels[j], size, left + (j + 0.5) * (right - left) / k, bottom + pad,
                              ha="center", va="top", rotation=90, boxes=boxes)
            if p % cols == 0:
                step = max(1, math.ceil(q / MAX_TICKS))
                for i in range(0, q, step):
                    self._put(image, key.row_labels[i], size, left - pad, top + (i + 0.5) * (bottom - top) / q,
                              ha="right", va="center", boxes=boxes)
        x, y = self.layout.col_axis_xy
        self._put(image, key.col_axis, 8, x * self.width, (1 - y) * self.height, ha="center", va="bottom", boxes=boxes)
        x, y = self.layout.row_axis_xy
        self._put(image, key.row_axis, 8, x * self.width, (1 - y) * self.height, ha="left", va="center", rotation=90,
                  boxes=boxes)

    def show(self, view: HeatmapView) -> None:
        """Draw ``view``'s content over a copy of the frame."""
        from matplotlib import colormaps

        key, scale = self.key, view.scale
        pixels = self.frame.copy()
        self.boxes = list(self.frame_boxes)
        cmap = colormaps[key.cmap]
        colours = cmap(scale.normalize(np.nan_to_num(view.panels, nan=scale.vmin)), bytes=True)[..., :3]
        colours[np.isnan(view.panels)] = WHITE
        _, q, k = key.shape
        for p, box in enumerate(self.panels):
            left, top, right, bottom = box
            fill_cells(pixels, box, colours[p])
            self._lines(pixels, box)
            for j in (view.marks[p] if view.marks and p < len(view.marks) else []):
                x = left + (j + 0.5) * (right - left) / k
                marker = _marker(round(MARK_SIZE * PX))
                blend(pixels, marker, round(x - marker.shape[1] / 2), top - marker.shape[0], MARK_COLOUR)  # over the cell
            if key.values:
                shade = scale.normalize(view.panels[p])
                for i in range(q):
                    for j in range(k):
                        self._put(pixels, f"{view.panels[p, i, j]:.2f}", 5, left + (j + 0.5) * (right - left) / k,
                                  top + (i + 0.5) * (bottom - top) / q, ha="center", va="center",
                                  colour=BLACK if shade[i, j] > 0.6 else WHITE)
            if len(self.panels) > 1 and p < len(view.panel_titles):
                self._put(pixels, view.panel_titles[p], 8, (left + right) / 2, top - TITLE_PAD * DPI,
                          ha="center", va="bottom", boxes=self.boxes)
        self._colorbar(pixels, cmap, view)
        title = view.title + "".join(f"\n{note}" for note in view.notes)
        self._put(pixels, title, 10, self.width / 2, PAD * DPI, ha="center", va="top", boxes=self.boxes)
        self.pixels = pixels

    def _lines(self, pixels: np.ndarray, box: Box) -> None:
        """A panel's white lines between the segments of a pair, and its black frame."""
        left, top, right, bottom = box
        _, q, k = self.key.shape
        for b in self.key.row_breaks:
            _band(pixels, top + b * (bottom - top) / q, LINE_WIDTH * PX, left, right, WHITE, horizontal=True)
        for b in self.key.col_breaks:
            _band(pixels, left + b * (right - left) / k, LINE_WIDTH * PX, top, bottom, WHITE, horizontal=False)
        _outline(pixels, box, FRAME_WIDTH * PX)

    def _colorbar(self, pixels: np.ndarray, cmap: Any, view: HeatmapView) -> None:
        """The colorbar: its colours, ticks and their labels (as matplotlib's formatter writes them), its name."""
        left, top, right, bottom = self.colorbar
        height = max(bottom - top, 1)
        pixels[top:bottom, left:right] = cmap(1.0 - (np.arange(height) + 0.5) / height, bytes=True)[:, None, :3]
        _outline(pixels, self.colorbar, FRAME_WIDTH * PX)
        if view.scale.log:  # a tick a decade, from the top down
            ticks = [view.scale.vmax * 10.0 ** -d for d in range(LOG_DECADES + 1)]
            labels, offset = [log_tick(value) for value in ticks], ""
            labels[-1] = "≤" + labels[-1]  # everything below the scale takes its bottom colour
        else:
            ticks, labels, offset = colorbar_ticks(view.scale.vmin, view.scale.vmax, (bottom - top) / PX)
        pad = TICK_PAD * DPI
        for value, label in zip(ticks, labels, strict=True):
            y = bottom - float(view.scale.normalize(np.asarray(value))) * (bottom - top)
            _band(pixels, y, FRAME_WIDTH * PX, right, right + round(TICK_LENGTH * PX), BLACK, horizontal=True)
            self._put(pixels, label, 10, right + pad, y, ha="left", va="center", boxes=self.boxes)
        self._put(pixels, offset, 10, right, top - pad, ha="left", va="bottom", boxes=self.boxes)
        x = right + pad + self.text.width(self.key.colorbar_sample, 10) + PAD * DPI
        self._put(pixels, self.key.value_name, 10, x, (top + bottom) / 2, ha="left", va="center", rotation=90,
                  boxes=self.boxes)

    def save(self, path: Path) -> None:
        data = encode_png(self.pixels, dpi=DPI, text={"Software": "attnviz"})
        atomic_write(path, lambda tmp: write_bytes(tmp, data))


def write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)


LOG_TICK_SAMPLE = "≤0.0e-0"
"""The widest label of a log colorbar's ticks (:func:`log_tick`), its digits as 0: room kept for it."""


def log_tick(value: float) -> str:
    """A log colorbar's tick: two significant digits, a short exponent (``0.075``, ``7.5e-5``)."""
    text = f"{value:.2g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def colorbar_ticks(vmin: float, vmax: float, length_pt: float) -> tuple[list[float], list[str], str]:
    """Tick values, their labels and the offset text (e.g. ``1e−5``) of a colorbar ``length_pt``
    points tall, as matplotlib's MaxNLocator and ScalarFormatter choose them (at most 9 intervals,
    as :func:`~attnviz.render.labelled_figure.colorbar_sample` assumes)."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    nbins = int(min(9, max(2, length_pt // 30)))  # a label about every 30 points, as matplotlib spaces them
    values = np.asarray(MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax))
    span = vmax - vmin
    values = values[(values >= vmin - 1e-9 * span) & (values <= vmax + 1e-9 * span)]
    formatter = ScalarFormatter()
    formatter.create_dummy_axis()
    assert formatter.axis is not None  # the dummy axis just made
    formatter.axis.set_view_interval(vmin, vmax)
    labels = formatter.format_ticks(list(values))
    return [float(v) for v in values], labels, formatter.get_offset()


def _label_size(n_panels: int) -> float:
    return 8.0 if n_panels == 1 else 6.0


def fill_cells(pixels: np.ndarray, box: Box, colours: np.ndarray) -> None:
    """``colours`` ``[q, k, 3]`` enlarged into ``box`` by repeating pixels (nearest neighbour: pixel
    ``x`` shows cell ``floor((x + 0.5) * k / width)``)."""
    left, top, right, bottom = box
    width, height = right - left, bottom - top
    if width <= 0 or height <= 0:
        return
    q, k = colours.shape[:2]
    cols = np.bincount(np.minimum(((np.arange(width) + 0.5) * (k / width)).astype(np.intp), k - 1), minlength=k)
    rows = np.bincount(np.minimum(((np.arange(height) + 0.5) * (q / height)).astype(np.intp), q - 1), minlength=q)
    pixels[top:bottom, left:right] = np.repeat(np.repeat(colours, rows, axis=0), cols, axis=1)


def blend(pixels: np.ndarray, mask: np.ndarray, left: int, top: int, colour: tuple[int, int, int]) -> None:
    """Paint ``colour`` through ``mask`` (coverage 0–255) with its top left corner at (left, top);
    what falls outside ``pixels`` is left out."""
    height, width = mask.shape
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + height, pixels.shape[0]), min(left + width, pixels.shape[1])
    if y0 >= y1 or x0 >= x1:
        return
    alpha = mask[y0 - top:y1 - top, x0 - left:x1 - left, None].astype(np.float32) / 255
    region = pixels[y0:y1, x0:x1]
    region[:] = np.rint(region * (1 - alpha) + np.asarray(colour, dtype=np.float32) * alpha).astype(np.uint8)


@functools.cache
def _marker(size: int) -> np.ndarray:
    """A triangle pointing down (matplotlib's "v"), ``size`` pixels wide and tall, as a mask."""
    from PIL import Image, ImageDraw

    image = Image.new("L", (size + 1, size + 1), 0)
    ImageDraw.Draw(image).polygon([(0, 0), (size, 0), (size / 2, size)], fill=255)
    return np.asarray(image)


def _band(pixels: np.ndarray, at: float, width: float, start: int, stop: int, colour: tuple[int, int, int], *,
          horizontal: bool) -> None:
    """A line ``width`` pixels wide centred on ``at``, from ``start`` to ``stop`` along it."""
    lo = round(at - width / 2)
    hi = max(lo + 1, round(at + width / 2))
    if horizontal:
        pixels[max(lo, 0):hi, start:stop] = colour
    else:
        pixels[start:stop, max(lo, 0):hi] = colour


def _outline(pixels: np.ndarray, box: Box, width: float) -> None:
    left, top, right, bottom = box
    _band(pixels, top, width, left, right, BLACK, horizontal=True)
    _band(pixels, bottom, width, left, right, BLACK, horizontal=True)
    half = round(width / 2)
    _band(pixels, left, width, max(top - half, 0), bottom + half, BLACK, horizontal=False)
    _band(pixels, right, width, max(top - half, 0), bottom + half, BLACK, horizontal=False)

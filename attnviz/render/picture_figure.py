"""Heat over a picture, drawn to be read (issue 59): each panel the picture at a readable size (a small one upscaled:
384 pixels on its short side for a few panels, never under 192), the heat smooth at the picture's resolution (or a
block per patch) blended so the picture shows through, one colour bar for the figure's one scale (or each panel's
own, said in the title), a title naming the model, the query, the layer and head, and what the processor cropped
hatched outside a dashed frame, with a note saying so. PNG, SVG and PDF alike (matplotlib); draws what it is given
(:class:`attnviz.views.picture_heat.PictureHeat`), computes nothing."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from .figure_style import DPI, STABLE_RC, save_figure

HEAT_ALPHA = 0.7  # the heat's opacity over the picture at its largest weight: both show
HEAT_FLOOR = 0.2  # and at its smallest: the picture nearly clear where a head reads nothing
PANEL_ASPECT = 4.0  # a panel at most this many times wider than tall, or taller than wide (a thin picture squeezed)
MAX_FIGURE_PIXELS = 64_000_000  # the whole figure at most (192 MB as RGB): panels shrink first, then it is refused
MIN_SIDE = 64  # pixels: the smallest short side a panel is drawn at before the figure is refused


def short_side(panels: int) -> int:
    """Pixels on a panel's short side: 384 for up to 12 panels, 256 up to 36, then 192."""
    return 384 if panels <= 12 else 256 if panels <= 36 else 192


def panel_inches(size: tuple[int, int], side: int) -> tuple[float, float]:
    """A panel's ``(width, height)`` in inches for a picture of ``size``: its short side ``side`` pixels, its aspect
    kept within :data:`PANEL_ASPECT`."""
    width, height = size
    aspect = min(PANEL_ASPECT, max(1 / PANEL_ASPECT, width / max(1, height)))
    short = side / DPI
    return (short * aspect, short) if aspect >= 1 else (short, short / aspect)


def render_picture_figure(view: Any, images: list[Any], path: str | Path) -> Path:
    """Draw ``view`` over ``images`` (the RGB ``PIL.Image`` of each picture, in the view's order) to ``path``
    (.png, .svg or .pdf)."""
    from matplotlib import colormaps, rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from ..errors import ResourceError
    from .fonts import font_chain
    from .image import warn_missing

    path = Path(path)
    count = len(view.panels)
    columns = max(1, min(view.columns, count))
    rows = math.ceil(count / columns)
    widest = max((images[p.picture].size for p in view.panels), key=lambda s: s[0] / max(1, s[1]))
    side = short_side(count)
    while True:
        pw, ph = panel_inches(widest, side)
        width, height = columns * pw + 1.6, rows * (ph + 0.35) + 1.3
        if width * height * DPI * DPI <= MAX_FIGURE_PIXELS or side <= MIN_SIDE:
            break
        side = max(MIN_SIDE, int(side * 0.8))
    if width * height * DPI * DPI > MAX_FIGURE_PIXELS:
        raise ResourceError(f"{path}: {count:,} panels make a figure of {width * DPI:,.0f} × {height * DPI:,.0f} "
                            f"pixels even {MIN_SIDE} pixels a panel; draw fewer layers, heads, pictures or tokens")
    titles = [view.title, *(p.title for p in view.panels), *view.notes]
    families, missing = font_chain(titles)
    warn_missing(missing)
    shown = [_display_copy(image, panel_inches(image.size, side), side) for image in images]
    with rc_context({"font.family": families, **STABLE_RC}):
        fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows, columns, squeeze=False)
        drawn = None
        for ax, panel in zip(axes.flat, view.panels, strict=False):
            scale = view.panel_scale(panel)
            drawn = _panel(ax, panel, view.pictures[panel.picture], images[panel.picture].size,
                           shown[panel.picture], scale, smooth=view.smooth, cmap=colormaps[scale.cmap])
        for ax in list(axes.flat)[count:]:
            ax.set_axis_off()
        fig.suptitle("\n".join(textwrap.wrap(view.title, max(40, int(width * 11)))), fontsize=10)
        if drawn is not None:
            from matplotlib.cm import ScalarMappable

            norm = Normalize(0.0, 1.0) if view.per_panel else Normalize(view.scale.vmin, view.scale.vmax)
            bar = fig.colorbar(ScalarMappable(norm=norm, cmap=colormaps[view.scale.cmap]), ax=axes, shrink=0.9,
                               fraction=0.04, pad=0.02)
            bar.set_label("share of the panel's largest weight" if view.per_panel else view.value_name, fontsize=8)
            bar.ax.tick_params(labelsize=7)
            if view.uniform is not None and not view.per_panel and view.uniform <= view.scale.vmax:
                # where attention spread evenly would sit: a head at this level reads nothing in particular
                bar.ax.axhline(view.uniform, color="white", linewidth=1.5, linestyle="--")
                bar.ax.text(-0.3, view.uniform, f"uniform\n1/{round(1 / view.uniform)}", ha="right", va="center",
                            fontsize=6, transform=bar.ax.get_yaxis_transform())
        if view.notes:
            fig.supxlabel("\n".join(textwrap.fill(note, max(40, int(width * 12))) for note in view.notes), fontsize=7)
        save_figure(fig, path)
    return path


def _display_copy(image: Any, inches: tuple[float, float], side: int) -> np.ndarray:
    """The picture at twice its panel's pixels at most (a 50-million-pixel photo is never drawn whole), upscaled
    smoothly where smaller than its panel (a 64 × 48 picture fills 512 × 384)."""
    from PIL import Image

    target = (max(1, round(inches[0] * DPI * 2)), max(1, round(inches[1] * DPI * 2)))
    return np.asarray(image.resize(target, Image.Resampling.BICUBIC if image.size[0] < target[0] else
                                   Image.Resampling.LANCZOS).convert("RGB"))


def _panel(ax: Any, panel: Any, picture: Any, size: tuple[int, int], shown: np.ndarray, scale: Any, *, smooth: bool,
           cmap: Any) -> Any:
    """One panel: the picture over its whole area, the heat over the region the patches cover, the crop hatched."""
    from matplotlib.patches import Rectangle

    width, height = size
    kept = 1 / PANEL_ASPECT <= width / max(1, height) <= PANEL_ASPECT  # else squeezed into its panel
    ax.imshow(shown, extent=(0, width, height, 0), interpolation="bilinear", aspect="equal" if kept else "auto")
    x0, y0, x1, y1 = picture.seen
    # The heat's opacity grows with its weight: where a head reads nothing the picture shows nearly clear.
    opacity = HEAT_FLOOR + (HEAT_ALPHA - HEAT_FLOOR) * np.sqrt(scale.normalize(panel.weights))  # a sixth still shows
    heat = ax.imshow(panel.weights, extent=(x0, x1, y1, y0), cmap=cmap, vmin=scale.vmin, vmax=scale.vmax,
                     alpha=opacity, interpolation="bilinear" if smooth else "nearest",
                     aspect="equal" if kept else "auto")
    inside = (max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1))
    if inside != (0.0, 0.0, float(width), float(height)):  # cropped: what the model never saw, hatched
        for band in ((0, 0, width, inside[1]), (0, inside[3], width, height - inside[3]),
                     (0, inside[1], inside[0], inside[3] - inside[1]),
                     (inside[2], inside[1], width - inside[2], inside[3] - inside[1])):
            if band[2] > 0 and band[3] > 0:
                ax.add_patch(Rectangle(band[:2], band[2], band[3], facecolor=(0.5, 0.5, 0.5, 0.55), hatch="//",
                                       edgecolor=(0.2, 0.2, 0.2, 0.6), linewidth=0))
        ax.add_patch(Rectangle(inside[:2], inside[2] - inside[0], inside[3] - inside[1], fill=False,
                               linestyle="--", linewidth=1.0, edgecolor="white"))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_axis_off()
    ax.set_title("\n".join(textwrap.wrap(panel.title, 40)), fontsize=8)
    return heat

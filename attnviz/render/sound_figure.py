"""Cross-attention over a clip, drawn to be read (issue 61 item 2): for each panel (a layer × head), the clip's
log-mel spectrogram on top and, under it on the same time axis in seconds, each token's weights over time, the tokens
at the side; one colour bar for the figure's one scale; a title naming the model, the layer and head. PNG, SVG and
PDF alike (matplotlib); draws what it is given (:class:`attnviz.views.sound_heat.SoundHeat`), computes nothing."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from .figure_style import DPI, STABLE_RC, save_figure

PANEL_WIDTH = 6.4  # inches: a panel's width (960 pixels at 150 dpi)
ROW_INCHES = 0.24  # a token's row
MEL_INCHES = 1.1  # the spectrogram's strip
MAX_COLUMNS = 2  # panels side by side at most


def render_sound_figure(heat: Any, path: str | Path) -> Path:
    """Draw ``heat`` to ``path`` (.png, .svg or .pdf)."""
    from matplotlib import colormaps, rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from .fonts import font_chain
    from .image import warn_missing

    path = Path(path)
    count = len(heat.panel_titles)
    columns = max(1, min(MAX_COLUMNS, count))
    rows = math.ceil(count / columns)
    tokens = len(heat.tokens)
    heat_inches = max(1.2, tokens * ROW_INCHES)
    width = columns * PANEL_WIDTH + 1.9
    height = rows * (MEL_INCHES + heat_inches + 0.9) + 1.2
    families, missing = font_chain([heat.title, *heat.tokens, *heat.panel_titles, *heat.notes])
    warn_missing(missing)
    top = float(heat.panels.max()) if heat.panels.size and float(heat.panels.max()) > 0 else 1.0
    norm = Normalize(0.0, top)
    cmap = colormaps[heat.cmap]
    shown = heat.positions * heat.seconds_per_position
    with rc_context({"font.family": families, **STABLE_RC}):
        fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        grid = fig.add_gridspec(rows * 2, columns, height_ratios=[MEL_INCHES, heat_inches] * rows)
        heat_axes = []
        for p, title in enumerate(heat.panel_titles):
            r, c = divmod(p, columns)
            mel_ax = fig.add_subplot(grid[2 * r, c])
            ax = fig.add_subplot(grid[2 * r + 1, c], sharex=mel_ax)
            if heat.mel is not None:
                frames = heat.mel.shape[1]
                mel_ax.imshow(heat.mel, origin="lower", aspect="auto", cmap="gray_r", interpolation="nearest",
                              extent=(0, frames * heat.frame_seconds, 0, heat.mel.shape[0]))
                mel_ax.set_ylabel("mel bin", fontsize=7)
            mel_ax.set_title(f"{title}: the clip's log-mel spectrogram (top), each token's attention over it (below)",
                             fontsize=8)
            mel_ax.tick_params(labelbottom=False, labelsize=6)
            ax.imshow(heat.panels[p], aspect="auto", cmap=cmap, norm=norm, interpolation="nearest",
                      extent=(0, shown, tokens, 0))
            ax.set_yticks([i + 0.5 for i in range(tokens)], heat.tokens, fontsize=7)
            ax.set_xlim(0, shown)
            ax.set_xlabel("time (s)", fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", color="white", alpha=0.25, linewidth=0.5)
            heat_axes.append(ax)
        bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=heat_axes, shrink=0.9, fraction=0.04, pad=0.02)
        bar.set_label("attention weight (one scale across the panels)", fontsize=8)
        bar.ax.tick_params(labelsize=7)
        fig.suptitle("\n".join(textwrap.wrap(heat.title, max(40, int(width * 11)))), fontsize=10)
        notes = ["each row: the step that writes its token", *heat.notes]
        fig.supxlabel("\n".join(textwrap.fill(note, max(40, int(width * 12))) for note in notes), fontsize=7)
        save_figure(fig, path)
    return path

"""What ``attnviz align-heads`` writes (:mod:`.head_search`'s result): JSON (the whole search), CSV (the heads
ranked), PNG (the layers × heads grid of each head's error, or label-free score, the chosen heads marked) and an
offline page (HTML: the grid, the set in its three forms, the greedy steps and the ranking; no script, no request)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .head_search import COLUMNS, HeadSearch

SUFFIXES = (".json", ".csv", ".png", ".html")


def write_head_search(path: str | os.PathLike[str], search: HeadSearch) -> Path:
    """``search`` written to ``path``, its kind from its extension (:data:`SUFFIXES`)."""
    from ..fileio import write_json
    from ..tables import write_rows

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        return write_json(path, search.to_dict())
    if suffix == ".csv":
        write_rows(path, search.rows(), list(COLUMNS))
        return path
    if suffix == ".png":
        return head_grid_figure(search, path)
    if suffix == ".html":
        return head_search_page(search, path)
    from ..errors import UnknownFormatError

    raise UnknownFormatError(f"cannot write {path}: use one of {', '.join(SUFFIXES)}")


def head_grid_figure(search: HeadSearch, path: Path) -> Path:
    """The ``[layers, heads]`` grid of ``search`` drawn to ``path``: a cell per head coloured by its mean boundary
    error (ms; lower is better) or its label-free score, a colour bar, the chosen heads outlined."""
    labelled = search.labelled
    grid = search.grid()
    clips = len(search.clips)
    title = f"{search.model}: " + (f"mean word-boundary error of each head's own timings over {clips} "
                                   f"clip{'s' if clips != 1 else ''}" if labelled
                                   else "label-free score (arXiv 2509.09987)")
    label = ("error (ms), lower is better; red: the set chosen" if labelled
             else "score, higher is better; red: the set chosen")
    return head_grid_png(grid * 1000 if labelled else grid, path, title=title, label=label,
                         cmap="viridis_r" if labelled else "viridis", outlined=search.chosen)


def head_grid_png(values: Any, path: Path, *, title: str, label: str, cmap: str = "viridis",
                  outlined: Sequence[tuple[int, int]] = (), centred: bool = False) -> Path:
    """A ``[layers, heads]`` grid of numbers drawn to ``path``: a cell per decoder head, a colour bar labelled
    ``label``, the heads ``outlined`` in red; ``centred``: a scale symmetric about 0 (a change)."""
    import math
    import textwrap

    import numpy as np
    from matplotlib import colormaps, rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from ..labels import safe_text
    from ..render.figure_style import DPI, STABLE_RC, save_figure

    values = np.asarray(values, dtype=np.float64)
    layers, heads = values.shape
    width = max(3.6, min(14.0, 0.35 * heads + 2.2))
    height = max(2.8, min(12.0, 0.35 * layers + 1.6))
    with rc_context(dict(STABLE_RC)):
        fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        norm = None
        if centred:
            reach = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 1.0
            norm = TwoSlopeNorm(0.0, -(reach or 1.0), reach or 1.0)
        drawn = ax.imshow(np.ma.masked_invalid(values), cmap=colormaps[cmap], norm=norm, aspect="auto",
                          interpolation="nearest")
        step_x, step_y = max(1, math.ceil(heads / 32)), max(1, math.ceil(layers / 32))
        ax.set_xticks(range(0, heads, step_x), [str(h) for h in range(0, heads, step_x)], fontsize=7)
        ax.set_yticks(range(0, layers, step_y), [str(layer) for layer in range(0, layers, step_y)], fontsize=7)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("decoder layer", fontsize=8)
        ax.set_title("\n".join(textwrap.wrap(safe_text(title), max(30, int(width * 11)))), fontsize=8)
        for layer, head in outlined:
            ax.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.6))
        bar = fig.colorbar(drawn, ax=ax, shrink=0.9)
        bar.ax.tick_params(labelsize=6)
        bar.set_label(label, fontsize=7)
        save_figure(fig, path)
    return path


def search_text(search: HeadSearch) -> dict[str, Any]:
    """The chosen set's summary as the terminal prints it: the set, its error, and its three forms."""
    from ..labels import head_name

    return {"chosen": ", ".join(head_name(layer, head) for layer, head in search.chosen), **search.forms()}


def static_page(path: str | os.PathLike[str], title: str, body: str) -> Path:
    """An offline page written to ``path`` atomically: ``title`` (escaped here) over ``body`` (HTML made by the
    caller, every text in it escaped), the strict policy of attnviz's pages (no script runs, nothing is fetched)."""
    import html

    from ..render.html import POLICY, write_page

    text = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY.format(connect=chr(39) + 'none' + chr(39))}\">\n"
            f"<meta name=\"generator\" content=\"attnviz\">\n<title>{html.escape(title)}</title>\n"
            "<style>body{font-family:system-ui,sans-serif;margin:1.5em;max-width:80em}table{border-collapse:collapse}"
            "td,th{padding:.2em .6em;text-align:right;border-bottom:1px solid #ddd}pre{background:#f4f4f4;"
            "padding:.6em;overflow-x:auto}</style>\n</head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n{body}</body>\n</html>\n")
    return Path(write_page(text, path))


def png_tag(drawn: Path, alt: str) -> str:
    """A drawn PNG as an inline ``<img>`` (a data: URL)."""
    import base64
    import html

    data = base64.b64encode(Path(drawn).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}" style="max-width:100%">'


def head_search_page(search: HeadSearch, path: str | os.PathLike[str]) -> Path:
    """The search as one offline page (see the module)."""
    import html

    from ..fileio import scratch_folder
    from ..labels import head_name

    with scratch_folder("align-heads") as folder:
        grid = png_tag(head_grid_figure(search, folder / "grid.png"), "each head's score as a grid of layers by heads")
    forms = search.forms()
    chosen = ", ".join(head_name(layer, head) for layer, head in search.chosen)
    how = ("each head's own word timings (openai-whisper's steps, that head alone) scored against the references: "
           "the mean absolute error of the word boundaries, lower is better" if search.labelled else
           "no references: the label-free score of arXiv 2509.09987 (the L2 norms of each head's map's columns and "
           "rows), higher is better")
    steps = "".join(f"<tr><td>{html.escape(head_name(*step['added']))}</td><td>{step['set_error'] * 1000:.1f} ms</td>"
                    "</tr>" for step in search.steps)
    columns = [c for c in COLUMNS if search.labelled or c not in ("error", "within_20ms", "within_50ms",
                                                                  "within_100ms")]
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(row[c]))}</td>" for c in columns) + "</tr>"
                   for row in search.rows())
    clips = len(search.clips)
    body = (f"<p>{search.layers} decoder layers × {search.per_layer} heads over {clips} clip{'' if clips == 1 else 's'}"
            f"; {html.escape(how)}. The set chosen (red): <b>{html.escape(chosen)}</b>.</p>\n{grid}\n"
            "<h2>The set, in the three forms people load</h2>\n"
            "<p>generation_config.json's <code>alignment_heads</code> (transformers' "
            "<code>return_token_timestamps</code>):</p>\n"
            f"<pre>{html.escape(str(forms['alignment_heads']))}</pre>\n"
            f"<p>openai-whisper's mask (base85 of gzip):</p>\n<pre>{html.escape(str(forms['openai_mask']))}</pre>\n"
            f"<p>whisper.cpp's custom heads:</p>\n<pre>{html.escape(str(forms['whisper_cpp']))}</pre>\n"
            + (f"<h2>How the set grew</h2>\n<table><tr><th>head added</th><th>the set's error</th></tr>{steps}"
               "</table>\n" if search.labelled else "")
            + "<h2>Every head, ranked</h2>\n<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in columns)
            + f"</tr>{rows}</table>\n")
    return static_page(path, f"attnviz align-heads · {search.model}", body)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)

"""``atlas --image --out atlas.html`` (issue 59, item 4): the picture atlas as one offline page, as the text atlas
has one: the visual sinks drawn as heat over the picture (each grid place's mean share of the attention on the
patches, as times an even spread, across the questions, layers and heads), the sinks ranked, and every head's share
on the picture, entropy over its patches and sink."""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

import numpy as np


def sinks_view(atlas: Any, cmap: str = "magma") -> Any:
    """The visual sinks of ``atlas`` as one panel of heat over its picture (:class:`~.picture_heat.PictureHeat`)."""
    from ..render.colors import ColorScale
    from .picture_heat import PictureHeat, PicturePanel, view_notes

    rows, cols = atlas.grid
    weights = np.zeros((rows, cols))
    for place in atlas.sinks:
        weights[place["row"], place["col"]] = place["weight"]
    return PictureHeat(title=f"{atlas.model} · visual sinks across {atlas.texts} texts · each place's share of the "
                       "attention on the patches, as times an even spread", panels=[PicturePanel("visual sinks",
                                                                                              weights, 0)],
                       pictures=[atlas.picture], scale=ColorScale(0.0, float(weights.max()) or 1.0, cmap), columns=1,
                       notes=view_notes([atlas.picture]), value_name="times an even spread")


def picture_atlas_page(atlas: Any, path: str | Path, *, cmap: str = "magma") -> Path:
    """Write the page (see the module) to ``path``, atomically."""
    from ..fileio import scratch_folder
    from ..images.files import read_image
    from ..render.html import write_page
    from ..render.picture_figure import render_picture_figure

    figure = ""
    if atlas.grid is not None and atlas.picture is not None and atlas.picture.path:
        with scratch_folder("atlas") as folder:
            drawn = render_picture_figure(sinks_view(atlas, cmap), [read_image(atlas.picture.path)],
                                          folder / "sinks.png")
            figure = base64.b64encode(drawn.read_bytes()).decode("ascii")
    return write_page(page_text(atlas, figure), path)


def page_text(atlas: Any, figure: str) -> str:
    """The page's HTML: no script, no request (the figure inline as a PNG)."""
    from ..render.html import POLICY

    title = f"attnviz atlas · {atlas.model} · {atlas.texts} texts with pictures"
    heads = sorted(atlas.heads, key=lambda r: -r["image_share"])
    rows = "".join(f"<tr><td>{h['layer']}</td><td>{h['head']}</td><td>{h['image_share']:.3f}</td>"
                   f"<td>{h['patch_entropy']:.3f}</td><td>{html.escape(str(h['sink']))}</td>"
                   f"<td>{h['sink_agreement']:.0%}</td></tr>" for h in heads)
    sinks = "".join(f"<tr><td>r{p['row']}c{p['col']}</td><td>{p['weight']:.2f}×</td><td>{p['texts']:.0%}</td></tr>"
                    for p in atlas.sinks[:10])
    picture = (f'<img alt="the visual sinks as heat over the picture" src="data:image/png;base64,{figure}" '
               'style="max-width:100%">' if figure else
               "<p>The texts' pictures make grids of different shapes: their places are not compared (no visual "
               "sinks).</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY.format(connect=chr(39) + 'none' + chr(39))}\">\n"
            f"<meta name=\"generator\" content=\"attnviz\">\n<title>{html.escape(title)}</title>\n"
            "<style>body{font-family:system-ui,sans-serif;margin:1.5em;max-width:70em}table{border-collapse:collapse}"
            "td,th{padding:.2em .8em;text-align:right;border-bottom:1px solid #ddd}</style>\n</head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n<h2>Visual sinks</h2>\n"
            "<p>Places of the picture's grid drawn to whatever is asked (Kang et al. 2025): each place's mean share of "
            "the attention on the patches across the questions, layers and heads, as times an even spread, and how "
            "often it is a text's heaviest.</p>\n"
            f"{picture}\n<table><tr><th>place</th><th>weight</th><th>heaviest in</th></tr>{sinks}</table>\n"
            "<h2>Heads</h2>\n<p>Each head's mean share of attention on the pictures, its entropy over the patches (0: "
            "one patch, 1: even) and its most frequent sink, with the share of texts that agree.</p>\n"
            "<table><tr><th>layer</th><th>head</th><th>on pictures</th><th>entropy</th><th>sink</th><th>same sink</th>"
            f"</tr>{rows}</table>\n</body>\n</html>\n")

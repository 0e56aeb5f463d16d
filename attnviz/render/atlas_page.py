"""The atlas as one offline page. A corpus: a layers × heads grid of a statistic's corpus mean (pick the
statistic), the heads ranked by it with the labels they earn and how often, and per head the statistic's
distribution over the texts, the texts where the head shows it most (each with its attention) and its
queries and keys embedded together. A checkpoint diff: the same for each head's change, with intervals and
p-values, and the two models' attention side by side. Self-contained (inline script, style and data, no
request leaves it), as the interactive page is; the data is :func:`attnviz.export.atlas_data.document` or
:func:`attnviz.export.atlas_data.diff_document`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .html import standalone_page, write_page


def atlas_html(document: dict[str, Any]) -> str:
    diff = document.get("kind") == "diff"
    model = document.get("model") or "model"
    title = f"attnviz atlas · {model} → {document['other']}" if diff else f"attnviz atlas · {model}"
    title += f" · {document['n_texts']} texts"
    intro = ("Each cell is a head's mean change over the texts (red: up, blue: down; the JS divergence is how far the "
             "two models' attention moved); click one for its distribution, interval and the texts where it changed "
             "most." + (f" {document['note']}." if document.get("note") else "")) if diff else \
        ("Each cell is a head's mean over the texts; click one for its distribution, the texts where it shows the "
         "statistic most, and its queries and keys.")
    body = (
        f"<div class=\"controls\"><label>{'measure' if diff else 'statistic'} <select id=\"atlasstat\"></select>"
        "</label> <label>heads <select id=\"atlasorder\"><option value=\"desc\">highest first</option>"
        "<option value=\"asc\">lowest first</option></select></label></div>\n"
        "<main><section><table id=\"atlasgrid\" aria-label=\"layers by heads\"></table>"
        "<div id=\"atlaslegend\" class=\"legend\"></div>"
        "<ol id=\"atlasrank\" aria-label=\"heads by the statistic\"></ol></section>"
        "<section id=\"atlashead\" aria-live=\"polite\"><p class=\"note\">Click a head.</p></section></main>"
    )
    return standalone_page(title=title, intro=intro, body=body, document=document, data_id="atlas-data",
                           scripts=("names.js", "atlas.js", "atlas_qk.js"), style="atlas.css")


def render_atlas(document: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the atlas page to ``path`` (atomically)."""
    return write_page(atlas_html(document), path)

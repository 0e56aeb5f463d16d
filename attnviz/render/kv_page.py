"""The kv page, offline and self-contained: the runs (policy × budget) with their curves of recall and KL against
the keys kept; a matrix of every layer's key/value heads × the prompt's keys showing what the future needs of each
key, with the chosen run's kept keys overlaid and the needed keys it drops in red (the wheel zooms the keys, a drag
pans, a double click resets); and the chosen head: its loss, and the keys it drops that the future needed, by name.
The data is :func:`attnviz.kv.page.page_document`'s."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .html import standalone_page, write_page


def kv_html(document: dict[str, Any]) -> str:
    title = f"attnviz kv · {document['model']} · {document['n_context']:,} tokens cached"
    future = "the question" if document["future_mode"] == "question" else "the model's continuation"
    intro = (f"What each KV-cache policy keeps of the prompt, judged by what {future} attends to. Pick a run; the matrix "
             "shows, for every layer's key/value heads (rows) and the prompt's keys (columns), how much the future "
             "attends each key (brighter: more), the keys the run drops greyed and the ones it drops that the future "
             "needed in red.")
    body = (
        "<div class=\"top\"><section><h2>runs</h2><table class=\"runs\" id=\"runs\"></table></section>"
        "<section><h2>recall against the keys kept</h2><canvas id=\"curves\" width=\"420\" height=\"240\"></canvas>"
        "</section></div>\n"
        "<section><h2 id=\"matrixtitle\">what the future needs, and what the run keeps</h2>"
        "<div class=\"legend\"><span style=\"background:#fde725\"></span>kept, needed <span style=\"background:#888\">"
        "</span>dropped <span style=\"background:#d33\"></span>dropped, needed</div>"
        "<div class=\"matrixbox\"><div class=\"rowaxis\"><div id=\"rowlabels\"></div>"
        "<div class=\"axistitle\">layer · key/value head</div></div><div class=\"matrixcol\">"
        "<canvas id=\"matrix\" width=\"1000\" height=\"200\" aria-label=\"layers' key/value heads (rows) by the "
        "prompt's keys (columns)\"></canvas><div id=\"keyaxis\"><span id=\"keyfirst\"></span><span "
        "class=\"axistitle\">the prompt's keys, by position (the wheel zooms, a drag pans)</span><span "
        "id=\"keylast\"></span></div></div></div><div id=\"tip\" aria-live=\"polite\"></div>"
        "</section>\n<section id=\"head\" aria-live=\"polite\"></section>"
    )
    return standalone_page(title=title, intro=intro, body=body, document=document, data_id="kv-data",
                           scripts=("names.js", "kv.js"), style="kv.css")


def render_kv_page(document: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the kv page to ``path`` (atomically)."""
    return write_page(kv_html(document), path)

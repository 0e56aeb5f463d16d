"""The needle page, offline and self-contained (inline script, style and data; no request leaves it): the depth ×
length grid of recall and the layers × heads grid of retrieval scores; a click on a cell opens that run, its answer
tokens' attention over the whole prompt (the long-context matrix, the needle's span marked) and one answer token's
attention (the one-token view: the row over the prompt, the keys around the needle by name, the strongest keys).
The data is :func:`attnviz.needle.page.page_document`'s."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .html import standalone_page, write_page


def needle_html(document: dict[str, Any]) -> str:
    title = f"attnviz needle · {document['model']} · {len(document['runs'])} runs"
    intro = (f"The needle \u201c{document['needle']}\u201d, hidden in {document['haystack']}; the question "
             f"\u201c{document['question']}\u201d. Left: the share of the needle's words each answer recalled (ROUGE-1) "
             "per depth and prompt length; right: each head's retrieval score over the runs that retrieved. Click a "
             "cell for that run's answer and its attention.")
    body = (
        "<main><section><h2>recall of the needle</h2><table id=\"needlegrid\" aria-label=\"depth by length\"></table>"
        "</section><section><h2>retrieval score</h2><table id=\"headgrid\" aria-label=\"layers by heads\"></table>"
        "<ol id=\"ranked\" aria-label=\"heads by retrieval score\"></ol></section></main>\n"
        "<section id=\"run\" aria-live=\"polite\"><p class=\"note\">Click a cell of the grid.</p></section>"
    )
    return standalone_page(title=title, intro=intro, body=body, document=document, data_id="needle-data",
                           scripts=("names.js", "needle.js"), style="needle.css")


def render_needle_page(document: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the needle page to ``path`` (atomically)."""
    return write_page(needle_html(document), path)

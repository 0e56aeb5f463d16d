"""The needle page, offline and self-contained (inline script, style and data; no request leaves it): the depth ×
length grid of recall and the layers × heads grid of retrieval scores; a click on a cell opens that run, its answer
tokens' attention over the whole prompt (the long-context matrix, the needle's span marked) and one answer token's
attention (the one-token view: the row over the prompt, the keys around the needle by name, the strongest keys).
The data is :func:`attnviz.needle.page.page_document`'s."""

from __future__ import annotations

import html
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from ..fileio import atomic_write
from .html import POLICY, script_safe


def needle_html(document: dict[str, Any]) -> str:
    assets = resources.files("attnviz.render") / "assets"
    script = "\n".join((assets / name).read_text(encoding="utf-8") for name in ("names.js", "needle.js"))
    script += '\ndocument.body.dataset.ready = "1";\n'
    style = (assets / "needle.css").read_text(encoding="utf-8")
    payload = script_safe(json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    title = f"attnviz needle · {document['model']} · {len(document['runs'])} runs"
    intro = (f"The needle \u201c{document['needle']}\u201d, hidden in {document['haystack']}; the question "
             f"\u201c{document['question']}\u201d. Left: the share of the needle's words each answer recalled (ROUGE-1) "
             "per depth and prompt length; right: each head's retrieval score over the runs that retrieved. Click a "
             "cell for that run's answer and its attention.")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY.format(connect=chr(39) + 'none' + chr(39))}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"attnviz\">\n<title>{html.escape(title)}</title>\n"
        f"<style>\n{style}</style>\n</head>\n<body>\n"
        f"<header><h1>{html.escape(title)}</h1><p class=\"note\">{html.escape(intro)}</p></header>\n"
        "<main><section><h2>recall of the needle</h2><table id=\"needlegrid\" aria-label=\"depth by length\"></table>"
        "</section><section><h2>retrieval score</h2><table id=\"headgrid\" aria-label=\"layers by heads\"></table>"
        "<ol id=\"ranked\" aria-label=\"heads by retrieval score\"></ol></section></main>\n"
        "<section id=\"run\" aria-live=\"polite\"><p class=\"note\">Click a cell of the grid.</p></section>\n"
        f"<script type=\"application/json\" id=\"needle-data\">{payload}</script>\n"
        f"<script>\n{script}</script>\n</body>\n</html>\n"
    )


def render_needle_page(document: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the needle page to ``path`` (atomically)."""
    text = needle_html(document)
    return atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

"""The kv page, offline and self-contained: the runs (policy × budget) with their curves of recall and KL against
the keys kept; a matrix of every layer's key/value heads × the prompt's keys showing what the future needs of each
key, with the chosen run's kept keys overlaid and the needed keys it drops in red (the wheel zooms the keys, a drag
pans, a double click resets); and the chosen head: its loss, and the keys it drops that the future needed, by name.
The data is :func:`attnviz.kv.page.page_document`'s."""

from __future__ import annotations

import html
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from ..fileio import atomic_write
from .html import POLICY, script_safe


def kv_html(document: dict[str, Any]) -> str:
    assets = resources.files("attnviz.render") / "assets"
    script = "\n".join((assets / name).read_text(encoding="utf-8") for name in ("names.js", "kv.js"))
    script += '\ndocument.body.dataset.ready = "1";\n'
    style = (assets / "kv.css").read_text(encoding="utf-8")
    payload = script_safe(json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    title = f"attnviz kv · {document['model']} · {document['n_context']:,} tokens cached"
    future = "the question" if document["future_mode"] == "question" else "the model's continuation"
    intro = (f"What each KV-cache policy keeps of the prompt, judged by what {future} attends to. Pick a run; the matrix "
             "shows, for every layer's key/value heads (rows) and the prompt's keys (columns), how much the future "
             "attends each key (brighter: more), the keys the run drops greyed and the ones it drops that the future "
             "needed in red.")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY.format(connect=chr(39) + 'none' + chr(39))}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"attnviz\">\n<title>{html.escape(title)}</title>\n"
        f"<style>\n{style}</style>\n</head>\n<body>\n"
        f"<header><h1>{html.escape(title)}</h1><p class=\"note\">{html.escape(intro)}</p></header>\n"
        "<div class=\"top\"><section><h2>runs</h2><table class=\"runs\" id=\"runs\"></table></section>"
        "<section><h2>recall against the keys kept</h2><canvas id=\"curves\" width=\"420\" height=\"240\"></canvas>"
        "</section></div>\n"
        "<section><h2 id=\"matrixtitle\">what the future needs, and what the run keeps</h2>"
        "<div class=\"legend\"><span style=\"background:#fde725\"></span>kept, needed <span style=\"background:#888\">"
        "</span>dropped <span style=\"background:#d33\"></span>dropped, needed</div>"
        "<canvas id=\"matrix\" width=\"1000\" height=\"200\"></canvas><div id=\"tip\" aria-live=\"polite\"></div>"
        "</section>\n<section id=\"head\" aria-live=\"polite\"></section>\n"
        f"<script type=\"application/json\" id=\"kv-data\">{payload}</script>\n"
        f"<script>\n{script}</script>\n</body>\n</html>\n"
    )


def render_kv_page(document: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write the kv page to ``path`` (atomically)."""
    text = kv_html(document)
    return atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))

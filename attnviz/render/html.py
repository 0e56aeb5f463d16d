"""The interactive page as one self-contained HTML file: its script, style and data inside it.

A Content-Security-Policy in the page forbids every request (no network, ever: bertviz's CDN
scripts and CircuitsVis's bundle check are exactly what this avoids). The data is the JSON of a
:class:`~attnviz.render.page.Page`; the script is ``assets/page.js`` (with
``assets/steps.js``, the step slider of a generated text). :func:`render_html` is the
registry's renderer for ``.html``: it takes a page, or any heatmap view (made a page).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ..fileio import atomic_write
from .output import check_output_path
from .page import Page, page_of_view
from .page_views import sections

# No request may leave the page: scripts and styles are inline, images are drawn on canvases (a model's pictures
# are data: URLs in the page's data).
POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
          "connect-src {connect}; base-uri 'none'; form-action 'none'")

SCRIPTS = ("names.js", "steps.js", "tiles.js", "matrix.js", "headview.js", "onetoken.js", "qk.js", "picture.js",
           "page.js")
"""The page's script, in this order: the spelling of head names (``headName``), the step slider of a
generated text, the tiles' decoder, the zoomable matrix, the head view, the One token view, the
query · key view, the picture view, then the page itself."""


def script_safe(payload: str) -> str:
    """JSON that stays inside its ``<script>`` and stays valid JSON: ``<``, ``>`` and ``&`` (which could
    close the element or open a comment: ``</script>``, ``<!--``) and the line separators U+2028/2029
    are written as ``\\uXXXX`` escapes, which JSON allows everywhere in a string (``<\\!--`` is not JSON)."""
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        payload = payload.replace(char, escape)
    return payload


def standalone_page(*, title: str, intro: str, body: str, document: Any, data_id: str, scripts: Sequence[str],
                    style: str, media: bool = False, connect: str = "'none'") -> str:
    """An offline page of one view (the atlas, a needle grid, a kv run): the policy that lets no request leave it,
    the header, ``body`` (markup), ``document`` as JSON in ``<script id=data_id>``, then the ``scripts`` and
    ``style`` of ``assets/`` inline; the scripts set ``body[data-ready]`` once run. ``media``: the page plays sound
    held in its data (``media-src data:``: a clip as a ``data:`` URL, still no request). ``connect``: where its script
    may fetch from (``'self'`` for a page that ``attnviz serve`` serves)."""
    assets = resources.files("attnviz.render") / "assets"
    script = "\n".join((assets / name).read_text(encoding="utf-8") for name in scripts)
    script += '\ndocument.body.dataset.ready = "1";\n'
    css = (assets / style).read_text(encoding="utf-8")
    payload = script_safe(json.dumps(document, ensure_ascii=False, separators=(",", ":"), allow_nan=False))
    policy = POLICY.format(connect=connect) + ("; media-src data:" if media else "")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"attnviz\">\n<title>{html.escape(title)}</title>\n"
        f"<style>\n{css}</style>\n</head>\n<body>\n"
        f"<header><h1>{html.escape(title)}</h1><p class=\"note\">{html.escape(intro)}</p></header>\n"
        f"{body}\n"
        f"<script type=\"application/json\" id=\"{data_id}\">{payload}</script>\n"
        f"<script>\n{script}</script>\n</body>\n</html>\n"
    )


def write_page(text: str, path: str | os.PathLike[str]) -> Path:
    """Write a page's ``text`` to ``path`` (atomically)."""
    return atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def page_html(page: Page, *, cmap: str = "viridis", connect: str = "'none'") -> str:
    """The whole document. ``connect``: where the page may fetch from (``'self'`` for ``attnviz serve``)."""
    assets = resources.files("attnviz.render") / "assets"
    script = "".join((assets / name).read_text(encoding="utf-8") for name in SCRIPTS)
    style = (assets / "page.css").read_text(encoding="utf-8")
    payload = json.dumps(page.data(cmap), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    payload = script_safe(payload)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY.format(connect=connect)}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"attnviz\">\n<title>{html.escape(page.title)}</title>\n"
        f"<style>\n{style}</style>\n</head>\n<body>\n"
        "<header><h1 id=\"title\"></h1><div class=\"notes\" id=\"notes\"></div></header>\n"
        "<div class=\"bar\"><nav class=\"tabs\" id=\"tabs\"></nav><form class=\"find\" id=\"find\" role=\"search\"></form></div>\n"
        "<div class=\"controls\" id=\"controls\"></div>\n<main>\n"
        f"{sections()}"
        "</main>\n<div id=\"tooltip\"></div>\n"
        f"<script type=\"application/json\" id=\"attnviz-data\">{payload}</script>\n"
        f"<script>\n{script}</script>\n</body>\n</html>\n"
    )


def render_html(view: Any, path: str | os.PathLike[str], *, cmap: str | None = None, **_: Any) -> Path:
    """Write ``view`` (a :class:`Page`, or a heatmap view) as one self-contained HTML file."""
    path = check_output_path(path)
    page = view if isinstance(view, Page) else page_of_view(view)
    scale = getattr(getattr(view, "scale", None), "cmap", None)
    text = page_html(page, cmap=cmap or scale or "viridis")
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path

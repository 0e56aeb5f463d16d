"""The views of the interactive page, one record each: the tabs of ``attnviz view``, ``--show`` and
``page_view(view=...)``.

A :class:`PageView` says its ``name`` (what ``--show`` and ``view=`` take), its ``tab`` label, the
``hint`` above it and the element it draws into (``body``, markup the document gets as written), the
page data it ``needs`` to be offered at all (a page without query and key vectors has no ``qk`` tab, one
without pictures no ``picture`` tab), and whether it draws ``heads`` (a page made of a heatmap view's panels
has no head view). The document's sections, the tabs the script offers and the check of ``view=`` all come from
:data:`PAGE_VIEWS`; the drawing itself is the function of the same name in ``assets/page.js``.
Adding a view is one record here and its drawing function there; or, from outside (a user's code, a
plugin: :mod:`attnviz.plugins`), one :func:`register` call with the drawing function as the record's
``script``. :data:`PAGE_VIEWS` is a :class:`~attnviz.records.Registry`: a taken name is refused.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import Literal

from ..errors import UsageError
from ..records import Registry


@dataclass(frozen=True)
class PageView:
    """One view of the page (see the module)."""

    name: str
    tab: str
    hint: str  # markup: ours, never the user's text
    body: str  # the element the script draws into
    needs: Literal["qk", "stats", "extras", "pictures"] | None = None
    heads: bool = False  # draws a layer's heads as attention between tokens (not offered for a panel page)
    hint_id: str | None = None  # the hint's element id, where the script writes it (the matrix's title)
    script: str | None = None  # a view added from outside: its drawing function, a JavaScript function expression
    # called as f(data, state, section) each time the view is shown (the page's data, the layer, head and
    # view chosen, and the view's <section> element); the built-ins' are in assets/page.js

    def __post_init__(self) -> None:
        if not self.name.replace("-", "").replace("_", "").isalnum() or not self.name.isascii():
            raise ValueError(f"a page view's name is letters, digits, - and _; got {self.name!r}")
        if self.script is not None and "</" in self.script:
            raise ValueError(f"{self.name}: a view's script may not hold '</' (it would end its <script> element)")

    def section(self) -> str:
        hint_id = "" if self.hint_id is None else f" id=\"{html.escape(self.hint_id)}\""
        script = "" if self.script is None else (
            f"<script>(window.attnvizViews = window.attnvizViews || {{}})[{json.dumps(self.name)}] = {self.script};"
            "</script>")
        return (f"<section id=\"view-{html.escape(self.name)}\"><p class=\"hint\"{hint_id}>{self.hint}</p>{self.body}"
                f"{script}</section>\n")

    def script_data(self) -> dict[str, object]:
        return {"name": self.name, "tab": self.tab, "needs": self.needs, "heads": self.heads}


MATRIX = (
    "<div class=\"matrixbar\"><button type=\"button\" id=\"zoomin\" title=\"zoom in (+)\">+</button>"
    "<button type=\"button\" id=\"zoomout\" title=\"zoom out (−)\">−</button>"
    "<button type=\"button\" id=\"zoomfit\" title=\"the whole matrix (0)\">whole matrix</button>"
    "<label>scale <select id=\"scale\"><option value=\"linear\">linear</option><option value=\"log\">log (4 decades)"
    "</option><option value=\"row\">per row</option><option value=\"rank\">rank</option></select></label>"
    "<label title=\"keys most queries lean on (Gu et al. 2024) left out of the scale's maximum\">"
    "<input type=\"checkbox\" id=\"nosinks\"> leave sinks out of the scale</label>"
    "<span class=\"legend\"><canvas id=\"legend\" aria-label=\"colour scale\"></canvas>"
    "<span id=\"legendtext\"></span></span></div>"
    "<p class=\"hint\" id=\"matrixinfo\" aria-live=\"polite\"></p>"
    "<div class=\"matrixwrap\" id=\"matrixwrap\"><canvas id=\"matrix\" tabindex=\"0\" role=\"img\" "
    "aria-label=\"attention matrix: queries down, keys across; scroll or + and − to zoom, arrows to move\"></canvas>"
    "<div class=\"toks rows\" id=\"matrixrows\"></div><div class=\"toks cols\" id=\"matrixcols\"></div>"
    "<div id=\"zoombox\"></div><canvas id=\"minimap\" aria-label=\"the whole matrix; click to go there\"></canvas></div>"
)
"""The matrix view's controls, colour legend, drawing, token labels and minimap (``assets/matrix.js``)."""

HEAD = (
    "<div id=\"headnote\"></div><div id=\"headtop\" class=\"headtop\" aria-live=\"polite\"></div>"
    "<div class=\"headbox\" id=\"headscroll\" tabindex=\"0\"><div class=\"headspace\" id=\"headspace\">"
    "<canvas id=\"headview\" role=\"img\" aria-label=\"head view: a line from each query token on the left to the key "
    "tokens on the right it attends to, stronger for a larger weight\"></canvas>"
    "<div class=\"htoks\" id=\"headrows\"></div><div class=\"htoks\" id=\"headcols\"></div></div></div>"
)
"""The head view's tokens (text, only those in sight), its lines (a canvas the window's size) and the kept
token's strongest keys (``assets/headview.js``)."""

PAGE_VIEWS: Registry[PageView] = Registry("page view")
"""Every view, in the order of the page's tabs (the built-ins, then those :func:`register` added)."""
register, unregister, registered = PAGE_VIEWS.register, PAGE_VIEWS.unregister, PAGE_VIEWS.registered

PICTURE = "<div class=\"picturebox\" id=\"picturebox\"></div>"
"""The picture view: its bar, the tokens, and each picture with the heat over its patches (``assets/picture.js``)."""

for _view in (
    PageView("head", "Head view", "Queries on the left, keys on the right; a line's strength is the weight. Hover a "
             "token to see only its lines, click it to keep them (↑/↓ move, Esc lets go); the head swatches choose "
             "heads.", HEAD, heads=True),
    PageView("model", "Model view", "Every head of every layer; click one to open it.",
             "<div class=\"grid\" id=\"modelgrid\"></div>"),
    PageView("picture", "Pictures", "Hover, focus or click a token to see its attention over each picture (the layer "
             "and head chosen above, or the mean of the heads); click a patch, or focus a picture and move with the "
             "arrows and Enter, to see which tokens attend to it (Esc goes back to the token).", PICTURE,
             needs="pictures"),
    PageView("matrix", "Matrix", "", MATRIX, hint_id="matrixtitle"),
    PageView("query", "One token", "What one token attends to in every layer and head at once (click a token on the "
             "left of the head view, or choose it here). <select id=\"querytoken\"></select><input type=\"number\" "
             "id=\"queryat\" min=\"0\" aria-label=\"the query's position\" hidden> <span id=\"querytext\"></span> "
             "Click a cell to open it in the matrix.",
             "<div id=\"querynote\"></div><div class=\"scroll onetoken\" id=\"querybox\"><div class=\"qkeys\" id=\"querykeys\"></div>"
             "<canvas id=\"queryview\" role=\"img\" aria-label=\"one token's attention in every layer and head: a row per head, "
             "a column per key\"></canvas></div>", heads=True),
    PageView("qk", "Query · key", "For one query (choose it, or ← →): its vector q, and for each key its vector k and "
             "the elementwise product q ⊙ k as coloured cells (blue negative, red positive), then their sum, the score "
             "q·k, the score scaled by √d and the attention weight (the softmax of the scaled scores over the keys). "
             "Hover a cell for its component.", "<div class=\"qk\" id=\"qkbox\"></div>", needs="qk"),
    PageView("table", "Heads table", "Click a column to sort, a row to open that head.",
             "<div class=\"scroll\" id=\"table\"></div>", needs="stats"),
    PageView("extras", "Head distances", "Hover a cell for its value; click a head's row to open it.",
             "<div id=\"extrasbox\"></div>", needs="extras"),
):
    register(_view)
BUILT_IN = PAGE_VIEWS.seal()


def check_view(name: str) -> str:
    """``name`` if it is a view of the page, else the error naming them."""
    if name not in PAGE_VIEWS:
        raise UsageError(f"[[view={name!r}]] is not a view of the page; use one of {', '.join(PAGE_VIEWS)}")
    return name


def sections() -> str:
    """The document's sections, one per view."""
    return "".join(view.section() for view in PAGE_VIEWS.values())

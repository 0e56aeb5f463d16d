"""Attention pages inline in Jupyter: ``attnviz.show(result)`` and ``AttentionResult._repr_html_``.

The page (:mod:`attnviz.render.html`) goes into an ``<iframe srcdoc>``, so its script and its
Content-Security-Policy stay its own: no ``require``, no CDN, no request to any network, in
Jupyter, JupyterLab, VS Code or a static HTML export of the notebook alike.
"""

from __future__ import annotations

import html
from typing import Any

from .result import AttentionResult

HEIGHT = 640  # pixels of the inline frame; the page scrolls inside it


class PageDisplay:
    """What a notebook displays: the page in a frame (``_repr_html_``), or ``.html`` for a file."""

    def __init__(self, page: Any, *, cmap: str = "viridis", height: int = HEIGHT) -> None:
        from .render.html import page_html

        self.html = page_html(page, cmap=cmap)
        self.height = height

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" style="width:100%;height:{self.height}px;'
                'border:1px solid #ddd;border-radius:6px" sandbox="allow-scripts" '
                'title="attnviz attention page"></iframe>')

    def save(self, path: str) -> str:
        from pathlib import Path

        from .fileio import atomic_write, check_output_path

        target = check_output_path(path)
        atomic_write(target, lambda tmp: Path(tmp).write_text(self.html, encoding="utf-8"))
        return str(target)


def show(what: AttentionResult | str, *, model: str | None = None, head: int = 0, kind: str = "self",
         view: str = "head", stats: bool = True, cmap: str = "viridis", height: int = HEIGHT,
         **extract_options: Any) -> PageDisplay:
    """The interactive page of a result, or of a text (extracted with ``model`` and ``extract_options``
    such as ``pair=`` or ``target=``), for display in a notebook (the last expression of a cell)."""
    from .api import extract, page_of_result

    result = what if isinstance(what, AttentionResult) else extract(what, model=model, **extract_options)
    title = None if isinstance(what, AttentionResult) else " ".join(what.split())[:60]
    page = page_of_result(result, head=head, kind=kind, stats=stats, view=view, title=title)
    return PageDisplay(page, cmap=cmap, height=height)

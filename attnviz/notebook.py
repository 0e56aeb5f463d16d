"""Attention pages inline in Jupyter: what ``attnviz.show`` (:func:`attnviz.api.show`) and
``AttentionResult._repr_html_`` display.

The page (:mod:`attnviz.render.html`) goes into an ``<iframe srcdoc>``, so its script and its
Content-Security-Policy stay its own: no ``require``, no CDN, no request to any network, in
Jupyter, JupyterLab, VS Code or a static HTML export of the notebook alike.
"""

from __future__ import annotations

import html
from typing import Any

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

        from .fileio import atomic_write
        from .render.output import check_output_path

        target = check_output_path(path)
        atomic_write(target, lambda tmp: Path(tmp).write_text(self.html, encoding="utf-8"))
        return str(target)


def result_display(result: Any, **options: Any) -> PageDisplay:
    """The page of a whole result (:func:`attnviz.views.pages.page_of_result`) in a notebook frame.
    ``options``: ``head``, ``kind``, ``view``, ``stats``, ``title``, and ``cmap``/``height`` of the frame."""
    from .views.page_parts import page_of_result

    frame = {name: options.pop(name) for name in ("cmap", "height") if name in options}
    return PageDisplay(page_of_result(result, **options), **frame)

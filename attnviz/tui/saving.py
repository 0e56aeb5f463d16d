"""``s`` in ``attnviz tui``: the current view written to a file, as the commands write it (the same
registry of formats: a labelled figure, the interactive page, or the result's numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError


def save_view(explorer: Any, path: Path) -> Path:
    """``.png``/``.svg``/``.pdf``: the current layer and head as a labelled figure; ``.html``: the text's
    interactive page, the current head open; ``.npz``: the whole result (``AttentionResult.load`` reads it);
    ``.json``: the current head's matrix and labels."""
    from ..fileio import check_output_path

    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix == ".npz":
        if explorer.result is None:
            raise UsageError("a long text's weights are not kept whole here; save this head as .png, .svg, .pdf or "
                             ".json, or write every weight with attnviz export")
        return Path(explorer.result.save(path))
    check_output_path(path)
    source, text, options = explorer.inputs()
    if suffix == ".html":
        from ..api import page_view
        from ..render.html import render_html

        page = page_view(source, text, layer=None, head=explorer.head, **options)
        return Path(render_html(page, path))
    from ..api import attention_view
    from ..render.registry import VIEW_DATA, for_path

    region = explorer.region()
    view = attention_view(source, text, layer=explorer.layer_number, head=explorer.head, rows=region,
                          cols=region, pool=suffix in (".png", ".svg", ".pdf") or None, **options)
    fmt = VIEW_DATA.get(suffix) or for_path(path)
    if fmt is None:  # pragma: no cover - check_output_path refused it first
        raise UsageError(f"{path}: use .png, .svg, .pdf, .html, .npz or .json")
    return Path(fmt.render(view, path))

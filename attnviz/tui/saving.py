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
    from ..render.output import check_output_path
    from ..render.registry import FORMATS, VIEW_DATA, figure_suffixes, for_path, or_list, page_format

    path = Path(path).expanduser()
    suffix = path.suffix.lower()
    if suffix == FORMATS["npz"].suffix:
        if explorer.result is None:
            one_head = [*figure_suffixes(), *(s for s in VIEW_DATA if s != suffix)]
            raise UsageError(f"a long text's weights are not kept whole here; save this head as {or_list(one_head)}, "
                             "or write every weight with attnviz export")
        return Path(explorer.result.save(path))
    check_output_path(path)
    source, text, options = explorer.inputs()
    page_fmt = page_format(path)
    if page_fmt is not None:
        from ..api import page_view

        page = page_view(source, text, layer=None, head=explorer.head, **options)
        return Path(page_fmt.render(page, path))
    from ..api import attention_view

    region = explorer.region()
    view = attention_view(source, text, layer=explorer.layer_number, head=explorer.head, rows=region,
                          cols=region, pool=suffix in figure_suffixes() or None, **options)
    return Path(for_path(path).render(view, path))

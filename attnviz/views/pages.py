"""What ``attnviz view`` (and the pages of ``heatmap``/``compare-heads --out x.html``, ``export
--formats html``, the notebook and ``attnviz serve``) shows, as data: a :class:`~attnviz.render.page.Page`
of every head, built one layer at a time as the engine computes it, with the head statistics and,
for short texts, each head's query and key vectors."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .page_parts import QK_TOKENS, PageCollector, page_of_result, qk_vectors, with_steps

__all__ = ["page_of_result", "page_view"]

if TYPE_CHECKING:  # pragma: no cover

    from ..analysis.reading import Reading
    from ..render.page import Page


def page_view(source: Any, text: str | None, *, layer: int | None = None, head: int | str = 0, kind: str = "self",
              pair: str | None = None, target: str | None = None, reading: Reading | None = None,
              truncate: bool = False, stats: bool = True, view: str = "head", budget: int | None = None,
              hold: int = 0, layers_out: list[Any] | None = None, checkpoint: Callable[[], None] | None = None) -> Page:
    """What ``attnviz view`` writes: an interactive page (:mod:`attnviz.render.page`) of every head of
    ``layer`` (default: every layer), with the head statistics table (``stats``), for one text.
    Layers are quantised and compressed as the engine computes them. Encoder-decoder models get
    their encoder, decoder and cross-attention (``kind`` chooses the one shown first); one
    cross-attention layer alone (a matrices config with a context) its cross-attention. ``budget``:
    the bytes of tiles the page may hold (default :data:`attnviz.render.page.PAGE_BUDGET`); a long
    input's finest levels are left out beyond it, and the page says so. For a server:
    ``hold`` bytes of finer tiles are kept in ``Page.held`` and each layer read is appended to
    ``layers_out`` (:class:`attnviz.views.live_tiles.LiveTiles` answers tiles from both); ``checkpoint``
    is called between blocks of rows, and may raise to stop (a server's client that has gone)."""
    from ..analysis.reading import Reading
    from ..analysis.transforms import KINDS
    from ..errors import UsageError
    from ..render.page_views import check_view

    check_view(view)  # before the model runs

    reading = reading or Reading()
    if kind not in KINDS:
        raise UsageError(f"[[kind={kind!r}]] is unknown; use one of {', '.join(KINDS)}")
    layers = None if layer is None else [layer]
    can = source.capabilities
    if can.cross or not can.self_attention:  # encoder-decoder (or cross-attention alone): computed whole
        # Cross-attention alone has no statistics; its page carries each head's q and k (details) instead.
        details = not can.self_attention and can.details and reading.plain
        result = source.extract(text, truncate=truncate, pair=pair, target=target, layers=layers, details=details)
        if view == "qk" and not (details and len(result.tokens) <= QK_TOKENS):
            view = _without_qk(source, reading, len(result.tokens), "the query · key view shows self-attention "
                               "heads' vectors, and this page of an encoder-decoder model carries none")
        return page_of_result(reading.apply(result), head=head, kind=kind, stats=stats, view=view,
                              title=_title_text(text))
    if kind not in ("self", "encoder"):
        raise UsageError(f"[[kind={kind}]] needs an encoder-decoder model (T5, BART); {source.name} has only "
                         "self-attention")
    from ..sources.layer_reader import read_layers

    # A server keeps each layer to answer tiles: as queries and keys (O(T·d)) wherever the engine can, never
    # a long text's whole weights (32 layers of 4,096 tokens would be 16 GiB).
    reader = read_layers(source, [text], reading=reading, truncate=truncate, layers=layers, pairs=[pair],
                         target=target, purpose="the page", rows=layers_out is not None)
    collector = PageCollector(reader.layers, stats, _title_text(text), budget=budget, hold=hold,
                              checkpoint=checkpoint)
    n_tokens = len(reader.results[0].tokens)
    if source.capabilities.details and reading.plain and n_tokens <= QK_TOKENS:
        # The query-key view: each head's q and k (a second, small pass with details=True).
        detailed = source.extract(text, truncate=truncate, layers=layers, pair=pair, details=True)
        collector.qk = qk_vectors(detailed)
    elif view == "qk":
        view = _without_qk(source, reading, n_tokens)
    for position, parts in reader:
        collector.add(reader.results[0], position, parts[0])  # whole or a block of rows at a time
        if layers_out is not None:
            layers_out.append(parts[0])
        del parts  # before the next layer is computed
    return with_steps(collector.finish(head=head, kind="self", view=view), reader.results[0])


def _without_qk(source: Any, reading: Reading, n_tokens: int, why: str | None = None) -> str:
    """The view a page opens on where ``view="qk"`` was asked and the page carries no query and key vectors
    (the head view), said in a warning that names why and what would show them."""
    import warnings

    from ..errors import AttnvizWarning

    if why is None and not source.capabilities.details:
        why = (f"the {source.engine} engine hands out no query and key vectors (the native engine and config models "
               "do: [[engine=native]])")
    elif why is None and not reading.plain:
        why = ("a page carries query and key vectors for the tokens as the model reads them: drop [[hide_special]] "
               "and [[words]]")
    elif why is None:
        why = (f"a page carries each head's query and key vectors for texts of at most {QK_TOKENS} tokens, and this "
               f"one has {n_tokens:,}: give a text (or a part of it) of at most {QK_TOKENS} tokens")
    warnings.warn(f"[[view=qk]]: {why}; the page opens on the head view", AttnvizWarning, stacklevel=3)
    return "head"


def _title_text(text: str | None, limit: int = 60) -> str:
    if text is None:
        return "the config's input"
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= limit else one_line[: limit - 1] + "…")

"""The Python API the CLI is a shell over: each command's data comes from one function here.

``load`` gives a source (a model loaded once); ``extract``/``extract_batch`` give results;
``attention_view`` gives what ``heatmap`` draws and ``attribution_view`` (:mod:`attnviz.attribution`)
what ``rollout --method`` draws;
``heads_of``, ``compare_heads_of_text`` and ``explain`` give what ``heads``, ``compare-heads`` and
``explain`` show. The CLI only parses, calls one of these, and picks a renderer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .analysis.reading import Reading
from .attribution import (  # noqa: F401 (what ``attnviz rollout`` shows: attnviz.attribution, here for callers)
    METHODS,
    attribution_view,
    flow_of_text,
    flow_view,
    norm_view,
    rollout_of_text,
    rollout_view,
)
from .labels import head_name
from .sources.resolve import Engine, load_source
from .views.compared import compare_heads_page, compare_runs_of_text  # noqa: F401 (compare-heads --vs, --out x.html)
from .views.explained import EXPLAIN_DEFAULT, errata, explain  # noqa: F401 (what explain shows, and its errata)
from .views.generated import generation_summary, generation_view  # noqa: F401 (what generate shows)
from .views.pages import page_of_result, page_view  # noqa: F401 (the page's data: attnviz.views.pages, here for callers)

if TYPE_CHECKING:  # pragma: no cover

    from .analysis.compare import HeadsOverview
    from .analysis.heads import HeadTable
    from .notebook import PageDisplay
    from .render.view import HeadChoice, HeatmapView, Kind
    from .result import AttentionResult
    from .sources.base import Source


def extract(
    text: str | None,
    model: str | None = None,
    *,
    engine: Engine = "auto",
    causal: bool | None = None,
    pair: str | None = None,
    target: str | None = None,
    truncate: bool = False,
    details: bool = False,
    layers: list[int] | None = None,
    float16: bool = False,
    revision: str | None = None,
    device: str = "cpu",
    device_map: str | None = None,
    trust_remote_code: bool = False,
    dtype: str | None = None,
) -> AttentionResult:
    """Attention of every head of ``model`` on ``text``.

    Args:
        text: the input; None for a ``type = "matrices"`` config, which fixes its own input.
        model: None for the embedded default (all-MiniLM-L6-v2); a ``.toml`` config; a Hugging
            Face model folder; or a hub id such as ``gpt2``.
        engine: ``"native"`` (our attention on the model's weights), ``"fused"`` (transformers with attnviz's
            attention function), ``"hf"`` (transformers' eager attention), or
            ``"auto"``: the first of those that runs the model.
        causal: config models only: force a causal mask on or off.
        pair: a second sentence (BERT-style sentence pairs).
        target: the decoder's input, for encoder-decoder models (T5, BART).
        truncate: cut a text longer than the model's maximum positions instead of failing.
        details: also return pre-softmax ``scores`` and each head's ``values`` (native and config models).
        layers: keep only these layers (model numbering, listed in ``metadata["layers"]``). The
            native engine then builds no other layer's attention matrix and stops after the last.
        float16: keep the attentions in float16 (long inputs: half the memory; native and hf engines).
        revision: a hub branch, tag or commit.
        device: ``cpu``, ``cuda`` or ``mps``; ``device_map="auto"`` spreads a large model (transformers).
        trust_remote_code: let transformers run a hub model's own code. Off unless asked for.
        dtype: ``"bfloat16"`` or ``"float16"`` runs the model in half precision on the transformers engines
            (default: float32 on the CPU); the fused engine computes the weights in float32 either way.

    Returns:
        An :class:`AttentionResult` whose ``attentions`` are float32 ``[layers, heads, q, k]``.
    """
    source = load_source(model, engine=engine, causal=causal, revision=revision, device=device,
                         device_map=device_map, trust_remote_code=trust_remote_code, dtype=dtype)
    kwargs: dict[str, Any] = {"float16": True} if float16 else {}  # ExtractOptions' fields, changed
    return source.extract(text, pair=pair, target=target, truncate=truncate, details=details, layers=layers, **kwargs)


def extract_batch(
    texts: list[str],
    model: str | None = None,
    *,
    engine: Engine = "auto",
    pairs: list[str | None] | None = None,
    truncate: bool = False,
    details: bool = False,
    layers: list[int] | None = None,
    revision: str | None = None,
    device: str = "cpu",
    trust_remote_code: bool = False,
) -> list[AttentionResult]:
    """One :class:`AttentionResult` per text, from one forward pass padded with an attention mask.

    Padded rows and columns are removed from every result, so each equals its text run alone.
    """
    source = load_source(model, engine=engine, revision=revision, device=device, trust_remote_code=trust_remote_code)
    return source.extract_batch(texts, pairs=pairs, truncate=truncate, details=details, layers=layers)


def head_table_of_texts(source: Any, texts: Sequence[str | None], *, truncate: bool = False, batch_size: int = 16,
                        pair: str | None = None, reading: Reading = Reading(), kind: str = "self",
                        target: str | None = None, layer: int | None = None) -> HeadTable:
    """The head table (:mod:`attnviz.analysis.heads`) of ``texts`` run through a loaded ``source``, averaged over them.

    Texts run in padded batches of ``batch_size``, and each layer's statistics are taken as soon
    as the engine computes it, so a long text never holds every layer's matrices at once.
    ``pair`` is a second sentence for every text; ``reading`` drops special tokens or joins words first;
    ``kind``/``target``: an encoder-decoder model's decoder self-attention (see :func:`attnviz.sources.layer_reader.read_layers`);
    ``layer``: that layer alone (the native engine computes no other layer's weights).
    """
    from .analysis.heads import HeadTableBuilder
    from .sources.layer_reader import read_layers

    builder = HeadTableBuilder()
    for start in range(0, len(texts), batch_size):
        chunk = list(texts[start : start + batch_size])
        reader = read_layers(source, chunk, reading=reading, kind=kind, target=target, truncate=truncate,
                             layers=None if layer is None else [layer],
                             pairs=None if pair is None else [pair] * len(chunk), purpose="head statistics")
        builder.layers = list(reader.layers)  # the model's numbers (a saved result may hold only some layers)
        for position, parts in reader:
            _add_layer(builder, reader.results, position, parts, start)
            del parts  # before the next layer is computed
    return builder.table()


def _add_layer(builder: Any, results: list[AttentionResult], position: int, parts: list[Any], first: int) -> None:
    """One layer of each text into the table, read whole or a block of rows at a time (a function, so no
    loop variable outlives the layer)."""
    for number, part in enumerate(parts):
        builder.add_layer(results[number], position, part, text=first + number)


def compare_heads_of_text(source: Any, text: str | None, *, layer: int | None = None, truncate: bool = False,
                          all_rows: bool = False, pair: str | None = None, reading: Reading = Reading(),
                          kind: str = "self", target: str | None = None) -> HeadsOverview:
    """Every head of ``layer`` (default: every layer) on ``text``, for comparing them
    (:class:`attnviz.analysis.compare.HeadsOverview`): display matrices and the head-distance matrix,
    built as the engine computes each layer. The distances are exact unless their cost passes
    :data:`attnviz.analysis.compare.DISTANCE_BUDGET` (long inputs): then summed over evenly spaced query
    rows and scaled, which the overview's notes say; ``all_rows`` computes every row."""
    from .analysis.compare import OverviewBuilder
    from .sources.layer_reader import read_layers

    reader = read_layers(source, [text], reading=reading, kind=kind, target=target, truncate=truncate,
                         layers=None if layer is None else [layer], pairs=[pair], purpose="comparing heads")
    builder: OverviewBuilder | None = None
    for _, parts in reader:
        part = parts[0]
        del parts
        if builder is None:
            builder = OverviewBuilder(reader.results[0], list(reader.layers), n_heads=part.n_heads, all_rows=all_rows)
        if part.lazy:  # too long to hold a layer: pooled and sampled block by block
            builder.add_rows(part)
        else:
            builder.add(part.attentions)
        del part  # before the next layer is computed
    assert builder is not None  # a model has at least one layer
    return builder.finish()


# --- what each command shows, as data -------------------------------------------------------------


def checkpoint_diff(source: Source, other: Source, texts: Sequence[str], *, truncate: bool = False,
                    bootstrap: int = 1000, permutations: int = 1000, seed: int = 0,
                    extra: dict[str, Any] | None = None, force: bool = False) -> Any:
    """What ``attnviz atlas TEXTS --vs-model OTHER`` reports: for every head, how each statistic and the
    attention distribution change from ``source`` to ``other`` over ``texts``, with bootstrap intervals and
    permutation p-values, heads ranked by change (:class:`~attnviz.analysis.checkpoint_diff.CheckpointDiff`).
    Both models must tokenize every text alike (two checkpoints of one model). ``extra``: more per-text changes
    ``[texts, layers, heads]`` to summarise alike (``atlas --importance``: each head's importance, B minus A).
    ``force``: resample even where that is estimated past 5 minutes (refused otherwise, before the models run)."""
    from .analysis.checkpoint_diff import run_diff

    return run_diff(source, other, texts, truncate=truncate, bootstrap=bootstrap, permutations=permutations, seed=seed,
                    extra=extra, force=force)


def load(model: str | None = None, *, engine: Engine = "auto", causal: bool | None = None, revision: str | None = None,
         device: str = "cpu", device_map: str | None = None, trust_remote_code: bool = False,
         dtype: str | None = None, audio: str | os.PathLike[str] | None = None) -> Source:
    """The :class:`~attnviz.sources.base.Source` for ``model`` (see :func:`extract` for the arguments),
    to pass to the functions below so a model is loaded once for several calls. ``dtype``
    (``"float32"``, ``"bfloat16"``, ``"float16"``): the model's precision on the transformers engines
    (default: float32 on the CPU, the checkpoint's own elsewhere); the weights are computed in float32. A model
    that reads pictures is refused by name: :func:`vlm_attention` and :func:`image_attention` read it. ``audio``: a
    clip heard by the speech encoder ``model`` (wav2vec2, HuBERT, WavLM: :mod:`attnviz.audio.encoders`), its
    self-attention over the frames computed once and read as a saved result is (a Whisper's is read by
    :func:`whisper_attention`, :func:`sound_heatmap` and the other sound functions)."""
    if audio is not None:
        return heard_source(audio, model, device=device, revision=revision)
    if model is not None:
        from .errors import UsageError
        from .images.picture_models import picture_layout

        layout = picture_layout(model)
        if layout is not None:
            what, how = ("a vision-language model", "vlm_attention") if layout.language else \
                ("an image encoder", "image_attention")
            raise UsageError(f"{model} is {what} ({layout.name}): attnviz reads it with a picture ([[image]]; in "
                             f"Python, attnviz.api.{how})")
    return load_source(model, engine=engine, causal=causal, revision=revision, device=device, device_map=device_map,
                       trust_remote_code=trust_remote_code, dtype=dtype)


def attention_view(
    source: Source,
    text: str | None,
    *,
    layer: int | None = None,
    head: HeadChoice = 0,
    kind: Kind = "self",
    pair: str | None = None,
    target: str | None = None,
    reading: Reading = Reading(),
    truncate: bool = False,
    vmax: float | None = None,
    cmap: str = "viridis",
    pool: bool | None = None,
    rows: tuple[int | None, int | None] | None = None,
    cols: tuple[int | None, int | None] | None = None,
) -> HeatmapView:
    """What ``attnviz heatmap`` draws: a ``head`` (a number), every head (``"all"``) or their mean
    (``"mean"``), in one ``layer`` or in every layer (None, the default: a panel per layer, or
    with ``head="all"`` every head of every layer, a row per layer).

    ``rows`` and ``cols`` (token positions ``(first, stop)``, either None for the text's start or
    end) draw a region of the matrix cell by cell, computing only its query rows
    (:mod:`attnviz.views.region`): what a long input's pooled overview labels its rows and columns for.

    ``reading`` drops special tokens ([CLS], [SEP], BOS…) from both axes, rows rescaled to sum to 1
    or not, and/or joins word pieces (Clark et al. 2019: attention to a word is the sum over its
    pieces, from a word the mean). ``kind`` is ``self`` (or ``encoder``), ``decoder`` or ``cross``
    for encoder-decoder models.

    An input longer than a picture's :data:`~attnviz.render.view.FIGURE_CELLS` is max-pooled as each
    layer is computed (:mod:`attnviz.views.pooled`) with ``pool=True`` (what a picture file does
    anyway), and by default (``None``) only where a layer is too big to hold whole; ``False`` never.
    """
    from .views.heatmap import head_across_layers_view, heatmap_view

    if rows is not None or cols is not None:
        from .errors import UsageError
        from .views.region import region_view

        if not reading.plain:
            raise UsageError("[[rows]] and [[cols]] count the tokens as the model reads them; drop [[hide_special]] "
                             "and [[words]] to draw a region")
        if kind not in ("self", "encoder"):
            raise UsageError(f"[[rows]] and [[cols]] draw a region of self-attention; [[kind={kind}]] is not one")
        return region_view(source, text, rows=rows or (None, None), cols=cols or (None, None), layer=layer, head=head,
                           pair=pair, truncate=truncate, vmax=vmax, cmap=cmap)
    if pool is not False and reading.plain and kind in ("self", "encoder") and \
            _long_for_a_picture(source, text, pair, truncate, always=bool(pool)):
        from .views.pooled import pooled_view

        return pooled_view(source, text, layer=layer, head=head, pair=pair, truncate=truncate, vmax=vmax, cmap=cmap)
    # Only the layer shown is built: the native engine stops after it and skips the others' matrices.
    result = source.extract(text, pair=pair, target=target, truncate=truncate,
                            layers=None if layer is None else [layer])
    result = reading.apply(result)
    if layer is None:
        return head_across_layers_view(result, head=head, kind=kind, vmax=vmax, cmap=cmap)
    return heatmap_view(result, layer=layer, head=head, kind=kind, vmax=vmax, cmap=cmap)


def _long_for_a_picture(source: Any, text: str | None, pair: str | None, truncate: bool, *, always: bool) -> bool:
    """More tokens than a picture has cells, from an engine that hands layers over one at a time,
    and (unless ``always``) a layer too big to hold whole: then each layer is pooled as it is
    computed (:mod:`attnviz.views.pooled`)."""
    from .render.view import FIGURE_CELLS

    if text is None or not source.capabilities.streaming or not hasattr(source, "encode"):
        return False
    n = len(source.encode(text, pair, truncate=truncate).ids)
    too_big = getattr(source, "rows_for", lambda batch, tokens: False)(1, n)
    return n > FIGURE_CELLS and (always or too_big)


def heard_source(audio: str | os.PathLike[str], model: str | None, *, device: str = "cpu",
                 revision: str | None = None) -> Source:
    """The clip ``audio`` heard by ``model`` as a source: a Whisper's (each text teacher-forced, none its own
    transcript: :class:`attnviz.audio.heard_source.HeardSource`), or a speech encoder's self-attention over the frames
    as one fixed result (see :func:`load`)."""
    from pathlib import Path

    from .audio.encoders import hearing_kind, speech_encoder_attention
    from .sources.saved import SavedSource

    kind = hearing_kind(model)
    if kind == "whisper":
        from .audio.heard_source import HeardSource
        from .audio.model import load_whisper

        return HeardSource(audio, load_whisper(str(model), device=device, revision=revision))
    if kind == "seq2seq":
        from .audio.seq2seq import speech_seq2seq_attention

        return SavedSource(speech_seq2seq_attention(audio, str(model), device=device, revision=revision), Path(audio))
    return SavedSource(speech_encoder_attention(audio, str(model), device=device, revision=revision), Path(audio))


def find_query(tokens: Sequence[str], query: int | str) -> int:
    """The position a ``query`` names: an index (from 0), or a token, matched as written and then
    ignoring case and word-piece marks (``Ġ``, ``▁``, ``##``); the first of several."""
    from .errors import UsageError

    if isinstance(query, int) or (isinstance(query, str) and query.strip().isascii() and query.strip().isdigit()):
        index = int(query)
        if not 0 <= index < len(tokens):
            raise UsageError(f"[[query={index}]] is out of range; the text has tokens 0 to {len(tokens) - 1}")
        return index
    wanted = str(query)

    def bare(token: str) -> str:
        return token.lstrip("Ġ▁").removeprefix("##").casefold()

    for match in (lambda t: t == wanted, lambda t: bare(t) == bare(wanted)):
        found = [i for i, token in enumerate(tokens) if match(token)]
        if found:
            return found[0]
    shown = ", ".join(f"{i}:{t}" for i, t in enumerate(tokens[:40])) + (" …" if len(tokens) > 40 else "")
    raise UsageError(f"[[query={wanted!r}]] is not a token of the text; give one of them or its index ({shown})")


def query_view(source: Source, text: str | None, query: int | str, *, layer: int | None = None,
               head: int | str = "all", kind: str = "self", pair: str | None = None, target: str | None = None,
               reading: Reading = Reading(), truncate: bool = False, vmax: float | None = None,
               cmap: str = "viridis") -> HeatmapView:
    """What one token attends to in every layer and head at once: a ``[layers·heads, keys]`` picture
    (``heatmap --query``). ``query`` is a token or its index; ``layer`` (None: every one) and ``head`` narrow the rows."""
    from .analysis.transforms import kind_tensor, resolved_kind
    from .render.view import matrix_view

    result = reading.apply(source.extract(text, pair=pair, target=target, truncate=truncate,
                                          layers=None if layer is None else [layer]))
    tensor, rows, cols = kind_tensor(result, kind)
    kind = resolved_kind(result, kind)  # a cross-only result's default: cross, in the title too
    position = find_query(rows, query)
    layers = result.metadata.get("layers") or list(range(tensor.shape[0]))
    heads = list(range(tensor.shape[1])) if head == "all" else [int(head)]
    from .layer_range import check_heads

    check_heads(heads, owner=result.model_name, count=tensor.shape[1])
    picked = tensor[:, heads, position, :].reshape(len(layers) * len(heads), -1)
    names = [head_name(la, h) for la in layers for h in heads]
    where = "" if kind in ("self", "encoder") else f" · {kind}"
    return matrix_view(picked[None].double().numpy(), names, cols, vmax=vmax, cmap=cmap,
                       title=f"{result.model_name}{where} · what {rows[position]!r} (token {position}) attends to",
                       panel_titles=[f"query {position}: {rows[position]}"], row_axis="layer · head",
                       col_axis="keys (attended to)")


def heads_of(source: Source, texts: Sequence[str | None] | None = None, *, probe: str | None = None, truncate: bool = False,
             batch_size: int = 16, pair: str | None = None, reading: Reading = Reading(), kind: str = "self",
             target: str | None = None, layer: int | None = None, retrieval: Any = None) -> HeadTable:
    """What ``attnviz heads`` shows: every statistic of every head, averaged over ``texts``, or on
    ``probe="induction"`` (random tokens repeated; causal models). ``kind="decoder"`` with
    ``target``: an encoder-decoder model's decoder self-attention (one text). ``layer``: that layer
    alone, the only one computed (None: every layer). ``retrieval``: a needle run of the same model (its path, or
    :func:`attnviz.needle.tables.read_retrieval`'s columns) adds each head's ``retrieval_score`` and
    ``reasoning_score`` and the ``retrieval`` label, checked against the model before it runs."""
    from .errors import UsageError

    if retrieval is not None:
        from .needle.tables import RetrievalColumns, read_retrieval
        from .sources.saved import SavedSource

        found = retrieval if isinstance(retrieval, RetrievalColumns) else read_retrieval(retrieval)
        model_layers = None if isinstance(source, SavedSource) else int(source.n_layers)
        if model_layers is not None:
            found.check_layers(model_layers, source.name)  # a needle run of another model, before this one runs
        table = heads_of(source, texts, probe=probe, truncate=truncate, batch_size=batch_size, pair=pair,
                         reading=reading, kind=kind, target=target, layer=layer)
        found.attach(table, model_layers)
        return table

    if (texts is None) == (probe is None):
        raise UsageError("give texts or probe='induction', one of the two")
    if probe is not None:
        from .analysis.heads import head_table
        from .analysis.probes import induction_probe

        if probe != "induction":
            raise UsageError(f"[[probe={probe!r}]] is unknown; the probe is 'induction'")
        if pair is not None or target is not None or kind not in ("self", "encoder"):
            raise UsageError("[[pair]], [[target]] and [[kind]] go with texts; the probe is random tokens through a "
                             "causal model's self-attention")
        probed = induction_probe(source)
        if layer is not None:
            probed = probed.narrowed([layer])
        return head_table([reading.apply(probed)])
    return head_table_of_texts(source, list(texts or []), truncate=truncate, batch_size=batch_size, pair=pair,
                               reading=reading, kind=kind, target=target, layer=layer)


def show(what: AttentionResult | str, *, model: str | None = None, head: int = 0, kind: str = "self",
         view: str = "head", stats: bool = True, cmap: str = "viridis", height: int | None = None,
         **extract_options: Any) -> PageDisplay:
    """The interactive page of a result, or of a text (extracted with ``model`` and ``extract_options``
    such as ``pair=`` or ``target=``), for display in a notebook (the last expression of a cell)."""
    from .notebook import HEIGHT, result_display

    if isinstance(what, str):
        result = extract(what, model=model, **extract_options)
        title: str | None = " ".join(what.split())[:60]
    else:
        result, title = what, None
    return result_display(result, head=head, kind=kind, stats=stats, view=view, title=title, cmap=cmap,
                          height=HEIGHT if height is None else height)


def __getattr__(name: str) -> Any:
    from .api_names import LAZY

    if name in LAZY:
        import importlib

        module, attribute = LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'attnviz.api' has no attribute {name!r}")

"""The Python API the CLI is a shell over."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .result import AttentionResult
from .sources.resolve import Engine, load_source

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .compare import HeadsOverview
    from .heads import HeadTable


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
) -> AttentionResult:
    """Attention of every head of ``model`` on ``text``.

    Args:
        text: the input; None for a ``type = "matrices"`` config, which fixes its own input.
        model: None for the embedded default (all-MiniLM-L6-v2); a ``.toml`` config; a Hugging
            Face model folder; or a hub id such as ``gpt2``.
        engine: ``"native"`` (our attention on the model's weights), ``"hf"`` (transformers), or
            ``"auto"``: native where it supports the model.
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

    Returns:
        An :class:`AttentionResult` whose ``attentions`` are float32 ``[layers, heads, q, k]``.
    """
    source = load_source(model, engine=engine, causal=causal, revision=revision, device=device,
                         device_map=device_map, trust_remote_code=trust_remote_code)
    kwargs = {"float16": True} if float16 else {}
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


def head_table_of_texts(source: Any, texts: Sequence[str], *, truncate: bool = False, batch_size: int = 16) -> HeadTable:
    """The head table (:mod:`attnviz.heads`) of ``texts`` run through a loaded ``source``, averaged over them.

    Texts run in padded batches of ``batch_size``, and each layer's statistics are taken as soon
    as the engine computes it, so a long text never holds every layer's matrices at once.
    """
    from .heads import HeadTableBuilder

    builder = HeadTableBuilder()
    for start in range(0, len(texts), batch_size):
        stream = source.stream_batch(list(texts[start : start + batch_size]), truncate=truncate)
        for position, parts in stream:
            builder.add_layers(stream.results, position, [part.attentions for part in parts], first_text=start)
            del parts  # before the next layer is computed
    return builder.table()


def rollout_of_text(source: Any, text: str, *, layer: int | None = None, head_fusion: str = "mean",
                    truncate: bool = False) -> tuple[torch.Tensor, AttentionResult]:
    """Attention rollout (:func:`attnviz.metrics.rollout`) of ``text`` through ``layer`` (default: the
    last): ``[q, k]`` float64, and the result describing the tokens. Layers are fused as the engine
    computes them, so memory holds one layer's matrices and one ``[q, k]`` product at a time."""
    from . import metrics
    from .errors import UsageError

    n_layers = source.n_layers
    if layer is not None and not 0 <= layer < n_layers:
        raise UsageError(f"--layer {layer} is out of range; {source.name} has layers 0 to {n_layers - 1}")
    wanted = None if layer is None else list(range(layer + 1))
    stream = source.stream_batch([text], truncate=truncate, layers=wanted)

    def layers() -> Iterator[torch.Tensor]:
        for _, parts in stream:
            attentions = parts[0].attentions
            del parts
            yield attentions
            del attentions  # before the next layer is computed

    last = deque(metrics.rollout_steps(layers(), head_fusion=head_fusion), maxlen=1)  # type: ignore[arg-type]
    return last[0], stream.results[0]


def compare_heads_of_text(source: Any, text: str, *, layer: int | None = None, truncate: bool = False,
                          all_rows: bool = False) -> HeadsOverview:
    """Every head of ``layer`` (default: every layer) on ``text``, for comparing them
    (:class:`attnviz.compare.HeadsOverview`): display matrices and the head-distance matrix,
    built as the engine computes each layer. The distances are exact unless their cost passes
    :data:`attnviz.compare.DISTANCE_BUDGET` (long inputs): then summed over evenly spaced query
    rows and scaled, which the overview's notes say; ``all_rows`` computes every row."""
    from .compare import OverviewBuilder
    from .errors import UsageError

    n_layers = source.n_layers
    if layer is not None and not 0 <= layer < n_layers:
        raise UsageError(f"--layer {layer} is out of range; {source.name} has layers 0 to {n_layers - 1}")
    wanted = list(range(n_layers)) if layer is None else [layer]
    stream = source.stream_batch([text], truncate=truncate, layers=None if layer is None else wanted)
    builder: OverviewBuilder | None = None
    for _, parts in stream:
        attentions = parts[0].attentions
        del parts
        if builder is None:
            builder = OverviewBuilder(stream.results[0], wanted, n_heads=attentions.shape[0], all_rows=all_rows)
        builder.add(attentions)
        del attentions  # before the next layer is computed
    assert builder is not None  # a model has at least one layer
    return builder.finish()

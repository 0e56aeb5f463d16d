"""The views of rollout, flow and norm-based attention (:mod:`attnviz.attribution.methods` names them):
layers read one at a time (:mod:`attnviz.sources.layer_reader`), fused as they arrive."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..analysis.reading import Reading
from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..analysis.weights import HeadFusion
    from ..render.view import HeadChoice, HeatmapView
    from ..result import AttentionResult
    from ..sources.base import Source

FLOW_NOTICE_SECONDS = 2.0
"""Attention flow says what it will cost (through ``notice``) when it expects to take longer than this."""



def fused_rows(part: Any, head_fusion: HeadFusion) -> torch.Tensor:
    """One layer's heads fused (:func:`attnviz.attribution.rollout.fuse_heads`) into ``[q, k]`` float64, from its
    blocks of query rows (:meth:`attnviz.sources.stream.ItemLayer.row_blocks`): never the whole ``[H, q, k]``."""
    import torch

    from .rollout import fuse_heads

    n = part.n_tokens
    fused = torch.zeros(n, n, dtype=torch.float64)
    for first, block in part.row_blocks():
        fused[first : first + block.shape[1], : block.shape[2]] = fuse_heads(block, head_fusion)
    return fused


def _read_layers(source: Any, text: str | None, *, layer: int | None, truncate: bool, pair: str | None,
                 reading: Reading, kind: str, target: str | None, purpose: str, head_fusion: HeadFusion | None = None,
                 ) -> tuple[Iterator[torch.Tensor], list[AttentionResult], list[int]]:
    """Each layer's ``[heads, q, k]`` from 0 through ``layer`` as the engine computes it, read as
    ``reading`` says; the header result (tokens as read) is filled in as layers arrive. With
    ``head_fusion``, a layer the engine hands over as row blocks (a long input) comes already fused,
    ``[q, k]``, built block by block."""
    from ..sources.layer_reader import check_through, read_layers

    check_through(source, layer, kind, purpose)
    wanted = None if layer is None else list(range(layer + 1))
    reader = read_layers(source, [text], reading=reading, kind=kind, target=target, truncate=truncate, layers=wanted,
                         pairs=[pair], purpose=purpose)
    header = [reader.results[0]]  # as read (fewer tokens without special ones, or words)

    def layers() -> Iterator[torch.Tensor]:
        for _, parts in reader:
            part = parts[0]
            del parts
            header[0] = reader.results[0]
            if head_fusion is not None and part.lazy:  # too long to hold: fused block by block
                yield fused_rows(part, head_fusion)
            else:
                yield part.attentions
            del part  # before the next layer is computed

    return layers(), header, list(reader.layers)


def rollout_of_text(source: Any, text: str | None, *, layer: int | None = None, head_fusion: HeadFusion = "mean",
                    truncate: bool = False, pair: str | None = None, reading: Reading = Reading(),
                    kind: str = "self", target: str | None = None) -> tuple[torch.Tensor, AttentionResult]:
    """Attention rollout (:func:`attnviz.attribution.rollout.rollout`) of ``text`` through ``layer`` (default: the
    last): ``[q, k]`` float64, and the result describing the tokens (``metadata["rolled_through"]``:
    the layers chained). Layers are fused as the engine computes them, so memory holds one layer's
    matrices and one ``[q, k]`` product at a time. ``kind="decoder"`` (with ``target``) rolls out an
    encoder-decoder model's decoder self-attention."""
    from collections import deque

    from .rollout import rollout_steps

    layers, header, numbers = _read_layers(source, text, layer=layer, truncate=truncate, pair=pair, reading=reading,
                                           kind=kind, target=target, purpose="rollout", head_fusion=head_fusion)
    last = deque(rollout_steps(layers, head_fusion=head_fusion), maxlen=1)
    return last[0], replace(header[0], metadata={**header[0].metadata, "rolled_through": numbers})


def flow_of_text(source: Any, text: str | None, *, layer: int | None = None, head_fusion: HeadFusion = "mean",
                 truncate: bool = False, pair: str | None = None, reading: Reading = Reading(), kind: str = "self",
                 target: str | None = None, force: bool = False,
                 notice: Callable[[str], object] | None = None) -> tuple[torch.Tensor, AttentionResult]:
    """Attention flow (:func:`attnviz.attribution.flow.attention_flow`) of ``text`` to ``layer`` (default: the
    last), ``[q, k]`` float64, and the result describing the tokens (``metadata["rolled_through"]``).
    Each layer's heads are fused as it is computed; the max-flow problems are solved once the
    tokens are known, after :func:`attnviz.attribution.flow.check_flow_cost` (refused past its limit unless
    ``force``; ``notice`` hears the cost of a long run first)."""
    import torch

    from .flow import attention_flow_to, check_flow_cost
    from .rollout import fuse_heads

    if kind in ("self", "encoder") and text is not None and hasattr(source, "encode"):  # refused before any forward
        through = source.n_layers if layer is None else layer + 1
        check_flow_cost(len(source.encode(text, pair, truncate=truncate).ids), through, force=force)
    layers, header, numbers = _read_layers(source, text, layer=layer, truncate=truncate, pair=pair, reading=reading,
                                           kind=kind, target=target, purpose="attention flow", head_fusion=head_fusion)
    fused = torch.stack([fuse_heads(a, head_fusion) if a.dim() == 3 else a for a in layers])  # (L, T, T)
    cost = check_flow_cost(fused.shape[-1], fused.shape[0], force=force)
    if notice is not None and cost.seconds > FLOW_NOTICE_SECONDS:
        notice(f"attention flow: {cost.problems:,} max-flow problems over {cost.n_tokens} tokens and {cost.n_layers} "
               f"layers, about {cost.seconds:,.1f} s")
    flow = attention_flow_to(fused[:, None], fused.shape[0] - 1)  # one "head" per layer: already fused
    return flow, replace(header[0], metadata={**header[0].metadata, "rolled_through": numbers})


def rollout_view(source: Source, text: str | None, *, layer: int | None = None, fusion: HeadFusion = "mean",
                 truncate: bool = False, cmap: str = "viridis", pair: str | None = None, reading: Reading = Reading(),
                 kind: str = "self", target: str | None = None) -> HeatmapView:
    """What ``attnviz rollout`` draws: attention rollout (Abnar & Zuidema 2020) through ``layer``
    (default: the last), heads fused by ``fusion`` (mean, max or min)."""
    rolled, result = rollout_of_text(source, text, layer=layer, head_fusion=fusion, truncate=truncate, pair=pair,
                                     reading=reading, kind=kind, target=target)
    return _through_view(rolled, result, f"attention rollout ({fusion} of heads)", "rollout", cmap, kind)


def flow_view(source: Source, text: str | None, *, layer: int | None = None, fusion: HeadFusion = "mean",
              truncate: bool = False, cmap: str = "viridis", pair: str | None = None, reading: Reading = Reading(),
              kind: str = "self", target: str | None = None, force: bool = False,
              notice: Callable[[str], object] | None = None) -> HeatmapView:
    """What ``attnviz rollout --method flow`` draws: attention flow (Abnar & Zuidema 2020) to ``layer``."""
    flow, result = flow_of_text(source, text, layer=layer, head_fusion=fusion, truncate=truncate, pair=pair,
                                reading=reading, kind=kind, target=target, force=force, notice=notice)
    return _through_view(flow, result, f"attention flow ({fusion} of heads)", "flow", cmap, kind)


def _through_view(matrix: Any, result: AttentionResult, what: str, short: str, cmap: str, kind: str) -> HeatmapView:
    from ..render.view import matrix_view

    last = result.metadata["rolled_through"][-1]
    where = " · decoder" if kind == "decoder" else ""
    return matrix_view(matrix[None].numpy(), result.tokens, result.tokens, cmap=cmap,
                       title=f"{result.model_name}{where} · {what} through layers 0–{last}",
                       panel_titles=[f"{short} to layer {last}"], row_axis="positions (after the layers)",
                       col_axis="input tokens", value_name="share of the input token")


def norm_view(source: Source, text: str | None, *, layer: int | None = None, head: HeadChoice = "mean",
              truncate: bool = False, cmap: str = "viridis", pair: str | None = None,
              reading: Reading = Reading()) -> HeatmapView:
    """Norm-based attention ‖α_ij f(x_j)‖ (Kobayashi et al. 2020) of one layer or every layer
    (None, the default): a head, ``"all"`` or ``"mean"``. Needs each head's value vectors
    (native engine, config models)."""
    from ..analysis.metrics import norm_attention
    from ..attention import built
    from ..render.view import every_layer_panels, matrix_view, select_panels
    from ..sources.saved import SavedSource

    if not source.capabilities.self_attention:  # one cross-attention layer: no token-over-token weights to scale
        from ..analysis.transforms import no_self_attention

        raise UsageError(no_self_attention(source.name, "self", "norm-based attention ‖α f(x)‖",
                                           explain=source.engine == "config"))
    if not source.capabilities.value_norms and isinstance(source, SavedSource):
        raise UsageError(f"norm-based attention needs each head's value vectors; {source.path} was saved without "
                         "them. Save a result of the native engine or a .toml config model")
    if not source.capabilities.value_norms:
        from ..sources.native import family_names

        raise UsageError(f"norm-based attention needs each head's value vectors; the {source.engine} engine does not "
                         f"give them. Use the native engine ({family_names()}) or a .toml config model")
    if not reading.plain:
        raise UsageError("norm-based attention is per token: [[hide_special]] and [[words]] do not apply to it")
    every_layer = layer is None
    # Only the layer shown is built (or every layer, as each is computed).
    result = source.extract(text, truncate=truncate, layers=None if layer is None else [layer], pair=pair)
    tensor = norm_attention(result.attentions, built(result.value_norms, "value norms"))  # value_norms: checked above
    if every_layer:
        layers = result.metadata.get("layers") or list(range(result.n_layers))
        panels, titles, what, columns = every_layer_panels(tensor, layers, head, result.model_name)
        where = "every layer"
    else:
        panels, titles, what = select_panels(tensor, 0, head, result.model_name)
        columns, where = None, f"layer {layer}"
    return matrix_view(panels, result.tokens, result.tokens, cmap=cmap, panel_titles=titles, columns=columns,
                       title=f"{result.model_name} · norm-based attention ‖α f(x)‖ · {where} · {what}",
                       value_name="‖α f(x)‖")

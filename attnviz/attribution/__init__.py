"""What ``attnviz rollout --method …`` shows: attribution beyond raw attention, as views.

Raw attention weights are known to mislead about what a model uses (Jain & Wallace 2019; Abnar &
Zuidema 2020; Kobayashi et al. 2020). Each method here is a pure function of :mod:`attnviz.analysis.metrics`
(or :mod:`attnviz.attribution.flow`, :mod:`attnviz.attribution.relevance`, :mod:`attnviz.attribution.mixing`) fed by a source, and
comes back as a :class:`~attnviz.render.view.HeatmapView`, so every output (terminal, PNG, HTML,
npz/JSON) draws it:

- ``rollout`` and ``flow`` (Abnar & Zuidema 2020): how much of each input token reaches each
  position through layer l, chained (rollout) or as a max-flow (flow);
- ``grad-rollout`` (Chefer, Gur & Wolf 2021) and ``attn-grad`` (A ⊙ ∂y/∂A): attention weighted by
  the gradient of an output y the user chooses;
- ``norm`` (Kobayashi et al. 2020), ``norm-layer``, ``norm-res``, ``norm-resln`` and ``mixing``
  (Kobayashi et al. 2021): the size of what each token passes on, with the heads summed through W_O,
  the residual, and the LayerNorm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..analysis.reading import Reading
from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..render.view import HeatmapView
    from ..result import AttentionResult
    from ..sources.base import Source

METHODS: dict[str, str] = {
    "rollout": "attention rollout: heads fused, the residual added, layers chained (Abnar & Zuidema 2020)",
    "flow": "attention flow: max-flow through the rollout's graph of layers (Abnar & Zuidema 2020)",
    "grad-rollout": "gradient-weighted rollout, R ← R + mean_h((∂y/∂A ⊙ A)⁺)·R (Chefer, Gur & Wolf 2021)",
    "attn-grad": "attention × gradient, A ⊙ ∂y/∂A, per head, signed",
    "norm": "norm-based attention ‖α f(x)‖ per head (Kobayashi et al. 2020)",
    "norm-layer": "‖Σ_h α f_h(x)‖: the heads summed through W_O (Kobayashi et al. 2021)",
    "norm-res": "the heads summed, with the residual x_i on the diagonal (Kobayashi et al. 2021)",
    "norm-resln": "the heads summed, the residual, split through the LayerNorm; post-LN models (Kobayashi et al. 2021)",
    "mixing": "context-mixing ratio per token and layer (Kobayashi et al. 2021)",
}
"""Each method ``attnviz rollout --method`` takes, with what it shows."""

THROUGH_LAYERS = ("rollout", "flow", "grad-rollout")  # chained: a matrix through layer l
GRADIENT = ("grad-rollout", "attn-grad")
MIXING = ("norm-layer", "norm-res", "norm-resln", "mixing")
FLOW_NOTICE_SECONDS = 2.0
"""Attention flow says what it will cost (through ``notice``) when it expects to take longer than this."""


def check_method_options(method: str, *, fusion: str | None = None, head: int | str | None = None,
                         target_token: str | None = None, vs: str | None = None, force: bool = False,
                         kind: str = "self", target: str | None = None, reading: Reading = Reading(),
                         pair: str | None = None) -> None:
    """Refuse, before any model runs, an option the method does not use (the user meant something)."""
    if method not in METHODS:
        raise UsageError(f"[[method={method!r}]] is unknown; use one of {', '.join(METHODS)}")
    if pair is not None and method in (*GRADIENT, *MIXING):
        raise UsageError(f"{method} reads one text; [[pair]] goes with rollout, flow and norm")
    if fusion is not None and method not in ("rollout", "flow"):
        raise UsageError(f"[[fusion]] belongs to rollout and flow, which fuse a layer's heads; {method} does not")
    if head is not None and method not in ("norm", "attn-grad"):
        raise UsageError(f"[[head]] applies to norm and attn-grad, which show heads; {method} "
                         + ("fuses every head of a layer (choose how with [[fusion]])" if method in ("rollout", "flow")
                            else "sums or averages the heads"))
    if (target_token is not None or vs is not None) and method not in GRADIENT:
        raise UsageError("[[target_token]] and [[vs]] choose the output y that grad-rollout and attn-grad "
                         f"differentiate; {method} uses no gradient")
    if force and method != "flow":
        raise UsageError("[[force]] lets attention flow run past its cost limit; only flow has one")
    if method not in THROUGH_LAYERS[:2] and (kind not in ("self", "encoder") or target is not None):
        raise UsageError(f"{method} runs on a model's self-attention; [[kind]] and [[target]] go with rollout and flow")
    if method not in THROUGH_LAYERS[:2] and not reading.plain:
        raise UsageError(f"{method} is per token: [[hide_special]], [[renormalize]] and [[words]] apply to "
                         "rollout and flow only")


def attribution_view(source: Source, text: str | None, *, method: str = "rollout", layer: int | str | None = None,
                     head: int | str | None = None, fusion: str | None = None, target_token: str | None = None,
                     vs: str | None = None, force: bool = False, truncate: bool = False, cmap: str | None = None,
                     pair: str | None = None, reading: Reading = Reading(), kind: str = "self",
                     target: str | None = None, notice: Callable[[str], None] | None = None) -> HeatmapView:
    """What ``attnviz rollout --method METHOD`` draws (see :data:`METHODS`).

    ``layer``: for rollout, flow and grad-rollout the last layer chained (default: the model's last);
    for the others one layer, or ``"all"`` (default) for a panel per layer. ``head`` (norm,
    attn-grad): a head number, ``"all"`` or ``"mean"`` (default). ``fusion`` (rollout, flow): mean
    (default), max or min. ``target_token`` and ``vs`` choose the output y the gradient methods
    differentiate (see :func:`attnviz.sources.gradients.attention_gradients`). ``force`` lets
    attention flow run past :func:`attnviz.attribution.flow.check_flow_cost`'s limit. ``notice`` receives a
    line before a long computation (the flow's cost)."""
    check_method_options(method, fusion=fusion, head=head, target_token=target_token, vs=vs, force=force,
                         kind=kind, target=target, reading=reading, pair=pair)
    through = None if layer in (None, "all") else int(layer)
    shown_layer = "all" if layer is None else layer
    if method == "rollout":
        return rollout_view(source, text, layer=through, fusion=fusion or "mean", truncate=truncate,
                            cmap=cmap or "viridis", pair=pair, reading=reading, kind=kind, target=target)
    if method == "flow":
        return flow_view(source, text, layer=through, fusion=fusion or "mean", truncate=truncate,
                         cmap=cmap or "viridis", pair=pair, reading=reading, kind=kind, target=target, force=force,
                         notice=notice)
    if method == "norm":
        return norm_view(source, text, layer=shown_layer, head="mean" if head is None else head, truncate=truncate,
                         cmap=cmap or "viridis", pair=pair, reading=reading)
    if method in GRADIENT:
        from .grad import gradient_view

        return gradient_view(source, text, method=method, layer=through if method == "grad-rollout" else shown_layer,
                             head="mean" if head is None else head, target_token=target_token, vs=vs,
                             truncate=truncate, cmap=cmap)
    from .mixing_view import mixing_view

    return mixing_view(source, text, method=method, layer=shown_layer, truncate=truncate, cmap=cmap or "viridis",
                       pair=pair)


def fused_rows(part: Any, head_fusion: str) -> torch.Tensor:
    """One layer's heads fused (:func:`attnviz.attribution.rollout.fuse_heads`) into ``[q, k]`` float64, from its
    blocks of query rows (:meth:`attnviz.sources.stream.ItemLayer.row_blocks`): never the whole ``[H, q, k]``."""
    import torch

    from .rollout import fuse_heads

    n = part.n_tokens
    fused = torch.zeros(n, n, dtype=torch.float64)
    for first, block in part.row_blocks():
        fused[first : first + block.shape[1], : block.shape[2]] = fuse_heads(block, head_fusion)  # type: ignore[arg-type]
    return fused


def _read_layers(source: Any, text: str | None, *, layer: int | None, truncate: bool, pair: str | None,
                 reading: Reading, kind: str, target: str | None, purpose: str, head_fusion: str | None = None,
                 ) -> tuple[Iterator[torch.Tensor], list[AttentionResult], list[int]]:
    """Each layer's ``[heads, q, k]`` from 0 through ``layer`` as the engine computes it, read as
    ``reading`` says; the header result (tokens as read) is filled in as layers arrive. With
    ``head_fusion``, a layer the engine hands over as row blocks (a long input) comes already fused,
    ``[q, k]``, built block by block."""
    from ..views.layers import check_through, read_layers

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


def rollout_of_text(source: Any, text: str | None, *, layer: int | None = None, head_fusion: str = "mean",
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
    last = deque(rollout_steps(layers, head_fusion=head_fusion), maxlen=1)  # type: ignore[arg-type]
    return last[0], replace(header[0], metadata={**header[0].metadata, "rolled_through": numbers})


def flow_of_text(source: Any, text: str | None, *, layer: int | None = None, head_fusion: str = "mean",
                 truncate: bool = False, pair: str | None = None, reading: Reading = Reading(), kind: str = "self",
                 target: str | None = None, force: bool = False,
                 notice: Callable[[str], None] | None = None) -> tuple[torch.Tensor, AttentionResult]:
    """Attention flow (:func:`attnviz.attribution.flow.attention_flow`) of ``text`` to ``layer`` (default: the
    last), ``[q, k]`` float64, and the result describing the tokens (``metadata["rolled_through"]``).
    Each layer's heads are fused as it is computed; the max-flow problems are solved once the
    tokens are known, after :func:`attnviz.attribution.flow.check_flow_cost` (refused past its limit unless
    ``force``; ``notice`` hears the cost of a long run first)."""
    import torch

    from .rollout import fuse_heads
    from .flow import attention_flow_to, check_flow_cost

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


def rollout_view(source: Source, text: str | None, *, layer: int | None = None, fusion: str = "mean",
                 truncate: bool = False, cmap: str = "viridis", pair: str | None = None, reading: Reading = Reading(),
                 kind: str = "self", target: str | None = None) -> HeatmapView:
    """What ``attnviz rollout`` draws: attention rollout (Abnar & Zuidema 2020) through ``layer``
    (default: the last), heads fused by ``fusion`` (mean, max or min)."""
    rolled, result = rollout_of_text(source, text, layer=layer, head_fusion=fusion, truncate=truncate, pair=pair,
                                     reading=reading, kind=kind, target=target)
    return _through_view(rolled, result, f"attention rollout ({fusion} of heads)", "rollout", cmap, kind)


def flow_view(source: Source, text: str | None, *, layer: int | None = None, fusion: str = "mean",
              truncate: bool = False, cmap: str = "viridis", pair: str | None = None, reading: Reading = Reading(),
              kind: str = "self", target: str | None = None, force: bool = False,
              notice: Callable[[str], None] | None = None) -> HeatmapView:
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


def norm_view(source: Source, text: str | None, *, layer: int | str = "all", head: int | str = "mean",
              truncate: bool = False, cmap: str = "viridis", pair: str | None = None,
              reading: Reading = Reading()) -> HeatmapView:
    """Norm-based attention ‖α_ij f(x_j)‖ (Kobayashi et al. 2020) of one layer or every layer
    (``"all"``, the default): a head, ``"all"`` or ``"mean"``. Needs each head's value vectors
    (native engine, config models)."""
    from ..analysis.metrics import norm_attention
    from ..render.view import every_layer_panels, matrix_view, select_panels

    if not source.capabilities.self_attention:  # one cross-attention layer: no token-over-token weights to scale
        from ..analysis.transforms import no_self_attention

        raise UsageError(no_self_attention(source.name, "self", "norm-based attention ‖α f(x)‖",
                                           explain=source.engine == "config"))
    if not source.capabilities.value_norms and source.engine == "saved":
        raise UsageError(f"norm-based attention needs each head's value vectors; {source.path} was saved without "
                         "them. Save a result of the native engine or a .toml config model")
    if not source.capabilities.value_norms:
        raise UsageError(f"norm-based attention needs each head's value vectors; the {source.engine} engine does not "
                         "give them. Use the native engine (BERT, GPT-2, LLaMA families) or a .toml config model")
    if not reading.plain:
        raise UsageError("norm-based attention is per token: [[hide_special]] and [[words]] do not apply to it")
    every_layer = layer == "all"
    # Only the layer shown is built (or every layer, as each is computed).
    result = source.extract(text, truncate=truncate, layers=None if every_layer else [int(layer)], pair=pair)
    tensor = norm_attention(result.attentions, result.value_norms)
    if every_layer:
        layers = result.metadata.get("layers") or list(range(result.n_layers))
        panels, titles, what, columns = every_layer_panels(tensor, layers, head, result.model_name)  # type: ignore[arg-type]
        where = "every layer"
    else:
        panels, titles, what = select_panels(tensor, 0, head, result.model_name)  # type: ignore[arg-type]
        columns, where = None, f"layer {layer}"
    return matrix_view(panels, result.tokens, result.tokens, cmap=cmap, panel_titles=titles, columns=columns,
                       title=f"{result.model_name} · norm-based attention ‖α f(x)‖ · {where} · {what}",
                       value_name="‖α f(x)‖")

"""Views of norm-based mixing (Kobayashi et al. 2021): ``rollout --method norm-layer|norm-res|norm-resln|mixing``.

Each layer's pieces come from :func:`attnviz.sources.mixing.mixing_parts` one layer at a time and
are reduced at once by the pure functions of :mod:`attnviz.attribution.mixing`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..render.view import HeatmapView
    from ..sources.base import Source

TITLES = {
    "norm-layer": ("‖Σ_h α f_h(x)‖, heads summed through W_O", "‖Σ_h α f(x)‖"),
    "norm-res": ("‖Σ_h α f_h(x) + residual‖", "‖attention + residual‖"),
    "norm-resln": ("‖LN(Σ_h α f_h(x) + residual)‖, split per term", "‖attention + residual + LN‖"),
}


def mixing_view(source: Source, text: str | None, *, method: str, layer: int | str = "all", truncate: bool = False,
                cmap: str = "viridis", pair: str | None = None) -> HeatmapView:
    """One panel per layer (or ``layer``'s) of the chosen decomposition, or, for ``mixing``, one
    ``[layers, tokens]`` panel of the context-mixing ratio."""
    from ..render.view import matrix_view
    from ..sources.mixing import mixing_parts
    from . import mixing

    if pair is not None:
        raise UsageError(f"{method} decomposes one text's layers; [[pair]] goes with rollout and flow")
    from ..layer_range import check_layer

    layers = None if layer == "all" else [check_layer(int(layer), owner=source.name, count=source.n_layers)]
    result, parts = mixing_parts(source, text, layers=layers, truncate=truncate)
    panels: list[Any] = []
    numbers: list[int] = []
    post_ln = True
    for part in parts:
        numbers.append(part.layer)
        post_ln = part.post_norm is not None
        panels.append(_reduce(mixing, method, part, source.name))
        del part  # one layer's pieces at a time
    where = "every layer" if layer == "all" else f"layer {layer}"
    notes = [] if post_ln else [
        "pre-LN model: the residual is the un-normalised stream x_i, the LayerNorm before attention is inside "
        "f(x) (it acts per token), and no LayerNorm follows the sum"]
    if method == "mixing":
        ratio = matrix_view(np.stack(panels)[None], [f"L{n}" for n in numbers], result.tokens, cmap=cmap,
                            title=f"{result.model_name} · context-mixing ratio (Kobayashi et al. 2021) · {where}",
                            panel_titles=["mixing ratio"], row_axis="layers", col_axis="tokens",
                            value_name="share from other tokens", notes=notes)
        return replace(ratio, pool_rows=False)  # rows are layers: a long text shrinks its columns only
    title, value_name = TITLES[method]
    return matrix_view(np.stack(panels), result.tokens, result.tokens, cmap=cmap,
                       title=f"{result.model_name} · {title} (Kobayashi et al. 2021) · {where}",
                       panel_titles=[f"L{n}" for n in numbers], value_name=value_name, notes=notes)


def _reduce(mixing: Any, method: str, part: Any, name: str) -> np.ndarray:
    if method == "norm-layer":
        return mixing.layer_norm_attention(part.attentions, part.transformed).cpu().numpy()
    if method == "norm-res":
        return mixing.residual_norm_attention(part.attentions, part.transformed, part.residual).cpu().numpy()
    if method == "norm-resln" and part.post_norm is None:
        raise UsageError(f"{name} is a pre-LN model: no LayerNorm follows attention and the residual (its norm is "
                         "inside f(x), before the values), so there is nothing to split; use [[method=norm-res]]")
    if method == "norm-resln":
        weight, bias, eps = part.post_norm
        return mixing.layernorm_norm_attention(part.attentions, part.transformed, part.residual, part.bias_o,
                                               weight, bias, eps).cpu().numpy()
    return mixing.mixing_ratio(part).cpu().numpy()

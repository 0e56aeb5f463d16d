"""Views of attention weighted by gradients: ``rollout --method grad-rollout`` and ``--method attn-grad``.

The output ``y`` the gradients are of is chosen by :func:`attnviz.sources.gradients.attention_gradients`
(a decoder's next-token logit, a masked token's logit, or a sentence encoder's similarity to a
second text); each view says which, and its value, in a note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # pragma: no cover
    from ..render.view import HeadChoice, HeatmapView
    from ..sources.base import Source


def gradient_view(source: Source, text: str | None, *, method: str, layer: int | str | None, head: HeadChoice = "mean",
                  target_token: str | None = None, vs: str | None = None, truncate: bool = False,
                  cmap: str | None = None) -> HeatmapView:
    """``grad-rollout``: Chefer, Gur & Wolf's relevance ``R`` through ``layer`` (default: the last);
    ``attn-grad``: ``A ⊙ ∂y/∂A`` of one layer or every layer (``"all"``), a head, ``"all"`` or the mean."""
    from ..layer_range import check_layer
    from ..render.view import every_layer_panels, matrix_view, select_panels
    from ..sources.gradients import attention_gradients
    from .relevance import attention_times_gradient, gradient_rollout

    n_layers = source.n_layers
    if isinstance(layer, int):
        check_layer(layer, owner=source.name, count=n_layers)
    found = attention_gradients(source, text, target_token=target_token, vs=vs, truncate=truncate)
    result = found.result
    note = f"y = {found.target} = {found.value:.6g}"
    if method == "grad-rollout":
        last = n_layers - 1 if layer is None else int(layer)
        relevance = gradient_rollout(result.attentions[: last + 1], found.gradients[: last + 1])[-1]
        # R starts as I: its 1s would take the whole colour scale, and what the layers add is the reading.
        added = relevance - torch.eye(relevance.shape[-1], dtype=relevance.dtype, device=relevance.device)
        return matrix_view(added[None].cpu().numpy(), result.tokens, result.tokens, cmap=cmap or "viridis",
                           title=f"{result.model_name} · gradient-weighted rollout (Chefer et al. 2021) R − I through "
                                 f"layers 0–{last}",
                           panel_titles=[f"R − I after layer {last}"], row_axis="positions (after the layers)",
                           col_axis="input tokens", value_name="relevance added by the layers (R − I)",
                           notes=[note, "R starts as the identity I, which is left out here (relevance.gradient_rollout "
                                        "returns R itself)"])
    tensor = attention_times_gradient(result.attentions, found.gradients)
    if layer == "all":
        panels, titles, what, columns = every_layer_panels(tensor, list(range(result.n_layers)), head,
                                                           result.model_name)
        where = "every layer"
    else:
        if layer is None:  # as int(None) would: attribution_view says "all" for the method's default
            raise TypeError("gradient_view's layer is a layer number or 'all' for attn-grad")
        panels, titles, what = select_panels(tensor, int(layer), head, result.model_name)
        columns, where = None, f"layer {layer}"
    return matrix_view(panels, result.tokens, result.tokens, cmap=cmap or "coolwarm", panel_titles=titles,
                       columns=columns, signed=True, notes=[note],
                       title=f"{result.model_name} · attention × gradient A ⊙ ∂y/∂A · {where} · {what}",
                       value_name="A ⊙ ∂y/∂A")

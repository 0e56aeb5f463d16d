"""What ``attnviz explain`` needs from a checkpoint the native engine runs: one layer's attention input.

The text is encoded and run exactly as an extraction runs it (same tokenizer call, same forward
pass), up to the layer asked for. A forward pre-hook on that layer's :class:`MultiHeadAttention`
records what the family hands it: ``x`` (after the block's LayerNorm/RMSNorm), the mask, and
RoPE's ``(cos, sin)``. What the walkthrough cannot reproduce (a mask other than plain causal or
none, such as Mistral's sliding window on a longer text; a scale other than 1/√d_head) is refused
rather than shown with wrong numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ...attention import causal_mask, combine_masks
from ...errors import UsageError
from ..contracts import ExplainInputs

if TYPE_CHECKING:  # pragma: no cover
    from ...attention import MultiHeadAttention
    from ..tokens import TokenInfo

NativeSource = Any  # attnviz.sources.native.NativeSource, named, not imported: the package imports this module


@dataclass
class Entered:
    """What entered one attention module on one forward call (batch of one text)."""

    x: Tensor  # [T, d_model]
    mask: Tensor | None  # boolean, broadcastable to [1, H, T, T]; True = may attend
    causal: bool  # the module's own ``causal`` argument
    rotary: tuple[Tensor, Tensor] | None  # ([T, d_head], [T, d_head])
    scale: float | None  # None: 1/√d_head
    extra: list[str]  # arguments the walkthrough has no step for (context, past)


def explain_inputs(source: NativeSource, text: str | None, layer: int) -> ExplainInputs:
    """The input ``x`` of ``layer``'s attention for ``text``, its module, labels and masking."""
    from ...layer_range import check_layer

    check_layer(layer, owner=source.name, count=source.n_layers)
    info = source.encode(text or "")  # an empty text: the error an extraction gives
    attention: MultiHeadAttention = source.model.layers[layer]["attn"]
    entered = run_to_layer(source, info, layer, attention)
    check_reproducible(source, entered, layer, attention)
    return ExplainInputs(
        x=entered.x,
        attention=attention,
        tokens=list(info.labels),
        causal=source.causal,
        title=f"{source.name}, layer {layer}",
        rotary=entered.rotary,
        padding=None,
        model_kind="model",
    )


def _built(mask: Any) -> Any:
    """A copy of the mask a layer received, built if it came described (a RowMask)."""
    if mask is not None and not isinstance(mask, torch.Tensor):
        mask = mask.dense()
    return None if mask is None else mask.detach().clone()


def run_to_layer(source: NativeSource, info: TokenInfo, layer: int, attention: MultiHeadAttention) -> Entered:
    """Run ``info`` (one encoded text) through the model up to ``layer`` and record what enters
    ``attention``, through the same path as an extraction (the run stops after that layer)."""
    seen: list[Entered] = []

    def record(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else kwargs["x"]
        context = args[1] if len(args) > 1 else kwargs.get("context")
        rotary = kwargs.get("rotary")
        extra = [name for name, value in (("context", context), ("past", kwargs.get("past"))) if value is not None]
        seen.append(Entered(
            x=x[0].detach().clone(),
            mask=_built(kwargs.get("mask")),
            causal=bool(kwargs.get("causal", False)),
            rotary=None if rotary is None else (rotary[0].detach().clone(), rotary[1].detach().clone()),
            scale=kwargs.get("scale"),
            extra=extra,
        ))

    handle = attention.register_forward_pre_hook(record, with_kwargs=True)
    try:
        for _ in source.stream_infos([info], [layer], details=False):
            pass
    finally:
        handle.remove()
    if len(seen) != 1:  # pragma: no cover - a family that does not call its layer's module once
        raise RuntimeError(f"layer {layer}'s attention ran {len(seen)} times for one text, not once")
    return seen[0]


def check_reproducible(source: NativeSource, entered: Entered, layer: int, attention: MultiHeadAttention) -> None:
    """Refuse what the walkthrough (Q·Kᵀ/√d_head, then a causal mask or none) would show wrongly."""
    where = f"{source.name} (layer {layer})"
    if entered.extra:
        raise UsageError(f"{where} attends with {' and '.join(entered.extra)}, which explain does not show; "
                         "explain a self-attention layer")
    if entered.scale is not None and not math.isclose(entered.scale, 1.0 / math.sqrt(attention.d_head)):
        raise UsageError(f"{where} scales its scores by {entered.scale:g}, not 1/√d_head = 1/√{attention.d_head}; "
                         "explain shows only the standard scaling, so use attnviz heatmap for this model")
    t = entered.x.shape[0]
    allowed = allowed_keys(entered, t)
    expected = causal_mask(t, device=allowed.device) if source.causal else torch.ones_like(allowed)
    if torch.equal(allowed, expected):
        return
    window = getattr(source.model, "window", None)
    if window is not None and t > window:
        raise UsageError(f"{source.name} attends through a sliding window of {window} tokens and the text has {t}; "
                         f"explain shows plain causal attention, so shorten the text to at most {window} tokens")
    kind = "causal" if source.causal else "full (unmasked)"
    raise UsageError(f"{where} masks its attention in a way other than {kind}, which explain cannot show; "
                     "use attnviz heatmap for this model")


def allowed_keys(entered: Entered, t: int) -> Tensor:
    """The ``[T, T]`` keys each query may attend to, from the mask and ``causal`` the module was given
    (one mask for every head: a per-head mask is refused by the caller's comparison)."""
    device = entered.x.device
    mask = combine_masks(entered.mask, causal_mask(t, device=device) if entered.causal else None)
    if mask is None:
        return torch.ones(t, t, dtype=torch.bool, device=device)
    full = torch.broadcast_to(mask, (*mask.shape[:-2], t, t)).reshape(-1, t, t)
    if not bool((full == full[:1]).all()):
        return torch.zeros(t, t, dtype=torch.bool, device=device)  # differs per head: never the expected mask
    return full[0]

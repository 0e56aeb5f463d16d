"""A real key/value cache cut to the keys a policy keeps, for a :class:`~attnviz.sources.stepping.TransformersStepper`
to feed the future on (kv's end-to-end check, as kvpress applies its presses).

:func:`cut_cache` copies the context's cache and keeps, in each layer and key/value head, only the kept keys
(``keys.gather``; the keys already carry their rotary positions, and the stepper passes the next tokens' positions
from the context's length). A sliding-window layer (Mistral's every layer, Gemma's and gpt-oss's local ones) holds
only its last ``W − 1`` keys, and its policy chose among those. Its cut keeps them in a plain layer, and while the
future runs each kept key stays visible only while it is inside the query's window: a key leaves the window at a
different step in each key/value head, which no one mask per layer type can say, so the cut caches of such a model
run through :func:`cut_attention` (:func:`feeding`), softmax(q kᵀ · scale) with each layer's own mask per key/value
head (soft-capping and learned sinks as the model's eager attention applies them).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import UsageError

CUT_ATTENTION = "attnviz_cut"  # the attention function the cut caches of a windowed model run through
_plan = threading.local()


@dataclass
class CutLayer:
    """One layer of a cut cache: the kept keys' positions per key/value head (``[Hkv, b]``, ascending), the
    context's length and the layer's window (None: every earlier key)."""

    positions: Tensor
    n_context: int
    window: int | None


@dataclass
class Cut:
    """A cut copy of the context's cache, the context's length, and each layer's kept positions (what
    :func:`cut_attention` masks by)."""

    cache: Any
    n_context: int
    layers: list[CutLayer]

    @property
    def windowed(self) -> bool:
        return any(layer.window is not None for layer in self.layers)


def cut_attention(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                  scaling: float | None = None, softcap: float | None = None, s_aux: Tensor | None = None,
                  **kwargs: Any) -> tuple[Tensor, None]:
    """transformers' attention-function signature over a cut cache: ``query [B, H, q, d]``, ``key``/``value``
    ``[B, Hkv, L, d]`` (the kept keys, then the future's); each query sees its key/value head's kept keys inside its
    window (see the module). Returns ``([B, q, H, dv], None)``."""
    layer: CutLayer = _plan.layers[module.layer_idx]
    heads, kv_heads, t_q, t_k = query.shape[1], key.shape[1], query.shape[-2], key.shape[-2]
    kept = layer.positions.to(key.device)
    n_new = t_k - kept.shape[1]
    new = layer.n_context + torch.arange(n_new, device=key.device)
    keys_at = torch.cat([kept, new.expand(kv_heads, -1)], dim=1)  # [Hkv, L]
    queries_at = new[n_new - t_q:]  # [q]
    allowed = keys_at[:, None, :] <= queries_at[None, :, None]  # [Hkv, q, L]
    if layer.window is not None:
        allowed &= queries_at[None, :, None] - keys_at[:, None, :] < layer.window
    groups = heads // kv_heads
    allowed = allowed.repeat_interleave(groups, dim=0)[None]  # [1, H, q, L]
    k, v = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    logits = (query @ k.transpose(-1, -2)).float() * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits.masked_fill(~allowed, float("-inf"))
    if s_aux is not None:  # gpt-oss's learned sinks: one more logit per head, dropped after the softmax
        sinks = s_aux.float().reshape(1, heads, 1, 1).expand(logits.shape[0], heads, t_q, 1)
        weights = torch.softmax(torch.cat([logits, sinks], dim=-1), dim=-1)[..., :-1]
    else:
        weights = torch.softmax(logits, dim=-1)
    return (weights.to(v.dtype) @ v).transpose(1, 2).contiguous(), None


def cut_cache(cache: Any, n_context: int, keep: list[Tensor]) -> Cut:
    """A copy of ``cache`` (a context of ``n_context`` tokens) holding, in each layer and key/value head, only the
    keys ``keep[layer]`` (``[Hkv, T]`` bool, the same count in every head of a layer) marks. A sliding-window layer
    holds its last keys only: its kept keys must be among them, and it becomes a plain layer (see the module)."""
    from transformers.cache_utils import DynamicLayer

    # A copy of everything but the keys and values each layer's are replaced by below (never written into).
    replaced = {id(t): t for layer in cache.layers for t in (layer.keys, layer.values) if isinstance(t, Tensor)}
    cache = copy.deepcopy(cache, replaced)
    plan = []
    for number, (layer, kept) in enumerate(zip(cache.layers, keep, strict=True)):
        positions = torch.stack([row.nonzero()[:, 0] for row in kept])  # [Hkv, b], in order
        held = layer.keys.shape[2]
        first = n_context - held  # a sliding-window layer holds positions first … T − 1
        if int(positions.min()) < first:
            raise UsageError(f"layer {number} holds the last {held} of {n_context} keys, and a kept set names "
                             f"position {int(positions.min())}: the policy must choose among the held keys")
        gather = (positions - first).to(layer.keys.device)[None, :, :, None]
        keys = layer.keys.gather(2, gather.expand(*layer.keys.shape[:2], -1, layer.keys.shape[-1]))
        values = layer.values.gather(2, gather.expand(*layer.values.shape[:2], -1, layer.values.shape[-1]))
        window = getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None
        if window is not None:  # a plain layer: transformers' would keep only the last W − 1 of the kept keys
            layer = cache.layers[number] = DynamicLayer()
            layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
        plan.append(CutLayer(positions, n_context, None if window is None else int(window)))
    return Cut(cache, n_context, plan)


@contextmanager
def feeding(model: Any, cut: Cut | None) -> Iterator[None]:
    """Meanwhile ``model`` runs on ``cut`` (None: on an ordinary cache, nothing changes): a windowed model's cut
    through :func:`cut_attention` (see the module)."""
    if cut is None or not cut.windowed:
        yield
        return
    from transformers import AttentionInterface

    AttentionInterface.register(CUT_ATTENTION, cut_attention)
    before = model.config._attn_implementation
    model.set_attn_implementation(CUT_ATTENTION)
    _plan.layers = cut.layers
    try:
        yield
    finally:
        _plan.layers = None
        model.set_attn_implementation(before)

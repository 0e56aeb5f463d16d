"""A policy's eviction applied to a real key/value cache, end to end, as kvpress applies it.

The context runs once through transformers' model into its cache; for each kept set (per layer, per key/value
head) a copy of that cache is cut to the kept keys, key head by key head (``keys.gather``; the keys already carry
their rotary positions, and the next tokens' positions continue from the context's length through
``cache_position``); then the future tokens run one at a time on the full and on the cut cache. What comes back:
the KL divergence of the cut cache's next-token distributions from the full cache's at each future position, and
the greedy answer each cache gives.

A sliding-window layer (Mistral's every layer, Gemma's and gpt-oss's local ones) holds only its last ``W − 1``
keys, and its policy chose among those (:func:`attnviz.kv.layers.layer_windows`). Its cut keeps them in a plain
layer, and while the future runs each kept key stays visible only while it is inside the query's window: a key
leaves the window at a different step in each key/value head, which no one mask per layer type can say, so the cut
caches of such a model run through :func:`cut_attention`, softmax(q kᵀ · scale) with each layer's own mask per
key/value head (soft-capping and learned sinks as the model's eager attention applies them).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import UsageError
from ..sources.cache import cache_of, with_cache


@dataclass
class Continuation:
    """What one cache gives on the future tokens: the log-probabilities at each future position
    (``[F, vocab]``, teacher-forced) and the greedy answer after them (``answer`` ids)."""

    logprobs: Tensor
    answer: list[int]


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
    """A cut copy of the context's cache, and each layer's kept positions (what :func:`cut_attention` masks by)."""

    cache: Any
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


class CacheRunner:
    """A causal transformers model (attnviz's fused attention or eager), its context run once."""

    def __init__(self, model: Any, context: list[int], eos: list[int]) -> None:
        from ..sources.hf_attention import weights_mode

        self.model, self.eos = model, set(eos)
        self.length = len(context)
        with torch.no_grad(), weights_mode("none"):
            out = model.base_model(input_ids=torch.tensor([context], device=model.device), use_cache=True)
        self.cache = cache_of(out)

    def cut(self, keep: list[Tensor]) -> Cut:
        """A copy of the context's cache holding, in each layer and key/value head, only the keys ``keep[layer]``
        (``[Hkv, T]`` bool, the same count in every head of a layer) marks. A sliding-window layer holds its last
        keys only: its kept keys must be among them, and it becomes a plain layer (see the module)."""
        from transformers.cache_utils import DynamicLayer

        cache = copy.deepcopy(self.cache)
        plan = []
        for number, (layer, kept) in enumerate(zip(cache.layers, keep, strict=True)):
            positions = torch.stack([row.nonzero()[:, 0] for row in kept])  # [Hkv, b], in order
            held = layer.keys.shape[2]
            first = self.length - held  # a sliding-window layer holds positions first … T − 1
            if int(positions.min()) < first:
                raise UsageError(f"layer {number} holds the last {held} of {self.length} keys, and a kept set names "
                                 f"position {int(positions.min())}: the policy must choose among the held keys")
            gather = (positions - first).to(layer.keys.device)[None, :, :, None]
            keys = layer.keys.gather(2, gather.expand(*layer.keys.shape[:2], -1, layer.keys.shape[-1]))
            values = layer.values.gather(2, gather.expand(*layer.values.shape[:2], -1, layer.values.shape[-1]))
            window = getattr(layer, "sliding_window", None) if getattr(layer, "is_sliding", False) else None
            if window is not None:  # a plain layer: transformers' would keep only the last W − 1 of the kept keys
                layer = cache.layers[number] = DynamicLayer()
                layer.lazy_initialization(keys, values)
            layer.keys, layer.values = keys, values
            plan.append(CutLayer(positions, self.length, None if window is None else int(window)))
        return Cut(cache, plan)

    @torch.no_grad()
    def run(self, cache: Any, future: list[int], answer_tokens: int) -> Continuation:
        """Feed ``future`` on ``cache`` (a copy, or a :class:`Cut`), then answer greedily for up to ``answer_tokens``
        tokens."""
        if isinstance(cache, Cut) and cache.windowed:
            return self._run_windowed(cache, future, answer_tokens)
        return self._run(cache.cache if isinstance(cache, Cut) else cache, future, answer_tokens)

    def _run_windowed(self, cut: Cut, future: list[int], answer_tokens: int) -> Continuation:
        from transformers import AttentionInterface

        AttentionInterface.register(CUT_ATTENTION, cut_attention)
        before = self.model.config._attn_implementation
        self.model.set_attn_implementation(CUT_ATTENTION)
        _plan.layers = cut.layers
        try:
            return self._run(cut.cache, future, answer_tokens)
        finally:
            _plan.layers = None
            self.model.set_attn_implementation(before)

    @torch.no_grad()
    def _run(self, cache: Any, future: list[int], answer_tokens: int) -> Continuation:
        from ..sources.hf_attention import weights_mode

        position = self.length
        logprobs = []

        def step(token: int) -> Tensor:
            nonlocal position
            with weights_mode("none"):
                # Both positions given: GPT-2 counts its positions from the cache's length, which a cut cache
                # no longer is; the rotary families read cache_position.
                at = torch.tensor([position], device=self.model.device)
                out = self.model(input_ids=torch.tensor([[token]], device=self.model.device), use_cache=True,
                                 cache_position=at, position_ids=at[None], **with_cache(self.model, cache))
            position += 1
            return out.logits[0, -1].float().cpu()

        logits = None
        for token in future:
            logits = step(token)
            logprobs.append(torch.log_softmax(logits.double(), dim=-1))
        answer: list[int] = []
        while logits is not None and len(answer) < answer_tokens:
            token = int(logits.argmax())
            answer.append(token)
            if token in self.eos:
                break
            logits = step(token)
        return Continuation(torch.stack(logprobs) if logprobs else torch.zeros(0), answer)

    def full(self, future: list[int], answer_tokens: int) -> Continuation:
        return self._run(copy.deepcopy(self.cache), future, answer_tokens)


def kl_divergence(full: Tensor, kept: Tensor) -> Tensor:
    """``KL(p_full ‖ p_kept)`` at each position, from log-probabilities ``[F, vocab]`` (float64)."""
    return (full.exp() * (full - kept)).sum(-1).clamp(min=0.0)

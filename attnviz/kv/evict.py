"""A policy's eviction applied to a real key/value cache, end to end, as kvpress applies it.

The context runs once through transformers' model into its cache; for each kept set (per layer, per key/value
head) a copy of that cache is cut to the kept keys, key head by key head (``keys.gather``; the keys already carry
their rotary positions, and the next tokens' positions continue from the context's length through
``cache_position``); then the future tokens run one at a time on the full and on the cut cache. What comes back:
the KL divergence of the cut cache's next-token distributions from the full cache's at each future position, and
the greedy answer each cache gives.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor


@dataclass
class Continuation:
    """What one cache gives on the future tokens: the log-probabilities at each future position
    (``[F, vocab]``, teacher-forced) and the greedy answer after them (``answer`` ids)."""

    logprobs: Tensor
    answer: list[int]


class CacheRunner:
    """A causal transformers model (attnviz's fused attention or eager), its context run once."""

    def __init__(self, model: Any, context: list[int], eos: list[int]) -> None:
        from ..sources.hf_attention import weights_mode

        self.model, self.eos = model, set(eos)
        self.length = len(context)
        self.cache_name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        with torch.no_grad(), weights_mode("none"):
            out = model.base_model(input_ids=torch.tensor([context], device=model.device), use_cache=True)
        found = getattr(out, "cache", None)
        self.cache = found if found is not None else out.past_key_values

    def cut(self, keep: list[Tensor]) -> Any:
        """A copy of the context's cache holding, in each layer and key/value head, only the keys ``keep[layer]``
        (``[Hkv, T]`` bool, the same count in every head of a layer) marks."""
        cache = copy.deepcopy(self.cache)
        for layer, kept in zip(cache.layers, keep, strict=True):
            index = torch.stack([row.nonzero()[:, 0] for row in kept]).to(layer.keys.device)  # [Hkv, b], in order
            gather = index[None, :, :, None]
            layer.keys = layer.keys.gather(2, gather.expand(*layer.keys.shape[:2], -1, layer.keys.shape[-1]))
            layer.values = layer.values.gather(2, gather.expand(*layer.values.shape[:2], -1, layer.values.shape[-1]))
        return cache

    @torch.no_grad()
    def run(self, cache: Any, future: list[int], answer_tokens: int) -> Continuation:
        """Feed ``future`` on ``cache`` (a copy), then answer greedily for up to ``answer_tokens`` tokens."""
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
                                 cache_position=at, position_ids=at[None], **{self.cache_name: cache})
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
        return self.run(copy.deepcopy(self.cache), future, answer_tokens)


def kl_divergence(full: Tensor, kept: Tensor) -> Tensor:
    """``KL(p_full ‖ p_kept)`` at each position, from log-probabilities ``[F, vocab]`` (float64)."""
    return (full.exp() * (full - kept)).sum(-1).clamp(min=0.0)

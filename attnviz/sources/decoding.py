"""Incremental decoding on attnviz's own attention: a prompt, then one token at a time on a key/value
cache, every token's attention row kept from the step that processed it.

A source that can generate supplies one function, ``step(ids) -> (logits, weights)``: it runs the
new tokens ``ids`` on its cache and returns the next-token logits of the last one (``[vocab]``)
and each layer's attention of the new rows over every token so far (``[layers, heads, n, t]``).
:func:`decode` does the rest as transformers' ``generate`` does: greedy, or sampling through
temperature, then top-k, then top-p (the order of its logits warpers), ``torch.multinomial`` on the
global generator, and the end-of-sequence token forbidden when generation must not stop at it
(its ``min_new_tokens``). With the same seed and the same logits it picks the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from ..attention import AttentionOutput
    from .sampling import Sampling


@dataclass
class KVCache:
    """Incremental decoding's state: each layer's keys and values so far (``[B, H, T, d]``, after RoPE,
    repeated under grouped-query attention), how many tokens they cover, and the last layer's
    output for the newest tokens (``hidden``, ``[B, n, d]``), from which the next token is read."""

    layers: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    length: int = 0
    hidden: Tensor | None = None

    def past(self, layer: int) -> tuple[Tensor, Tensor] | None:
        return self.layers[layer] if layer < len(self.layers) else None

    def keep(self, layer: int, out: AttentionOutput) -> None:
        if out.keys is None:  # pragma: no cover - MultiHeadAttention always returns its keys
            raise ValueError("the attention returned no keys to cache")
        entry = (out.keys, out.values)
        if layer < len(self.layers):
            self.layers[layer] = entry
        else:
            self.layers.append(entry)


Step = Callable[[list[int]], tuple[Tensor, Tensor]]


def choose_next(logits: Tensor, sampling: Sampling, *, banned: Sequence[int] = ()) -> int:
    """The next token from ``logits`` ``[vocab]``: the likeliest, or a sample (temperature, top-k,
    top-p, in transformers' order). ``banned`` ids are never chosen (their logits are −∞)."""
    scores = logits.float().clone()[None]  # (1, V), as transformers' processors see it
    if banned:
        scores[:, list(banned)] = float("-inf")
    if not sampling.sample:
        return int(scores.argmax(dim=-1))
    if sampling.temperature != 1.0:
        allowed = torch.isfinite(scores)
        scores = scores / sampling.temperature
        if not torch.isfinite(scores[allowed]).all():  # 1e-300: every logit becomes ±inf, the softmax NaN
            raise sampling.overflow()
    if sampling.top_k:
        k = min(sampling.top_k, scores.shape[-1])
        scores = scores.masked_fill(scores < torch.topk(scores, k)[0][..., -1, None], float("-inf"))
    if sampling.top_p is not None and sampling.top_p < 1.0:
        ordered, order = torch.sort(scores, descending=False)
        drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= 1 - sampling.top_p
        drop[..., -1:] = False  # the likeliest token always stays
        scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return int(torch.multinomial(scores.softmax(dim=-1), num_samples=1))


def check_generation_memory(layers: int, heads: int, total: int) -> None:
    """A generation keeps every row of every head: ``[layers, heads, T, T]`` float32, refused before it
    is allocated when it would not fit (``-n 4096`` on a small config asked for 34 GB)."""
    from ..limits import check_memory

    check_memory(4 * layers * heads * total * total,
                 f"keeping the attention of {total:,} tokens ({layers} layers × {heads} heads)")


@dataclass
class Decoded:
    """What :func:`decode` returns: every token id, every row of attention, and why it stopped."""

    ids: list[int]
    attentions: Tensor  # [layers, heads, T, T], lower-triangular
    stopped_at_eos: bool


def decode(step: Step, prompt: list[int], *, max_new_tokens: int, sampling: Sampling, eos_ids: Sequence[int],
           stop_at_eos: bool) -> Decoded:
    """Run ``prompt``, then choose and feed back up to ``max_new_tokens`` tokens. The last token chosen
    is fed back too, once, for its own attention row (its logits are not used)."""
    n = len(prompt)
    logits, weights = step(list(prompt))
    layers, heads = weights.shape[:2]
    total = n + max_new_tokens
    check_generation_memory(layers, heads, total)
    attentions = torch.zeros(layers, heads, total, total)
    attentions[:, :, :n, :n] = weights
    ids = list(prompt)
    banned = () if stop_at_eos else tuple(eos_ids)
    stopped = False
    with torch.random.fork_rng(devices=[]):
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        for _ in range(max_new_tokens):
            token = choose_next(logits, sampling, banned=banned)
            ids.append(token)
            t = len(ids) - 1
            logits, weights = step([token])
            attentions[:, :, t, : t + 1] = weights[:, :, 0]
            if stop_at_eos and token in eos_ids:
                stopped = True
                break
    t = len(ids)
    return Decoded(ids, attentions[:, :, :t, :t].contiguous(), stopped)


def sampling_metadata(sampling: Sampling) -> dict[str, object]:
    """How the tokens were chosen, as a result's metadata records it."""
    return {"sample": sampling.sample, "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "seed": sampling.seed}

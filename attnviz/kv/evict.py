"""A policy's eviction applied to a real key/value cache, end to end, as kvpress applies it.

The context runs once on the model's :class:`~attnviz.sources.stepping.Stepper` and its cache is held; for each
kept set (per layer, per key/value head) the stepper cuts a copy of it to the kept keys (the native engine's
:class:`~attnviz.sources.kv_cache.CutKVCache`, transformers' :mod:`attnviz.sources.cut_cache`, each with its
layers' windows), then the one decoding loop (:func:`attnviz.sources.decoding.decode`) feeds the future tokens a
token at a time and answers greedily. What comes back: the log-probabilities at each future position (the KL
divergence of the cut cache's from the full cache's) and the greedy answer each cache gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..sources.decoding import decode
from ..sources.stepping import prefill


@dataclass
class Continuation:
    """What one cache gives on the future tokens: the log-probabilities at each future position
    (``[F, vocab]``, teacher-forced) and the greedy answer after them (``answer`` ids)."""

    logprobs: Tensor
    answer: list[int]


class CacheRunner:
    """A causal model's stepper, the context run once and its cache held. On the native engine, where the full
    cache runs first (:meth:`full`, as kv runs it), the context is taken back from that run's cache (its first
    positions), so the context's keys and the cache fed after them are never two copies; elsewhere it is copied
    before (a sliding-window layer of transformers' cache drops its oldest keys as it is fed)."""

    def __init__(self, stepper: Any, context: list[int], eos: list[int]) -> None:
        from ..sources.stepping import NativeStepper

        self.stepper, self.eos, self.length = stepper, list(eos), len(context)
        prefill(stepper, context)
        self.held = None if isinstance(stepper, NativeStepper) else stepper.hold()

    def cut(self, keep: list[Tensor]) -> Any:
        """The held cache keeping, in each layer and key/value head, only the keys ``keep[layer]`` (``[Hkv, T]``
        bool, the same count in every head of a layer) marks."""
        if self.held is None:  # a cut before the full cache's run: the context's cache, as the prefill left it
            self.held = self.stepper.hold()
        return self.stepper.cut(self.held, keep)

    @torch.no_grad()
    def run(self, state: Any, future: list[int], answer_tokens: int) -> Continuation:
        """Feed ``future`` on ``state`` (the held cache or a cut), then answer greedily for up to ``answer_tokens``
        tokens."""
        if state is not None:
            self.stepper.restore(state)
        done = decode(self.stepper, future, max_new_tokens=answer_tokens, eos_ids=self.eos, fresh=False,
                      prompt_logprobs=True)
        if self.held is None:  # the full cache's run, on the context's own cache: the context taken back from it
            self.held = self.stepper.take_context(self.length)
        self.stepper.reset()  # the cache it grew is let go before the next cut is made
        assert done.prompt_logprobs is not None  # prompt_logprobs=True keeps them
        return Continuation(done.prompt_logprobs, done.new)

    def full(self, future: list[int], answer_tokens: int) -> Continuation:
        """Feed ``future`` on the whole context's cache (once, before any cut), then answer greedily."""
        return self.run(self.held, future, answer_tokens)


def kl_divergence(full: Tensor, kept: Tensor) -> Tensor:
    """``KL(p_full ‖ p_kept)`` at each position, from log-probabilities ``[F, vocab]`` (float64), a block of rows at a
    time (no ``[F, vocab]`` temporaries beside the two given)."""
    rows = max(1, KL_BLOCK // max(1, full.shape[-1]))
    return torch.cat([(full[i : i + rows].exp() * (full[i : i + rows] - kept[i : i + rows])).sum(-1)
                      for i in range(0, full.shape[0], rows)] or [full.new_zeros(0)]).clamp(min=0.0)


KL_BLOCK = 1 << 22  # elements of one block of rows (32 MiB in float64)

"""The one decoding loop: a prompt, then one token at a time on a key/value cache.

Every place attnviz decodes runs :func:`decode` on a :class:`~attnviz.sources.stepping.Stepper` (the native engine,
a config model, or transformers on the fused or eager engine): ``generate`` keeping every row of attention, a
needle cell keeping only the newest row of each step, kv's cut caches keeping none. It chooses as transformers'
``generate`` does: greedy, or sampling through temperature, then top-k, then top-p (the order of its logits
warpers), ``torch.multinomial`` on the global generator, and the end-of-sequence token forbidden when generation
must not stop at it (its ``min_new_tokens``). With the same seed and the same logits it picks the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from .sampling import Sampling

if TYPE_CHECKING:  # pragma: no cover
    from .stepping import Stepper

_GREEDY = Sampling()


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
    try:
        return int(torch.multinomial(scores.softmax(dim=-1), num_samples=1))
    except RuntimeError as exc:  # NaN or infinite probabilities: the logits overflowed
        if "probability tensor contains" in str(exc):
            raise sampling.overflow() from None
        raise


def check_generation_memory(layers: int, heads: int, total: int) -> None:
    """A generation keeps every row of every head: ``[layers, heads, T, T]`` float32, refused before it
    is allocated when it would not fit (``-n 4096`` on a small config asked for 34 GB)."""
    from ..limits import check_memory

    check_memory(4 * layers * heads * total * total,
                 f"keeping the attention of {total:,} tokens ({layers} layers × {heads} heads)")


@dataclass
class Decoded:
    """What :func:`decode` returns: the prompt's ids then the chosen ones, why it stopped, and what the loop was
    asked to keep: every row of attention (``attentions`` ``[layers, heads, T, T]``, lower-triangular) and the
    log-probabilities the model gave after each prompt token (``prompt_logprobs`` ``[n, vocab]``, float64)."""

    ids: list[int]
    n_prompt: int
    stopped_at_eos: bool
    attentions: Tensor | None = None
    prompt_logprobs: Tensor | None = None

    @property
    def new(self) -> list[int]:
        """The chosen tokens."""
        return self.ids[self.n_prompt:]


Keep = Literal["matrix", "rows", "none"]


def decode(stepper: Stepper, prompt: Sequence[int], *, max_new_tokens: int, sampling: Sampling | None = None,
           eos_ids: Sequence[int] = (), stop_at_eos: bool = True, keep: Keep = "none", fresh: bool = True,
           prompt_logprobs: bool = False, each: Callable[[int, Tensor | None], bool] | None = None,
           never: Sequence[int] = ()) -> Decoded:
    """The one decoding loop: feed ``prompt`` to ``stepper`` (on a fresh cache, or, not ``fresh``, after what it
    holds), then choose up to ``max_new_tokens`` tokens as transformers' ``generate`` chooses them (greedy, or
    ``sampling``; see the module), stopping after an end token unless not ``stop_at_eos`` (then none is chosen).

    ``keep``: ``"matrix"`` keeps every row of attention (the prompt's from its feed, each chosen token's from the
    step that feeds it back, the last one's too); ``"rows"`` hands each chosen token to ``each`` with the row that
    chose it (the previous token's, ``[layers, heads, T]``; the prompt runs without weights but for its last
    token); ``"none"`` computes no weights. ``each(token, row)`` returning True stops after that token.
    ``prompt_logprobs``: keep the log-probabilities after each prompt token (the prompt fed a token at a time).
    ``never``: ids never chosen (a picture's placeholder token, which stands only where a picture is): where one is
    chosen, the choice is made again without them, so every other step chooses as transformers does."""
    prompt = list(prompt)
    if not prompt:
        raise ValueError("decode needs at least one prompt token")  # pragma: no cover - callers check
    if fresh:
        stepper.reset()
    rows: Tensor | None = None
    attentions: Tensor | None = None
    logprobs: Tensor | None = None
    if keep == "matrix":
        start = stepper.length
        logits, weights = stepper.feed(prompt, rows="all")
        assert weights is not None
        total = start + len(prompt) + max_new_tokens
        check_generation_memory(stepper.n_layers, stepper.n_heads, total)
        attentions = torch.zeros(stepper.n_layers, stepper.n_heads, total, total)
        attentions[:, :, start : stepper.length, : stepper.length] = weights
    elif prompt_logprobs:  # a token at a time: a cut cache's keys are not in position order
        every = torch.stack([stepper.feed([token])[0] for token in prompt])
        logprobs, logits = torch.log_softmax(every.double(), dim=-1), every[-1]
    elif keep == "rows":
        if len(prompt) > 1:
            stepper.feed(prompt[:-1])
        logits, rows = stepper.feed(prompt[-1:], rows="last")
    else:
        logits, _ = stepper.feed(prompt)
    ids = list(prompt)
    banned = () if stop_at_eos else tuple(eos_ids)
    stopped = False
    with torch.random.fork_rng(devices=[]):
        if sampling is not None and sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        for n in range(max_new_tokens):
            token = choose_next(logits, sampling or _GREEDY, banned=banned)
            if token in never:  # chosen again without it: every other choice stays the one transformers makes
                token = choose_next(logits, sampling or _GREEDY, banned=(*banned, *never))
            ids.append(token)
            if attentions is not None:  # the chosen token's own row, from the step that feeds it back
                logits, rows = stepper.feed([token], rows="last")
                assert rows is not None  # rows="last" returns them
                attentions[:, :, stepper.length - 1, : stepper.length] = rows
            stop = each(token, rows) if each is not None else False
            stopped = stop_at_eos and token in eos_ids
            if stopped or stop or n == max_new_tokens - 1:
                break
            if attentions is None:
                logits, rows = stepper.feed([token], rows="last" if keep == "rows" else "none")
    if attentions is not None:
        attentions = attentions[:, :, : stepper.length, : stepper.length].contiguous()
    return Decoded(ids, len(prompt), stopped, attentions, logprobs)


def sampling_metadata(sampling: Sampling) -> dict[str, object]:
    """How the tokens were chosen, as a result's metadata records it."""
    return {"sample": sampling.sample, "temperature": sampling.temperature, "top_k": sampling.top_k,
            "top_p": sampling.top_p, "seed": sampling.seed}

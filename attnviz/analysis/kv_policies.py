"""KV-cache eviction policies scored head by head, and what each would lose (issue 44).

Every policy scores the prefix keys of one **KV head** and keeps its top ``budget``; a GQA group's query
heads (query head h belongs to KV head ``h // (H // Hkv)``) are averaged first, so all heads of a group
share one kept set, as in a real cache (TOVA averages every head of the layer, as its paper does). The
definitions follow NVIDIA kvpress 0.5.x (``kvpress/presses/``) and the papers it cites; each function says
which. Ties are broken deterministically: forced keys score above every other key — SnapKV's observation
window and TOVA's last key the most recent highest, StreamingLLM's sinks the earliest highest — and among
equal scores the earlier key wins (a stable sort).

Attention is read as a :class:`RowBlocks` source, one block of query rows at a time (``[H, rows, keys]``). The
commands read :class:`attnviz.kv.context_pass.LayerRows`, rows computed on demand by the engines' own
:class:`attnviz.attention.rows.AttentionRows` (never ``[H, T, T]``); :class:`QKRows` (rows from given queries and
keys) and :class:`DenseRows` (given dense weights) are the tests' independent sources. What a policy loses is
measured on the **future queries** (the question or the continuation; rows ``[H, F, T + F]`` over the prefix keys
and their own): :func:`recall` is their attention mass not on a dropped prefix key (on kept prefix keys, on their own
keys — always kept, they are the new tokens — and on a learned sink); :func:`output_error` is ``‖o − o_kept‖ / ‖o‖``
with ``o_kept`` the softmax over the kept keys only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from ..defaults import KERNEL, N_SINK, WINDOW  # the settings' defaults, declared once

BETA = 20  # kvpress PyramidKVPress.beta
BLOCK_FLOATS = 1 << 24  # floats of one block of rows (64 MiB in float32)


# -- budgets -------------------------------------------------------------------------------------------


def parse_budget(text: str) -> int | float:
    """``"256"`` → 256 keys, ``"0.25"`` or ``"25%"`` → the fraction 0.25 (checked by :func:`resolve_budget`)."""
    text = text.strip()
    if text.endswith("%"):
        return float(text[:-1]) / 100
    try:
        return int(text)
    except ValueError:
        return float(text)


def resolve_budget(budget: int | float, n_keys: int) -> int:
    """Keys kept per head: an int ``≥ 1`` (at most ``n_keys``) or a fraction ``0 < f ≤ 1`` of the keys,
    ``floor(f · n_keys)`` as kvpress's ``int(k_len * (1 - compression_ratio))``, at least 1.
    A float with an integral value above 1 (``64.0``) counts keys."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or n_keys < 1:
        raise ValueError(f"budget {budget!r} is not a number of keys or a fraction (keys: {n_keys})")
    if isinstance(budget, float):
        if not math.isfinite(budget) or budget <= 0 or (budget > 1 and not budget.is_integer()):
            raise ValueError(f"budget {budget!r}: a fraction is in (0, 1], a count a whole number ≥ 1")
        if budget <= 1:
            return max(1, math.floor(budget * n_keys + 1e-9))
        budget = int(budget)
    if budget < 1:
        raise ValueError(f"budget {budget!r}: keep at least one key")
    return min(budget, n_keys)


def pyramid_budgets(budget: int, n_layers: int, n_keys: int, window: int = WINDOW, beta: int = BETA) -> list[int]:
    """PyramidKV's per-layer budgets (Cai et al. 2024, arXiv 2406.02069): an arithmetic sequence falling linearly
    from ``high`` at layer 0 to ``low`` at the last layer with mean ``budget`` (the same total as a uniform budget).
    attnviz: ``low = max(budget / beta, min(window, budget))`` (the observation window is always kept), ``high =
    2·budget − low``; a ``high`` above ``n_keys`` is capped there, ``low = 2·budget − n_keys``; each layer's count
    rounded and clamped to ``1 … n_keys``. It never falls back to a uniform budget.

    Where the two references differ from this:

    - kvpress ``PyramidKVPress.get_layer_budget`` (0.5.x): ``min = budget / beta``, ``max = 2·budget − min``; when
      ``max ≥ q_len − window`` the cap is ``q_len − window`` (not ``n_keys``) and ``min = 2·budget − max``; it falls
      back to the uniform ``budget`` only when ``q_len ≥ max ≥ min ≥ window`` fails — without the cap that is
      whenever ``budget / beta < window`` (every budget under 1,280 with its defaults), with the cap whenever the
      recomputed ``min = 2·budget − q_len + window`` is under ``window`` (``budget < q_len / 2``); a capped budget of
      at least half the prompt builds a pyramid. attnviz raises ``low`` to the window instead of falling back, so
      its PyramidKV differs from SnapKV at the budgets a short prompt allows.
    - The PyramidKV authors' code (KVCache-Factory ``pyramidkv_utils.PyramidKVCluster.update_kv``): the budget
      ``max_capacity_prompt`` counts the window; ``min = (C − window) // beta`` and ``max = 2(C − window) − min`` in
      whole numbers, capped at ``q_len − window`` as kvpress does, ``steps = (max − min) // (layers − 1)``; each layer
      keeps ``max − layer · steps`` scored keys plus the window, and a prompt shorter than ``2(C − window)`` gets the
      uniform ``C − window`` (SnapKV) instead of a pyramid.
    """
    if beta < 1 or n_layers < 1 or not 1 <= budget <= n_keys:
        raise ValueError(f"beta {beta} and layers {n_layers} must be ≥ 1, budget {budget} in 1 … {n_keys}")
    if n_layers == 1:
        return [budget]
    low = max(budget / beta, min(window, budget))
    high = 2 * budget - low
    if high > n_keys:
        high, low = n_keys, 2 * budget - n_keys
    step = (high - low) / (n_layers - 1)
    return [min(n_keys, max(1, round(high - layer * step))) for layer in range(n_layers)]


# -- attention rows ----------------------------------------------------------------------------------------


class RowBlocks(Protocol):
    """Attention probabilities of ``n_rows`` query rows over ``n_keys`` keys, served in blocks. Row ``r``
    sits at absolute position ``offset + r`` (keys at ``0 … n_keys − 1``); when ``causal`` it sees the
    keys up to its position, the rest are 0."""

    n_heads: int
    n_rows: int
    n_keys: int
    offset: int
    causal: bool
    q: Tensor | None  # [H, n_rows, d] where known (block-sparse pooling needs them)
    k: Tensor | None  # [Hkv, n_keys, d]

    def block(self, start: int, stop: int) -> Tensor:
        """``[H, stop − start, n_keys]`` float32 or float64 probabilities of rows ``start … stop − 1``."""
        ...


class DenseRows:
    """Rows of given dense weights ``[H, n_rows, n_keys]`` (tests, short inputs); ``q``/``k`` optional."""

    def __init__(self, weights: Tensor, *, offset: int | None = None, causal: bool = True,
                 q: Tensor | None = None, k: Tensor | None = None) -> None:
        if weights.dim() != 3:
            raise ValueError(f"weights are [heads, rows, keys], got {tuple(weights.shape)}")
        self.weights = weights if weights.dtype == torch.float64 else weights.float()
        self.n_heads, self.n_rows, self.n_keys = weights.shape
        self.offset = self.n_keys - self.n_rows if offset is None else offset
        self.causal, self.q, self.k = causal, q, k

    def block(self, start: int, stop: int) -> Tensor:
        return self.weights[:, start:stop]


class QKRows:
    """Rows computed on demand from given queries ``q [H, n_rows, d]`` and keys ``k [Hkv, n_keys, d]`` (after
    RoPE): the tests' reference source (the commands read the engines' rows, :class:`attnviz.kv.context_pass.LayerRows`): ``softmax(scale · q kᵀ)`` with query head h reading KV head ``h // (H // Hkv)``, causal by
    default (row r at position ``offset + r``, ``offset`` defaulting to ``n_keys − n_rows``). float64
    inputs stay float64, others are computed in float32."""

    def __init__(self, q: Tensor, k: Tensor, *, scale: float | None = None, causal: bool = True,
                 offset: int | None = None) -> None:
        if q.dim() != 3 or k.dim() != 3 or q.shape[2] != k.shape[2] or q.shape[0] % k.shape[0]:
            raise ValueError(f"q [H, T, d] and k [Hkv, T, d] with Hkv dividing H, got {tuple(q.shape)}, {tuple(k.shape)}")
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        self.q, self.k = q.to(dtype), k.to(dtype)
        self.n_heads, self.n_rows, d = q.shape
        self.n_keys = k.shape[1]
        self.scale = d**-0.5 if scale is None else scale
        self.offset = self.n_keys - self.n_rows if offset is None else offset
        self.causal = causal

    def block(self, start: int, stop: int) -> Tensor:
        h, g, r = self.n_heads, self.n_heads // self.k.shape[0], stop - start
        # Causal rows see no key after the block's last row: those columns stay 0 and are not computed.
        width = min(self.n_keys, self.offset + stop) if self.causal else self.n_keys
        q = (self.q[:, start:stop] * self.scale).reshape(h // g, g * r, -1)
        logits = (q @ self.k[:, :width].transpose(1, 2)).view(h, r, width)
        if self.causal:
            rows = torch.arange(start, stop, device=logits.device) + self.offset
            logits.masked_fill_(torch.arange(width, device=logits.device)[None, :] > rows[:, None], float("-inf"))
        if width == self.n_keys:
            return torch.softmax(logits, dim=-1)
        out = logits.new_zeros(h, r, self.n_keys)
        out[..., :width] = torch.softmax(logits, dim=-1)
        return out


def row_blocks(rows: RowBlocks, start: int = 0, stop: int | None = None,
               size: int | None = None) -> Iterator[tuple[int, Tensor]]:
    """``(first row, block)`` for rows ``start … stop − 1``, ``size`` rows a block (by default as many as
    fit :data:`BLOCK_FLOATS` floats)."""
    stop = rows.n_rows if stop is None else stop
    size = size or max(1, BLOCK_FLOATS // max(1, rows.n_heads * rows.n_keys))
    for first in range(start, stop, size):
        yield first, rows.block(first, min(stop, first + size))


def group_mean(x: Tensor, n_kv_heads: int) -> Tensor:
    """``[H, …]`` → ``[Hkv, …]``: the mean over each GQA group (query heads ``g·G … g·G + G − 1``)."""
    if x.shape[0] % n_kv_heads:
        raise ValueError(f"{x.shape[0]} query heads do not split into {n_kv_heads} KV heads")
    return x.reshape(n_kv_heads, x.shape[0] // n_kv_heads, *x.shape[1:]).mean(1)


# -- policy scores ---------------------------------------------------------------------------------------------


def _forced(scores: Tensor, first: int) -> Tensor:
    """Keys ``first …`` of ``scores [Hkv, T]`` raised above every other key, the most recent highest
    (kvpress pads them with ``max + 1``; the order among them only matters when the budget is smaller)."""
    n = scores.shape[1] - first
    top = scores[:, :first].max() if first > 0 else torch.zeros((), dtype=scores.dtype)
    scores[:, first:] = top + 1 + torch.arange(n, dtype=scores.dtype) / max(n, 1)
    return scores


def streaming_scores(n_keys: int, n_kv_heads: int, n_sink: int = N_SINK) -> Tensor:
    """StreamingLLM (Xiao et al. 2023, arXiv 2309.17453; kvpress ``StreamingLLMPress``): the first
    ``n_sink`` keys, then the most recent. ``[Hkv, T]`` float64; the top ``b`` are the sinks and the last
    ``b − n_sink`` keys (the first ``b`` sinks when ``b < n_sink``)."""
    position = torch.arange(n_keys, dtype=torch.float64) / max(n_keys, 1)
    scores = torch.where(torch.arange(n_keys) < n_sink, 2 - position, position)
    return scores.expand(n_kv_heads, n_keys).clone()


def h2o_scores(rows: RowBlocks, n_kv_heads: int) -> Tensor:
    """H2O as kvpress ``ObservedAttentionPress`` (Zhang et al. 2023, arXiv 2306.14048): the attention each
    key received, summed over the prefix's query rows and divided by the rows that could see it
    (``T − j`` for key j in a causal prefix), averaged over the group. ``[Hkv, n_keys]`` float64."""
    total = torch.zeros(rows.n_heads, rows.n_keys, dtype=torch.float64)
    for _, block in row_blocks(rows):
        # A block's ≤ BLOCK_FLOATS rows summed in its own precision, then float64; a causal block may stop at its
        # last row's key (the keys after it are 0 for every row of the block).
        total[:, : block.shape[-1]] += block.sum(1).double()
    if rows.causal:
        keys = torch.arange(rows.n_keys)
        seen = (rows.n_rows - (keys - rows.offset).clamp(min=0)).clamp(min=1)
    else:
        seen = torch.full((rows.n_keys,), rows.n_rows)
    return group_mean(total / seen.to(torch.float64), n_kv_heads)


def snapkv_scores(rows: RowBlocks, n_kv_heads: int, *, window: int = WINDOW, kernel: int = KERNEL,
                  observation: RowBlocks | None = None) -> Tensor:
    """SnapKV (Li et al. 2024, arXiv 2404.14469) as kvpress ``SnapKVPress``: the last ``window`` query rows'
    attention on the keys before the window, averaged over those rows, smoothed with
    ``avg_pool1d(kernel, padding=kernel // 2, stride=1)`` (zeros padded, counted) over the key axis,
    averaged over the group; the window's own keys are always kept. With ``observation`` (e.g. the
    question's rows ``[H, F, n_keys + F]``) those rows are the window and score every prefix key of
    ``rows``, none forced. ``[Hkv, n_keys]`` float64."""
    if kernel % 2 == 0:
        raise ValueError(f"kernel {kernel} must be odd")
    n = rows.n_keys
    if observation is not None:
        source, first, scored = observation, 0, n
    else:
        window = min(window, rows.n_rows, n)
        source, first, scored = rows, rows.n_rows - window, n - window
    total = torch.zeros(source.n_heads, scored, dtype=torch.float64)
    for _, block in row_blocks(source, first):
        total += block[..., :scored].sum(1, dtype=torch.float64)
    mean = total / max(source.n_rows - first, 1)
    pooled = F.avg_pool1d(mean[:, None], kernel, stride=1, padding=kernel // 2)[:, 0] if scored else mean
    scores = torch.zeros(n_kv_heads, n, dtype=torch.float64)
    scores[:, :scored] = group_mean(pooled, n_kv_heads)
    return _forced(scores, scored)


def tova_scores(rows: RowBlocks, n_kv_heads: int, *, across: Literal["group", "layer"] = "layer") -> Tensor:
    """TOVA (Oren et al. 2024, arXiv 2401.06104): the last query row's attention on the keys before it, averaged
    over every head of the layer, one kept set for all its key/value heads, as TOVA's own cache
    (``schwartz-lab-NLP/TOVA``, ``tova_cache.py``: ``attn_weights.mean(1)``) and kvpress ``TOVAPress.score`` do;
    ``across="group"`` averages within each GQA group instead (one kept set per key/value head, attnviz's own
    variant, which neither reference has). The last key is always kept (TOVA keeps the newest token; kvpress pads
    the last position with the maximum score). ``[Hkv, n_keys]`` float64."""
    last = rows.block(rows.n_rows - 1, rows.n_rows)[:, 0].to(torch.float64)
    scores = torch.zeros(n_kv_heads, rows.n_keys, dtype=torch.float64)
    scored = rows.n_keys - 1
    mean = last[:, :scored].mean(0, keepdim=True).expand(n_kv_heads, -1) if across == "layer" else \
        group_mean(last[:, :scored], n_kv_heads)
    scores[:, :scored] = mean
    return _forced(scores, scored)


def oracle_scores(future: RowBlocks, n_kv_heads: int, n_prefix: int) -> Tensor:
    """The upper bound: the future queries' own attention on each prefix key, averaged over them and over
    the group. Its top ``b`` maximise :func:`recall` averaged over the group. ``[Hkv, n_prefix]``."""
    total = torch.zeros(future.n_heads, n_prefix, dtype=torch.float64)
    for _, block in row_blocks(future):
        total += block[..., :n_prefix].sum(1, dtype=torch.float64)
    return group_mean(total / max(future.n_rows, 1), n_kv_heads)


def keep_top(scores: Tensor, budget: int | float) -> Tensor:
    """``[Hkv, T]`` bool: each KV head's ``resolve_budget(budget, T)`` highest scores (stable: among equal
    scores the earlier key)."""
    n = resolve_budget(budget, scores.shape[1])
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :n]
    return torch.zeros(scores.shape, dtype=torch.bool).scatter_(1, order, True)


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy's score function (:mod:`attnviz.analysis.policies`) reads for one layer: the prefix's rows, the future queries' rows (oracle,
    and SnapKV's window when ``question_window``), and the policies' settings."""

    rows: RowBlocks
    n_kv_heads: int
    future: RowBlocks | None = None
    n_sink: int = N_SINK
    window: int = WINDOW
    kernel: int = KERNEL
    question_window: bool = False
    tova_across: Literal["group", "layer"] = "layer"
    keys: Tensor | None = None  # [Hkv, T, d] the prefix's keys, where a policy asks for them (Policy.needs_keys)
    settings: Mapping[str, Any] = field(default_factory=dict)  # every chosen policy's settings (Policy.settings)

    def setting(self, name: str) -> Any:
        """A policy's setting by name: as given or its record's default (a plugin's policy reads its own so)."""
        if name in self.settings:
            return self.settings[name]
        if name in ("n_sink", "window", "kernel", "question_window", "tova_across"):
            return getattr(self, name)
        raise KeyError(f"no policy setting {name!r} was chosen; declare it on the policy's record (Policy.settings)")


def streaming_policy(inputs: PolicyInputs) -> Tensor:
    """The ``streaming`` record's scores (:func:`streaming_scores`)."""
    return streaming_scores(inputs.rows.n_keys, inputs.n_kv_heads, inputs.n_sink)


def h2o_policy(inputs: PolicyInputs) -> Tensor:
    """The ``h2o`` record's scores (:func:`h2o_scores`)."""
    return h2o_scores(inputs.rows, inputs.n_kv_heads)


def snapkv_policy(inputs: PolicyInputs) -> Tensor:
    """The ``snapkv`` and ``pyramidkv`` records' scores (:func:`snapkv_scores`; the question's rows as the window
    when ``question_window``)."""
    observation = inputs.future if inputs.question_window else None
    if inputs.question_window and observation is None:
        raise ValueError("a question window needs the future rows")
    return snapkv_scores(inputs.rows, inputs.n_kv_heads, window=inputs.window, kernel=inputs.kernel,
                         observation=observation)


def tova_policy(inputs: PolicyInputs) -> Tensor:
    """The ``tova`` record's scores (:func:`tova_scores`)."""
    return tova_scores(inputs.rows, inputs.n_kv_heads, across=inputs.tova_across)


def oracle_policy(inputs: PolicyInputs) -> Tensor:
    """The ``oracle`` record's scores (:func:`oracle_scores`)."""
    if inputs.future is None:
        raise ValueError("the oracle needs the future rows")
    return oracle_scores(inputs.future, inputs.n_kv_heads, inputs.rows.n_keys)


def sinks_kept(inputs: PolicyInputs) -> Tensor:
    """StreamingLLM's always-kept keys: the first ``n_sink``."""
    return torch.arange(inputs.rows.n_keys) < inputs.n_sink


def window_kept(inputs: PolicyInputs) -> Tensor:
    """SnapKV's always-kept keys: its observation window, the last ``window`` keys (none with a question window)."""
    n = inputs.rows.n_keys
    if inputs.question_window:
        return torch.zeros(n, dtype=torch.bool)
    return torch.arange(n) >= n - min(inputs.window, inputs.rows.n_rows, n)


def last_kept(inputs: PolicyInputs) -> Tensor:
    """TOVA's always-kept key: the last."""
    return torch.arange(inputs.rows.n_keys) == inputs.rows.n_keys - 1


def pyramid_layer_budget(count: int, layer: int, n_layers: int, n_keys: int) -> int:
    """PyramidKV's budget rule: ``layer``'s share of :func:`pyramid_budgets`."""
    return pyramid_budgets(count, n_layers, n_keys)[layer]


# -- what a kept set loses --------------------------------------------------------------------------------------


def _kept_columns(keep: Tensor, future: RowBlocks) -> Tensor:
    """``[H, T + F]`` bool: per query head, its KV head's kept prefix keys and every future key."""
    n_prefix = keep.shape[1]
    per_head = keep.repeat_interleave(future.n_heads // keep.shape[0], dim=0)
    own = torch.ones(future.n_heads, future.n_keys - n_prefix, dtype=torch.bool)
    return torch.cat([per_head, own], dim=1)


def recall(future: RowBlocks, keep: Tensor) -> Tensor:
    """``[H]`` float64: each query head's future attention mass that is not on a dropped prefix key — on its KV
    head's kept prefix keys (``keep [Hkv, T]``), on the future keys, and on a learned sink where the model has one
    (gpt-oss: a row's mass short of 1 goes to a logit no cut removes) — averaged over the future rows. Rows that sum
    to 1 give the mass on the kept and future keys. :func:`group_mean` gives the KV head's recall."""
    kept = _kept_columns(keep, future)
    lost = torch.zeros(future.n_heads, dtype=torch.float64)
    for _, block in row_blocks(future):
        lost += (block * ~kept[:, None]).sum((1, 2), dtype=torch.float64)
    return 1.0 - lost / max(future.n_rows, 1)


def output_error(future: RowBlocks, values: Tensor, keep: Tensor) -> Tensor:
    """``[H]`` float64: ``‖o − o_kept‖ / ‖o‖`` over each query head's future rows (Frobenius over rows ×
    dims), ``o = A v`` and ``o_kept = (A ⊙ M) v / Σ(A ⊙ M)``, the softmax over the kept keys M only (and a learned
    sink's share, where rows sum to less than 1: the softmax's denominator keeps it).
    ``values [Hkv, T + F, d]``."""
    kept = _kept_columns(keep, future)
    group = future.n_heads // values.shape[0]
    v = values.to(torch.float64).repeat_interleave(group, dim=0)
    diff = torch.zeros(future.n_heads, dtype=torch.float64)
    norm = torch.zeros(future.n_heads, dtype=torch.float64)
    for _, block in row_blocks(future):
        a = block.to(torch.float64)
        masked = a * kept[:, None]
        o = a @ v
        sink = (1.0 - a.sum(-1, keepdim=True)).clamp(min=0.0)  # a learned sink's share (gpt-oss), never cut
        o_kept = (masked @ v) / (masked.sum(-1, keepdim=True) + sink).clamp(min=1e-300)
        diff += (o - o_kept).square().sum((1, 2))
        norm += o.square().sum((1, 2))
    return diff.sqrt() / norm.sqrt().clamp(min=1e-300)

"""Every statistic of :data:`attnviz.analysis.heads.STATISTICS` for one layer, reduced one block of query rows at a time.

Each statistic is a sum over query rows (then divided by the rows, or by the attention mass), so a
layer handed over as blocks of rows ``[heads, rows, width]`` (computed on demand and freed after use,
as a long input's engine does) gives the same numbers as the whole ``[heads, n, n]`` matrix, with no
``[n, n]`` temporary. The definitions are those of :mod:`attnviz.analysis.metrics` (design.md):

- Clark et al. 2019, "What Does BERT Look At?": entropy after ``0.9999·A + 0.0001/n`` (n = all keys),
  the mean weight on the token itself, the next one, the first, [SEP]/EOS and punctuation;
- TransformerLens ``detect_head`` (``error_measure="mul"``): ``sum(A⊙P) / sum(A)`` for the previous-,
  duplicate- and induction-token patterns P, each block's rows of P built from the token ids;
- Gu et al. 2024 (arXiv 2410.10781): α_k, column k's mean over the rows that see key k.

A block may leave out its right-hand columns ``width … n−1`` when they are exactly 0 (a causal block):
each such column adds ``entr(0.0001/n)`` to a row's entropy and nothing to any other statistic.
Elementwise work runs in the input's precision (half precision is widened to float32), each row is
summed in it, and rows are accumulated in float64, as :func:`attnviz.analysis.metrics.read_attention` describes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor

from . import metrics

ROWS = 256  # query rows per block when a dense layer is cut up (as metrics' own blocks)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# What each block adds up per head, [heads] float64; ``mass`` is sum(A), the patterns' denominator.
_SUMS = ("entropy", "entropy_norm", "self", "prev", "next", "first", "sep", "punct", "max", "distance",
         "duplicate", "induction", "mass")


class LayerRowStatistics:
    """Every statistic of :data:`attnviz.analysis.heads.STATISTICS` for one layer of one text, accumulated from
    blocks of query rows (:meth:`add`), in any order, each row once.

    ``token_ids`` are resolved ids (:func:`attnviz.analysis.heads.token_ids`), ``sep`` the key flags of
    :func:`attnviz.analysis.heads.sep_keys`; punctuation is :func:`attnviz.analysis.metrics.is_punctuation` of ``tokens``.
    """

    def __init__(self, *, n: int, n_heads: int, token_ids: Sequence[int], tokens: Sequence[str],
                 sep: Sequence[bool], causal: bool) -> None:
        if n < 1 or n_heads < 1:
            raise ValueError(f"a layer needs at least one token and one head, got n={n}, n_heads={n_heads}")
        for name, values in (("token_ids", token_ids), ("tokens", tokens), ("sep", sep)):
            if len(values) != n:
                raise ValueError(f"{len(values)} {name} for {n} tokens")
        self.n, self.n_heads, self.causal = n, n_heads, causal
        self._ids, self._sep, self._punct, self._norm_weight, self._norm_rows = _text_facts(
            tuple(token_ids), tuple(tokens), tuple(sep), causal)
        self._sums = {name: torch.zeros(n_heads, dtype=torch.float64) for name in _SUMS}
        self._columns = torch.zeros(n_heads, n, dtype=torch.float64)  # column sums, for α_k
        self._seen = torch.zeros(n, dtype=torch.bool)
        self._scratch = torch.empty(0)  # [heads·rows·width]: reused by every block (fresh ones cost page faults)
        self._tile = torch.empty(0)  # [rows·width]: |i − j| of a block
        self._positions: dict[torch.dtype, Tensor] = {}

    @property
    def rows_seen(self) -> int:
        """How many query rows have been added."""
        return int(self._seen.sum())

    def add(self, start: int, block: Tensor) -> None:
        """Rows ``start … start+rows−1``, ``block`` ``[heads, rows, width]`` (float32/float64/float16/bfloat16),
        ``width ≤ n``: columns ``width … n−1`` are exactly 0 for these rows and were left out."""
        b = self._checked(start, block)
        _, rows, width = b.shape
        stop = start + rows
        mass = b.sum(-1)  # (H, R), each row in the input's precision
        entropy = self._entropy_rows(b, mass)
        largest = b.amax(-1)
        if width < self.n:
            largest.clamp_min_(0)  # the left-out zeros are in the row too
        duplicate, induction = self._pattern_hits(b, start)
        step = {
            "entropy": entropy.sum(-1),
            "entropy_norm": entropy @ self._norm_weight[start:stop],
            "self": _diagonal(b, start), "prev": _diagonal(b, start - 1), "next": _diagonal(b, start + 1),
            "first": b[..., 0].double().sum(-1),
            "sep": _columns_sum(b, self._sep), "punct": _columns_sum(b, self._punct),
            "max": largest.double().sum(-1),
            "distance": self._distance_rows(b, start).sum(-1),
            "duplicate": duplicate, "induction": induction,
            "mass": mass.double().sum(-1),
        }
        columns = b.sum(1)  # (H, W): ≤ ROWS rows in the input's precision; blocks add up in float64
        for name, value in step.items():
            self._sums[name] += value
        self._columns[:, :width] += columns
        self._seen[start:stop] = True

    def statistics(self) -> dict[str, Tensor]:
        """``{name: [heads] float64}``, the keys and order of :data:`attnviz.analysis.heads.STATISTICS`."""
        self._check_complete()
        return {name: finish(self).to(torch.float64) for name, finish in ROW_STATISTICS.items()}

    def sink_importance(self) -> Tensor:
        """α_k ``[heads, n]`` float64 (Gu et al. 2024), as :func:`attnviz.analysis.metrics.sink_importance`: column k's
        sum over the rows that see key k, divided by their number (causal: n − k; otherwise n)."""
        self._check_complete()
        return self._columns / metrics.rows_seeing(self.n, self.n, causal=self.causal)

    # --- per block ---------------------------------------------------------------------------

    def _checked(self, start: int, block: Tensor) -> Tensor:
        if not isinstance(block, Tensor) or block.dim() != 3:
            raise ValueError(f"a block must be [heads, rows, width], got {getattr(block, 'shape', type(block))}")
        heads, rows, width = block.shape
        if heads != self.n_heads or rows < 1 or width > self.n:
            raise ValueError(f"a block must be [{self.n_heads} heads, rows ≥ 1, width ≤ {self.n}], "
                             f"got {tuple(block.shape)}")
        if not 0 <= start <= self.n - rows:
            raise ValueError(f"rows {start}…{start + rows - 1} are outside the layer's {self.n} rows")
        if block.dtype not in _FLOATS:
            raise ValueError(f"a block must be float16, bfloat16, float32 or float64, got {block.dtype}")
        if bool(self._seen[start : start + rows].any()):
            twice = (self._seen[start : start + rows].nonzero().flatten() + start).tolist()
            raise ValueError(f"rows {_ranges(twice)} were added twice; each query row must come in exactly one block")
        if width == 0:  # every weight left out: a row of zeros says the same
            block = block.new_zeros(heads, rows, 1)
        return block.float() if block.dtype in (torch.float16, torch.bfloat16) else block

    def _scratch_for(self, b: Tensor) -> Tensor:
        self._scratch = _grown(self._scratch, b.numel(), b.shape[0] * b.shape[1] * self.n, b.dtype)
        return self._scratch[: b.numel()].view(b.shape)

    def _entropy_rows(self, b: Tensor, mass: Tensor) -> Tensor:
        """Each row's entropy in nats after Clark et al.'s ``p = α·A + β`` (α = 0.9999, β = 0.0001/n),
        ``[H, R]`` float64. With ``c = β/α``, ``Σ p ln p = α·(ln α·(S + w·c) + Σ A·L + c·Σ L)`` where
        ``L = ln(A + c)`` and S the row's mass: one logarithm per weight, no second buffer."""
        alpha = 1 - metrics.ENTROPY_SMOOTHING
        beta = metrics.ENTROPY_SMOOTHING / self.n
        shift = beta / alpha
        width = b.shape[-1]
        logs = self._scratch_for(b)
        torch.add(b, shift, out=logs)
        logs.log_()
        sum_logs = logs.sum(-1).double()
        logs.mul_(b)
        weighted = logs.sum(-1).double()
        p_log_p = alpha * (math.log(alpha) * (mass.double() + width * shift) + weighted + shift * sum_logs)
        per_zero = float(torch.special.entr(torch.tensor(beta, dtype=b.dtype)))  # a left-out 0, smoothed
        return (self.n - width) * per_zero - p_log_p

    def _distance_rows(self, b: Tensor, start: int) -> Tensor:
        """``Σ_j A[i, j]·|i − j|`` per row, ``[H, R]`` float64 (the ``distance`` statistic's rows)."""
        _, rows, width = b.shape
        if b.dtype not in self._positions:
            self._positions[b.dtype] = torch.arange(self.n, dtype=b.dtype)
        positions = self._positions[b.dtype]
        self._tile = _grown(self._tile, rows * width, rows * self.n, b.dtype)
        tile = self._tile[: rows * width].view(rows, width)
        torch.sub(positions[start : start + rows, None], positions[None, :width], out=tile)
        tile.abs_()
        weighted = self._scratch_for(b)
        torch.mul(b, tile, out=weighted)
        return weighted.sum(-1).double()

    def _pattern_hits(self, b: Tensor, start: int) -> tuple[Tensor, Tensor]:
        """``Σ A⊙P`` per head for TransformerLens's duplicate pattern (key j < i with token j = token i)
        and induction pattern (key j + 1 for each such j), from this block's rows of the pattern only."""
        _, rows, width = b.shape
        zero = torch.zeros(b.shape[0], dtype=torch.float64)
        keys = min(width, start + rows - 1)  # an earlier copy is left of the block's last row
        if keys <= 0:
            return zero, zero
        same = self._ids[start : start + rows, None] == self._ids[None, :keys]  # (R, keys)
        row, key = same.nonzero(as_tuple=True)
        earlier = key < row + start
        row, key = row[earlier], key[earlier]
        inside = key + 1 < width
        return _gathered_sum(b, row, key), _gathered_sum(b, row[inside], key[inside] + 1)

    def _check_complete(self) -> None:
        if not bool(self._seen.all()):
            missing = (~self._seen).nonzero().flatten().tolist()
            raise ValueError(f"rows {_ranges(missing)} of {self.n} were never added; every query row must come in "
                             "one block before the statistics are read")

    def _mean(self, name: str) -> Tensor:
        return self._sums[name] / self.n

    def _share(self, name: str) -> Tensor:
        """TransformerLens's ``sum(A⊙P) / sum(A)``, 0 where a head has no mass at all."""
        total = self._sums["mass"]
        return torch.where(total > 0, self._sums[name] / total.clamp_min(torch.finfo(torch.float64).tiny),
                           torch.zeros_like(total))


@functools.lru_cache(maxsize=64)
def _text_facts(token_ids: tuple[int, ...], tokens: tuple[str, ...], sep: tuple[bool, ...],
                causal: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, int]:
    """What every layer of one text shares (computed once per text, not once per layer): the ids
    made small, the [SEP] and punctuation keys, and entropy_norm's row weights."""
    n = len(token_ids)
    ids = torch.tensor(token_ids, dtype=torch.long)
    small = torch.unique(ids, return_inverse=True)[1].to(torch.int32)  # equal ids stay equal, smaller
    sep_keys = torch.tensor(sep, dtype=torch.bool).nonzero().flatten()
    punct = torch.tensor([metrics.is_punctuation(t) for t in tokens], dtype=torch.bool).nonzero().flatten()
    # entropy_norm: row i's entropy / ln(keys it sees); rows that see one key are left out.
    visible = torch.arange(1, n + 1, dtype=torch.float64) if causal else torch.full((n,), float(n), dtype=torch.float64)
    return small, sep_keys, punct, torch.where(visible > 1, 1 / visible.log(), torch.zeros(())), int((visible > 1).sum())


def _grown(scratch: Tensor, needed: int, most: int, dtype: torch.dtype) -> Tensor:
    """``scratch``, or one of ``dtype`` with room for ``most`` (and ``needed``) elements when it has too few.
    Sized for the widest block at once, so a causal layer's ever wider blocks allocate once: memory the
    narrow blocks never write costs nothing (its pages are never touched)."""
    if scratch.dtype == dtype and scratch.numel() >= needed:
        return scratch
    return torch.empty(max(needed, most), dtype=dtype)


def _gathered_sum(b: Tensor, row: Tensor, key: Tensor) -> Tensor:
    """``Σ b[:, row, key]`` per head, float64: read through a flat view of the block's memory with one
    index per cell (about 3× faster than indexing with a row and a key tensor)."""
    _, rows, width = b.shape
    span = (rows - 1) * b.stride(1) + (width - 1) * b.stride(2) + 1
    flat = b.as_strided((b.shape[0], span), (b.stride(0), 1))
    return flat.index_select(1, row * b.stride(1) + key * b.stride(2)).sum(-1, dtype=torch.float64)


def _diagonal(b: Tensor, offset: int) -> Tensor:
    """Σ over the block's rows of ``A[i, i + offset − start]``: the key at a fixed distance from each query."""
    return b.diagonal(offset=offset, dim1=-2, dim2=-1).double().sum(-1)


def _columns_sum(b: Tensor, keys: Tensor) -> Tensor:
    """Σ over the block's rows of the weight on ``keys`` (sorted positions; those left out of the block are 0)."""
    keys = keys[: int(torch.searchsorted(keys, b.shape[-1]))]
    return b.index_select(-1, keys).sum(-1).double().sum(-1)


def _ranges(rows: list[int]) -> str:
    """``[0, 1, 2, 7]`` → ``0–2, 7`` (the first few ranges)."""
    spans: list[list[int]] = []
    for row in rows:
        if spans and row == spans[-1][1] + 1:
            spans[-1][1] = row
        else:
            spans.append([row, row])
    text = [f"{a}–{b}" if b > a else str(a) for a, b in spans[:5]]
    return ", ".join(text) + (f" and {len(spans) - 5} more ranges" if len(spans) > 5 else "")


# name → its value from the accumulated sums, [heads]: one entry per statistic of heads.STATISTICS, in its
# order (a test holds the two equal, so a statistic added there cannot be forgotten here).
ROW_STATISTICS: dict[str, Callable[[LayerRowStatistics], Tensor]] = {
    "entropy": lambda s: s._mean("entropy"),
    "entropy_norm": lambda s: s._sums["entropy_norm"] / max(s._norm_rows, 1),
    "self": lambda s: s._mean("self"),
    "prev_score": lambda s: s._share("prev"),
    "next": lambda s: s._mean("next"),
    "first": lambda s: s._mean("first"),
    "sep": lambda s: s._mean("sep"),
    "punct": lambda s: s._mean("punct"),
    "max": lambda s: s._mean("max"),
    "distance": lambda s: s._mean("distance"),
    "duplicate": lambda s: s._share("duplicate"),
    "induction": lambda s: s._share("induction"),
    "sink": lambda s: s.sink_importance().amax(-1),
}


def blocks_of(attn: Tensor, rows: int = ROWS, *, causal_trim: bool = False) -> Iterator[tuple[int, Tensor]]:
    """``(start, attn[:, start:stop, :width])`` for each block of ``rows`` query rows of a dense layer
    ``[heads, n, n]`` (views, no copies). With ``causal_trim`` a block leaves out the columns right of
    its last row (width = stop) when they are all exactly 0 there (checked, not assumed)."""
    if attn.dim() != 3 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"a layer's attentions must be [heads, n, n], got shape {tuple(attn.shape)}")
    if rows < 1:
        raise ValueError(f"a block needs at least one row, got rows={rows}")
    n = attn.shape[-1]
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        width = stop if causal_trim and stop < n and _all_zero(attn[:, start:stop, stop:]) else n
        yield start, attn[:, start:stop, :width]


def _all_zero(part: Tensor) -> bool:
    """Every entry exactly 0 (NaN is not): two reductions, cheaper than ``any`` (which widens to bool first)."""
    return bool(part.amax() == 0) and bool(part.amin() == 0)


def layer_row_statistics(attn: Tensor, *, token_ids: Sequence[int], tokens: Sequence[str], sep: Sequence[bool],
                         causal: bool, rows: int = ROWS) -> LayerRowStatistics:
    """A dense layer ``[heads, n, n]`` fed through :class:`LayerRowStatistics` in blocks of ``rows`` rows
    (a causal layer's blocks trimmed where its upper triangle is zero)."""
    if attn.dim() != 3:
        raise ValueError(f"a layer's attentions must be [heads, n, n], got shape {tuple(attn.shape)}")
    stats = LayerRowStatistics(n=attn.shape[-1], n_heads=attn.shape[0], token_ids=token_ids, tokens=tokens,
                               sep=sep, causal=causal)
    for start, block in blocks_of(attn, rows, causal_trim=causal):
        stats.add(start, block)
    return stats

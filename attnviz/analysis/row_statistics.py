"""Every statistic of :data:`attnviz.analysis.statistics.STATISTICS` for one layer, reduced one block of query rows at a time.

Each statistic is a sum over query rows (then divided by the rows, or by the attention mass), so a
layer handed over as blocks of rows ``[heads, rows, width]`` (computed on demand and freed after use,
as a long input's engine does) gives the same numbers as the whole ``[heads, n, n]`` matrix, with no
``[n, n]`` temporary. The definitions are those of :mod:`attnviz.analysis.metrics` (docs/design.md):

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
import itertools
import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from . import metrics
from .statistics import STATISTICS, Statistic

ROWS = 256  # query rows per block when a dense layer is cut up (as metrics' own blocks)
# A run of at least this many equal consecutive ids (a picture's patch tokens all share one) has its duplicate and
# induction hits summed as slices of the block instead of gathered cell by cell: 9,888 patch tokens make 49 M pairs a
# head, whose indices alone cost more than reading every weight once.
LONG_RUN = 64
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Block:
    """What a statistic's ``rows`` reads of one block of query rows ``start … start+rows−1`` of a layer:
    ``weights`` ``[heads, rows, width]`` (float32 or float64; columns from ``width`` on are 0 and left
    out), the text's facts, and the quantities several statistics share, each computed once per
    block. Every property is per head, summed over the block's rows, ``[heads]`` float64, unless it
    says otherwise."""

    def __init__(self, layer: LayerRowStatistics, start: int, weights: Tensor) -> None:
        self.layer, self.start, self.weights = layer, start, weights
        self.n = layer.n  # tokens: every key, whether the block kept its column or not

    @functools.cached_property
    def row_mass(self) -> Tensor:
        """``[heads, rows]``: each row's sum, in the input's precision."""
        return self.weights.sum(-1)

    @functools.cached_property
    def entropy(self) -> Tensor:
        """``[heads, rows]`` float64: each row's entropy in nats after Clark et al.'s smoothing."""
        return self.layer.entropy_rows(self.weights, self.row_mass)

    @property
    def norm_weight(self) -> Tensor:
        """``[rows]``: 1 / ln(keys row i sees), 0 for a row that sees one key (``entropy_norm``)."""
        return self.layer.facts[3][self.start : self.start + self.weights.shape[1]]

    def diagonal(self, offset: int) -> Tensor:
        """Σ over the rows of ``A[i, i + offset]``: the key at a fixed distance from each query."""
        return self.weights.diagonal(offset=self.start + offset, dim1=-2, dim2=-1).double().sum(-1)

    @property
    def first(self) -> Tensor:
        """Σ over the rows of the weight on the first token."""
        return self.weights[..., 0].double().sum(-1)

    @property
    def sep_keys(self) -> Tensor:
        """The positions of [SEP] or EOS (sorted)."""
        return self.layer.facts[1]

    @property
    def punct_keys(self) -> Tensor:
        """The positions of punctuation (:func:`attnviz.analysis.metrics.is_punctuation`), sorted."""
        return self.layer.facts[2]

    def on_keys(self, keys: Tensor) -> Tensor:
        """Σ over the rows of the weight on ``keys`` (sorted positions; those left out of the block are 0)."""
        keys = keys[: int(torch.searchsorted(keys, self.weights.shape[-1]))]
        return self.weights.index_select(-1, keys).sum(-1).double().sum(-1)

    @property
    def largest(self) -> Tensor:
        """Σ over the rows of each row's largest weight (the left-out zeros count: a signed row's maximum is ≥ 0)."""
        largest = self.weights.amax(-1)
        if self.weights.shape[-1] < self.n:
            largest.clamp_min_(0)
        return largest.double().sum(-1)

    @property
    def distance(self) -> Tensor:
        """``Σ_j A[i, j]·|i − j|`` summed over the rows."""
        return self.layer.distance_rows(self.weights, self.start).sum(-1)

    @functools.cached_property
    def patterns(self) -> tuple[Tensor, Tensor]:
        """``Σ A⊙P`` for TransformerLens's duplicate pattern (key j < i with token j = token i) and
        induction pattern (key j + 1 for each such j), from this block's rows of the patterns only."""
        return self.layer.pattern_hits(self.weights, self.start)


class LayerRowStatistics:
    """Every statistic of :data:`attnviz.analysis.statistics.STATISTICS` for one layer of one text,
    accumulated from blocks of query rows (:meth:`add`), in any order, each row once.

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
        self.facts = _text_facts(tuple(token_ids), tuple(tokens), tuple(sep), causal)
        self.norm_rows = self.facts[4]  # rows that see more than one key (entropy_norm's divisor)
        self.statistics_read = list(STATISTICS.values())  # those registered when the layer began
        self._sums = {s.name: torch.zeros(n_heads, dtype=torch.float64)
                      for s in self.statistics_read if s.rows is not None}
        self.mass = torch.zeros(n_heads, dtype=torch.float64)  # Σ A: the patterns' denominator
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
        rows, width = b.shape[1], b.shape[2]
        read = Block(self, start, b)
        added = {s.name: s.rows(read) for s in self.statistics_read if s.rows is not None}
        mass = read.row_mass.double().sum(-1)
        columns = b.sum(1)  # (H, W): ≤ ROWS rows in the input's precision; blocks add up in float64
        for name, value in added.items():
            self._sums[name] += value
        self.mass += mass
        self._columns[:, :width] += columns
        self._seen[start : start + rows] = True

    def statistics(self) -> dict[str, Tensor]:
        """``{name: [heads] float64}``, the keys and order of :data:`attnviz.analysis.statistics.STATISTICS`."""
        self._check_complete()
        return {s.name: self._value(s).to(torch.float64) for s in self.statistics_read}

    def _value(self, statistic: Statistic) -> Tensor:
        total = self._sums.get(statistic.name)
        if statistic.per == "row" or statistic.per == "mass":
            summed = self._sums[statistic.name]  # a statistic read per row or per mass sums its rows
            if statistic.per == "row":
                return summed / self.n
            return torch.where(self.mass > 0, summed / self.mass.clamp_min(torch.finfo(torch.float64).tiny),
                               torch.zeros_like(self.mass))
        return statistic.per(self, total)

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

    def entropy_rows(self, b: Tensor, mass: Tensor) -> Tensor:
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

    def distance_rows(self, b: Tensor, start: int) -> Tensor:
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

    def pattern_hits(self, b: Tensor, start: int) -> tuple[Tensor, Tensor]:
        """``Σ A⊙P`` per head for TransformerLens's duplicate pattern (key j < i with token j = token i)
        and induction pattern (key j + 1 for each such j), from this block's rows of the pattern only.
        Earlier copies inside a run of :data:`LONG_RUN` or more equal ids are summed by :meth:`_run_hits`;
        the other pairs are found from the ids and gathered."""
        _, rows, width = b.shape
        duplicate = torch.zeros(b.shape[0], dtype=torch.float64)
        induction = torch.zeros(b.shape[0], dtype=torch.float64)
        keys = min(width, start + rows - 1)  # an earlier copy is left of the block's last row
        if keys <= 0:
            return duplicate, induction
        ids, runs, in_run = self.facts[0], self.facts[5], self.facts[6]
        same = ids[start : start + rows, None] == ids[None, :keys]  # (R, keys)
        if runs:
            same &= ~in_run[None, :keys]
        row, key = same.nonzero(as_tuple=True)
        earlier = key < row + start
        row, key = row[earlier], key[earlier]
        inside = key + 1 < width
        duplicate += _gathered_sum(b, row, key)
        induction += _gathered_sum(b, row[inside], key[inside] + 1)
        for run_start, run_stop in runs:
            if run_start >= keys:
                break
            hits = self._run_hits(b, start, run_start, run_stop)
            duplicate += hits[0]
            induction += hits[1]
        return duplicate, induction

    def _run_hits(self, b: Tensor, start: int, s: int, e: int) -> tuple[Tensor, Tensor]:
        """The duplicate and induction hits of this block's rows whose earlier copies are keys ``s … e−1``, a run of
        one id: a row i inside the run reads keys ``s … i−1`` (duplicate) and ``s+1 … i`` (induction), a lower
        triangle of the block; a row after it with the same id reads ``s … e−1`` and ``s+1 … e``."""
        heads, rows, width = b.shape
        duplicate = torch.zeros(heads, dtype=torch.float64)
        induction = torch.zeros(heads, dtype=torch.float64)
        first, stop = max(start, s + 1), min(start + rows, e)  # rows inside the run with a copy before them
        if first < stop and s < width:
            part = b[:, first - start : stop - start, s : min(stop, width)]  # row r is i = first + r, column k key s + k
            lower = self._scratch_for(b).view(-1)[: part.numel()].view(part.shape)
            torch.tril(part, first - s, out=lower)  # k ≤ r + (first − s): key ≤ i
            total = lower.sum(-1).double().sum(-1)
            duplicate += total - torch.diagonal(part, first - s, dim1=1, dim2=2).sum(-1).double()  # key < i
            induction += total - part[:, :, 0].sum(-1).double()  # key > s
        later = torch.arange(max(start, e), max(start + rows, e))
        later = later[self.facts[0][later] == self.facts[0][s]] - start
        if later.numel() and s < width:
            after = b[:, later]
            duplicate += after[:, :, s : min(e, width)].sum(-1).double().sum(-1)
            induction += after[:, :, s + 1 : min(e + 1, width)].sum(-1).double().sum(-1)
        return duplicate, induction

    def _check_complete(self) -> None:
        if not bool(self._seen.all()):
            missing = (~self._seen).nonzero().flatten().tolist()
            raise ValueError(f"rows {_ranges(missing)} of {self.n} were never added; every query row must come in "
                             "one block before the statistics are read")


@functools.lru_cache(maxsize=64)
def _text_facts(token_ids: tuple[int, ...], tokens: tuple[str, ...], sep: tuple[bool, ...],
                causal: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, int, tuple[tuple[int, int], ...], Tensor]:
    """What every layer of one text shares (computed once per text, not once per layer): the ids
    made small, the [SEP] and punctuation keys, entropy_norm's row weights, and the runs of
    :data:`LONG_RUN` or more equal ids (``(start, stop)``, and which keys lie in one)."""
    n = len(token_ids)
    ids = torch.tensor(token_ids, dtype=torch.long)
    small = torch.unique(ids, return_inverse=True)[1].to(torch.int32)  # equal ids stay equal, smaller
    sep_keys = torch.tensor(sep, dtype=torch.bool).nonzero().flatten()
    punct = torch.tensor([metrics.is_punctuation(t) for t in tokens], dtype=torch.bool).nonzero().flatten()
    # entropy_norm: row i's entropy / ln(keys it sees); rows that see one key are left out.
    visible = torch.arange(1, n + 1, dtype=torch.float64) if causal else torch.full((n,), float(n), dtype=torch.float64)
    runs = _long_runs(small, LONG_RUN)
    in_run = torch.zeros(n, dtype=torch.bool)
    for run_start, run_stop in runs:
        in_run[run_start:run_stop] = True
    return (small, sep_keys, punct, torch.where(visible > 1, 1 / visible.log(), torch.zeros(())),
            int((visible > 1).sum()), runs, in_run)


def _long_runs(ids: Tensor, least: int) -> tuple[tuple[int, int], ...]:
    """``(start, stop)`` of each run of at least ``least`` equal consecutive ids, in order."""
    if ids.numel() < least:
        return ()
    change = torch.cat([torch.ones(1, dtype=torch.bool), ids[1:] != ids[:-1]]).nonzero().flatten().tolist()
    bounds = [*change, ids.numel()]
    return tuple((a, b) for a, b in itertools.pairwise(bounds) if b - a >= least)


def _grown(scratch: Tensor, needed: int, most: int, dtype: torch.dtype) -> Tensor:
    """``scratch``, or one of ``dtype`` with room for ``most`` (and ``needed``) elements when it has too few.
    Sized for the widest block at once, so a causal layer's ever wider blocks allocate once: memory the
    narrow blocks never write costs nothing (its pages are never touched)."""
    if scratch.dtype == dtype and scratch.numel() >= needed:
        return scratch
    return torch.empty(max(needed, most), dtype=dtype)


def _gathered_sum(b: Tensor, row: Tensor, key: Tensor) -> Tensor:
    """``Σ b[:, row, key]`` per head, float64: read through a flat view of the block's memory with one
    index per cell, gathered (``index_select`` on that strided view copied one cell at a time: 2.5 ms for
    256 cells of a 2,048-token layer's block, 70× the gather's time)."""
    _, rows, width = b.shape
    span = (rows - 1) * b.stride(1) + (width - 1) * b.stride(2) + 1
    flat = b.as_strided((b.shape[0], span), (b.stride(0), 1))
    index = (row * b.stride(1) + key * b.stride(2)).expand(b.shape[0], -1)
    return torch.gather(flat, 1, index).sum(-1, dtype=torch.float64)


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

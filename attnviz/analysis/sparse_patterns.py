"""Sparse prefill patterns per head (MInference) and the streaming/full-attention split (DuoAttention), issue 44.

MInference (Jiang et al. 2024, arXiv 2407.02490; ``minference/modules/minference_forward.py``,
``search_pattern``) scores three patterns per query head by their **recall**, the mean over query rows
``i ≥ i0`` of ``Σ_j A_ij M_ij`` (causal rows; MInference takes ``i0 = 2500``, here the budget by default,
the first row that cannot keep every key):

- **A-shape** (``stream_llm``): the first ``sinks`` columns and a local band ``i − j < local``;
- **vertical-slash**: the strongest columns and diagonals (offsets ``i − j``), estimated from the last
  ``last_q = 64`` query rows (column sums and diagonal sums of their attention, the first 30 columns and
  the 30 nearest diagonals always among them), then applied to every row;
- **block-sparse**: per 64-query block row, the top-k 64×64 key blocks by the dot product of the blocks'
  mean-pooled queries and keys (``ops/block_sparse_flash_attention._build_block_index``), causal at the
  block level. A block's mean is over its tokens (MInference pads the last block with zeros).

Each pattern gets the same **budget** ``b``, keys per query row: A-shape ``min(sinks, b // 2)`` sinks and
``b − sinks`` local keys; vertical-slash ``v + s = b`` over a few splits (all columns to all diagonals), the best
reported (as MInference searches several sizes); block-sparse ``max(1, b // 64)`` blocks. No row keeps more than ``b`` keys.
The winner is the first of :data:`PATTERNS` within ``1e-6`` of the best recall (ties go to the simpler).

DuoAttention (Xiao et al. 2024, arXiv 2410.10819; ``mit-han-lab/duo-attention``) serves a head with
sinks + a recent window when that loses little: here a query head's **streaming mass** is its attention
on the first 64 keys and the last 256 (``i − j < 256``), averaged over rows ``i ≥ 64 + 256`` (earlier rows
lose nothing); a KV head is streaming when every query head of its group keeps at least ``threshold``
(0.9) of its mass, otherwise full attention (the paper's "retrieval head"; attnviz says full attention, keeping
"retrieval head" for Wu et al.'s score in :mod:`attnviz.needle`), the unit DuoAttention gates.

Masses are accumulated one block of rows at a time as sums by column, by diagonal and by 64×64 block,
so a pattern's recall costs no ``[H, T, T]`` mask: ``mass(V ∪ S) = mass(V) + mass(S) − mass(V ∩ S)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import Tensor

from .kv_policies import RowBlocks, resolve_budget, row_blocks
from .patterns_registry import PATTERNS, TIE, winners  # noqa: F401 - TIE: the tie rule, where the module says

SINKS = 64  # A-shape sink columns (capped at half the budget)
LAST_Q = 64  # MInference's last_q: rows that estimate vertical-slash
FORCED = 30  # MInference: the first 30 columns and the 30 nearest diagonals are always chosen
BLOCK = 64  # block-sparse block size (MInference's kernel: 64 × 64)
VERTICAL_SHARES = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)  # vertical-slash splits tried: the columns' share of b
DUO_SINK, DUO_RECENT, DUO_THRESHOLD = 64, 256, 0.9


def _top(scores: Tensor, count: int) -> Tensor:
    """``[H, count]`` indices of each row's highest scores (stable: the earlier index among equals)."""
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :count]


def _add_diagonals(reverse: Tensor, block: Tensor, p0: int) -> None:
    """Add a causal block's sums by diagonal offset (rows at positions ``p0 …``, consecutive) to ``reverse``
    ``[H, width]`` float64, which holds offset ``o`` at ``width − 1 − o`` (offsets ``≥ width`` left out). The block
    may stop at its last row's key (a narrow causal block: its width is at least the last position + 1).

    Row ``i`` (position ``p0 + i``) read from column ``i + m`` is offset ``p0 − m`` for every row, so a strided
    view with row stride ``row + 1`` (no copy) sums the offsets ``0 … p0`` at once, in increasing ``m``: the
    reversed order. The offsets past ``p0`` (columns ``j < i``) are the lower triangle of the block's first ``R``
    columns, skewed the same way after padding that small square (as MInference's ``sum_all_diagonal_matrix``)."""
    h, r, n = block.shape
    width = reverse.shape[1]
    if n < p0 + r:
        raise ValueError(f"a causal block of rows {p0} … {p0 + r - 1} needs at least {p0 + r} keys, got {n}")
    low = max(0, p0 - width + 1)  # columns m = low … p0: offsets p0 − low … 0
    s0, s1, s2 = block.stride()
    skewed = block.as_strided((h, r, p0 + 1 - low), (s0, s1 + s2, s2), block.storage_offset() + low * s2)
    reverse[:, width - 1 - p0 + low :] += skewed.sum(1)  # summed in the block's precision (a strided
    # float32 view summed into float64 directly is ~10x slower), added in float64
    d = min(r - 1, width - 1 - p0)  # offsets p0 + 1 … p0 + d: Σ_i A[i, i − (r − k)] at k = r − d … r − 1
    if d > 0:
        square = F.pad(block[..., :r], (r, 0))  # [h, r, 2r]: column j of row i at j + r
        tri = square.as_strided((h, r, r), (2 * r * r, 2 * r + 1, 1))[..., r - d :]
        reverse[:, width - 1 - p0 - d : width - 1 - p0] += tri.sum(1)


def _diagonal_sums(block: Tensor, positions: Tensor, width: int | None = None) -> Tensor:
    """``[H, width]`` float64: for each offset ``o < width`` (default: every key of the block), the block's sum
    of ``A[i, i − o]`` over its rows (consecutive ``positions``; only ``j ≤ i``; see :func:`_add_diagonals`)."""
    reverse = torch.zeros(block.shape[0], block.shape[2] if width is None else width, dtype=torch.float64)
    _add_diagonals(reverse, block, int(positions[0]))
    return reverse.flip(1)


def _vertical_slash_orders(rows: RowBlocks, *, last_q: int = LAST_Q, forced: int = FORCED) -> tuple[Tensor, Tensor]:
    """Every column and every diagonal offset by MInference's estimate, best first (``[H, N]`` long each):
    the sums of the last ``last_q`` rows' attention by column and by diagonal, the first ``forced`` of each
    always first. Any split's columns and offsets are prefixes of these."""
    first = max(0, rows.n_rows - last_q)
    block = rows.block(first, rows.n_rows).double()
    positions = torch.arange(first, rows.n_rows) + rows.offset
    n = rows.n_keys
    if block.shape[-1] < n:
        block = F.pad(block, (0, n - block.shape[-1]))
    vertical = block.sum(1)
    slash = _diagonal_sums(block, positions)
    vertical[:, :forced] = math.inf
    slash[:, :forced] = math.inf
    return _top(vertical, n), _top(slash, n)


def estimate_vertical_slash(rows: RowBlocks, n_vertical: int, n_slash: int, *, last_q: int = LAST_Q,
                            forced: int = FORCED) -> tuple[Tensor, Tensor]:
    """MInference's vertical-slash estimate: from the last ``last_q`` rows' attention, the ``n_vertical``
    columns with the highest sums (the first ``forced`` always among them) and the ``n_slash`` diagonal
    offsets with the highest sums (offsets ``0 … forced − 1`` always). ``(columns [H, n_vertical] long,
    offsets [H, N] bool)``."""
    columns, slashes = _vertical_slash_orders(rows, last_q=last_q, forced=forced)
    n = rows.n_keys
    offsets = torch.zeros(rows.n_heads, n, dtype=torch.bool)
    offsets.scatter_(1, slashes[:, : min(n_slash, n)], True)
    return columns[:, : min(n_vertical, n)], offsets


def estimate_blocks(rows: RowBlocks, top_blocks: int, *, block: int = BLOCK) -> Tensor:
    """MInference's block-sparse index: queries and keys mean-pooled over blocks of ``block`` positions,
    ``pooled_q · pooled_k`` per query head (its KV head's keys), key blocks after the query block masked,
    each block row's ``top_blocks`` best kept. ``[H, query blocks, key blocks]`` bool (query blocks by
    absolute position). Needs ``rows.q`` and ``rows.k``."""
    if rows.q is None or rows.k is None:
        raise ValueError("block-sparse pooling needs the queries and keys (QKRows, or DenseRows with q and k)")
    q, k = rows.q.double(), rows.k.double()
    h, hkv = q.shape[0], k.shape[0]
    qb = (torch.arange(rows.n_rows) + rows.offset) // block
    nbq, nbk = int(qb[-1]) + 1, -(-rows.n_keys // block)
    pooled_q = torch.zeros(h, nbq, q.shape[2], dtype=torch.float64).index_add_(1, qb, q)
    pooled_q /= torch.bincount(qb, minlength=nbq).clamp(min=1)[None, :, None]
    kb = torch.arange(rows.n_keys) // block
    pooled_k = torch.zeros(hkv, nbk, k.shape[2], dtype=torch.float64).index_add_(1, kb, k)
    pooled_k /= torch.bincount(kb, minlength=nbk)[None, :, None]
    scores = pooled_q @ pooled_k.repeat_interleave(h // hkv, dim=0).transpose(1, 2)
    causal = torch.arange(nbk)[None, :] <= torch.arange(nbq)[:, None]
    scores = scores.masked_fill(~causal, -math.inf)
    chosen = torch.zeros(h, nbq, nbk, dtype=torch.bool)
    chosen.scatter_(2, torch.sort(scores, dim=2, descending=True, stable=True).indices[..., :top_blocks], True)
    return chosen & causal


@dataclass
class _Sums:
    """Σ over rows ``i ≥ first`` of a layer's attention: by column, by diagonal offset, by (query block,
    key block), and the overlaps of the patterns' two parts (A-shape's sinks ∩ band, vertical ∩ slash).

    Vertical-slash: ``orders`` are every column and every offset best first, and split ``k`` takes the first
    ``v_k`` columns and ``s_k`` offsets (``splits`` by ``v`` ascending, so ``s`` descending): a column of rank
    ``< v_k`` first kept by split ``kc`` and an offset last kept by split ``ko`` meet in the splits ``kc … ko``. One
    gather of the widest split's columns per block, each cell binned by ``(head, kc, ko)``, gives every split's
    overlap. A block costs a few passes over its cells (few, large operations: each is a parallel region)."""

    n_heads: int
    n_keys: int
    first: int
    a_shape: tuple[int, int]  # sinks, local
    orders: tuple[Tensor, Tensor] | None = None  # vertical-slash: (columns [H, N], offsets [H, N]) best first
    splits: Sequence[tuple[int, int]] = ()  # (v, s) by v ascending
    block: int = 0  # 0: no block sums
    n_query_blocks: int = 0
    stop: int | None = None  # rows at positions from here on skipped (another _Sums adds them: merge)

    def __post_init__(self) -> None:
        h, n = self.n_heads, self.n_keys
        sinks, local = self.a_shape
        self.full = bool(self.orders is not None or self.block)  # else only what the A-shape reads
        self.rows = 0
        self.column = torch.zeros(h, n if self.full else min(sinks, n), dtype=torch.float64)
        self.reverse = torch.zeros(h, n if self.full else min(local, n), dtype=torch.float64)  # by offset, reversed
        self.a_overlap = torch.zeros(h, dtype=torch.float64)
        ns = len(self.splits)
        self.meet = torch.zeros(h, ns, ns + 1, dtype=torch.float64)  # [head, kc, ko + 1]: cells of the columns
        meeting = [k for k, (v, s) in enumerate(self.splits) if v and s]  # splits whose parts can meet
        self.union = torch.zeros(h, 0, dtype=torch.long)
        if self.orders is not None and meeting:
            columns, offsets = self.orders
            union = columns[:, : max(self.splits[k][0] for k in meeting)]
            kc = torch.zeros(union.shape, dtype=torch.long)  # by rank: the first split keeping the column
            for k in reversed(meeting):
                kc[:, : self.splits[k][0]] = k
            # By column (a block reads only the columns before its width: its rows see no later key).
            self.union, order = union.sort(1)
            kc = kc.gather(1, order)
            # Cell (head, row at p, column c) reads bin[head, kc, p − c + N]: distances < 0 (keys after the row)
            # and offsets no split keeps read ko = −1.
            ko = torch.full((h, 2 * n), -1, dtype=torch.long)
            for k, (_, s) in enumerate(self.splits):
                if s:
                    ko[:, n:].scatter_(1, offsets[:, :s], k)
            heads = torch.arange(h)[:, None, None]
            bins = (heads * ns + torch.arange(ns)[None, :, None]) * (ns + 1) + 1 + ko[:, None, :]
            self.bins = bins.view(-1).to(torch.int16 if h * ns * (ns + 1) < 2**15 else torch.long)  # cache-sized
            self.at = ((torch.arange(h)[:, None] * ns + kc) * 2 * n + n) - self.union  # [h, u]: p = 0
        nbk = -(-n // self.block) if self.block else 0
        self.blocks = torch.zeros(h, self.n_query_blocks, nbk, dtype=torch.float64)

    @property
    def diagonal(self) -> Tensor:
        """``[H, width]`` float64: the sums by diagonal offset."""
        return self.reverse.flip(1)

    @property
    def vs_overlap(self) -> Tensor:
        """``[splits, H]`` float64: each vertical-slash split's mass on cells both its parts keep."""
        # Split k: columns first kept by a split ≤ k, offsets last kept by a split ≥ k.
        ns = len(self.splits)
        by_ko = self.meet.flip(2).cumsum(2).flip(2)  # [h, kc, m]: Σ over ko + 1 ≥ m
        cumulative = by_ko.cumsum(1)  # Σ over kc ≤ k
        k = torch.arange(ns)
        return cumulative[:, k, k + 1].T

    def add(self, block: Tensor, positions: Tensor) -> None:
        """Add a block of rows ``[H, R, W]`` at consecutive ``positions``; rows before ``first`` are skipped.
        ``W`` is the layer's key count, or any width from the last position + 1 on (a narrow causal block: the
        keys after are 0)."""
        skip = int((positions < self.first).sum())
        end = len(positions) if self.stop is None else int((positions < self.stop).sum())
        if skip >= end:
            return
        a, positions = block[:, skip:end], positions[skip:end]
        h, r, w = a.shape
        p0 = int(positions[0])
        self.rows += r
        width = min(self.column.shape[1], w)
        if self.block:
            # One product sums each query block's rows and all rows (the column sums) in one pass over the block;
            # those sums pooled by key block: the full key blocks as a view, the ragged last one apart.
            cut = [0, *range(self.block - p0 % self.block, r, self.block), r]  # rows where a query block starts
            nq = len(cut) - 1
            weights = torch.zeros(nq + 1, r, dtype=a.dtype)
            for q, (i, j) in enumerate(pairwise(cut)):
                weights[q, i:j] = 1
            weights[nq] = 1
            sums = torch.matmul(weights, a)  # [h, nq + 1, w]
            self.column[:, :width] += sums[:, nq, :width]
            whole = w // self.block
            qb = p0 // self.block
            target = self.blocks[:, qb : qb + nq]
            target[..., :whole] += sums[:, :nq, : whole * self.block].reshape(h, nq, whole, self.block).sum(-1)
            if whole * self.block < w:
                target[..., whole] += sums[:, :nq, whole * self.block :].sum(-1)
        else:
            self.column[:, :width] += a[..., :width].sum(1)
        _add_diagonals(self.reverse, a, p0)
        sinks, local = self.a_shape
        near_rows = int((positions < sinks + local - 1).sum())  # rows whose band reaches a sink column
        if near_rows:
            j = torch.arange(min(sinks, w))
            p = positions[:near_rows, None]
            near = (p - j[None, :] < local) & (j[None, :] <= p)
            self.a_overlap += (a[:, :near_rows, : len(j)] * near).sum((1, 2), dtype=torch.float64)
        u = int((self.union < w).sum(1).max()) if self.union.shape[1] else 0  # columns the block can see
        if u:
            union = self.union[:, :u]
            picked = a.gather(2, union.clamp(max=w - 1)[:, None, :].expand(h, r, u))  # columns ≥ w: ko −1
            cells = self.bins.take(self.at[:, None, :u] + positions[None, :, None])
            self.meet.view(-1).add_(torch.bincount(cells.view(-1), picked.view(-1).double(), self.meet.numel()))

    def merge(self, later: _Sums) -> None:
        """Take ``later``'s rows (from ``self.stop`` on, a full _Sums) as if added here: its sums by column and by
        offset cover this one's; its rows lie past this A-shape's sinks-band overlap (checked)."""
        sinks, local = self.a_shape
        if not (later.full and self.stop == later.first and later.first >= sinks + local - 1):
            raise ValueError("merge takes a full _Sums whose first row is this one's stop, past its overlap rows")
        self.column += later.column[:, : self.column.shape[1]]
        self.reverse += later.reverse[:, later.reverse.shape[1] - self.reverse.shape[1] :]
        self.rows += later.rows

    def a_shape_mass(self) -> Tensor:
        sinks, local = self.a_shape
        return self.column[:, :sinks].sum(1) + self.diagonal[:, :local].sum(1) - self.a_overlap

    def vertical_slash_mass(self, index: int) -> Tensor:
        assert self.orders is not None
        (columns, offsets), (v, s) = self.orders, self.splits[index]
        return (self.column.gather(1, columns[:, :v]).sum(1) + self.diagonal.gather(1, offsets[:, :s]).sum(1)
                - self.vs_overlap[index])

    def mean(self, mass: Tensor) -> Tensor:
        """Mass per row; 1 where no row is at or after ``first`` (nothing can be lost)."""
        return mass / self.rows if self.rows else torch.ones_like(mass)


@dataclass(frozen=True)
class PatternSearch:
    """One layer's search: per query head ``[H]`` tensors. ``recall`` per pattern (vertical-slash: the best
    split, its sizes in ``vertical``/``slash``), ``winner`` per head, the A-shape's ``sinks``/``local``, the
    blocks per row ``top_blocks``, every candidate tried as MInference's ``all_info`` rows
    ``(pattern, v_size, s_size, recall [H])``, and DuoAttention's ``streaming_mass``."""

    budget: int
    first_query: int
    recall: dict[str, Tensor]
    vertical: Tensor
    slash: Tensor
    sinks: int
    local: int
    top_blocks: int
    block: int
    candidates: list[tuple[str, int, int, Tensor]]
    streaming_mass: Tensor

    @property
    def winner(self) -> list[str]:
        """Each head's best of the patterns measured here (:func:`~.patterns_registry.winners`)."""
        return winners(self.recall)


def search_patterns(rows: RowBlocks, budget: int | float, *, sinks: int = SINKS, last_q: int = LAST_Q,
                    block: int = BLOCK, forced: int = FORCED, shares: Sequence[float] = VERTICAL_SHARES,
                    first_query: int | None = None, duo_sink: int = DUO_SINK,
                    duo_recent: int = DUO_RECENT) -> PatternSearch:
    """MInference's per-head search at one ``budget`` (keys per row; an int or a fraction of the keys) over
    a causal prefix's rows (``rows.offset == 0`` normally), and DuoAttention's streaming mass, in one pass
    over the rows. ``first_query`` (default: the budget) is MInference's ``i0``."""
    if not rows.causal:
        raise ValueError("sparse prefill patterns are defined for causal attention")
    n, h = rows.n_keys, rows.n_heads
    b = resolve_budget(budget, n)
    i0 = min(b, n - 1) if first_query is None else first_query
    a_sinks = min(sinks, b // 2)
    splits = sorted({(v, b - v) for v in (min(b, max(0, round(s * b))) for s in shares)})
    orders = _vertical_slash_orders(rows, last_q=last_q, forced=forced)
    top_blocks = max(1, b // block)
    n_query_blocks = (rows.offset + rows.n_rows - 1) // block + 1
    sums = _Sums(h, n, i0, (a_sinks, b - a_sinks), orders, splits, block, n_query_blocks)
    # DuoAttention's sums from the rows before i0 alone where the search's own sums cover the rest (by default).
    merge = duo_sink + duo_recent <= i0  # (then i0 is past the rows where sinks and window meet)
    duo = _Sums(h, n, duo_sink + duo_recent, (duo_sink, duo_recent), stop=i0 if merge else None)
    for start, a in row_blocks(rows, min(max(0, i0 - rows.offset), max(0, duo.first - rows.offset), rows.n_rows)):
        positions = torch.arange(start, start + a.shape[1]) + rows.offset
        sums.add(a, positions)
        duo.add(a, positions)
    if merge:
        duo.merge(sums)
    candidates = [("a_shape", a_sinks, b - a_sinks, sums.mean(sums.a_shape_mass()))]
    candidates += [("vertical_slash", v, s, sums.mean(sums.vertical_slash_mass(i))) for i, (v, s) in enumerate(splits)]
    chosen = estimate_blocks(rows, top_blocks, block=block)
    candidates.append(("block_sparse", top_blocks, block, sums.mean((sums.blocks * chosen).sum((1, 2)))))
    vs_recalls = torch.stack([c[3] for c in candidates if c[0] == "vertical_slash"])
    best = vs_recalls.argmax(0)
    recall = {"a_shape": candidates[0][3], "vertical_slash": vs_recalls.max(0).values,
              "block_sparse": candidates[-1][3]}
    return PatternSearch(
        budget=b, first_query=i0, recall=recall,
        vertical=torch.tensor([splits[int(i)][0] for i in best]), slash=torch.tensor([splits[int(i)][1] for i in best]),
        sinks=a_sinks, local=b - a_sinks, top_blocks=top_blocks, block=block, candidates=candidates,
        streaming_mass=duo.mean(duo.a_shape_mass()),
    )


def full_attention_heads(streaming_mass: Tensor, n_kv_heads: int, threshold: float = DUO_THRESHOLD) -> Tensor:
    """DuoAttention's split per KV head: ``[Hkv]`` bool, True for a head that keeps full attention (the paper's
    "retrieval head", the 1 of its ``full_attention_heads.tsv``), i.e. some query head of its group keeps less than
    ``threshold`` of its mass under sinks + recent window; False for a streaming head. attnviz keeps DuoAttention's
    words "full attention" and "streaming" apart from Wu et al.'s retrieval heads (:mod:`attnviz.needle`)."""
    group = streaming_mass.reshape(n_kv_heads, -1)
    return group.min(1).values < threshold


def minference_config(layers: Sequence[PatternSearch]) -> list[dict[str, list[object]]]:
    """MInference's per-head config (its ``configs/*_best_pattern.json``): a list over layers of
    ``{"head": [pattern, v_size, s_size, score]}`` with MInference's names (``stream_llm`` with ``n_init`` =
    sinks and ``n_local``; ``vertical_and_slash`` with the column and diagonal counts; ``block_sparse`` with
    the blocks per row and the block size, which MInference's kernel replaces by its own top-k) and the
    recall as the score."""
    config = []
    for search in layers:
        heads: dict[str, list[object]] = {}
        known = winners({name: r for name, r in search.recall.items() if PATTERNS[name].minference})
        for head, pattern in enumerate(known):
            if pattern == "a_shape":
                sizes = [search.sinks, search.local]
            elif pattern == "vertical_slash":
                sizes = [int(search.vertical[head]), int(search.slash[head])]
            else:
                sizes = [search.top_blocks, search.block]
            heads[str(head)] = [PATTERNS[pattern].minference, *sizes, float(search.recall[pattern][head])]
        config.append(heads)
    return config


def duo_attention_tsv(full_heads: Sequence[Tensor]) -> str:
    """DuoAttention's ``full_attention_heads.tsv``: one line per layer, one tab-separated column per KV
    head, 1 for a full-attention head and 0 for a streaming one, written as numpy's
    ``savetxt`` does (``%.18e``); ``duo_attn.utils.load_attn_pattern`` reads it back with ``np.loadtxt``."""
    return "".join("\t".join(f"{float(x):.18e}" for x in layer.tolist()) + "\n" for layer in full_heads)

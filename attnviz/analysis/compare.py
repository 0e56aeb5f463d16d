"""Comparing heads: clustering the head-distance matrix, the extreme pairs, and two runs side by side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..errors import UsageError
from ..labels import head_name
from . import metrics
from .heads import head_table

if TYPE_CHECKING:  # pragma: no cover
    from ..result import AttentionResult

MAX_COMPARED_HEADS = 8192
"""Heads compared pairwise at once (80 layers × 64 heads, 61 × 128 fit): the cost grows with their square."""


def cluster_order(dist: np.ndarray) -> list[int]:
    """Leaf order of average-linkage (UPGMA) hierarchical clustering of a symmetric distance matrix.

    Merges the two closest clusters until one is left; a merged cluster lists its left part's
    leaves, then its right part's, so similar heads end up next to each other.
    """
    d = np.array(dist, dtype=np.float64)
    n = d.shape[0]
    if n <= 2:
        return list(range(n))
    members: dict[int, list[int]] = {i: [i] for i in range(n)}
    active = list(range(n))
    d = d.copy()
    np.fill_diagonal(d, np.inf)
    while len(active) > 1:
        sub = d[np.ix_(active, active)]
        flat = int(np.argmin(sub))
        i, j = active[flat // len(active)], active[flat % len(active)]
        ni, nj = len(members[i]), len(members[j])
        # Lance–Williams update for average linkage: the new cluster lives in slot i.
        d[i, :] = (ni * d[i, :] + nj * d[j, :]) / (ni + nj)
        d[:, i] = d[i, :]
        d[i, i] = np.inf
        members[i] = members[i] + members.pop(j)
        active.remove(j)
    return members[active[0]]


@dataclass
class HeadPairs:
    most_similar: list[tuple[str, str, float]]
    most_different: list[tuple[str, str, float]]


def extreme_pairs(dist: np.ndarray, names: list[str], k: int = 5) -> HeadPairs:
    """The ``k`` closest and ``k`` farthest distinct pairs of heads."""
    n = len(names)
    iu = np.triu_indices(n, 1)
    values = np.asarray(dist)[iu]
    order = np.argsort(values, kind="stable")
    pairs = [(names[iu[0][o]], names[iu[1][o]], float(values[o])) for o in order]
    return HeadPairs(most_similar=pairs[:k], most_different=pairs[::-1][:k])


def compare_runs(a: AttentionResult, b: AttentionResult) -> tuple[torch.Tensor, str]:
    """Per head ``[layers, heads]``, how differently it behaves in run a and run b, and how that was measured.

    Equal token counts: the Jensen–Shannon distance of :func:`attnviz.analysis.metrics.paired_head_distance`.
    Otherwise the patterns cannot be laid over each other, so the heads' statistics are compared:
    the mean absolute difference of the [0, 1] statistics of :mod:`attnviz.analysis.heads`.
    """
    if a.attentions.shape[:2] != b.attentions.shape[:2]:
        raise UsageError(
            f"the two runs have different shapes: {tuple(a.attentions.shape[:2])} and {tuple(b.attentions.shape[:2])} "
            "(layers, heads)"
        )
    if a.attentions.shape == b.attentions.shape:
        return metrics.paired_head_distance(a.attentions, b.attentions), "Jensen–Shannon distance of the patterns"
    ta, tb = head_table([a]), head_table([b])
    unit = [name for name in ta.stats if name not in ("entropy", "distance")]  # statistics in [0, 1]
    diff = torch.stack([(ta.stats[n] - tb.stats[n]).abs() for n in unit]).mean(0)
    return diff, "mean absolute difference of the head statistics (the token counts differ)"


THUMBNAIL_CELLS = 128  # cells per axis kept of each head for display (thumbnails and the image pool further)
DISTANCE_BUDGET = 1_000_000_000  # element terms of the pairwise Jensen–Shannon sums computed exactly
MIN_DISTANCE_ROWS = 32  # fewest query rows an estimate sums over


def distance_rows(n_heads: int, q: int, k: int, *, all_rows: bool = False) -> list[int] | None:
    """Query rows the head distances are summed over: None (every row) while the pairwise sums
    ``n²/2 · q · k`` stay within :data:`DISTANCE_BUDGET` (or with ``all_rows``); else evenly spaced
    rows, as many as the budget allows (at least :data:`MIN_DISTANCE_ROWS`), and the sums are scaled to all ``q`` rows."""
    pairs = n_heads * n_heads / 2
    if all_rows or pairs * q * k <= DISTANCE_BUDGET:
        return None
    count = max(MIN_DISTANCE_ROWS, int(DISTANCE_BUDGET / (pairs * k)))
    if count >= q:
        return None
    return sorted({round(i * (q - 1) / max(1, count - 1)) for i in range(count)})


@dataclass
class HeadsOverview:
    """Every head of some layers, for comparing them: each head's matrix for display (max-pooled to
    at most :data:`THUMBNAIL_CELLS` per axis), and the Jensen–Shannon distance between every pair."""

    model_name: str
    layers: list[int]  # the model's numbers of the layers compared
    n_heads: int
    display: torch.Tensor  # [layers, heads, P, P]
    labels: list[str]  # P labels: the first token of each pooled block
    distance: np.ndarray  # [N, N], N = layers × heads, head (l, h) at l·H + h
    notes: list[str]

    @property
    def names(self) -> list[str]:
        return [head_name(layer, head) for layer in self.layers for head in range(self.n_heads)]


class OverviewBuilder:
    """A :class:`HeadsOverview` built one layer at a time: each layer's display copy is pooled and
    its distance rows kept as it arrives, so a long input never holds every layer's matrices."""

    def __init__(self, header: AttentionResult, layers: list[int], *, n_heads: int, all_rows: bool = False) -> None:
        if len(layers) * n_heads > MAX_COMPARED_HEADS:
            raise UsageError(f"comparing {len(layers) * n_heads:,} heads means {(len(layers) * n_heads) ** 2:,} pairs, "
                             f"more than the {MAX_COMPARED_HEADS:,} heads compared at once; choose one [[layer]]")
        self.header, self.layers = header, layers
        n = len(header.tokens)
        self.rows = distance_rows(len(layers) * n_heads, n, n, all_rows=all_rows)
        self.factor = max(1, -(-n // THUMBNAIL_CELLS))
        self.display: list[torch.Tensor] = []
        self.kept: list[torch.Tensor] = []

    def add(self, attentions: torch.Tensor) -> None:
        """The next layer, ``[heads, q, k]``."""
        a = attentions.float()
        pooled = a if self.factor == 1 else torch.nn.functional.max_pool2d(a[None], self.factor, ceil_mode=True)[0]
        self.display.append(pooled.clone())
        self.kept.append(a.clone() if self.rows is None else a[:, self.rows].clone())

    def add_rows(self, part: Any) -> None:
        """The next layer as blocks of query rows (:meth:`attnviz.sources.stream.ItemLayer.row_blocks`,
        a long input): pooled and its distance rows kept block by block, never the whole ``[H, q, k]``."""
        from ..attention.rows import rows_per_block

        n, heads, f = part.n_tokens, part.n_heads, self.factor
        side = -(-n // f)
        pooled = torch.zeros(heads, side, side)  # weights are ≥ 0: columns a block leaves out are 0 anyway
        chosen = torch.arange(n) if self.rows is None else torch.tensor(self.rows)
        kept = torch.zeros(heads, len(chosen), n)
        step = max(f, rows_per_block(heads, n) // f * f)  # whole pooling windows in every block
        for first, block in part.row_blocks(step):
            stop = first + block.shape[1]
            small = block if f == 1 else torch.nn.functional.max_pool2d(block[None], f, ceil_mode=True)[0]
            pooled[:, first // f : first // f + small.shape[1], : small.shape[2]] = small
            inside = ((chosen >= first) & (chosen < stop)).nonzero().flatten()
            kept[:, inside, : block.shape[2]] = block[:, chosen[inside] - first]
        self.display.append(pooled)
        self.kept.append(kept)

    def finish(self) -> HeadsOverview:
        n = len(self.header.tokens)
        kept = torch.stack(self.kept)  # (L', H, R, k)
        self.kept = []
        distance = metrics.head_distance(kept)
        notes = []
        if self.rows is not None:
            distance = distance * (n / len(self.rows))
            notes.append(f"head distances estimated from {len(self.rows)} of {n} query rows (evenly spaced), "
                         "scaled to all rows")
        if self.factor > 1:
            side = -(-n // self.factor)
            notes.append(f"each head shown max-pooled {n}×{n} → {side}×{side} (blocks of {self.factor} tokens)")
        return HeadsOverview(
            model_name=self.header.model_name, layers=list(self.layers), n_heads=kept.shape[1],
            display=torch.stack(self.display), labels=list(self.header.tokens[:: self.factor]),
            distance=distance.numpy(), notes=notes,
        )


def overview_of_result(result: AttentionResult, layers: list[int], *, all_rows: bool = False) -> HeadsOverview:
    """:class:`HeadsOverview` of a whole result's ``layers`` (positions in ``result.attentions``)."""
    builder = OverviewBuilder(result, layers, n_heads=result.n_heads, all_rows=all_rows)
    for layer in layers:
        builder.add(result.attentions[layer])
    return builder.finish()


@dataclass
class Comparison:
    """What compare-heads shows, computed: the matrix beside the heads (head distances in clustered
    order, or each head's change against another run) and the pairs or heads to list."""

    overview: HeadsOverview
    matrix: np.ndarray
    rows: list[str]
    cols: list[str]
    matrix_title: str
    notes: list[str]  # about the matrix (e.g. distances estimated from some rows)
    pairs: HeadPairs | None = None  # most similar / most different heads (no other run)
    ranking: list[tuple[str, float]] | None = None  # heads that change most (against another run)
    other: HeadsOverview | None = None
    other_name: str | None = None


def comparison(overview: HeadsOverview, *, top: int = 5, other: HeadsOverview | None = None,
               change: tuple[torch.Tensor, str] | None = None, other_name: str | None = None) -> Comparison:
    """The heads of ``overview`` compared with each other (the clustered head-distance matrix and the
    ``top`` closest and farthest pairs), or, with ``change`` (``[layers, heads]`` and how it was
    measured, from :func:`compare_runs`), how much each head changes against ``other``."""
    layers, n_heads, names = overview.layers, overview.n_heads, overview.names
    if change is None:
        dist = overview.distance
        order = cluster_order(dist)
        return Comparison(
            overview=overview, matrix=dist[np.ix_(order, order)], rows=[names[i] for i in order],
            cols=[names[i] for i in order], matrix_title="Jensen–Shannon divergence between heads, summed over query rows (each row ≤ ln 2; clustered order)",
            notes=[n for n in overview.notes if n.startswith("head distances")], pairs=extreme_pairs(dist, names, k=top),
        )
    matrix = change[0].numpy()[layers]
    flat = sorted(((head_name(li, h), float(matrix[i, h])) for i, li in enumerate(layers) for h in range(n_heads)),
                  key=lambda item: item[1], reverse=True)
    return Comparison(
        overview=overview, matrix=matrix, rows=[f"L{li}" for li in layers], cols=[f"H{h}" for h in range(n_heads)],
        matrix_title=f"change per head vs {other_name}: {change[1]}", notes=[], ranking=flat[:top], other=other,
        other_name=other_name,
    )

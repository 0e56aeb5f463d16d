"""Two checkpoints of one architecture over a corpus: which heads changed, and how sure that is.

For every text both models run, and each head gets, per text, the difference of every statistic
(:mod:`attnviz.analysis.statistics`, model B minus model A) and the distance between the two models'
attention distributions: the Jensen–Shannon divergence of each query row, averaged over the rows
(natural log, so at most ln 2). Over the texts, each of those is summarised by its mean, a bootstrap 95%
interval of the mean (texts resampled with replacement) and a two-sided paired permutation p-value (the
sign of each text's difference flipped at random; Good 2005): the texts are paired, as the same text runs
through both models. Heads are ranked by their mean distance, largest first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Change:
    """A per-text difference over the texts: its ``mean``, a bootstrap 95% interval (``low``, ``high``) and
    the paired permutation ``p`` (of a mean difference this far from 0)."""

    mean: float
    low: float
    high: float
    p: float

    def document(self) -> dict[str, float]:
        return {"mean": round(self.mean, 6), "ci95": [round(self.low, 6), round(self.high, 6)], "p": round(self.p, 6)}


@dataclass(frozen=True)
class HeadChange:
    layer: int
    head: int
    distance: Change  # the mean Jensen–Shannon divergence per query row between the two models
    stats: dict[str, Change]  # each statistic, model B − model A

    def document(self) -> dict[str, object]:
        return {"layer": self.layer, "head": self.head, "distance": self.distance.document(),
                "statistics": {name: change.document() for name, change in self.stats.items()}}


@dataclass
class CheckpointDiff:
    """Every head's change from ``model`` to ``other`` over ``n_texts`` texts, ranked (see the module)."""

    model: str
    other: str
    n_texts: int
    heads: list[HeadChange]
    bootstrap: int
    permutations: int

    def document(self, top: int | None = None) -> dict[str, object]:
        return {"model": self.model, "other": self.other, "n_texts": self.n_texts,
                "distance": "mean Jensen-Shannon divergence per query row between the two models (nats, <= ln 2)",
                "statistics": "other minus model; ci95: bootstrap over texts; p: paired sign-flip permutation test",
                "bootstrap": self.bootstrap, "permutations": self.permutations,
                "heads": [head.document() for head in (self.heads[:top] if top else self.heads)]}


class DiffBuilder:
    """Collects each text's per-head differences, then summarises them (:meth:`finish`)."""

    def __init__(self) -> None:
        self.distances: list[Tensor] = []
        self.stats: dict[str, list[Tensor]] = {}
        self.layers: list[int] | None = None

    def add(self, distance: Tensor, stats_a: dict[str, Tensor], stats_b: dict[str, Tensor]) -> None:
        """One text: ``distance`` ``[layers, heads]`` and both models' statistics (each ``[layers, heads]``)."""
        self.distances.append(distance.double())
        for name, values in stats_a.items():
            if name in stats_b:
                self.stats.setdefault(name, []).append((stats_b[name] - values).double())

    def finish(self, model: str, other: str, *, bootstrap: int = 1000, permutations: int = 1000,
               seed: int = 0) -> CheckpointDiff:
        generator = torch.Generator().manual_seed(seed)
        distance = summarise(torch.stack(self.distances), bootstrap, permutations, generator)
        stats = {name: summarise(torch.stack(values), bootstrap, permutations, generator)
                 for name, values in self.stats.items()}
        n_layers, n_heads = self.distances[0].shape
        numbers = self.layers or list(range(n_layers))
        heads = [HeadChange(numbers[layer], head, _change(distance, layer, head),
                            {name: _change(values, layer, head) for name, values in stats.items()})
                 for layer in range(n_layers) for head in range(n_heads)]
        heads.sort(key=lambda h: (-h.distance.mean, h.layer, h.head))
        return CheckpointDiff(model, other, len(self.distances), heads, bootstrap, permutations)


def summarise(values: Tensor, bootstrap: int, permutations: int, generator: torch.Generator) -> tuple[Tensor, ...]:
    """Per cell of ``values`` ``[texts, …]``: the mean, the bootstrap 95% interval and the permutation p-value."""
    n = values.shape[0]
    flat = values.reshape(n, -1)
    mean = flat.mean(0)
    means = torch.cat(list(_resampled_means(flat, bootstrap, generator)))  # [bootstrap, cells]
    low, high = torch.quantile(means, 0.025, dim=0), torch.quantile(means, 0.975, dim=0)
    signs = torch.randint(0, 2, (permutations, n), generator=generator, dtype=torch.float64) * 2 - 1
    flipped = (signs @ flat) / n  # [permutations, cells]: each text's difference with a random sign
    extreme = (flipped.abs() >= mean.abs()[None] - 1e-12).sum(0)
    p = (extreme + 1) / (permutations + 1)
    shape = values.shape[1:]
    return tuple(t.reshape(shape) for t in (mean, low, high, p.double()))


def _resampled_means(flat: Tensor, count: int, generator: torch.Generator, chunk: int = 100) -> Iterable[Tensor]:
    n = flat.shape[0]
    for start in range(0, count, chunk):
        picks = torch.randint(0, n, (min(chunk, count - start), n), generator=generator)
        yield flat[picks].mean(1)


def _change(summary: tuple[Tensor, ...], layer: int, head: int) -> Change:
    mean, low, high, p = (float(t[layer, head]) for t in summary)
    return Change(mean, low, high, p)

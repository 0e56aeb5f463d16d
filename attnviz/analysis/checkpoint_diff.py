"""Two checkpoints of one architecture over a corpus: which heads changed, and how sure that is.

Each head gets, per text, the difference of every statistic (:mod:`attnviz.analysis.statistics`, model
B minus model A) and, where both models ran here, the distance between their attention distributions:
the Jensen–Shannon divergence of each query row, averaged over the rows (natural log, so at most ln 2).
Two exports' ``heads.parquet`` give the statistics' differences alone (the distance needs both models'
weights). Over the texts, each measure is summarised by its mean, a bootstrap 95% interval of the mean
(texts resampled with replacement, as multinomial weights so 10^5 texts stay a matrix product) and a
two-sided paired permutation p-value (the sign of each text's difference flipped at random; Good 2005):
the texts are paired, as the same text runs through both models. The distance is never negative, so it
gets no p-value (a sign flip can only shrink it): its interval says how far it is from 0. Heads are ranked
by their mean distance, largest first; without it, by their largest standardised change of a statistic
(the mean difference over its standard deviation across texts, Cohen's d_z).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

DISTANCE = "js_divergence"  # the measure of the two models' attention (the statistic "distance" is another thing)
CHUNK = 100  # resamples at a time: [CHUNK, texts] weights

SUMMARY_SECONDS_LIMIT = 300.0
"""Estimated seconds of the resampling (:func:`summary_cost`) past which :func:`check_summary_cost` refuses unless
forced: the defaults (1,000 of each) on 10^5 texts of all-MiniLM-L6-v2's 6 × 12 heads take about 15 s."""

SECONDS_PER_STEP = 5e-5
"""Seconds of one chunk of :data:`CHUNK` resamples or sign flips for one measure, whatever its size (the
interpreter's and torch's per-call costs). These four constants are a least-squares fit to 15 timings of
:func:`summarise_all` (one thread of the development machine, 6 to 30,000 texts, 4 to 1,024 heads, 100 to
100,000 resamples and flips; within a factor of 2 of each), rounded up by about a fifth."""

SECONDS_PER_CELL = 7e-11
"""Seconds per resample (or sign flip) × text × head × measure: the matrix products, single-threaded."""

SECONDS_PER_SORTED = 7e-9
"""Seconds per resample × head × measure × log2(resamples): the quantiles' sort."""

SECONDS_PER_DRAW = 5e-9
"""Seconds per resample × text: drawing the resample's texts."""


@dataclass(frozen=True)
class Change:
    """A per-text difference over the texts: its ``mean``, a bootstrap 95% interval (``low``, ``high``) and
    the paired permutation ``p`` (of a mean difference this far from 0; None for the distance, which is
    never negative, so a sign-flip test of it means nothing)."""

    mean: float
    low: float
    high: float
    p: float | None
    q: float | None = None  # the p-value adjusted for every head and statistic tested (Benjamini–Hochberg)

    def document(self) -> dict[str, object]:
        return {"mean": _number(self.mean), "ci95": [_number(self.low), _number(self.high)], "p": _number(self.p),
                **({"q": _number(self.q)} if self.q is not None else {})}


def _number(value: float | None) -> float | None:
    """Rounded for JSON; a NaN (a statistic undefined on the texts) is null."""
    return None if value is None or math.isnan(value) else round(value, 6)


@dataclass(frozen=True)
class HeadChange:
    layer: int
    head: int
    distance: Change | None  # the mean Jensen–Shannon divergence per query row; None from two exports' tables
    stats: dict[str, Change]  # each statistic, model B − model A
    score: float  # what the heads are ranked by (see the module)
    strongest: str | None = None  # the statistic whose change is largest for its spread (|d_z|)
    effect: float = 0.0  # that statistic's d_z (mean change over its standard deviation across the texts)

    def document(self) -> dict[str, object]:
        return {"layer": self.layer, "head": self.head, "score": _number(self.score),
                "strongest": {"statistic": self.strongest, "d_z": _number(self.effect)},
                **({"distance": self.distance.document()} if self.distance is not None else {}),
                "statistics": {name: change.document() for name, change in self.stats.items()}}


@dataclass
class CheckpointDiff:
    """Every head's change from ``model`` to ``other`` over ``n_texts`` texts, ranked (see the module);
    ``per_text[measure]``: ``[texts, layers, heads]``, the texts being ``text_index``."""

    model: str
    other: str
    n_texts: int
    heads: list[HeadChange]
    bootstrap: int
    permutations: int
    layers: list[int] = field(default_factory=list)
    per_text: dict[str, Tensor] = field(default_factory=dict, repr=False)
    text_index: list[int] = field(default_factory=list, repr=False)
    note: str = ""  # what a reader should know (texts in one export alone, left out)

    exact: bool = False  # the p-values enumerate every sign pattern (2^texts ≤ permutations)
    texts: dict[int, str] = field(default_factory=dict, repr=False)  # text_index → text, where known (an export's)

    def write_parquet(self, path: Any) -> Any:
        """Every text's change per head: one row per text × layer × head with ``text_index``, ``layer``, ``head`` and
        each measure (``js_divergence`` where both models ran, then each statistic, B − A); joins an export's
        ``heads.parquet`` on the first three."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        from ..fileio import atomic_write

        texts, n_layers, n_heads = next(iter(self.per_text.values())).shape
        columns = {"text_index": np.repeat(np.asarray(self.text_index, dtype=np.int64), n_layers * n_heads),
                   "layer": np.tile(np.repeat(np.asarray(self.layers, dtype=np.int32), n_heads), texts),
                   "head": np.tile(np.arange(n_heads, dtype=np.int32), texts * n_layers)}
        columns.update({name: values.reshape(-1).numpy() for name, values in self.per_text.items()})
        table = pa.table(columns).replace_schema_metadata({"model": self.model, "other": self.other})
        return atomic_write(Path(path), lambda tmp: pq.write_table(table, tmp, compression="zstd"))

    @property
    def by_distance(self) -> bool:
        """Whether heads are ranked by the distance (both models ran), not by a statistic's d_z."""
        return DISTANCE in self.per_text

    @property
    def ranked_by(self) -> str:
        if self.by_distance:
            return DISTANCE
        return "largest |mean change| of a statistic" if self.n_texts < 2 else "largest |d_z| of a statistic"

    def document(self, top: int | None = None) -> dict[str, object]:
        return {"model": self.model, "other": self.other, "n_texts": self.n_texts, "ranked_by": self.ranked_by,
                **({"note": self.note} if self.note else {}),
                **({"distance": "mean Jensen-Shannon divergence per query row between the two models (nats, <= ln 2)"}
                   if DISTANCE in self.per_text else {}),
                "statistics": "other minus model; ci95: bootstrap over texts; p: paired sign-flip permutation test; q: p "
                              "adjusted for every head and statistic (Benjamini-Hochberg)",
                "score": f"what the heads are ranked by: the {self.ranked_by}",
                "d_z": "a statistic's mean change over its standard deviation across the texts (Cohen's d_z)",
                "bootstrap": self.bootstrap, "permutations": "exact" if self.exact else self.permutations,
                "heads": [head.document() for head in (self.heads[:top] if top else self.heads)]}


class DiffBuilder:
    """Collects each text's per-head differences, then summarises them (:meth:`finish`)."""

    def __init__(self) -> None:
        self.measures: dict[str, list[Tensor]] = {}
        self.text_index: list[int] = []
        self.layers: list[int] | None = None

    def add(self, index: int, distance: Tensor | None, stats_a: dict[str, Tensor], stats_b: dict[str, Tensor]) -> None:
        """Text ``index``: ``distance`` ``[layers, heads]`` (or None) and both models' statistics (each ``[layers, heads]``)."""
        if distance is not None:
            self.measures.setdefault(DISTANCE, []).append(distance.double())
        for name, values in stats_a.items():
            if name in stats_b:
                self.measures.setdefault(name, []).append((stats_b[name] - values).double())
        self.text_index.append(index)

    def finish(self, model: str, other: str, *, bootstrap: int = 1000, permutations: int = 1000,
               seed: int = 0, force: bool = False) -> CheckpointDiff:
        return diff_of({name: torch.stack(values) for name, values in self.measures.items()}, self.text_index,
                       model, other, layers=self.layers, bootstrap=bootstrap, permutations=permutations, seed=seed,
                       force=force)


@dataclass(frozen=True)
class SummaryCost:
    """What summarising ``measures`` per-text changes of ``n_texts`` texts × ``cells`` heads costs (see
    :func:`summarise_all`): ``flips`` sign patterns (the exact ones where fewer), ``seconds`` here, ``bytes``."""

    n_texts: int
    cells: int
    measures: int
    bootstrap: int
    flips: int
    seconds: float
    bytes: float


def summary_cost(n_texts: int, cells: int, measures: int, bootstrap: int, permutations: int) -> SummaryCost:
    """The time and memory of :func:`summarise_all`, estimated from the sizes alone (fitted to its times on the
    development machine, rounded up): chunks of :data:`CHUNK` resamples and sign flips, each a ``[CHUNK, texts]``
    by ``[texts, cells]`` product per measure, then each measure's resamples ``[bootstrap, cells]`` kept, joined
    and sorted for the interval."""
    n, cells, measures = max(1, n_texts), max(1, cells), max(1, measures)
    flips = 2**n if n < 63 and 2**n <= permutations else permutations
    steps = (math.ceil(bootstrap / CHUNK) + math.ceil(flips / CHUNK)) * measures
    seconds = (steps * SECONDS_PER_STEP + (bootstrap + flips) * n * cells * measures * SECONDS_PER_CELL
               + bootstrap * cells * measures * math.log2(max(2, bootstrap)) * SECONDS_PER_SORTED
               + bootstrap * n * SECONDS_PER_DRAW)
    # every measure's resamples (float64) kept, then one measure's joined, transposed and sorted (3 copies)
    memory = 8.0 * bootstrap * cells * (measures + 3) + 8.0 * CHUNK * n * 4 + 8.0 * n * cells * measures
    return SummaryCost(n, cells, measures, bootstrap, flips, seconds, memory)


def check_summary_cost(n_texts: int, cells: int, measures: int, bootstrap: int, permutations: int, *,
                       force: bool = False) -> SummaryCost:
    """:func:`summary_cost`, refused before any of it runs: past the memory budget (a
    :class:`~attnviz.errors.ResourceError`), or past :data:`SUMMARY_SECONDS_LIMIT` unless ``force`` (a
    :class:`~attnviz.errors.UsageError`); each message gives the estimate and what to lower."""
    from ..errors import ResourceError, UsageError
    from ..limits import MEMORY_ENV, human, memory_budget

    if bootstrap < 100 or permutations < 100:
        raise UsageError(f"[[bootstrap={bootstrap}]] and [[permutations={permutations}]]: use at least 100 of each")
    cost = summary_cost(n_texts, cells, measures, bootstrap, permutations)
    sizes = f"{cost.n_texts:,} texts × {cost.cells:,} heads × {cost.measures} measures"
    budget = memory_budget()
    if cost.bytes > budget:
        raise ResourceError(f"{bootstrap:,} bootstrap resamples of {sizes} need about {human(cost.bytes)}, more than "
                            f"the {human(budget)} this machine has; lower [[bootstrap]] (1000, the default, gives a "
                            f"95% interval), or set {MEMORY_ENV} to try anyway")
    if cost.seconds > SUMMARY_SECONDS_LIMIT and not force:
        raise UsageError(
            f"{bootstrap:,} bootstrap resamples and {cost.flips:,} sign flips of {sizes} take about "
            f"{_duration(cost.seconds)} here (more than {SUMMARY_SECONDS_LIMIT:.0f} s); lower [[bootstrap]] or "
            "[[permutations]] (1000 of each, the default, gives p-values down to 0.001), give fewer texts, or pass "
            "[[force=True]]")
    return cost


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} minutes"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f} hours"
    return f"{seconds / 86400:,.0f} days"


def run_diff(source: Any, other: Any, texts: Sequence[str], *, truncate: bool = False, bootstrap: int = 1000,
             permutations: int = 1000, seed: int = 0, batch: int = 8,
             extra: dict[str, Tensor] | None = None, force: bool = False) -> CheckpointDiff:
    """Both models (two :class:`~attnviz.sources.base.Source` objects) on every text, in padded batches: each
    text's distance and statistics' changes, then the diff (see the module); ``extra``: more per-text changes
    ``[texts, layers, heads]`` measured elsewhere (head importance), summarised alike. The summary's cost is
    checked (:func:`check_summary_cost`) once the first batch shows the heads, before the other batches run."""
    from ..errors import InputError, UsageError
    from .heads import head_table
    from .metrics import paired_head_distance

    if not texts:
        raise InputError("no texts given; a checkpoint diff compares the two models over texts")
    check_summary_cost(len(texts), 1, 1, bootstrap, permutations, force=force)  # at least this, before any model runs
    builder = DiffBuilder()
    for start in range(0, len(texts), batch):
        chunk = list(texts[start:start + batch])
        pairs = zip(source.extract_batch(chunk, truncate=truncate), other.extract_batch(chunk, truncate=truncate),
                    strict=True)
        for index, (a, b) in enumerate(pairs, start):
            if a.tokens != b.tokens:
                raise UsageError(f"text {index}: {source.name} and {other.name} tokenize it differently "
                                 f"({len(a.tokens)} and {len(b.tokens)} tokens); a checkpoint diff compares two "
                                 "checkpoints of one model")
            if a.attentions.shape != b.attentions.shape:
                raise UsageError(f"{source.name} has {tuple(a.attentions.shape[:2])} layers × heads and {other.name} "
                                 f"{tuple(b.attentions.shape[:2])}; a checkpoint diff needs one architecture")
            if index == 0:  # the heads known: the whole summary's cost, before the other texts run
                from .statistics import STATISTICS

                check_summary_cost(len(texts), int(a.attentions.shape[0] * a.attentions.shape[1]),
                                   1 + len(STATISTICS) + len(extra or {}), bootstrap, permutations, force=force)
            rows = max(1, a.attentions.shape[-2])
            builder.add(index, paired_head_distance(a.attentions, b.attentions) / rows, head_table([a]).stats,
                        head_table([b]).stats)
            builder.layers = a.metadata.get("layers")
    builder.measures.update({name: list(values.double().unbind(0)) for name, values in (extra or {}).items()})
    return builder.finish(source.name, other.name, bootstrap=bootstrap, permutations=permutations, seed=seed,
                          force=force)


def diff_of(per_text: dict[str, Tensor], text_index: list[int], model: str, other: str, *,
            layers: list[int] | None = None, bootstrap: int = 1000, permutations: int = 1000,
            seed: int = 0, force: bool = False) -> CheckpointDiff:
    """The diff from each measure's per-text values ``[texts, layers, heads]`` (``distance`` among them or not);
    the summary's cost checked first (:func:`check_summary_cost`; ``force`` passes its time limit)."""
    from ..errors import InputError

    if not per_text:
        raise InputError("the two sides share no statistic to compare")
    first = next(iter(per_text.values()))
    check_summary_cost(first.shape[0], math.prod(first.shape[1:]), len(per_text), bootstrap, permutations,
                       force=force)
    summaries, exact = summarise_all(per_text, bootstrap, permutations, seed)
    q_values = adjusted({name: summary[3] for name, summary in summaries.items() if name != DISTANCE})
    n_layers, n_heads = next(iter(per_text.values())).shape[1:]
    numbers = list(layers) if layers else list(range(n_layers))
    effects = _effects(per_text, {name: summary[0] for name, summary in summaries.items()})
    heads = []
    for layer in range(n_layers):
        for head in range(n_heads):
            distance = _change(summaries[DISTANCE], layer, head) if DISTANCE in summaries else None
            stats = {name: replace(_change(summary, layer, head), q=float(q_values[name][layer, head]))
                     for name, summary in summaries.items() if name != DISTANCE}
            found = {name: float(effect[layer, head]) for name, effect in effects.items()
                     if not math.isnan(float(effect[layer, head]))}
            strongest = max(found, key=lambda name: abs(found[name]), default=None)
            effect = found[strongest] if strongest is not None else 0.0
            score = distance.mean if distance is not None else abs(effect)
            heads.append(HeadChange(numbers[layer], head, distance, stats, score, strongest, effect))
    heads.sort(key=lambda h: (-h.score, h.layer, h.head))
    n = len(text_index)
    note = ("one text: its intervals are a point and its p-values 1; give more texts to test a change" if n < 2 else
            f"{n} texts: no p-value can be below {2 / 2**n:.3g}, and intervals from so few texts are rough" if n < 10
            else "")
    return CheckpointDiff(model, other, n, heads, bootstrap, permutations, numbers, per_text, list(text_index), note,
                          exact)


def adjusted(p_values: dict[str, Tensor]) -> dict[str, Tensor]:
    """Benjamini–Hochberg q-values over every cell of every measure together (each head's each statistic is one
    test of the family): ``q_(i) = min_{j ≥ i} p_(j) · m / j`` in increasing order of p, at most 1."""
    names = list(p_values)
    if not names:
        return {}
    flat = torch.cat([p_values[name].reshape(-1).double() for name in names])
    known = ~torch.isnan(flat)
    q = torch.full_like(flat, math.nan)
    values = flat[known]
    if values.numel():
        order = torch.argsort(values)
        m = values.numel()
        scaled = values[order] * m / torch.arange(1, m + 1, dtype=torch.float64)
        running = torch.flip(torch.cummin(torch.flip(scaled, [0]), 0).values, [0]).clamp(max=1.0)
        out = torch.empty_like(values)
        out[order] = running
        q[known] = out
    pieces = torch.split(q, [p_values[name].numel() for name in names])
    return {name: piece.reshape(p_values[name].shape) for name, piece in zip(names, pieces, strict=True)}


def _effects(per_text: dict[str, Tensor], means: dict[str, Tensor]) -> dict[str, Tensor]:
    """Each statistic's d_z per head: its mean change over the standard deviation of the change across the texts,
    that deviation floored at a thousandth of the statistic's typical change (so rounding noise in a head that
    did not change cannot outrank a real change); with one text, the mean change alone."""
    effects = {}
    for name, values in per_text.items():
        if name == DISTANCE:
            continue
        if values.shape[0] < 2:
            effects[name] = means[name]
            continue
        typical = float(values.double().square().nanmean().sqrt())
        floor = max(1e-3 * typical, 1e-300) if not math.isnan(typical) else 1e-300
        effects[name] = means[name] / values.double().std(0).clamp_min(floor)
    return effects


def summarise_all(measures: dict[str, Tensor], bootstrap: int, permutations: int,
                  seed: int) -> tuple[dict[str, tuple[Tensor, ...]], bool]:
    """Per measure ``[texts, …]`` and cell: the mean, the bootstrap 95% interval and the paired permutation p-value
    (none for :data:`DISTANCE`), and whether the p-values are exact. Every measure shares each resample (one
    weight matrix of ``[CHUNK, texts]`` at a time: memory grows with the texts, not texts × resamples); the
    resamples and the sign flips have generators of their own, so ``permutations`` never changes an interval nor
    ``bootstrap`` a p-value. Where 2^texts ≤ ``permutations`` every sign pattern is taken once (exact p)."""
    n = next(iter(measures.values())).shape[0]
    cells = sum(values[0].numel() for values in measures.values()) if n else 0
    with _threads(1 if n * cells < SMALL_PRODUCT else torch.get_num_threads()):
        return _summarise_all(measures, bootstrap, permutations, seed)


SMALL_PRODUCT = 50_000_000
"""Texts × cells (every measure's) below which :func:`summarise_all` runs on one thread: its chunks are then
small products and comparisons, which threads slow down (each a barrier: 20 times slower on two busy cores)."""


@contextmanager
def _threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` for the block, then as they were."""
    before = torch.get_num_threads()
    if count == before:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _summarise_all(measures: dict[str, Tensor], bootstrap: int, permutations: int,
                   seed: int) -> tuple[dict[str, tuple[Tensor, ...]], bool]:
    n = next(iter(measures.values())).shape[0]
    flats = {name: values.reshape(n, -1).double() for name, values in measures.items()}
    means = {name: flat.mean(0) for name, flat in flats.items()}
    resamples = torch.Generator().manual_seed(2 * seed)
    resampled: dict[str, list[Tensor]] = {name: [] for name in flats}
    for start in range(0, bootstrap, CHUNK):
        count = min(CHUNK, bootstrap - start)
        picks = torch.randint(0, n, (count, n), generator=resamples)
        weights = torch.zeros(count, n, dtype=torch.float64).scatter_add_(
            1, picks, torch.ones(count, n, dtype=torch.float64)) / n  # each resample's multiplicity of each text
        for name, flat in flats.items():
            resampled[name].append(weights @ flat)
    tested = {name: flat for name, flat in flats.items() if name != DISTANCE}
    extreme = {name: torch.zeros_like(means[name]) for name in tested}
    exact = n < 63 and 2**n <= permutations
    total = 2**n if exact else permutations
    flips = torch.Generator().manual_seed(2 * seed + 1)
    for start in range(0, total, CHUNK):
        count = min(CHUNK, total - start)
        if exact:  # the sign patterns start … start + count − 1, bit j of each the sign of text j
            bits = (torch.arange(start, start + count)[:, None] >> torch.arange(n)[None]) & 1
            signs = bits.double() * 2 - 1
        else:
            signs = torch.randint(0, 2, (count, n), generator=flips, dtype=torch.float64) * 2 - 1
        for name, flat in tested.items():
            flipped = (signs @ flat) / n  # each text's difference with a random sign
            extreme[name] += (flipped.abs() >= means[name].abs()[None] - 1e-12).sum(0)
    out = {}
    bounds = torch.tensor([0.025, 0.975], dtype=torch.float64)
    for name, values in measures.items():
        boot = torch.cat(resampled.pop(name)).T.contiguous()  # [cells, resamples]: each cell's sort is contiguous
        low, high = torch.quantile(boot, bounds, dim=1)  # one sort for both (the same numbers as two quantiles)
        del boot
        p = (torch.full_like(means[name], math.nan) if name not in tested else
             extreme[name] / total if exact else (extreme[name] + 1) / (permutations + 1))
        out[name] = tuple(t.reshape(values.shape[1:]) for t in (means[name], low, high, p))
    return out, exact


def _change(summary: tuple[Tensor, ...], layer: int, head: int) -> Change:
    mean, low, high, p = (float(t[layer, head]) for t in summary)
    return Change(mean, low, high, None if math.isnan(p) else p)

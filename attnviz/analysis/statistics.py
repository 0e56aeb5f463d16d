"""The head statistics, one record each: the one place a statistic is defined.

A :class:`Statistic` says everything the program needs of it: its ``name`` (JSON, CSV, Parquet and
``--sort``), its ``short`` table header, a one-line ``description`` (the legend, the page, ``--help``),
an optional label rule (a head earns ``label`` when the statistic is ≥ ``threshold``), and its
definition as a sum over query rows: ``rows(block)`` gives, per head, what one block of rows adds
(``[heads]`` float64, from a :class:`attnviz.analysis.row_statistics.Block`), and ``per`` turns the
layer's total into the value: ``"row"`` divides by the query rows, ``"mass"`` by the attention mass
(TransformerLens's ``sum(A⊙P) / sum(A)``), or a function of the layer's accumulator and the total.

That one definition serves whole layers and row blocks alike: a layer held whole is cut into
blocks too (:func:`attnviz.analysis.row_statistics.blocks_of`), so the head table, the export's
Parquet rows, the page and a 100,000-token input all read the same numbers.

:func:`register` adds a statistic (``heads`` then shows it, sorts by it, exports it), its column placed by its
``order`` (after the built-ins' unless it says) and kept in a narrow table by its ``priority``; the
definitions docs/design.md cites are the built-ins below. Light to import: no torch until a block is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..records import Registry

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

# A statistic reads a row_statistics.Block and may read the layer's row_statistics.LayerRowStatistics;
# named here, not imported (row_statistics imports this module).
Block = Any
LayerRowStatistics = Any


@dataclass(frozen=True)
class Statistic:
    """One head statistic (see the module): what it is called and shown as, and how it is computed."""

    name: str
    short: str
    description: str
    rows: Callable[[Block], Tensor] | None  # per head, what a block of query rows adds; None: ``per`` reads the layer
    per: Literal["row", "mass"] | Callable[[LayerRowStatistics, Tensor | None], Tensor] = "row"
    label: str | None = None  # a head earns this label when the statistic is ≥ threshold
    threshold: float | None = None
    # Its column's place in the table, CSV, JSON, Parquet and page (smallest first; None: after every one that
    # says, in the order registered). The built-ins hold 10, 20, …, 130: room between them for one added.
    order: int | None = None
    # How long its column stays in a narrow table (smallest stays longest; None: after every one that says).
    priority: int | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name in ("layer", "head", "labels", "sinks"):
            raise ValueError(f"a statistic's name must be an identifier other than layer, head, labels and sinks; "
                             f"got {self.name!r}")
        if not 0 < len(self.short) <= 4:
            raise ValueError(f"a statistic's short name is 1 to 4 characters (a table header); got {self.short!r}")
        for field_name, text in (("short name", self.short), ("label", self.label), ("description", self.description)):
            if text is not None and (not isinstance(text, str) or not text.isprintable()):
                raise ValueError(f"{self.name}: a statistic's {field_name} is printable text (no control or escape "
                                 "characters: it reaches terminals and CSV files as it is)")
        if (self.label is None) != (self.threshold is None):
            raise ValueError(f"{self.name}: a label needs its threshold, and a threshold its label")
        if self.rows is None and not callable(self.per):
            raise ValueError(f"{self.name}: without rows, per must compute the value from the layer")


def _check(registered: Registry[Statistic], statistic: Statistic) -> None:
    """A new statistic's short name and label must be new too (table headers and labels are looked up by them)."""
    if statistic.short in {s.short for s in registered.values()} | set(registered):
        raise ValueError(f"a statistic named {statistic.short!r} is already registered")
    if statistic.label is not None and statistic.label in labels():
        raise ValueError(f"the label {statistic.label!r} is already given by {labels()[statistic.label][0]}")


class _InOrder(Registry[Statistic]):
    """A registry kept in column order: each register puts the records in :attr:`Statistic.order`."""

    def register(self, record: Statistic) -> Statistic:
        super().register(record)
        ranked = sorted(dict.items(self), key=lambda item: _rank(item[1].order))  # stable: ties keep registration order
        dict.clear(self)
        dict.update(self, ranked)
        return record


def _rank(place: int | None) -> tuple[bool, int]:
    return (place is None, place or 0)


STATISTICS: Registry[Statistic] = _InOrder("statistic", _check)
"""Every statistic, by name, in column order (:attr:`Statistic.order`: the built-ins first, then what
:func:`register` added, unless it gave an order of its own); every column order reads it."""
register, unregister, registered = STATISTICS.register, STATISTICS.unregister, STATISTICS.registered


def column_order() -> list[str]:
    """The statistics' names in their columns' order (:attr:`Statistic.order`)."""
    return list(STATISTICS)


def priority_order() -> list[str]:
    """The statistics' names in the order their columns stay in a narrow table (:attr:`Statistic.priority`)."""
    return sorted(STATISTICS, key=lambda name: _rank(STATISTICS[name].priority))


def short_name(statistic: str) -> str:
    """The table header of ``statistic`` (the name itself for one not registered)."""
    found = STATISTICS.get(statistic)
    return found.short if found is not None else statistic


def statistic_named(name: str) -> str | None:
    """The statistic a full or short name stands for (``prev`` and ``prev_score`` → ``prev_score``); None if none."""
    if name in STATISTICS:
        return name
    return next((s.name for s in STATISTICS.values() if s.short == name), None)


def labels() -> dict[str, tuple[str, float]]:
    """label → (statistic, threshold): a head gets the label when statistic ≥ threshold."""
    return {s.label: (s.name, s.threshold) for s in STATISTICS.values()
            if s.label is not None}


# Names a statistic had before (JSON and CSV columns), for a message that says what replaced them.
RETIRED: dict[str, str] = {"prev_mean": "prev_score", "cls": "first"}

SINK_THRESHOLD = 0.3
"""ε of Gu et al. 2024: a head has an attention sink at key k when α_k exceeds it."""


def _sinks(layer: Any, _: Any) -> Any:
    return layer.sink_importance().amax(-1)


def _entropy_norm(layer: Any, total: Any) -> Any:
    return total / max(layer.norm_rows, 1)


# Only statistics that can tell heads apart: Clark's mean weight on the previous token is left out, since
# it equals ``prev_score`` whenever rows sum to 1 (always), and Clark's [CLS] weight since it equals
# ``first`` whenever a text starts with [CLS] or BOS (and is 0 otherwise). metrics.py keeps both functions.
for _statistic in (
    Statistic("entropy", "ent", "mean row entropy in nats (Clark et al.)", lambda b: b.entropy.sum(-1), order=10, priority=120),
    Statistic("entropy_norm", "entN", "entropy / ln(keys a row sees): 1 uniform, 0 one key",
              lambda b: b.entropy @ b.norm_weight, per=_entropy_norm, label="broad", threshold=0.8, order=20, priority=50),
    Statistic("self", "self", "mean weight on the token itself (Clark et al.)", lambda b: b.diagonal(0),
              label="self", threshold=0.5, order=30, priority=30),
    Statistic("prev_score", "prev", "weight on the previous token (Clark; TransformerLens)",
              lambda b: b.diagonal(-1), per="mass", label="previous-token", threshold=0.5, order=40, priority=10),
    Statistic("next", "next", "mean weight on the next token (Clark et al.)", lambda b: b.diagonal(1),
              label="next-token", threshold=0.5, order=50, priority=20),
    Statistic("first", "1st", "weight on the first token: [CLS]/BOS, or a sink", lambda b: b.first,
              label="first-token", threshold=0.5, order=60, priority=40),
    Statistic("sep", "sep", "mean weight on [SEP] or EOS, not a picture's tokens (Clark et al.)", lambda b: b.on_keys(b.sep_keys),
              label="[SEP]", threshold=0.5, order=70, priority=60),
    Statistic("punct", "punc", "mean weight on punctuation (Clark et al.)", lambda b: b.on_keys(b.punct_keys),
              label="punctuation", threshold=0.5, order=80, priority=70),
    Statistic("max", "max", "mean of each row's largest weight: 1 = one key (Voita et al. 2019's confidence)",
              lambda b: b.largest, order=90, priority=100),
    Statistic("distance", "dist", "expected |i − j| from a query, in tokens", lambda b: b.distance, order=100, priority=110),
    # Only a query with an earlier copy of its token can score, so on the induction probe (random
    # tokens, then the same again) the first copy's rows score nothing: 0.5 is the most a head can
    # reach, and 0.3 means about 60% of the second copy's attention on the pattern.
    Statistic("duplicate", "dup", "share on earlier copies of the token (TransformerLens)",
              lambda b: b.patterns[0], per="mass", label="duplicate-token", threshold=0.3, order=110, priority=90),
    Statistic("induction", "ind", "share on what followed an earlier copy (TransformerLens)",
              lambda b: b.patterns[1], per="mass", label="induction", threshold=0.3, order=120, priority=80),
    Statistic("sink", "sink", "largest α_k, the mean weight on key k from the rows that see it (Gu et al. 2024)",
              None, per=_sinks, label="sink", threshold=SINK_THRESHOLD, order=130),
):
    register(_statistic)
BUILT_IN = STATISTICS.seal()

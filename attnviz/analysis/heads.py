"""Every statistic of every head for one or many texts, and the labels they earn.

A label is a plain threshold on one statistic (the table below), so a reader can check it, and
a head can carry several. Over many texts the statistics are averaged first, then labelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from . import metrics

if TYPE_CHECKING:  # pragma: no cover
    from ..result import AttentionResult


@dataclass
class HeadInputs:
    """What a statistic reads: one or more layers' attentions ``[layers, heads, q, k]`` and the tokens.

    Duck-types the fields of :class:`AttentionResult` the statistics use, and computes what several
    statistics share (each row's entropy) once.
    """

    attentions: Tensor
    tokens: list[str]
    token_ids: list[int]
    special: list[bool]
    causal: bool

    @classmethod
    def of(cls, result: AttentionResult, attentions: Tensor | None = None) -> HeadInputs:
        return cls(result.attentions if attentions is None else attentions, list(result.tokens),
                   list(result.token_ids), list(result.special), result.causal)

    @cached_property
    def row_entropy(self) -> Tensor:
        """``[layers, heads, q]``: each query row's smoothed entropy (Clark et al.), shared by two columns."""
        return metrics.row_entropy(self.attentions)


# column name → (function of a result's HeadInputs, one-line description); each returns [layers, heads].
# Only statistics that can tell heads apart: Clark's mean weight on the previous token is left out, since
# it equals ``prev_score`` whenever rows sum to 1 (always), and Clark's [CLS] weight since it equals
# ``first`` whenever a text starts with [CLS] or BOS (and is 0 otherwise). metrics.py keeps both functions.
STATISTICS: dict[str, tuple[Callable[[HeadInputs], Tensor], str]] = {
    "entropy": (lambda r: r.row_entropy.mean(-1), "mean row entropy in nats (Clark et al.)"),
    "entropy_norm": (lambda r: metrics.entropy_normalized(r.attentions, causal=r.causal, rows=r.row_entropy),
                     "entropy / ln(keys a row sees): 1 uniform, 0 one key"),
    "self": (lambda r: metrics.self_score(r.attentions), "mean weight on the token itself (Clark et al.)"),
    "prev_score": (lambda r: metrics.previous_token_score(r.attentions),
                   "weight on the previous token (Clark; TransformerLens)"),
    "next": (lambda r: metrics.next_token_score(r.attentions), "mean weight on the next token (Clark et al.)"),
    "first": (lambda r: metrics.first_token_score(r.attentions), "weight on the first token: [CLS]/BOS, or a sink"),
    "sep": (lambda r: metrics.attention_to(r.attentions, sep_keys(r)), "mean weight on [SEP] or EOS (Clark et al.)"),
    "punct": (lambda r: metrics.punctuation_attention(r.attentions, r.tokens), "mean weight on punctuation (Clark et al.)"),
    "max": (lambda r: metrics.max_weight(r.attentions), "mean of each row's largest weight: 1 = one key"),
    "distance": (lambda r: metrics.mean_distance(r.attentions), "expected |i − j| from a query, in tokens"),
    "duplicate": (lambda r: metrics.duplicate_token_score(r.attentions, token_ids(r)),
                  "share on earlier copies of the token (TransformerLens)"),
    "induction": (lambda r: metrics.induction_score(r.attentions, token_ids(r)),
                  "share on what followed an earlier copy (TransformerLens)"),
    "sink": (lambda r: metrics.sink_importance(r.attentions, causal=r.causal).amax(-1),
             "largest α_k, the mean weight on key k from the rows that see it (Gu et al. 2024)"),
}

# The table's column headers: at most 4 characters, so 12 columns fit 80 to 120 terminal columns.
# A statistic missing here shows its full name. ``--sort`` and ``--columns`` take either name.
SHORT_NAMES: dict[str, str] = {
    "entropy": "ent", "entropy_norm": "entN", "self": "self", "prev_score": "prev", "next": "next",
    "first": "1st", "sep": "sep", "punct": "punc", "max": "max", "distance": "dist", "duplicate": "dup",
    "induction": "ind", "sink": "sink",
}
# Names a statistic had before (JSON and CSV columns), for a message that says what replaced them.
RETIRED: dict[str, str] = {"prev_mean": "prev_score", "cls": "first"}

# label → (statistic, threshold): a head gets the label when statistic ≥ threshold.
LABELS: dict[str, tuple[str, float]] = {
    "previous-token": ("prev_score", 0.5),
    "next-token": ("next", 0.5),
    "self": ("self", 0.5),
    "broad": ("entropy_norm", 0.8),
    "first-token": ("first", 0.5),
    "[SEP]": ("sep", 0.5),
    "punctuation": ("punct", 0.5),
    # Only a query with an earlier copy of its token can score, so on the induction probe (random
    # tokens, then the same again) the first copy's rows score nothing: 0.5 is the most a head can
    # reach, and 0.3 means about 60% of the second copy's attention on the pattern.
    "duplicate-token": ("duplicate", 0.3),
    "induction": ("induction", 0.3),
    # Gu et al. 2024: a head has an attention sink at key k when α_k > ε = 0.3.
    "sink": ("sink", metrics.SINK_THRESHOLD),
}
MIN_TOKENS = 4  # fewer tokens than this say little about a head; the commands warn


def short_name(statistic: str) -> str:
    """The table header of ``statistic`` (:data:`SHORT_NAMES`, else the name itself)."""
    return SHORT_NAMES.get(statistic, statistic)


def statistic_named(name: str) -> str | None:
    """The statistic a full or short name stands for (``prev`` and ``prev_score`` → ``prev_score``); None if none."""
    if name in STATISTICS:
        return name
    return next((full for full in STATISTICS if short_name(full) == name), None)


def token_ids(result: AttentionResult) -> list[int]:
    """The tokenizer's ids; where a source has none (−1), equal labels stand for equal tokens."""
    if all(i >= 0 for i in result.token_ids):
        return list(result.token_ids)
    seen: dict[str, int] = {}
    return [seen.setdefault(t, len(seen)) for t in result.tokens]


def sep_keys(result: AttentionResult) -> list[bool]:
    """[SEP], or a special token after the start (``</s>``, EOS)."""
    return [t == "[SEP]" or (s and i > 0) for i, (t, s) in enumerate(zip(result.tokens, result.special, strict=True))]


@dataclass
class HeadTable:
    """Statistics ``[layers, heads]`` per column, over ``n_texts`` texts, with labels per head."""

    model_name: str
    stats: dict[str, Tensor]
    n_texts: int
    tokens: list[str] | None = None  # the token labels, when the table is of one text
    sinks: dict[tuple[int, int], list[int]] | None = None  # (layer, head) → sink positions, for one text
    layers: list[int] | None = None  # the model's number of each layer (None: 0, 1, …), as a saved result keeps them

    @property
    def sink_rate(self) -> float:
        """The share of heads with a sink on the first token, α_0 > ε (Gu et al. 2024's sink rate).
        α_0 is the ``first`` statistic: every row sees the first token."""
        return float((self.stats["first"] > metrics.SINK_THRESHOLD).double().mean())

    @property
    def shape(self) -> tuple[int, int]:
        first = next(iter(self.stats.values()))
        return int(first.shape[0]), int(first.shape[1])

    def labels(self, layer: int, head: int) -> list[str]:
        return [name for name, (stat, threshold) in LABELS.items() if float(self.stats[stat][layer, head]) >= threshold]

    def all_labels(self) -> list[list[str]]:
        """:meth:`labels` of every head, layer by layer (each threshold tested once for all heads)."""
        earned = [(name, (self.stats[stat] >= threshold).flatten().tolist()) for name, (stat, threshold) in LABELS.items()]
        n_layers, n_heads = self.shape
        return [[name for name, flags in earned if flags[i]] for i in range(n_layers * n_heads)]

    def rows(self) -> list[dict[str, object]]:
        """One dict per head: ``layer``, ``head``, every statistic, and ``labels``."""
        n_layers, n_heads = self.shape
        numbers = self.layers or list(range(n_layers))
        labels = self.all_labels()
        values = {name: t.double().tolist() for name, t in self.stats.items()}
        out = []
        for layer in range(n_layers):
            for head in range(n_heads):
                row: dict[str, object] = {"layer": numbers[layer], "head": head}
                row.update({name: round(v[layer][head], 6) for name, v in values.items()})
                row["labels"] = labels[layer * n_heads + head]
                if self.sinks is not None:
                    row["sinks"] = self.sinks.get((layer, head), [])
                out.append(row)
        return out

    def select(self, *, layer: int | None = None, head: int | None = None, sort: str | None = None,
               top: int | None = None) -> list[dict[str, object]]:
        """The :meth:`rows` of one ``layer`` and/or ``head`` (None: every one), sorted by a statistic
        (largest first) or by ``"layer"``/``"head"``, the first ``top`` of them (what ``heads`` prints)."""
        from ..errors import UsageError
        from ..layer_range import check_layer

        n_layers, n_heads = self.shape
        if layer is not None:
            check_layer(layer, owner=self.model_name, count=n_layers, held=self.layers)
        if head is not None and not 0 <= head < n_heads:
            raise UsageError(f"[[head={head}]] is out of range; {self.model_name} has heads 0 to {n_heads - 1}")
        if sort is not None and sort not in ("layer", "head") and sort not in self.stats:
            raise UsageError(f"[[sort={sort!r}]] is not a column; use layer, head or one of {', '.join(self.stats)}")
        rows = [row for row in self.rows()
                if (layer is None or row["layer"] == layer) and (head is None or row["head"] == head)]
        if sort is not None:
            rows.sort(key=lambda row: row[sort], reverse=sort not in ("layer", "head"))  # type: ignore[arg-type,return-value]
        return rows[:top] if top else rows

    def document(self, rows: list[dict[str, object]] | None = None, **what: object) -> dict[str, object]:
        """The JSON document of ``heads --format json``: model, ``what`` was read (text, file, probe),
        how many texts, the tokens of a single text, and ``rows`` (default: every head)."""
        return {"model": self.model_name, **what, "n_texts": self.n_texts, "sink_rate": round(self.sink_rate, 6),
                **({"tokens": self.tokens} if self.tokens is not None else {}),
                "heads": self.rows() if rows is None else rows}


def rows_csv(rows: list[dict[str, object]]) -> str:
    """Head rows as CSV: ``layer``, ``head``, every statistic, and the labels joined by ``;``."""
    import csv
    import io

    names = ["layer", "head", *STATISTICS]
    sinks = any("sinks" in row for row in rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*names, "labels", *(["sinks"] if sinks else [])])
    for row in rows:
        extra = [";".join(map(str, row.get("sinks", [])))] if sinks else []  # type: ignore[call-overload]
        writer.writerow([row[c] for c in names] + [";".join(row["labels"])] + extra)  # type: ignore[arg-type]
    return buffer.getvalue()


def layer_statistics(result: AttentionResult, attentions: Tensor | None = None) -> dict[str, Tensor]:
    """Every statistic of :data:`STATISTICS`, ``{name: [layers, heads]}`` float64, for ``result``'s
    tokens and ``attentions`` (default: the result's own; any number of layers, e.g. one at a time)."""
    inputs = HeadInputs.of(result, attentions)
    return {name: fn(inputs).to(torch.float64) for name, (fn, _) in STATISTICS.items()}


@dataclass
class HeadTableBuilder:
    """A :class:`HeadTable` built as attentions arrive: one layer of one text at a time, so a long
    input never needs every layer in memory. ``add_layer`` for each (text, layer), then ``table()``."""

    model_name: str = ""
    _sums: dict[int, dict[str, Tensor]] = field(default_factory=dict)  # layer position → statistic → [heads]
    _counts: dict[int, int] = field(default_factory=dict)
    _texts: set[int] = field(default_factory=set)
    _shortest: int | None = None
    _first_tokens: list[str] | None = None  # the tokens of the first text added (kept for a one-text table)
    _first_text: int | None = None
    _sinks: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # of the first text
    layers: list[int] | None = None  # the model's numbers of the layer positions, where not 0, 1, …

    def add_layer(self, result: AttentionResult, position: int, attentions: Tensor | Any, *, text: int = 0) -> None:
        """Add layer ``position`` (its index among the layers tabled) of text number ``text``:
        ``attentions`` ``[heads, q, k]`` over ``result``'s tokens, or a layer an engine hands over as
        blocks of query rows (an :class:`attnviz.sources.stream.ItemLayer`: anything with ``n_heads``
        and ``row_blocks()``). Either way the statistics are reduced a block of rows at a time
        (:mod:`attnviz.analysis.row_statistics`), so a long input's layer is never needed whole."""
        from .row_statistics import LayerRowStatistics, blocks_of

        whole = isinstance(attentions, Tensor)
        layer = LayerRowStatistics(n=len(result.tokens), n_heads=attentions.shape[0] if whole else attentions.n_heads,
                                   token_ids=token_ids(result), tokens=result.tokens, sep=sep_keys(result),
                                   causal=result.causal)
        for first, block in blocks_of(attentions, causal_trim=result.causal) if whole else attentions.row_blocks():
            layer.add(first, block.cpu())  # reduced on the CPU (a no-op there), whatever device computed it
        sums = self._sums.setdefault(position, {})
        for name, value in layer.statistics().items():
            sums[name] = sums[name] + value if name in sums else value
        self._counts[position] = self._counts.get(position, 0) + 1
        self._texts.add(text)
        self.model_name = self.model_name or result.model_name
        if self._first_tokens is None:
            self._first_tokens, self._first_text = list(result.tokens), text
        if text == self._first_text:  # where its sinks are (a table of one text lists them per head)
            heads, keys = torch.nonzero(layer.sink_importance() > metrics.SINK_THRESHOLD, as_tuple=True)
            found: dict[int, list[int]] = {head: [] for head in range(layer.n_heads)}
            for head, key in zip(heads.tolist(), keys.tolist(), strict=True):  # (in key order per head)
                found[head].append(key)
            self._sinks.update({(position, head): keys_ for head, keys_ in found.items()})
        n = len(result.tokens)
        self._shortest = n if self._shortest is None else min(self._shortest, n)

    def add_layers(self, results: Sequence[AttentionResult], position: int, attentions: Sequence[Tensor], *,
                   first_text: int = 0) -> None:
        """Layer ``position`` of several texts at once (a padded batch's items, numbered from ``first_text``)."""
        for number, (result, layer) in enumerate(zip(results, attentions, strict=True)):
            self.add_layer(result, position, layer, text=first_text + number)

    def add(self, result: AttentionResult, *, text: int | None = None) -> None:
        """Add every layer of one whole result."""
        number = len(self._texts) if text is None else text
        for position in range(result.n_layers):
            self.add_layer(result, position, result.attentions[position], text=number)

    def table(self) -> HeadTable:
        """The statistics averaged over the texts added."""
        if not self._sums:
            raise ValueError("head_table needs at least one result")
        counts = set(self._counts.values())
        if len(counts) != 1:
            raise ValueError(f"layers were added for different numbers of texts: {self._counts}")
        if self._shortest is not None and self._shortest < MIN_TOKENS:
            import warnings

            from ..errors import AttnvizWarning

            warnings.warn(f"a text of {self._shortest} token(s) says little about a head; the statistics and labels "
                          "of such texts are near-meaningless (use a longer text, or several)", AttnvizWarning,
                          stacklevel=3)
        positions = sorted(self._sums)
        n = counts.pop()
        stats = {name: torch.stack([self._sums[p][name] for p in positions]) / n for name in STATISTICS}
        one = len(self._texts) == 1
        numbers = None if self.layers == list(range(len(positions))) else self.layers
        return HeadTable(model_name=self.model_name, stats=stats, n_texts=len(self._texts),
                         tokens=self._first_tokens if one else None, sinks=dict(self._sinks) if one else None,
                         layers=numbers)


def head_table(results: Sequence[AttentionResult]) -> HeadTable:
    """Every statistic of :data:`STATISTICS` for each head, averaged over ``results`` (one per text).

    Computed one layer at a time (see :class:`HeadTableBuilder`), so the statistics of a long input
    cost little memory beyond the result itself.
    """
    if not results:
        raise ValueError("head_table needs at least one result")
    shapes = {r.attentions.shape[:2] for r in results}
    if len(shapes) != 1:
        raise ValueError(f"results come from models of different shapes: {sorted(shapes)}")
    builder = HeadTableBuilder()
    for number, result in enumerate(results):
        builder.add(result, text=number)
    return builder.table()

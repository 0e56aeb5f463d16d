"""Every statistic of every head for one or many texts, and the labels they earn.

Each statistic, and the label it may give, is one record of :mod:`attnviz.analysis.statistics`.
A label is a plain threshold on one statistic, so a reader can check it, and a head can carry several. Over many texts the statistics are averaged first, then labelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from . import AttentionResult
from .statistics import SINK_THRESHOLD, STATISTICS, labels

HeadRow = dict[str, Any]
"""One head's row of a table: ``layer``, ``head`` (ints), each statistic (a float), ``labels`` (strings), maybe
``sinks`` and columns a command adds (importance, ablation): JSON-like values, read by key."""

MIN_TOKENS = 4  # fewer tokens than this say little about a head; the commands warn


def token_ids(result: AttentionResult) -> list[int]:
    """The tokenizer's ids; where a source has none (−1), equal labels stand for equal tokens."""
    if all(i >= 0 for i in result.token_ids):
        return list(result.token_ids)
    seen: dict[str, int] = {}
    return [seen.setdefault(t, len(seen)) for t in result.tokens]


def sep_keys(result: AttentionResult) -> list[bool]:
    """[SEP], or a special token after the start (``</s>``, EOS); never a picture's token (a vision-language model's
    image tokens are special tokens, but the weight on them is attention to the picture, not to a separator)."""
    picture = {p for placement in result.pictures for p in placement.image_positions}
    return [i not in picture and (t == "[SEP]" or (s and i > 0))
            for i, (t, s) in enumerate(zip(result.tokens, result.special, strict=True))]


@dataclass
class HeadTable:
    """Statistics ``[layers, heads]`` per column, over ``n_texts`` texts, with labels per head."""

    model_name: str
    stats: dict[str, Tensor]
    n_texts: int
    tokens: list[str] | None = None  # the token labels, when the table is of one text
    sinks: dict[tuple[int, int], list[int]] | None = None  # (layer, head) → sink positions, for one text
    layers: list[int] | None = None  # the model's number of each layer (None: 0, 1, …), as a saved result keeps them
    # Labels of columns added from outside the statistics (a needle run's retrieval score): label → (column, threshold).
    extra_labels: dict[str, tuple[str, float]] = field(default_factory=dict)

    @property
    def sink_rate(self) -> float:
        """The share of heads with a sink on the first token, α_0 > ε (Gu et al. 2024's sink rate).
        α_0 is the ``first`` statistic: every row sees the first token."""
        return float((self.stats["first"] > SINK_THRESHOLD).double().mean())

    @property
    def shape(self) -> tuple[int, int]:
        first = next(iter(self.stats.values()))
        return int(first.shape[0]), int(first.shape[1])

    def _label_rules(self) -> dict[str, tuple[str, float]]:
        return {**labels(), **self.extra_labels}

    def labels(self, layer: int, head: int) -> list[str]:
        return [name for name, (stat, threshold) in self._label_rules().items()
                if stat in self.stats and float(self.stats[stat][layer, head]) >= threshold]

    def all_labels(self) -> list[list[str]]:
        """:meth:`labels` of every head, layer by layer (each threshold tested once for all heads)."""
        earned = [(name, (self.stats[stat] >= threshold).flatten().tolist()) for name, (stat, threshold)
                  in self._label_rules().items() if stat in self.stats]
        n_layers, n_heads = self.shape
        return [[name for name, flags in earned if flags[i]] for i in range(n_layers * n_heads)]

    def rows(self) -> list[HeadRow]:
        """One dict per head: ``layer``, ``head``, every statistic, and ``labels``."""
        n_layers, n_heads = self.shape
        numbers = self.layers or list(range(n_layers))
        labels = self.all_labels()
        values = {name: t.double().tolist() for name, t in self.stats.items()}
        out = []
        for layer in range(n_layers):
            for head in range(n_heads):
                row: HeadRow = {"layer": numbers[layer], "head": head}
                row.update({name: round(v[layer][head], 6) for name, v in values.items()})
                row["labels"] = labels[layer * n_heads + head]
                if self.sinks is not None:
                    row["sinks"] = self.sinks.get((layer, head), [])
                out.append(row)
        return out

    def select(self, *, layer: int | None = None, head: int | None = None, sort: str | None = None,
               top: int | None = None) -> list[HeadRow]:
        """The :meth:`rows` of one ``layer`` and/or ``head`` (None: every one), sorted by a statistic
        (largest first) or by ``"layer"``/``"head"``, the first ``top`` of them (what ``heads`` prints)."""
        from ..errors import UsageError
        from ..layer_range import check_head, check_layer

        n_layers, n_heads = self.shape
        if layer is not None:
            check_layer(layer, owner=self.model_name, count=n_layers, held=self.layers)
        if head is not None:
            check_head(head, owner=self.model_name, count=n_heads)
        if sort is not None and sort not in ("layer", "head") and sort not in self.stats:
            raise UsageError(f"[[sort={sort!r}]] is not a column; use layer, head or one of {', '.join(self.stats)}")
        rows = [row for row in self.rows()
                if (layer is None or row["layer"] == layer) and (head is None or row["head"] == head)]
        if sort is not None:
            rows.sort(key=lambda row: row[sort], reverse=sort not in ("layer", "head"))
        return rows[:top] if top else rows

    def document(self, rows: list[HeadRow] | None = None, **what: object) -> dict[str, object]:
        """The JSON document of ``heads --format json``: model, ``what`` was read (text, file, probe),
        how many texts, the tokens of a single text, and ``rows`` (default: every head)."""
        return {"model": self.model_name, **what, "n_texts": self.n_texts, "sink_rate": round(self.sink_rate, 6),
                **({"tokens": self.tokens} if self.tokens is not None else {}),
                "heads": self.rows() if rows is None else rows}


def rows_flat(rows: list[HeadRow]) -> tuple[list[str], list[list[object]]]:
    """Head rows as one flat table (what CSV and Parquet hold): ``layer``, ``head``, every statistic (then any added
    column: importance, ablation), the labels joined by ``;`` and, where any head has them, its sinks too."""
    known = ("layer", "head", "labels", "sinks")
    names = ["layer", "head", *(name for name in STATISTICS if not rows or name in rows[0]),
             *(name for name in (rows[0] if rows else {}) if name not in STATISTICS and name not in known)]
    sinks = any("sinks" in row for row in rows)
    table = []
    for row in rows:
        extra = [";".join(map(str, row.get("sinks", [])))] if sinks else []
        table.append([row[c] for c in names] + [";".join(row["labels"])] + extra)
    return [*names, "labels", *(["sinks"] if sinks else [])], table


def rows_csv(rows: list[HeadRow]) -> str:
    """Head rows as CSV (:func:`rows_flat`)."""
    import csv
    import io

    columns, table = rows_flat(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(table)
    return buffer.getvalue()


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

        n_heads = attentions.shape[0] if isinstance(attentions, Tensor) else attentions.n_heads
        layer = LayerRowStatistics(n=len(result.tokens), n_heads=n_heads,
                                   token_ids=token_ids(result), tokens=result.tokens, sep=sep_keys(result),
                                   causal=result.causal)
        blocks = (blocks_of(attentions, causal_trim=result.causal) if isinstance(attentions, Tensor)
                  else attentions.row_blocks())
        for first, block in blocks:
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
            heads, keys = torch.nonzero(layer.sink_importance() > SINK_THRESHOLD, as_tuple=True)
            found: dict[int, list[int]] = {head: [] for head in range(layer.n_heads)}
            for head, key in zip(heads.tolist(), keys.tolist(), strict=True):  # (in key order per head)
                found[head].append(key)
            self._sinks.update({(position, head): keys_ for head, keys_ in found.items()})
        n = len(result.tokens)
        self._shortest = n if self._shortest is None else min(self._shortest, n)

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
        stats = {name: torch.stack([self._sums[p][name] for p in positions]) / n for name in self._sums[positions[0]]}
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

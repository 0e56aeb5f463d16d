"""Rich tables of numbers: head statistics and pairs of heads.

Titles, labels and head names reach the table escaped (:func:`attnviz.labels.safe_text`: a model
name may hold ESC or a bidi override) and as ``rich.text.Text``, so ``[bold]`` is never markup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..labels import safe_text

HeadRow = dict[str, Any]
"""A head's row, as :meth:`attnviz.analysis.heads.HeadTable.rows` gives it (its ``HeadRow``; render does not
import analysis): ``layer``, ``head``, each statistic, ``labels``, and any columns a command added."""

GAP = 2  # cells between two columns (a blank divider and one cell of padding)
ZERO = 0.0005  # below this a value prints as 0.000


def format_value(value: float) -> str:
    """Three decimals; one when the integer part is wide (a long input's distance), so a cell stays 5 wide."""
    return f"{value:.3f}" if abs(value) < 9.9995 else f"{value:.1f}"


@dataclass
class HeadColumns:
    """Which statistics a head table shows at a width, and why the others are not there."""

    shown: list[str]  # in the order asked for
    left_out: list[str]  # did not fit the width
    all_zero: list[str]  # 0.000 in every row (e.g. ``next`` in a causal model): left out, and said so


def _labels_text(row: HeadRow) -> Text:
    return Text(", ".join(safe_text(label) for label in row["labels"]))


def _title(title: str) -> Text:
    return Text(safe_text(title), style="table.title")


def _widths(rows: Sequence[HeadRow], stats: Sequence[str], header: Callable[[str], str]) -> tuple[int, dict[str, int]]:
    """The fixed part of the table (L, H and labels columns with their gaps), and each statistic's column."""
    layer = max([1, *(len(str(r["layer"])) for r in rows)])
    head = max([1, *(len(str(r["head"])) for r in rows)])
    labels = label_column_width(rows)
    fixed = layer + GAP + head + GAP + labels
    return fixed, {s: max([len(header(s)), *(len(format_value(float(r[s]))) for r in rows)]) + GAP for s in stats}


def label_column_width(rows: Sequence[HeadRow]) -> int:
    """Wide enough for the longest label and its comma: labels wrap between them, never inside one."""
    return max([len("labels"), *(len(safe_text(label)) + 1 for r in rows for label in r["labels"])])


def choose_columns(rows: Sequence[HeadRow], stats: Sequence[str], width: int, *,
                   header: Callable[[str], str] = str, keep_first: str | None = None,
                   chosen: bool = False, priority: Sequence[str] = ()) -> HeadColumns:
    """The statistics of ``stats`` that fit ``width`` cells, in the order given.

    The rest give way by ``priority``, the first staying longest (the caller hands it over: each statistic
    says its own, ``attnviz.analysis.statistics.priority_order``; those it does not name follow in the order
    given; ``keep_first``, e.g. the sort column, gives way last),
    and a statistic that is 0.000 in every row gives way first. Statistics a user ``chosen`` by
    name keep their places instead: they give way from the end, and none for being 0.
    """
    all_zero = [] if chosen else [s for s in stats if s != keep_first and rows
                                  and all(abs(float(r[s])) < ZERO for r in rows)]
    candidates = [s for s in stats if s not in all_zero]
    fixed, cost = _widths(rows, candidates, header)
    ranked = list(candidates) if chosen else [s for s in priority if s in candidates] + [s for s in candidates if s not in priority]
    if keep_first in ranked:
        ranked.remove(keep_first)
        ranked.insert(0, keep_first)
    keep: set[str] = set()
    used = fixed
    for s in ranked:
        if used + cost[s] > width and keep:
            continue
        keep.add(s)  # the first one always shows, however narrow the terminal
        used += cost[s]
    return HeadColumns(shown=[s for s in candidates if s in keep], left_out=[s for s in candidates if s not in keep],
                       all_zero=all_zero)


def head_stats_table(rows: list[HeadRow], stats: list[str], *, title: str,
                     header: Callable[[str], str] = str) -> Table:
    """One row per head, a column per statistic (3 decimals, headed ``header(name)``), labels last.

    Columns are never cut: headers and labels keep their width (see :func:`choose_columns` for
    what fits), and a head's labels wrap between labels.
    """
    table = Table(title=_title(title), title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, collapse_padding=True)
    table.add_column("L", justify="right", no_wrap=True)
    table.add_column("H", justify="right", no_wrap=True)
    for name in stats:
        table.add_column(header(name), justify="right", no_wrap=True, min_width=len(header(name)))
    table.add_column("labels", min_width=label_column_width(rows), overflow="fold")
    in_order = [(r["layer"], r["head"]) for r in rows] == sorted((r["layer"], r["head"]) for r in rows)
    for i, row in enumerate(rows):
        # In model order, a blank line after each layer's last head.
        last_of_layer = in_order and i + 1 < len(rows) and rows[i + 1]["layer"] != row["layer"]
        table.add_row(str(row["layer"]), str(row["head"]), *(format_value(float(row[name])) for name in stats),
                      _labels_text(row), end_section=last_of_layer)
    return table


def legend_table(entries: Sequence[tuple[str, str, str]]) -> Table:
    """``(header, full name, description)`` per column, one line each, printed under a table."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for short, full, description in entries:
        grid.add_row(short, "" if full == short else full, description)
    return grid


def pairs_table(title: str, pairs: list[tuple[str, str, float]], value_name: str) -> Table:
    table = Table(title=_title(title), title_justify="left", header_style="bold")
    table.add_column("head")
    table.add_column("head")
    table.add_column(value_name, justify="right")
    for a, b, value in pairs:
        table.add_row(Text(safe_text(a)), Text(safe_text(b)), f"{value:.3f}")
    return table


def ranking_table(title: str, items: list[tuple[str, float]], value_name: str) -> Table:
    table = Table(title=_title(title), title_justify="left", header_style="bold")
    table.add_column("head")
    table.add_column(value_name, justify="right")
    for name, value in items:
        table.add_row(Text(safe_text(name)), f"{value:.3f}")
    return table


def titled(title: str, table: Table) -> Group:
    """``table`` under its title, the title wrapped to the terminal rather than to the table."""
    return Group(Text(title, style="bold"), table)

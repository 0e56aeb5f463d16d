"""The terminal tables of ``attnviz atlas``: a corpus's highest heads, or a checkpoint diff's ranking."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from ..api import head_name
from .common import stdout_console

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import JustifyMethod

    from ..api import CheckpointDiff
    from ..export.atlas_data import AtlasData


def print_corpus(data: AtlasData, top: int | None, width: int | None) -> None:
    """Per statistic and label, the heads with the highest corpus mean or rate."""
    from ..api import short_name

    console = stdout_console(width)
    shown = top or 3
    texts = f"{data.n_texts} text{'s' if data.n_texts != 1 else ''}"
    table = Table(title=Text(f"{data.model} · {texts} · the heads with the highest corpus mean",
                             style="bold"), title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("statistic")
    table.add_column(f"top {shown} heads (LH mean)")
    layers, n_heads = data.layers, data.n_heads
    for stat in data.stats:
        means = data.means[stat]
        order = means.flatten().argsort()[::-1][:shown]
        table.add_row(short_name(stat), "  ".join(
            f"{head_name(layers[i // n_heads], i % n_heads)} {means.flat[i]:.3f}" for i in order))
    for label, rates in sorted(data.label_rates.items()):
        order = rates.flatten().argsort()[::-1][:shown]
        table.add_row(f"[{label}]", "  ".join(
            f"{head_name(layers[i // n_heads], i % n_heads)} {rates.flat[i]:.0%}" for i in order if rates.flat[i] > 0))
    console.print(table)
    console.print(Text("[label]: the share of texts in which a head earns it. --format json has every head's means, "
                       "histograms and the texts where it shows each statistic most.", style="dim"))


def print_diff(diff: CheckpointDiff, top: int | None, width: int | None) -> None:
    """The heads in order of change: the distance where both models ran, and the statistic that changed most
    for its spread (d_z), each with its interval and p-value."""
    console = stdout_console(width)
    texts = f"{diff.n_texts} text{'s' if diff.n_texts != 1 else ''}"
    table = Table(title=Text(f"{diff.model} → {diff.other} · {texts} · heads in order of change", style="bold"),
                  title_justify="left", show_edge=False, pad_edge=False)
    columns: list[tuple[str, JustifyMethod]] = [("#", "right"), ("L", "right"), ("H", "right")]
    if diff.by_distance:
        columns.append(("JS divergence [95%]", "left"))
    columns.append(("the statistic that changed most [95%], d_z, p, q", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for rank, head in enumerate(diff.heads[:top] if top else diff.heads, 1):
        cells = [str(rank), str(head.layer), str(head.head)]
        d = head.distance
        if d is not None:
            cells.append(f"{d.mean:.4f} [{d.low:.4f}, {d.high:.4f}]")
        if head.strongest is None:
            cells.append("—")
        else:
            c = head.stats[head.strongest]
            p = "—" if c.p is None else f"{c.p:.3f}"
            q = "" if c.q is None else f", q {c.q:.3f}"
            cells.append(f"{head.strongest} {c.mean:+.3f} [{c.low:+.3f}, {c.high:+.3f}], d_z {head.effect:+.2f}, "
                         f"p {p}{q}")
        table.add_row(*cells)
    console.print(table)
    if diff.note:
        console.print(Text(diff.note, style="yellow"))
    ranked = ("JS divergence: the mean Jensen-Shannon divergence of each query row between the two models (≤ ln 2; "
              "never negative, so it has an interval and no p-value)" if diff.by_distance else
              f"ranked by each head's {diff.ranked_by} (from two exports' tables: the distance needs both models "
              "run on the texts)")
    flips = "every sign pattern (exact)" if diff.exact else f"{diff.permutations} random sign flips"
    console.print(Text(f"{ranked}; d_z: the mean change over its standard deviation across the texts; intervals: "
                       f"{diff.bootstrap} bootstrap resamples of the texts; p: {flips} of the paired differences; q: p adjusted "
                       "for every head and statistic tested (Benjamini-Hochberg). "
                       "--format json has every statistic.", style="dim"))

"""The terminal tables of ``attnviz atlas``: a corpus's highest heads, or a checkpoint diff's ranking."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from .common import stdout_console


def print_corpus(data: object, top: int | None, width: int | None) -> None:
    """Per statistic and label, the heads with the highest corpus mean or rate (``data``: an ``AtlasData``)."""
    from ..analysis.statistics import short_name

    console = stdout_console(width)
    shown = top or 3
    table = Table(title=Text(f"{data.model} · {data.n_texts} texts · the heads with the highest corpus mean",  # type: ignore[attr-defined]
                             style="bold"), title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("statistic")
    table.add_column(f"top {shown} heads (L·H mean)")
    layers, n_heads = data.layers, data.n_heads  # type: ignore[attr-defined]
    for stat in data.stats:  # type: ignore[attr-defined]
        means = data.means[stat]  # type: ignore[attr-defined]
        order = means.flatten().argsort()[::-1][:shown]
        table.add_row(short_name(stat), "  ".join(
            f"L{layers[i // n_heads]}·H{i % n_heads} {means.flat[i]:.3f}" for i in order))
    for label, rates in sorted(data.label_rates.items()):  # type: ignore[attr-defined]
        order = rates.flatten().argsort()[::-1][:shown]
        table.add_row(f"[{label}]", "  ".join(
            f"L{layers[i // n_heads]}·H{i % n_heads} {rates.flat[i]:.0%}" for i in order if rates.flat[i] > 0))
    console.print(table)
    console.print(Text("[label]: the share of texts in which a head earns it. --format json has every head's means, "
                       "histograms and the texts where it shows each statistic most.", style="dim"))


def print_diff(diff: object, top: int | None, width: int | None) -> None:
    """The heads in order of change (``diff``: a ``CheckpointDiff``)."""
    console = stdout_console(width)
    table = Table(title=Text(f"{diff.model} → {diff.other} · {diff.n_texts} text{'s' if diff.n_texts != 1 else ''} · heads in order of change",  # type: ignore[attr-defined]
                             style="bold"), title_justify="left", show_edge=False, pad_edge=False)
    for name, justify in (("#", "right"), ("L", "right"), ("H", "right"), ("JS divergence [95%]", "left"),
                          ("p", "right"), ("largest change of a statistic [95%], p", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank, head in enumerate(diff.heads[:top] if top else diff.heads, 1):  # type: ignore[attr-defined]
        name, change = max(head.stats.items(), key=lambda item: abs(item[1].mean))
        d = head.distance
        table.add_row(str(rank), str(head.layer), str(head.head),
                      "—" if d is None else f"{d.mean:.4f} [{d.low:.4f}, {d.high:.4f}]",
                      "—" if d is None else f"{d.p:.3f}",
                      f"{name} {change.mean:+.3f} [{change.low:+.3f}, {change.high:+.3f}], p {change.p:.3f}")
    console.print(table)
    if diff.note:  # type: ignore[attr-defined]
        console.print(Text(diff.note, style="yellow"))  # type: ignore[attr-defined]
    ranked = ("JS divergence: the mean Jensen-Shannon divergence of each query row between the two models (≤ ln 2)"
              if diff.ranked_by != "largest |d_z| of a statistic" else  # type: ignore[attr-defined]
              "ranked by each head's largest |mean change / its standard deviation| of a statistic (from two exports' "
              "tables: the distance needs both models run on the texts)")
    console.print(Text(f"{ranked}; intervals: {diff.bootstrap} bootstrap resamples of the texts; p: "  # type: ignore[attr-defined]
                       f"{diff.permutations} sign-flip permutations of the paired differences. --format json has every "  # type: ignore[attr-defined]
                       "statistic.", style="dim"))

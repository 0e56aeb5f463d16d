"""The tui's heads table (view 3): the ``heads`` command's table at the pane's width, its columns, legend and
labels, sorted as the explorer says."""

from __future__ import annotations

from typing import Any

from rich.text import Text


def draw_heads(explorer: Any, sink: Any) -> None:
    """Onto ``sink``: every head's statistics on the explorer's text, sorted by its ``sort``."""
    from ..analysis.statistics import STATISTICS, labels, priority_order, short_name
    from ..render.tables import choose_columns, head_stats_table, legend_table

    rows, stats = explorer.heads_rows()
    layout = choose_columns(rows, stats, sink.width, header=short_name,
                            keep_first=explorer.sort if explorer.sort in STATISTICS else None, priority=priority_order())
    order = f"sorted by {explorer.sort} (largest first)" if explorer.sort else "in model order"
    sink.print(head_stats_table(rows, layout.shown, title=f"{explorer.model_name} · every head, {order}",
                                header=short_name))
    sink.print(Text("o: sort by the next column · click a column's name to sort by it", style="dim"))
    sink.print(legend_table([(short_name(s), s, STATISTICS[s].description) for s in layout.shown]))
    if layout.left_out:
        sink.print(Text(f"left out at {sink.width} columns: {', '.join(layout.left_out)}", style="dim"))
    sink.print(Text("labels: " + "; ".join(f"{name} = {short_name(stat)} ≥ {thr}"
                                           for name, (stat, thr) in labels().items()), style="dim"))

"""What a KV-cache policy loses, drawn: the terminal's tables (a summary per policy and budget, the heads that lose
most) and the recall-against-budget curves (PNG, SVG, PDF). Draws what it is given; computes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from ..labels import safe_text
from .output import check_output_path

POLICY_COLOURS = {"streaming": "#1f77b4", "h2o": "#ff7f0e", "snapkv": "#2ca02c", "tova": "#d62728",
                  "pyramidkv": "#9467bd", "oracle": "#8c564b"}
"""One colour per policy in every picture of it (the PNG's curves and the page's), whatever runs beside it."""
_MORE = ("#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def policy_colour(policy: str) -> str:
    """The policy's colour: :data:`POLICY_COLOURS`, or for another policy one picked by its name alone."""
    return POLICY_COLOURS.get(policy) or _MORE[sum(policy.encode("utf-8")) % len(_MORE)]


def budget_label(value: float) -> str:
    """A number of keys as a count (``1`` is one key), a fraction of the context's as a percentage."""
    if isinstance(value, int) or value > 1:
        return f"{int(value):,}"
    return f"{value:.0%}" if round(value * 100, 6).is_integer() else f"{value:.2%}".rstrip("0").rstrip(".")


def mass_label(value: float) -> str:
    """An attention mass with the digits that tell it from 0: 0.31, 0.047, 0.0012, 3.1e-05."""
    return "0" if value == 0 else f"{value:.2f}" if value >= 0.1 else f"{value:.2g}" if value >= 1e-3 else f"{value:.1e}"


def _recall_style(value: float) -> str:
    return "green" if value >= 0.95 else "yellow" if value >= 0.8 else "red"


def fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals and never a negative zero (``-0.000`` from a rounding below zero is 0)."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


FUTURE_WORDS = {"question": ("KL on question", "answer after it"),
                "continue": ("KL on continuation", "its next tokens")}
"""The summary's last two columns by the future: where the KL is measured (the future's tokens, teacher-forced) and
what ``changed`` compares (the greedy answer after the question; the greedy choice at each continuation token)."""


def summary_table(runs: Sequence[dict[str, Any]], future: str = "question") -> Table:
    """One row per policy × budget: keys kept, mean and worst recall, mean output error, the KL of the next-token
    distributions over the future's tokens, and whether the greedy answer after them changed (its caption says so:
    the KL can be 0 on the question while the answer that follows it changes)."""
    kl_name, answer_name = FUTURE_WORDS.get(future, FUTURE_WORDS["question"])
    table = Table(box=None, pad_edge=False, caption_justify="left", caption_style="dim",
                  caption=f"{kl_name}: KL(full ‖ cut) of the next-token distributions at the {future} tokens, fed as "
                          f"given; {answer_name}: whether the greedy "
                          + ("answer after the question" if future == "question" else "choice at any of them")
                          + " differs from the full cache's")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("policy", "left"), ("budget", "right"), ("keys", "right"),
        ("recall", "right"), ("worst", "right"), ("error", "right"), (kl_name, "right"), (answer_name, "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for run in runs:
        keys = run["keys"]
        kept = str(keys[0]) if len(set(keys)) == 1 else f"{min(keys)}–{max(keys)}"
        changed = run["changed"]
        table.add_row(run["policy"], budget_label(run["budget"]), kept,
                      Text(fixed(run["recall"], 3), style=_recall_style(run["recall"])),
                      Text(fixed(run["worst"], 3), style=_recall_style(run["worst"])), fixed(run["error"], 3),
                      "—" if run["kl"] is None else fixed(run["kl"], 4),
                      "—" if changed is None else Text("changed", style="bold red") if changed else "same")
    return table


def heads_table(rows: Sequence[dict[str, Any]], *, width: int) -> Table:
    """The heads that lose most, worst first: policy, budget, layer, key/value head, recall, error, and the
    tokens the policy drops that the future attended to most."""
    table = Table(box=None, pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (("policy", "left"), ("budget", "right"), ("L", "right"),
        ("KV", "right"), ("recall", "right"), ("error", "right"), ("dropped that the future needed", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=name.startswith("dropped"))
    room = max(12, width - 48)
    for row in rows:
        dropped = ", ".join(f"{safe_text(t)}@{p} {mass_label(m)}" for p, t, m in row["dropped"][:3]) or "—"
        table.add_row(row["policy"], budget_label(row["budget"]), str(row["layer"]), str(row["kv_head"]),
                      Text(fixed(row["recall"], 3), style=_recall_style(row["recall"])), fixed(row["error"], 3),
                      dropped if len(dropped) <= room else dropped[: room - 1] + "…")
    return table


def curves_figure(curves: dict[str, list[tuple[float, float, float | None]]], *, n_context: int, title: str,
                  path: str | Path) -> Path:
    """Recall (mean over heads) and KL against the keys kept, one line per policy: ``curves[policy]`` is
    ``[(keys kept, recall, kl or None)]`` in order of budget."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .figure_style import DPI, STABLE_RC, save_figure
    from .fonts import font_chain
    from .image import warn_missing

    path = check_output_path(path)
    title = safe_text(title)
    families, missing = font_chain([title])
    warn_missing(missing)
    with_kl = any(kl is not None for points in curves.values() for _, _, kl in points)
    with rc_context({"font.family": families, **STABLE_RC}):
        fig = Figure(figsize=(9.0 if with_kl else 5.0, 3.8), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        fig.suptitle(title, fontsize=9)
        axes = fig.subplots(1, 2) if with_kl else [fig.subplots(1, 1)]
        for policy, points in curves.items():
            keys = [100 * k / n_context for k, _, _ in points]
            colour = policy_colour(policy)
            axes[0].plot(keys, [r for _, r, _ in points], marker="o", markersize=4, label=policy, color=colour)
            if with_kl:
                axes[1].plot(keys, [kl or 0.0 for _, _, kl in points], marker="o", markersize=4, label=policy,
                             color=colour)
        axes[0].set_ylabel("recall (attention mass kept)", fontsize=8)
        axes[0].set_ylim(0.0, 1.02)
        for ax in axes:
            ax.set_xlim(0, 102)  # the whole range of budgets, however few were run: one budget is a point on it
            ax.set_xlabel(f"keys kept per head (% of {n_context:,})", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        if with_kl:
            axes[1].set_ylabel("KL(full ‖ cut), nats", fontsize=8)
        save_figure(fig, path)
    return path


PATTERN_NAMES = {"a_shape": "A-shape", "vertical_slash": "vert-slash", "block_sparse": "block"}


def pattern_label(name: str) -> str:
    """A pattern's short column name (a plugin's pattern: its registered name)."""
    return PATTERN_NAMES.get(name, name)


def patterns_table(rows: Sequence[dict[str, Any]]) -> Table:
    """One row per head: each pattern's recall (the winner bold), the winner, and DuoAttention's class."""
    table = Table(box=None, pad_edge=False)
    names = [key.removeprefix("recall_") for key in (rows[0] if rows else {}) if key.startswith("recall_")] \
        or list(PATTERN_NAMES)
    columns: tuple[tuple[str, JustifyMethod], ...] = (("budget", "right"), ("L", "right"), ("H", "right"),
        ("KV", "right"), *((pattern_label(p), "right") for p in names), ("winner", "left"),
        ("sink+recent", "right"), ("duo", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for row in rows:
        cells = [Text(f"{row['recall_' + p]:.3f}", style="bold" if row["winner"] == p else "") for p in names]
        table.add_row(f"{row['budget']:,}", str(row["layer"]), str(row["head"]), str(row["kv_head"]), *cells,
                      pattern_label(row["winner"]), f"{row['streaming_mass']:.3f}",
                      Text(row["duo"], style="cyan" if row["duo"] == "full" else "dim"))
    return table

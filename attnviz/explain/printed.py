"""Print a :class:`attnviz.explain.Walkthrough` as rich tables, one step after another, in English or Chinese.

The walkthrough's own printed form lives with it (its words are :mod:`attnviz.explain.text`'s): the
renderers below draw what they are given and know no method's types (docs/development.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.columns import Columns
from rich.table import Table
from rich.text import Text

from . import Walkthrough, format_number, row_label
from .text import difference_text, say

if TYPE_CHECKING:  # pragma: no cover
    from ..render.terminal import Screen

_MAX_ROWS = 12
_MAX_COLS = 8


def matrix_table(title: str, m: Any, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
                 extra: dict[str, Any] | None = None, max_cols: int = _MAX_COLS) -> Table:
    """A matrix as a table; beyond 12 rows or 8 columns the rest is elided with '…' (--format json has it all).

    ``extra`` adds named columns after the matrix (e.g. each row's max and sum)."""
    rows, cols = m.shape
    shown_c = min(cols, max_cols)
    table = Table(title=f"{title}  [{rows}×{cols}]", title_justify="left")
    table.add_column("", style="dim", no_wrap=True)
    for j in range(shown_c):
        table.add_column(col_labels[j] if col_labels else str(j + 1), justify="right", no_wrap=True)
    if cols > shown_c:
        table.add_column("…", justify="center")
    for name in extra or {}:
        table.add_column(name, justify="right", no_wrap=True, style="bold")
    for i in range(min(rows, _MAX_ROWS)):
        cells = [_cell(m[i, j]) for j in range(shown_c)]
        more = [format_number(float(v[i])) for v in (extra or {}).values()]
        table.add_row(row_labels[i] if row_labels else str(i + 1), *cells, *(["…"] if cols > shown_c else []), *more)
    if rows > _MAX_ROWS:
        table.add_row("…", *["…"] * (shown_c + (cols > shown_c) + len(extra or {})))
    return table


def _cell(v: Any) -> str:
    if isinstance(v, bool) or (getattr(v, "dtype", None) is not None and str(v.dtype) == "torch.bool"):
        return "✓" if bool(v) else "·"
    return format_number(float(v))


class _Printer:
    def __init__(self, walk: Walkthrough, console: Screen, lang: str) -> None:
        self.walk, self.console, self.lang = walk, console, lang
        self.rows = [row_label(i, t) for i, t in enumerate(walk.tokens)]
        self.keys = [row_label(j, t, "c" if walk.cross else "x") for j, t in enumerate(walk.key_tokens)]
        label = max(len(r) for r in self.rows + self.keys)
        self.cols = max(2, min(_MAX_COLS, (console.width - label - 8) // 10))  # a wide matrix shown in part

    def table(self, title: str, m: Any, row_labels: Sequence[str] | None = None,
              col_labels: Sequence[str] | None = None, extra: dict[str, Any] | None = None) -> Table:
        return matrix_table(title, m, row_labels, col_labels, extra, max_cols=self.cols)

    def say(self, key: str, **params: Any) -> str:
        return say(key, self.lang, **params)

    def step(self, number: int, heading: str, text: str = "") -> None:
        self.console.print()
        self.console.print(Text(self.say("step", n=number, heading=heading), style="bold cyan"))
        if text:
            self.console.print(Text(text))

    def line(self, text: str, style: str = "") -> None:
        self.console.print(Text(text, style=style))

    def show(self, *tables: Table) -> None:
        self.console.print(Columns(list(tables)) if len(tables) > 1 else tables[0])


def render_walkthrough(walk: Walkthrough, console: Screen, lang: str = "en") -> None:
    """Print every step of ``walk``: inputs, projections, heads, scaling, mask, softmax, output."""
    p = _Printer(walk, console, lang)
    p.line(p.say("title", title=walk.title), "bold")
    _positions(p)
    _inputs(p)
    for h in walk.shown_heads:
        _head(p, h)
    _output(p)
    _reference(p)


def _positions(p: _Printer) -> None:
    pos = p.walk.positions
    if pos is None:
        return
    key = {"sinusoidal": "positions.text", "none": "positions.none"}.get(pos.kind, "positions.residual")
    p.step(0, p.say("positions.heading"), p.say(key, layer=pos.layer))
    parts = [(p.say(n), t) for n, t in (("embedding", pos.embedding), ("position", pos.position)) if t is not None]
    summed = p.say("residual" if pos.kind == "residual" else "summed")
    p.show(*[p.table(name, t, p.rows) for name, t in parts], p.table(summed, pos.summed, p.rows))


def _inputs(p: _Printer) -> None:
    walk = p.walk
    p.step(1, p.say("x.heading"), p.say("x.cross" if walk.cross else "x.text"))
    if walk.context is None:
        p.show(p.table("X", walk.x, p.rows))
    else:
        p.show(p.table("X", walk.x, p.rows), p.table("C", walk.context, p.keys))
    p.step(2, p.say("w.heading"), p.say("w.cross" if walk.cross else "w.text"))
    if walk.model_kind == "config":
        p.show(*[p.table(n, w) for n, w in (("W_Q", walk.w_q), ("W_K", walk.w_k), ("W_V", walk.w_v))])
        for name, bias in walk.biases.items():
            p.show(p.table(name, bias[None]))
    else:  # a real model: the head's own columns (the whole of W_Q is d_model × d_model)
        h = walk.heads[walk.shown_heads[0]]
        p.line(p.say("w.head", head=h.index), "dim")
        p.show(*[p.table(f"{n}[:, head {h.index}]", w) for n, w in (("W_Q", h.w_q), ("W_K", h.w_k), ("W_V", h.w_v))])
    p.step(3, p.say("qkv.heading"), p.say("qkv.text"))
    if walk.d_v != walk.d_k:
        p.line(p.say("qkv.dv", d_v=walk.d_v, d_k=walk.d_k))
    if walk.model_kind == "config":
        p.show(p.table("Q", walk.q, p.rows), p.table("K", walk.k, p.keys), p.table("V", walk.v, p.keys))
    gqa = p.say("split.gqa", n=walk.n_heads // walk.n_kv_heads) if walk.n_kv_heads != walk.n_heads else ""
    spans = ", ".join(f"{h}: Q/K {h * walk.d_k + 1}–{(h + 1) * walk.d_k}, V {h * walk.d_v + 1}–{(h + 1) * walk.d_v}"
                      for h in range(min(walk.n_heads, 4))) + (", …" if walk.n_heads > 4 else "")
    p.step(4, p.say("split.heading", n=walk.n_heads),
           p.say("split.text", d_k=walk.d_k, d_v=walk.d_v, spans=spans) + gqa)


def _head(p: _Printer, index: int) -> None:
    walk, head = p.walk, p.walk.heads[index]
    p.console.print()
    p.line(p.say("head", head=head.index), "bold magenta")
    p.show(p.table(f"Q_{head.index}", head.q, p.rows), p.table(f"K_{head.kv_index}", head.k, p.keys),
           p.table(f"V_{head.kv_index}", head.v, p.keys))
    if walk.rotary:
        p.line(p.say("rope"), "italic")
    p.line(p.say("scores"), "cyan")
    p.show(p.table(f"Q_{head.index}·K_{head.kv_index}ᵀ", head.raw_scores, p.rows, p.keys))
    rule = walk.scale_rule
    standard = format_number(1.0 / walk.d_k**0.5)
    p.line(p.say(f"scale.{rule.rule}", d_k=walk.d_k, value=format_number(walk.scale), n=len(walk.key_tokens),
                 standard=standard, divisor=format_number(rule.divisor)), "cyan")
    if index == walk.shown_heads[0]:
        p.line(p.say("why_scale"), "italic")
    p.show(p.table("scores", head.scores, p.rows, p.keys))
    p.line(p.say("mask.heading"), "cyan")
    if walk.mask is None:
        p.line(p.say("mask.none"))
    else:
        if walk.causal:
            p.line(p.say("mask.causal"))
        if walk.padding and any(walk.padding):
            p.line(p.say("mask.padding", keys=", ".join(k for k, pad in zip(p.keys, walk.padding, strict=True) if pad)))
        p.show(p.table(p.say("mask.matrix"), walk.mask, p.rows, p.keys),
               p.table(p.say("masked_scores"), head.masked_scores, p.rows, p.keys))
        p.line(p.say("mask.fill"))
    p.line(p.say("softmax.heading"), "cyan")
    p.line(p.say("softmax.text"))
    p.show(p.table(p.say("exp"), head.exp, p.rows, p.keys,
                        extra={p.say("row_max"): head.row_max, p.say("row_sum"): head.row_sums}))
    p.show(p.table(p.say("weights", head=head.index), head.weights, p.rows, p.keys))
    for i in walk.empty_rows:
        p.line(p.say("empty_row", row=p.rows[i]), "yellow")
    p.line(p.say("output.heading"), "cyan")
    p.show(p.table(p.say("head_output", head=head.index), head.output, p.rows))


def _output(p: _Printer) -> None:
    walk = p.walk
    p.step(10, p.say("concat.heading"), p.say("concat.text"))
    p.show(p.table("concat", walk.concat, p.rows))
    if walk.w_o is None:
        p.step(11, p.say("no_wo.heading"), p.say("no_wo.text"))
    else:
        p.step(11, p.say("wo.heading"), p.say("wo.text"))
        if walk.model_kind == "config":
            p.show(p.table("W_O", walk.w_o))
    p.show(p.table(p.say("output"), walk.output, p.rows))


def _reference(p: _Printer) -> None:
    walk = p.walk
    if not walk.reference_source:
        return
    p.console.print()
    if walk.reference_off:
        p.line(p.say("ref.off", source=walk.reference_source, why=p.say(f"ref.off.{walk.reference_off}")), "yellow")
    elif walk.differences:
        p.line(p.say("ref.header", source=walk.reference_source), "bold yellow")
        for diff in walk.differences:
            p.line(f"  • {difference_text(diff, p.lang)}")
    else:
        p.line(p.say("ref.agrees", source=walk.reference_source), "green")


def render_errata(items: Sequence[Any], console: Screen, lang: str = "en") -> None:
    """The tutorials' errors (:func:`attnviz.explain.errata.errata`), each with the numbers computed for it."""
    console.print(Text(say("errata.header", lang), style="bold"))
    for item in items:
        console.print()
        console.print(Text(f"seed {item.seed} · {item.key}", style="bold cyan"))
        console.print(Text(f"{say('errata.claim', lang)}: {item.claim[lang]}"))
        console.print(Text(f"{say('errata.finding', lang)}: {item.finding[lang]}", style="green"))

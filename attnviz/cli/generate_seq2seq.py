"""What ``attnviz generate`` shows for an encoder-decoder model (T5, BART): for each generated token,
what it attended to in the source (cross-attention) and in the target so far (the decoder's
self-attention), then the generated rows' cross-attention against the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..result import AttentionResult
from .common import show_view


def show_seq2seq(result: AttentionResult, console: Any, *, layer: int | None, head: int | None, top: int,
                 out: Path | None, cmap: str, width: int | None, title: str) -> None:
    """Print the generated tokens' cross- and self-attention, then write ``out`` (.npz, .html, an
    image) or draw the cross-attention heatmap in the terminal."""
    from ..generation import generated_summary
    from ..labels import printable

    cross = generated_summary(result, layer=layer, head=head, top=top, kind="cross")
    own = generated_summary(result, layer=layer, head=head, top=top, kind="self")
    start = int(result.metadata["target_start"])
    where = ("every decoder layer" if layer is None else f"decoder layer {layer}") + " · " + \
        ("mean of heads" if head is None else f"head {head}")
    console.print(f"{result.model_name} · {len(cross)} tokens generated from a {len(result.tokens)}-token source · "
                  f"{where}")

    def listed(attended: list[tuple[int, str, float]]) -> str:
        return " · ".join(f"{printable(t)} ({k}) {w:.2f}" for k, t, w in attended)

    for (position, label, in_source), (_, _, in_target) in zip(cross, own, strict=True):
        console.print(f"{position:>5} {printable(label):<14} source ← {listed(in_source)}")
        console.print(f"{'':>5} {'':<14} target ← {listed(in_target)}")
    if result.metadata.get("stopped_at_eos"):
        console.print("stopped at the end-of-sequence token", style="dim")
    suffix = None if out is None else out.suffix.lower()
    if suffix == ".npz":
        typer.echo(f"wrote {result.save(out)}")  # type: ignore[arg-type]
        return
    if suffix == ".html":  # the page of an encoder-decoder result: encoder, decoder and cross, opened on cross
        from ..api import page_of_result
        from ..render.html import render_html

        page = page_of_result(result, title=title, kind="cross", view="query")
        typer.echo(f"wrote {render_html(page, out, cmap=cmap)}")  # type: ignore[arg-type]
        return
    from ..render.view import matrix_view

    attn = result.cross_attentions.double()  # type: ignore[union-attr]  # [layers, heads, target, source]
    if layer is not None:
        attn = attn[layer : layer + 1]
    attn = attn.mean(0)
    attn = attn.mean(0) if head is None else attn[head]
    targets = result.target_tokens or []
    view = matrix_view(attn[start:][None].numpy(), targets[start:], result.tokens, cmap=cmap,
                       title=f"{result.model_name} · generated tokens' cross-attention · {where}",
                       panel_titles=["cross-attention"], row_axis="generated tokens (at their step)",
                       col_axis="source tokens")
    show_view(view, out, values=False, fit="downsample", width=width)

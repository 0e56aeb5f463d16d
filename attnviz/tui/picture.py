"""The tui's picture view (view 8): the selected token's attention over each picture, in the explorer's layer and
head, as coloured half-blocks at the patch grid, with its share on the pictures and the patch it reads most."""

from __future__ import annotations

from typing import Any

from rich.text import Text


def draw_picture(explorer: Any, sink: Any) -> None:
    """Onto ``sink``: the selected token's (the last token's by default) attention over each picture of the
    explorer's result (its ``full`` one, where the matrices show each picture as one token: every row, or the rows
    of the collapsed matrix's tokens, :class:`~attnviz.views.picture_parts.PictureRows`)."""
    from ..labels import safe_text
    from ..render.overlay import row_of, strongest_patches, terminal_grid

    result = explorer.full if explorer.full is not None else explorer.result
    metas = result.pictures
    first = (explorer.result.metadata.get("collapsed") or {}).get("first")  # a collapsed row's first token
    selected = explorer.token
    token = len(result.tokens) - 1 if selected is None else first[selected] if first else selected
    every = [p for meta in metas for p in meta.image_positions]
    # (a long prompt's full result holds the rows this view shows only: metadata["rows"])
    row = result.attentions[explorer.layer, explorer.head, row_of(result, [token])[0]].double()
    sink.print(Text(f"{safe_text(result.tokens[token])} (token {token}), layer {explorer.layer} head {explorer.head}: "
                    f"{float(row[every].sum()):.0%} of its attention on the picture"
                    f"{'s' if len(metas) > 1 else ''}; each weight scaled to the largest"))
    for n, (weights, place) in enumerate(strongest_patches(result, explorer.layer, explorer.head, token)):
        sink.print(Text(f"{'picture ' + str(n + 1) + ', ' if len(metas) > 1 else ''}{metas[n].rows} × "
                        f"{metas[n].cols} patches; most on {place}", style="dim"))
        sink.print(terminal_grid(weights))
    if selected is None:
        sink.print(Text("the last token; select another with [ ] or find one with /", style="dim"))

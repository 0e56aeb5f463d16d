"""``attnviz heatmap``: one layer's attention, in the terminal or as an image file."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import typer

from ..errors import UsageError
from .common import cli_command, given, note, renamed, show_view, wrote
from .options import (
    AudioFile,
    Cmap,
    CmapOpt,
    Fit,
    HideSpecial,
    ImageFiles,
    Kind,
    KindChoice,
    Layer,
    ModelOptions,
    OutFiles,
    Pair,
    Renormalize,
    Target,
    TextFile,
    Truncate,
    Width,
    Words,
    kind_name,
    model_command,
    parse_head,
    parse_layer,
    reading,
    text_from_file,
    text_or_example,
)
from .outputs import check_view_outputs

LOG_BEYOND = 512
"""Tokens beyond which the page's matrix opens on a log scale; a linear picture of more says how to get one."""


class ColourScale(str, Enum):
    linear = "linear"
    log = "log"


COLOUR_SCALE_HELP = ("The colour scale of pictures and the terminal: linear, or log (4 decades below the top, as the "
                     "page's matrix colours a long text, whose small weights a linear scale leaves dark; PNG and the "
                     "terminal).")


@cli_command
@model_command()
def heatmap(
    options: ModelOptions,
    text: str | None = typer.Argument(
        None, metavar="TEXT", help="Input text. Leave out for configs with a fixed input.", show_default=False
    ),
    layer: str = Layer,
    head: str = typer.Option("0", "--head", help="Head to show: a number from 0, 'all' for a grid, or 'mean'. With "
                             "--query: the heads to list, every head unless --head is given."),
    query: str | None = typer.Option(None, "--query", help="One token (or its index): what it attends to in every "
                                     "layer and head at once, a row per head.", show_default=False),
    old_query: str | None = typer.Option(None, "-q", hidden=True),  # -q is --quiet everywhere
    rows: str | None = typer.Option(None, "--rows", help="A region: the queries A:B (token positions, B not included; "
                                    ":B or A: for the text's start or end), drawn cell by cell. A long text's overview "
                                    "labels its rows and columns with their positions.", show_default=False, metavar="A:B"),
    cols: str | None = typer.Option(None, "--cols", help="A region: the keys C:D (token positions, D not included), drawn "
                                    "cell by cell.", show_default=False, metavar="C:D"),
    kind: KindChoice = Kind,
    pair: str | None = Pair,
    text_file: Path | None = TextFile,
    target: str | None = Target,
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
    out: list[Path] = OutFiles,
    image: list[Path] = ImageFiles,
    audio: Path | None = AudioFile,
    values: bool = typer.Option(False, "--values", help="Write each weight into its cell."),
    fit: Fit = typer.Option(Fit.downsample, "--fit", help="Wider than the terminal: max-pool it, or split it into pages."),
    vmax: float | None = typer.Option(None, "--vmax", help="Top of the colour scale (default: the largest weight shown)."),
    cmap: Cmap = CmapOpt,
    colour_scale: ColourScale = typer.Option(ColourScale.linear, "--colour-scale", help=COLOUR_SCALE_HELP),
    width: int | None = Width,
    truncate: bool = Truncate,
    per_panel: bool = typer.Option(False, "--per-panel-scale", help="With --image: each panel's heat scaled to its "
                                   "own largest weight (the title says so), not one colour scale across the figure."),
    blocky: bool = typer.Option(False, "--blocky", help="With --image: the heat as one block per patch, not smooth at "
                                "the picture's resolution."),
) -> None:
    """Draw attention as heatmaps, rows are queries and columns keys: --head in every layer (--layer all,
    the default) or in one, every head of a layer with --head all, every head of every layer with both 'all'.

    With --image, attention over a picture's patches, as heat over the picture, a panel per layer × head: an image
    encoder's CLS token (or --query) over its patches; with TEXT, a vision-language model's last word (or --query)
    over each picture.

    Example: attnviz heatmap "The cat sat on the mat." --layer 2 --head all
    """
    query = renamed(query, old_query, "-q", "--query")
    head_choice = parse_head("all" if query is not None and not given("head") else head)
    layer_choice = parse_layer(layer)
    text = text_from_file(text, text_file) if audio is not None else text
    heard = None
    if audio is not None:
        from .sound import audio_heatmap, speech_encoder_options

        heard = speech_encoder_options(options, audio, text)
    if audio is not None and heard is None:
        audio_heatmap(options, text, audio, layer=layer_choice, head=head_choice, out=out,
                      cmap=cmap.value, width=width)
        return
    if heard is not None:
        options, text_file = heard, None  # a speech encoder's frames: drawn as any result
    if image:
        from .images import image_heatmap, refuse_unused

        refuse_unused("rows", "cols", "kind", "pair", "target", "hide_special", "renormalize", "words", "values",
                      "fit", "vmax", "colour_scale")
        text = text_from_file(text, text_file)
        image_heatmap(options, text, image, layer=layer_choice, head=head_choice, query=query, out=out,
                      cmap=cmap.value, width=width, per_panel=per_panel, blocky=blocky)
        return
    if per_panel or blocky:
        raise UsageError(f"{'--per-panel-scale' if per_panel else '--blocky'} goes with --image (heat over a picture); "
                         "leave it out")
    if query is not None and head_choice == "mean":
        raise UsageError("--query lists heads one by one; give --head N or leave --head out (every head)")
    pages = [path for path in out if path.suffix.lower() == ".html"]  # the interactive page
    files = [path for path in out if path.suffix.lower() != ".html"]  # pictures and numbers
    if query is not None and pages:
        raise UsageError("--query draws a picture; the page has its own query view (click a token in the head view)")
    if renormalize and not hide_special:
        raise UsageError("--renormalize rescales rows after --hide-special; add --hide-special")
    from ..api import parse_span

    region = (None if rows is None else parse_span(rows, "rows"), None if cols is None else parse_span(cols, "cols"))
    if region != (None, None) and (query is not None or pages):
        raise UsageError("--rows and --cols draw a region of a heatmap; the page zooms into any region itself "
                         "(scroll or drag a box), and --query draws one row")
    log = colour_scale == ColourScale.log
    for path in files:
        if log and path.suffix.lower() in (".svg", ".pdf"):
            raise UsageError(f"--colour-scale log is drawn in PNG pictures and the terminal; {path.name} is "
                             f"{path.suffix.lower()[1:].upper()}: write a .png, or leave --colour-scale out")
    if log and pages:
        raise UsageError("--colour-scale is for pictures; the page has its own choice of scale (log by default "
                         "beyond 512 tokens)")
    text = text_from_file(text, text_file)
    check_view_outputs(out)
    source = options.load()
    text = text_or_example(text, source)
    if pages:  # the interactive page: every head, the one asked open
        if values or vmax is not None:
            raise UsageError("--values and --vmax are for pictures; the page shows each weight on hover, scaled to "
                             "its largest")
        from ..api import page_view
        from ..render.html import render_html

        page = page_view(source, text, layer=layer_choice, head=head_choice if isinstance(head_choice, int) else 0,
                         kind=kind_name(kind), pair=pair, target=target, truncate=truncate,
                         reading=reading(hide_special, renormalize, words),
                         view="matrix" if isinstance(head_choice, int) and layer_choice is not None else "model")
        for path in pages:
            wrote(render_html(page, path, cmap=cmap.value))
        if not files:
            return
    if query is not None:
        from ..api import query_view

        shown = query_view(source, text, query, layer=layer_choice, head=head_choice, kind=kind_name(kind), pair=pair,
                           target=target, reading=reading(hide_special, renormalize, words), truncate=truncate,
                           vmax=vmax, cmap=cmap.value)
        show_view(_scaled(shown, log), files, values=values, fit=fit.value, width=width)
        return
    from ..api import attention_view

    view = attention_view(source, text, layer=layer_choice, head=head_choice, kind=kind_name(kind), pair=pair,
                          target=target, reading=reading(hide_special, renormalize, words), truncate=truncate,
                          vmax=vmax, cmap=cmap.value, pool=_picture(files), rows=region[0], cols=region[1])
    tokens = view.n_tokens or view.panels.shape[2] * view.token_step
    if tokens > LOG_BEYOND and view.row_start is None and not given("colour_scale") and \
            all(path.suffix.lower() == ".png" for path in files):
        note(f"{tokens:,} tokens on a linear colour scale, where most weights are small and dark: --colour-scale log "
             "shows them, as the page's matrix does beyond 512 tokens")
    # A region is drawn cell by cell, as documented: the terminal splits its columns into pages (a panel after
    # another) unless --fit downsample is given.
    paged = region != (None, None) and not given("fit")
    show_view(_scaled(view, log), files, values=values, fit="page" if paged else fit.value, width=width)


def _scaled(view: Any, log: bool) -> Any:
    """``view`` on a log colour scale (``--colour-scale log``), or as it is."""
    if not log:
        return view
    from dataclasses import replace

    return replace(view, scale=view.scale.logarithmic())


def _picture(files: list[Path]) -> bool | None:
    """Picture files pool a long input to their size anyway: pooled as each layer is computed (True). The
    terminal and the numbers (.npz/.json, also beside a picture) keep every token unless a layer is too big (None)."""
    from ..render.registry import FORMATS, view_formats

    pictures = {FORMATS[name].suffix for name in view_formats() if name != "html"}
    return True if files and all(path.suffix.lower() in pictures for path in files) else None

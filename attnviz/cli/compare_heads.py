"""``attnviz compare-heads``: every head side by side, how alike they are, and how they change."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from ..errors import UsageError
from .common import cli_command, renamed, stdout_console, wrote
from .options import (
    Cmap,
    CmapOpt,
    HideSpecial,
    Kind,
    KindChoice,
    Layer,
    ModelOptions,
    Pair,
    Renormalize,
    Target,
    TextFile,
    Truncate,
    Width,
    Words,
    kind_name,
    model_command,
    parse_layer,
    reading,
    text_from_file,
    text_or_example,
)
from .outputs import check_view_outputs


@cli_command
@model_command()
def compare_heads(
    options: ModelOptions,
    text: str | None = typer.Argument(None, metavar="TEXT", help="Input text (default: a built-in example sentence; - reads standard input).", show_default=False),
    text_file: Path | None = TextFile,
    layer: str = Layer,
    kind: KindChoice = Kind,
    target: str | None = Target,
    vs: str | None = typer.Option(None, "--vs", help="A second text: how does each head change between the two?", show_default=False),
    vs_model: str | None = typer.Option(None, "--vs-model", help="A second model of the same shape, on the same text.", show_default=False),
    top_pairs: int = typer.Option(5, "--top-pairs", min=1, help="How many most similar / most different pairs to list (with --vs or --vs-model: how many of the heads that change most)."),
    old_top: int | None = typer.Option(None, "--top", min=1, hidden=True),  # --top: the first N rows (heads, atlas)
    all_rows: bool = typer.Option(False, "--all-rows", help="Long inputs: sum head distances over every query row, however long it takes (default: evenly spaced rows past a fixed budget, said in the output)."),
    out: list[Path] = typer.Option([], "--out", "-o", help="Write a file instead (repeatable), its kind from its extension: an image (.png, .svg, .pdf) or a page (.html).", show_default=False),
    cmap: Cmap = CmapOpt,
    width: int | None = Width,
    truncate: bool = Truncate,
    pair: str | None = Pair,
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
) -> None:
    """Every head as small multiples, the head-distance matrix ordered by clustering, and the extreme pairs.

    Example: attnviz compare-heads --layer 2 --out heads.png
    """
    top = renamed(top_pairs, old_top, "--top", "--top-pairs", parameter="top_pairs")
    if vs is not None and vs_model is not None:
        raise UsageError("give --vs or --vs-model, not both")
    layers_choice = parse_layer(layer)
    out = check_view_outputs(out)
    for path in out:
        if path.suffix.lower() in (".npz", ".json"):  # the overview is a figure and a table, not one view's numbers
            raise UsageError(f"compare-heads draws a picture (.png, .svg, .pdf) or a page (.html), not {path.suffix}; "
                             "for the numbers use attnviz heads --format json, or attnviz heatmap --head all "
                             f"--out x{path.suffix}")
    console = stdout_console(width)
    view = reading(hide_special, renormalize, words)
    pages = [path for path in out if path.suffix.lower() == ".html"]
    figures = [path for path in out if path.suffix.lower() != ".html"]
    if pages and (vs is not None or vs_model is not None):
        raise UsageError("--vs and --vs-model draw a picture of the changes; write it as .png, .svg or .pdf")
    text = text_from_file(text, text_file)  # read before the model loads
    source = options.load()
    text = text_or_example(text, source)
    from ..report import comparison_report

    if vs is None and vs_model is None:
        from ..api import compare_heads_of_text

        # Layers are taken as they are computed: a long input never holds every layer's matrices.
        overview = compare_heads_of_text(source, text, layer=layers_choice, truncate=truncate, all_rows=all_rows,
                                         pair=pair, reading=view, kind=kind_name(kind), target=target)
        if any(note.startswith("head distances") for note in overview.notes):
            overview.notes[:] = [n + " (--all-rows for the exact sums)" if n.startswith("head distances") else n
                                 for n in overview.notes]
        if pages:  # the interactive page of the text, with the head distances in a tab of their own
            from ..api import compare_heads_page
            from ..render.html import render_html

            written = compare_heads_page(source, text, overview, top=top, layer=layers_choice, kind=kind_name(kind),
                                         pair=pair, target=target, truncate=truncate, reading=view)
            for path in pages:
                wrote(render_html(written, path, cmap=cmap.value))
        for path in figures:
            comparison_report(overview, console=console, out=path, top=top, cmap=cmap.value)
        if not out:
            comparison_report(overview, console=console, out=None, top=top, cmap=cmap.value)
        return
    if target is not None or kind is not KindChoice.encoder:
        raise UsageError("--vs and --vs-model compare the encoder's self-attention; --kind and --target go with one run")
    from ..api import compare_runs_of_text

    runs = compare_runs_of_text(source, text, vs=vs, other=None if vs_model is None else replace(options, model=vs_model).load(),
                                layer=layers_choice, truncate=truncate, pair=pair, reading=view, other_name=vs_model)
    targets: list[Path | None] = list(figures) or [None]
    for target_path in targets:
        comparison_report(runs.overview, console=console, out=target_path, top=top, cmap=cmap.value, other=runs.other,
                          change=(runs.change, runs.measure), other_name=runs.other_name)

"""``attnviz view``: one self-contained interactive HTML page of every head, offline."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import UsageError
from .common import cli_command, renamed, wrote
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
    Words,
    kind_name,
    model_command,
    parse_head,
    parse_layer,
    reading,
    text_from_file,
    text_or_example,
)


def _show_help() -> str:
    from ..render.page_views import PAGE_VIEWS

    listed = ", ".join(f"{view.name} ({view.tab.lower()})" for view in PAGE_VIEWS.values())
    return (f"The view open first: {listed}. A view the page has no data for (qk, table) opens the head view (qk "
            "with a warning: at most 64 tokens, on the native engine or a config model), and a page that holds "
            "neither single cells nor each query's strongest keys opens the matrix and says why.")


def _view_names(incomplete: str) -> list[str]:
    from ..render.page_views import PAGE_VIEWS

    return [name for name in PAGE_VIEWS if name.startswith(incomplete)]


SHOW_HELP = _show_help()


@cli_command(flags={"view": "--show", "out": "--page"})
@model_command()
def view(
    options: ModelOptions,
    text: str | None = typer.Argument(
        None, metavar="TEXT", help="Input text. Leave out for configs with a fixed input.", show_default=False
    ),
    page_file: Path = typer.Option(Path("attnviz.html"), "--page", help="The page to write (.html), in this folder "
                                   "unless a path says where (--open shows it in the browser)."),
    old_out: Path | None = typer.Option(None, "--out", "-o", hidden=True),  # --out: write a file instead of printing
    layer: str = Layer,
    head: str = typer.Option("0", "--head", help="The head shown first (a number from 0)."),
    kind: KindChoice = Kind,
    target: str | None = Target,
    pair: str | None = Pair,
    text_file: Path | None = TextFile,
    first: str = typer.Option("head", "--show", help=SHOW_HELP, autocompletion=_view_names),
    stats: bool = typer.Option(True, "--stats/--no-stats", help="Include the sortable table of head statistics."),
    open_page: bool = typer.Option(False, "--open", help="Open the page in the default browser once written."),
    hide_special: bool = HideSpecial,
    renormalize: bool = Renormalize,
    words: bool = Words,
    cmap: Cmap = CmapOpt,
    truncate: bool = Truncate,
) -> None:
    """Write an interactive page: the head view (tokens in two columns, hover one), the model view (every
    layer x head; click one), each head's matrix with a tooltip, and the sortable head statistics.
    One file, no network: open it anywhere.

    Example: attnviz view "The cat sat on the mat." --page cat.html
    """
    out = renamed(page_file, old_out, "--out", "--page", parameter="page_file")
    if Path(out).suffix.lower() != ".html":
        raise UsageError(f"--page {out} must end in .html; the page is one HTML file")
    from ..render.page_views import check_view

    check_view(first)
    if first == "table" and not stats:
        raise UsageError("--show table needs the statistics; drop --no-stats")
    head_choice = parse_head(head)
    if not isinstance(head_choice, int):
        raise UsageError(f"--head {head} is the head shown first: give a number (the page shows every head)")
    layer_choice = parse_layer(layer)
    from ..render.output import check_output_path

    check_output_path(out)
    text = text_from_file(text, text_file)
    source = options.load()
    text = text_or_example(text, source)
    from ..api import page_view
    from ..render.html import render_html

    page = page_view(source, text, layer=layer_choice, head=head_choice, kind=kind_name(kind), pair=pair, target=target,
                     reading=reading(hide_special, renormalize, words), truncate=truncate, stats=stats, view=first)
    written = render_html(page, out, cmap=cmap.value)
    wrote(written)
    if open_page:
        import webbrowser

        webbrowser.open(written.resolve().as_uri())

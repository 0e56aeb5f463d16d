"""``--image``: an image encoder's attention over a picture, in the terminal (half-blocks at the patch grid) or as
heat over the picture (``--out x.png``), and its numbers (``--out x.npz``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..api import safe_text
from ..errors import UsageError
from ..views.picture_files import PICTURE_OUTPUTS as IMAGE_OUTPUTS  # every file a picture command writes
from .common import note, stdout_console, wrote


def checked_pictures(options: Any, images: list[Path], out: list[Path], allowed: tuple[str, ...], written: str, *,
             text: str | None = "") -> list[Path]:
    """The checks every picture command makes before a model loads: the pictures (an encoder reads one, ``text``
    None), a model, the --out files."""
    from ..api import check_picture_count, needs_picture_model
    from .outputs import check_outputs

    check_picture_count(text, images)
    if options.model is None:
        raise UsageError(needs_picture_model())
    return check_outputs(out, allowed, written=f"with --image, --out writes {written}")


def refuse_unused(*names: str, why: str = "the command draws the attention over the picture") -> None:
    """One line naming the first of these options (parameter names) given: a picture command does not use them
    (``why``: what it does instead)."""
    from .common import given

    for name in names:
        if given(name):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} does not go with --image ({why}): leave out {flag}")


def loading(options: Any) -> Any:
    """How the command's options load a picture model (:class:`attnviz.views.picture_commands.Loading`)."""
    from ..views.picture_commands import Loading

    return Loading(engine=str(getattr(options.engine, "value", options.engine)), device=options.device,
                   revision=options.revision, trust_remote_code=options.trust_remote_code)


def image_heatmap(options: Any, text: str | None, images: list[Path], *, layer: int | None, head: Any,
                  query: str | None, out: list[Path], cmap: str, width: int | None, per_panel: bool = False,
                  blocky: bool = False) -> None:
    """Check, run and show (see the module)."""
    from ..views.picture_commands import picture_heatmap
    from ..views.picture_files import PICTURE_OUTPUTS, write_picture_outputs

    checked = checked_pictures(options, images, out, PICTURE_OUTPUTS, ", ".join(PICTURE_OUTPUTS), text=text)
    shown = picture_heatmap(text, images, options.model, layer=layer, head=head, query=query,
                            every_row=any(path.suffix.lower() in (".npz", ".html") for path in checked),
                            per_panel=per_panel, blocky=blocky, cmap=cmap, loading=loading(options))
    result, view = shown.result, shown.view
    for path in write_picture_outputs(result, view, images, checked, text=text, layer=layer,
                                      head=shown.heads[0] if shown.heads else 0, cmap=cmap):
        wrote(path)
    if checked:
        return
    from ..render.terminal import render_terminal

    metas = result.pictures
    console = stdout_console(width)
    grids = ", ".join(f"{m.rows} × {m.cols}" for m in metas)
    console.print(f"{safe_text(view.title)} ({grids} grid of {metas[0].patch}-pixel patches, {metas[0].layout} "
                  "layout)", markup=False)
    for drawn in view.terminal_views():
        render_terminal(drawn, console)
    for line in view.notes:
        note(line)
    if metas[0].specials == 0 and query is None and text is None:
        note("no CLS token in this layout: the mean over the patches' own queries is shown (--query rNcM for one)")


def image_heads(options: Any, text: str | None, images: list[Path], *, fmt: Any, out: list[Path], top: int | None,
                width: int | None) -> None:
    """``heads --image``: each head's share on the picture, its spread over the patches and its sink patch."""
    import json

    from ..views.picture_commands import picture_heads
    from .outputs import csv_text, write_document, write_table

    outputs = checked_pictures(options, images, out, (".json", ".csv", ".parquet", ".png", ".svg", ".pdf"),
                               ".json, .csv or .parquet (the table), .png, .svg or .pdf (each head over the picture)",
                               text=text)
    found = picture_heads(text, images, options.model, loading=loading(options))
    if found.note:
        note(found.note)
    rows, result = found.rows, found.result
    for path in outputs:
        if path.suffix.lower() == ".json":
            write_document(path, found.document)
        elif path.suffix.lower() in (".png", ".svg", ".pdf"):
            from ..api import heads_over_pictures, read_image
            from ..render.picture_figure import render_picture_figure

            render_picture_figure(heads_over_pictures(result, cmap="magma"), [read_image(i) for i in images], path)
        else:
            write_table(path, rows, found.columns)
        wrote(path)
    shown = rows[:top] if top else rows
    if fmt.value == "json":
        typer.echo(json.dumps(found.document, ensure_ascii=False))
    elif fmt.value == "csv":
        typer.echo(csv_text(shown, found.columns), nl=False)
    else:
        from rich.table import Table

        what = "the text's" if text is not None else "every token's"
        table = Table(title=f"{safe_text(result.model_name)}: {what} attention on the picture, by head", box=None, pad_edge=False)
        for name in ("L", "H", "image", "entropy", "sink", "sink share"):
            table.add_column(name, justify="right")
        for row in shown:
            table.add_row(str(row["layer"]), str(row["head"]), f"{row['image_share']:.3f}",
                          f"{row['patch_entropy']:.3f}", row["sink"], f"{row['sink_share']:.3f}")
        stdout_console(width).print(table)


def image_generate(options: Any, prompt: str, images: list[Path], *, max_new_tokens: int, layer: int | None,
                   head: int | None, out: list[Path], cmap: str, width: int | None, sampling: Any = None) -> None:
    """``generate --image``: the vision-language model answers (greedily unless ``sampling`` says otherwise); each
    new token's attention over the picture (its share on the image, the patch it reads most, a grid), and
    ``--out x.png`` a panel per new token."""
    from ..render.terminal import render_terminal
    from ..views.picture_commands import picture_generation
    from ..views.picture_files import write_picture_outputs

    allowed = tuple(s for s in IMAGE_OUTPUTS if s != ".html")
    checked = checked_pictures(options, images, out, allowed, ", ".join(allowed) + " (a panel per new token)")
    made = picture_generation(prompt, images, options.model, max_new_tokens=max_new_tokens, layer=layer, head=head,
                              every_row=any(path.suffix.lower() == ".npz" for path in checked), sampling=sampling,
                              cmap=cmap, loading=loading(options))
    for path in write_picture_outputs(made.result, made.view, images, checked, cmap=cmap):
        wrote(path)
    console = stdout_console(width)
    several = len(made.result.pictures) > 1
    console.print(f"{safe_text(made.result.model_name)} answered {len(made.readings)} tokens; what each read of the "
                  f"picture ({made.where}):", markup=False)
    grids = iter(made.view.terminal_views())
    for reading in made.readings:
        console.print(f"{safe_text(repr(reading.label))}: {reading.share:.0%} on the picture{'s' if several else ''}, "
                      f"most on {', '.join(reading.places)}", markup=False)
        if not checked:
            for _ in made.result.pictures:
                render_terminal(next(grids), console)


def image_rollout(options: Any, images: list[Path], *, fusion: str | None, layer: int | None, query: str | None,
                  out: list[Path], cmap: str, width: int | None) -> None:
    """``rollout --image``: attention rollout over an image encoder's patches (Abnar & Zuidema 2020): how much of
    each patch reaches the CLS token (or ``--query``) after each layer, as heat over the picture."""
    from ..views.picture_commands import picture_rollout
    from ..views.picture_files import write_picture_outputs

    checked = checked_pictures(options, images, out, IMAGE_OUTPUTS, ", ".join(IMAGE_OUTPUTS), text=None)
    rolled = picture_rollout(images[0], options.model, fusion=fusion, layer=layer, query=query, cmap=cmap,
                             loading=loading(options))
    for path in write_picture_outputs(rolled.result, rolled.view, images, checked, cmap=cmap):
        wrote(path)
    if checked:
        return
    from ..render.terminal import render_terminal

    console = stdout_console(width)
    console.print(safe_text(rolled.view.title), markup=False)
    for shown in rolled.view.terminal_views():
        render_terminal(shown, console)


def image_atlas(options: Any, texts: Path, images: list[Path], *, field: str | None, column: str | None,
                input_format: str | None, fmt: str, top: int | None, out: Path | None, width: int | None,
                allow_outside: bool = False) -> None:
    """``atlas`` with pictures: each head across the texts, and the visual sinks (:mod:`attnviz.images.atlas`);
    ``allow_outside``: a corpus's pictures may lie outside its folder."""
    import json

    from ..api import SINK_COLUMNS, picture_atlas, picture_rows
    from ..api import picture_atlas_head_columns as HEAD_COLUMNS
    from ..render.progress import export_progress

    outputs = checked_pictures(options, images, [out] if out is not None else [],
                               (".html", ".json", ".csv", ".parquet"),
                               ".html (the atlas page, the sinks over the picture), .json (the heads and the sinks), "
                               ".csv or .parquet (the heads)")
    rows = picture_rows(texts, field=field, column=column, input_format=input_format, pictures=images or None,
                        allow_outside=allow_outside)
    from ..views.picture_commands import picture_model, read_pictures

    read_pictures([p for each in rows for p in each.pictures])  # each once, before the model loads
    model = picture_model(options.model, loading=loading(options))
    from rich.console import Console

    with export_progress(Console(stderr=True), enabled=fmt == "table" and not outputs, doing="atlas",
                         label="atlas: reading", unit="texts") as (start, advance):
        start(len(rows), 0)
        atlas = picture_atlas(rows, model, on_text=lambda done, total: advance())
    document = atlas.to_dict()
    for path in outputs:
        if path.suffix.lower() == ".html":
            from ..views.picture_atlas_page import picture_atlas_page

            picture_atlas_page(atlas, path)
        elif path.suffix.lower() == ".json":
            from ..api import write_document as write_json

            write_json(path, document)
        else:
            from ..api import write_rows

            write_rows(path, atlas.heads, HEAD_COLUMNS)
        wrote(path)
    if outputs:
        return
    if fmt == "json":
        typer.echo(json.dumps(document, ensure_ascii=False))
        return
    from rich.table import Table

    console = stdout_console(width)
    heads = sorted(atlas.heads, key=lambda r: -r["image_share"])
    table = Table(title=f"{safe_text(atlas.model)}: each head on the pictures across {atlas.texts} texts", box=None,
                  pad_edge=False)
    for name in ("L", "H", "image", "entropy", "sink", "same sink"):
        table.add_column(name, justify="right")
    for head in heads[:top] if top else heads:
        table.add_row(str(head["layer"]), str(head["head"]), f"{head['image_share']:.3f}",
                      f"{head['patch_entropy']:.3f}", head["sink"], f"{head['sink_agreement']:.0%}")
    console.print(table)
    if atlas.grid is None:
        note("the texts' pictures make grids of different shapes: their places are not compared (no visual sinks)")
        return
    sinks = Table(title=f"visual sinks: the places of the {atlas.grid[0]} × {atlas.grid[1]} grid drawn to whatever is "
                  "asked (weight: times an even spread)", box=None, pad_edge=False)
    for name in SINK_COLUMNS:
        sinks.add_column(name, justify="right")
    for place in atlas.sinks[: top or 5]:
        sinks.add_row(str(place["row"]), str(place["col"]), f"{place['weight']:.2f}×",
                      f"{place['texts']:.0%} of texts")
    console.print(sinks)


@dataclass
class PictureExplorer:
    """What ``tui --image`` explores: ``fixed`` (an image encoder's one result) or a vision-language model kept
    loaded for every text; ``load`` builds the explorer on the app's worker."""

    fixed: bool
    load: Callable[[], Any]


def picture_explorer(options: Any, text: str | None, images: list[Path], *, reading: Any,
                     expand: bool = False) -> PictureExplorer:
    """``tui --image``: the pictures checked before anything loads (see :class:`PictureExplorer`)."""
    from ..api import reads_pictures
    from ..tui.explorer import Explorer
    from ..views.picture_commands import picture_attention, picture_model, read_pictures

    checked_pictures(options, images, [], (), "", text=text)
    read_pictures(images)
    how = loading(options)
    if not reads_pictures(options.model):  # an image encoder (or a family found by name when it loads)
        def encoder() -> Any:
            from ..api import SavedSource

            result = picture_attention(None, images, options.model, loading=how)
            return Explorer(SavedSource(result, result.model_name), reading=reading)

        if text is not None:
            raise UsageError(f"{options.model} reads a picture alone (an image encoder), or is not one attnviz knows; "
                             "leave the text out, or give a vision-language model")
        return PictureExplorer(True, encoder)
    how.language_engine()  # attnviz's own engine reads no pictures: said before anything loads

    def language() -> Any:
        from ..views.picture_stream import StreamedPictures

        model = picture_model(options.model, loading=how)
        # The matrices show each picture as one token: the model read a layer at a time, the full result's rows kept
        # only where the picture view shows them (every image token expanded keeps every row).
        return Explorer(model if expand else StreamedPictures(model), reading=reading, pictures=tuple(images),
                        expand=expand)

    return PictureExplorer(False, language)

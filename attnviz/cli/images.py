"""``--image``: an image encoder's attention over a picture, in the terminal (half-blocks at the patch grid) or as
heat over the picture (``--out x.png``), and its numbers (``--out x.npz``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..errors import UnknownFormatError, UsageError
from ..labels import safe_text
from ..views.picture_files import PICTURE_OUTPUTS as IMAGE_OUTPUTS  # every file a picture command writes
from .common import note, stdout_console, wrote


def checked_pictures(options: Any, images: list[Path], out: list[Path], allowed: tuple[str, ...], written: str, *,
             text: str | None = "") -> list[Path]:
    """The checks every picture command makes before a model loads: the pictures (an encoder reads one, ``text``
    None), a model, the --out files."""
    from ..fileio import check_writable
    from .outputs import check_distinct

    if text is None and len(images) > 1:
        raise UsageError(f"{len(images)} pictures without a text: an image encoder reads one picture a run (several "
                         "--image go with a text, to a vision-language model)")
    if options.model is None:
        from ..api import needs_picture_model

        raise UsageError(needs_picture_model())
    for path in out:
        if path.suffix.lower() not in allowed:
            raise UnknownFormatError(f"cannot write {path}: with --image, --out writes {written}")
        if path.suffix.lower() == ".parquet":  # pyarrow, before the model runs
            from ..tables import pyarrow

            pyarrow()
    checked = [check_writable(path) for path in out]
    check_distinct([("out", path) for path in checked])
    return checked


def refuse_unused(*names: str, why: str = "the command draws the attention over the picture") -> None:
    """One line naming the first of these options (parameter names) given: a picture command does not use them
    (``why``: what it does instead)."""
    from .common import given

    for name in names:
        if given(name):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} does not go with --image ({why}): leave out {flag}")


def image_heatmap(options: Any, text: str | None, images: list[Path], *, layer: int | None, head: Any,
                  query: str | None, out: list[Path], cmap: str, width: int | None, per_panel: bool = False,
                  blocky: bool = False) -> None:
    """Check, run and show (see the module)."""
    from ..views.picture_files import PICTURE_OUTPUTS, write_picture_outputs
    from ..views.picture_heat import layer_head_panels, picture_heat

    checked = checked_pictures(options, images, out, PICTURE_OUTPUTS, ", ".join(PICTURE_OUTPUTS), text=text)
    every_row = any(path.suffix.lower() in (".npz", ".html") for path in checked)  # the file holds every row
    result = picture_attention(options, text, images, rows="all" if every_row else "text")
    metas = result.pictures
    chosen = _query(query, result.tokens, metas[0].specials, text_last=text is not None)
    held = result.metadata.get("rows")
    if held is not None and (chosen is None or chosen not in held):  # a patch's row (or their mean): every row
        result = picture_attention(options, text, images, rows="all")
    n_layers, n_heads = result.attentions.shape[:2]
    if layer is not None and not 0 <= layer < n_layers:
        raise UsageError(f"--layer {layer} is out of range; {result.model_name} has layers 0 to {n_layers - 1}")
    layers = list(range(n_layers)) if layer is None else [layer]
    heads = list(range(n_heads)) if head == "all" else None if head == "mean" else [int(head)]
    if heads is not None and not all(0 <= h < n_heads for h in heads):
        raise UsageError(f"--head {head} is out of range; {result.model_name} has heads 0 to {n_heads - 1}")
    who = ("the patches' mean query" if chosen is None else f"{result.tokens[chosen]!r} (token {chosen})")
    what = ("every layer" if layer is None else f"layer {layer}") + (", every head" if head == "all" else
                                                                      ", mean of heads" if heads is None else
                                                                      f", head {heads[0]}")
    view = picture_heat(result, layer_head_panels(result, layers=layers, heads=heads, query=chosen), who=who,
                        what=what, per_panel=per_panel, smooth=not blocky, cmap=cmap,
                        columns=len(heads) * len(metas) if heads is not None and len(heads) > 1 else None)
    for path in write_picture_outputs(result, view, images, checked, text=text, layer=layer,
                                      head=heads[0] if heads else 0, cmap=cmap):
        wrote(path)
    if checked:
        return
    from ..render.terminal import render_terminal

    console = stdout_console(width)
    grids = ", ".join(f"{m.rows} × {m.cols}" for m in metas)
    console.print(f"{safe_text(view.title)} ({grids} grid of {metas[0].patch}-pixel patches, {metas[0].layout} "
                  "layout)", markup=False)
    for shown in view.terminal_views():
        render_terminal(shown, console)
    for line in view.notes:
        note(line)
    if metas[0].specials == 0 and query is None and text is None:
        note("no CLS token in this layout: the mean over the patches' own queries is shown (--query rNcM for one)")


def picture_attention(options: Any, text: str | None, images: list[Path], *, rows: str = "all", **extra: Any) -> Any:
    """An image encoder's attention over the picture (no text), else the vision-language model's over text and
    pictures (``rows="text"``: the text's rows only, where nothing else is read), on the engine asked: fused (the
    default) or hf (transformers' eager attention); an encoder runs on eager attention."""
    from ..api import image_attention, vlm_attention

    engine = str(getattr(options.engine, "value", options.engine))
    if engine == "native":
        raise UsageError("--engine native: attnviz's own engine reads no pictures; use fused (the default) or hf")
    load = {"device": options.device, "revision": options.revision, "trust_remote_code": options.trust_remote_code}
    if text is None:
        return image_attention(images[0], options.model, **load)
    return vlm_attention(text, images, options.model, **load, engine="hf" if engine == "hf" else "fused", rows=rows,
                         **extra)


def _query(query: str | None, tokens: list[str], specials: int, *, text_last: bool = False) -> int | None:
    """The query token: ``--query`` as an index or a label (``[CLS]``, ``r3c4``, a word), ``mean`` for the patches'
    mean; by default the text's last token (a vision-language model: what it reads of the picture as it answers), the
    CLS token, or the mean where the layout has none."""
    if query is None:
        return len(tokens) - 1 if text_last else 0 if specials else None
    if query == "mean":
        return None
    if query.isascii() and query.isdigit() and int(query) < len(tokens):  # ASCII digits: "²" is no index
        return int(query)
    for label in (query, f"<img {query}>"):  # a patch of a vision-language model's prompt: <img r1c2>
        if label in tokens:
            return tokens.index(label)
    raise UsageError(f"--query {query!r} is not a token of this result: a word of the text, a patch (r1c2; with "
                     f"several pictures 2 r1c2), {tokens[0]}, an index up to {len(tokens) - 1}, or mean")


def image_heads(options: Any, text: str | None, images: list[Path], *, fmt: Any, out: list[Path], top: int | None,
                width: int | None) -> None:
    """``heads --image``: each head's share on the picture, its spread over the patches and its sink patch."""
    import json

    from ..api import image_head_columns as COLUMNS
    from ..api import image_head_rows
    from .outputs import csv_text

    outputs = checked_pictures(options, images, out, (".json", ".csv", ".parquet", ".png", ".svg", ".pdf"),
                               ".json, .csv or .parquet (the table), .png, .svg or .pdf (each head over the picture)",
                               text=text)
    result = picture_attention(options, text, images, rows="text")
    last = max(p for meta in result.pictures for p in meta.image_positions)
    if text is not None and result.causal and last == len(result.tokens) - 1:
        note("no word follows the pictures, and the words before them cannot attend to them (a causal model): put "
             "the question after the pictures")
    rows = sorted(image_head_rows(result), key=lambda r: -r["image_share"] if text is not None else r["patch_entropy"])
    document = {"model": result.model_name, "images": [{k: v for k, v in meta.to_dict().items()
                                                        if k not in ("boxes", "grids")} for meta in result.pictures],
                "tokens": result.tokens, "heads": rows}
    for path in outputs:
        if path.suffix.lower() == ".json":
            from ..fileio import write_json

            write_json(path, document)
        elif path.suffix.lower() in (".png", ".svg", ".pdf"):
            from ..api import heads_over_pictures, read_image
            from ..render.picture_figure import render_picture_figure

            render_picture_figure(heads_over_pictures(result, cmap="magma"), [read_image(i) for i in images], path)
        else:
            from ..tables import write_rows

            write_rows(path, rows, COLUMNS)
        wrote(path)
    shown = rows[:top] if top else rows
    if fmt.value == "json":
        typer.echo(json.dumps(document, ensure_ascii=False))
    elif fmt.value == "csv":
        typer.echo(csv_text(shown, COLUMNS), nl=False)
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
                   head: int | None, out: list[Path], cmap: str, width: int | None) -> None:
    """``generate --image``: the vision-language model answers greedily; each new token's attention over the
    picture (its share on the image, the patch it reads most, a grid), and ``--out x.png`` a panel per new token."""
    from ..render.overlay import row_of, strongest_patches
    from ..render.terminal import render_terminal
    from ..views.picture_files import write_picture_outputs
    from ..views.picture_heat import picture_heat

    allowed = tuple(s for s in IMAGE_OUTPUTS if s != ".html")
    checked = checked_pictures(options, images, out, allowed, ", ".join(allowed) + " (a panel per new token)")
    every_row = any(path.suffix.lower() == ".npz" for path in checked)  # the file holds every row
    result = picture_attention(options, prompt, images, max_new_tokens=max_new_tokens, rows="all" if every_row else "text")
    start = result.metadata["prompt_length"]
    new = list(range(start, len(result.tokens)))
    n_layers, n_heads = result.attentions.shape[:2]
    if layer is not None and not 0 <= layer < n_layers:
        raise UsageError(f"--layer {layer} is out of range; {result.model_name} has layers 0 to {n_layers - 1}")
    if head is not None and not 0 <= head < n_heads:
        raise UsageError(f"--only-head {head} is out of range; {result.model_name} has heads 0 to {n_heads - 1}")
    where = ("every layer" if layer is None else f"layer {layer}") + (", mean of heads" if head is None
                                                                      else f", head {head}")
    metas = result.pictures
    several = len(metas) > 1
    view = picture_heat(result, [((f"picture {n + 1} · " if several else "") + f"{result.tokens[q]!r} (token {q})",
                                  layer, head, q, n) for q in new for n in range(len(metas))],
                        who="each new token", what=where, cmap=cmap, columns=min(6, len(new) * len(metas)) or 1)
    for path in write_picture_outputs(result, view, images, checked, cmap=cmap):
        wrote(path)
    console = stdout_console(width)
    console.print(f"{safe_text(result.model_name)} answered {len(new)} tokens; what each read of the picture ({where}):",
                  markup=False)
    every = [p for meta in metas for p in meta.image_positions]
    attn = result.attentions.double()
    attn = attn.mean(0) if layer is None else attn[layer]
    attn = attn.mean(0) if head is None else attn[head]
    grids = iter(view.terminal_views())
    for q in new:
        share = float(attn[row_of(result, [q])[0], every].sum())
        found = [f"{'picture ' + str(n + 1) + ' ' if several else ''}{place}"
                 for n, (_, place) in enumerate(strongest_patches(result, layer, head, q))]
        console.print(f"{safe_text(repr(result.tokens[q]))}: {share:.0%} on the picture{'s' if several else ''}, "
                      f"most on {', '.join(found)}", markup=False)
        if not checked:
            for _ in metas:
                render_terminal(next(grids), console)


def image_rollout(options: Any, images: list[Path], *, fusion: str | None, layer: int | None, query: str | None,
                  out: list[Path], cmap: str, width: int | None) -> None:
    """``rollout --image``: attention rollout over an image encoder's patches (Abnar & Zuidema 2020): how much of
    each patch reaches the CLS token (or ``--query``) after each layer, as heat over the picture."""
    from dataclasses import replace

    from ..api import image_attention, rollout
    from ..views.picture_files import write_picture_outputs
    from ..views.picture_heat import picture_heat

    checked = checked_pictures(options, images, out, IMAGE_OUTPUTS, ", ".join(IMAGE_OUTPUTS), text=None)
    from ..api import reads_pictures

    if str(getattr(options.engine, "value", options.engine)) == "native":
        raise UsageError("--engine native: attnviz's own engine reads no pictures; an image encoder runs on "
                         "transformers' eager attention")
    if reads_pictures(options.model):
        raise UsageError(f"{options.model} is a vision-language model: rollout --image chains an image encoder's "
                         "attention over its patches; see what its words read of the picture with heatmap TEXT --image")
    result = image_attention(images[0], options.model, device=options.device, revision=options.revision,
                             trust_remote_code=options.trust_remote_code)
    chained = rollout(result.attentions, head_fusion=fusion or "mean")  # [L, T, T]
    n_layers = chained.shape[0]
    if layer is not None and not 0 <= layer < n_layers:
        raise UsageError(f"--layer {layer} is out of range; {result.model_name} has layers 0 to {n_layers - 1}")
    rolled = replace(result, attentions=chained[:, None].float(),
                     metadata={**result.metadata, "rollout": {"fusion": fusion or "mean"}})
    chosen = _query(query, rolled.tokens, rolled.pictures[0].specials)
    layers = list(range(n_layers)) if layer is None else [layer]
    who = "the patches' mean query" if chosen is None else f"{rolled.tokens[chosen]!r} (token {chosen})"
    view = picture_heat(rolled, [(f"rollout to layer {each}", each, 0, chosen, 0) for each in layers],
                        who=f"how much of each patch reaches {who}",
                        what=f"attention rollout, heads fused by {fusion or 'mean'}", cmap=cmap,
                        value_name="rollout weight")
    for path in write_picture_outputs(rolled, view, images, checked, cmap=cmap):
        wrote(path)
    if checked:
        return
    from ..render.terminal import render_terminal

    console = stdout_console(width)
    console.print(safe_text(view.title), markup=False)
    for shown in view.terminal_views():
        render_terminal(shown, console)


def image_atlas(options: Any, texts: Path, images: list[Path], *, field: str | None, column: str | None,
                input_format: str | None, fmt: str, top: int | None, out: Path | None, width: int | None,
                allow_outside: bool = False) -> None:
    """``atlas`` with pictures: each head across the texts, and the visual sinks (:mod:`attnviz.images.atlas`);
    ``allow_outside``: a corpus's pictures may lie outside its folder."""
    import json

    from ..api import SINK_COLUMNS, load_vlm, picture_atlas, picture_rows
    from ..api import picture_atlas_head_columns as HEAD_COLUMNS
    from ..render.progress import export_progress

    outputs = checked_pictures(options, images, [out] if out is not None else [],
                               (".html", ".json", ".csv", ".parquet"),
                               ".html (the atlas page, the sinks over the picture), .json (the heads and the sinks), "
                               ".csv or .parquet (the heads)")
    rows = picture_rows(texts, field=field, column=column, input_format=input_format, pictures=images or None,
                        allow_outside=allow_outside)
    from ..api import read_image

    for picture in dict.fromkeys(p for each in rows for p in each.pictures):  # each read before the model loads
        read_image(picture)  # (once): a bad one is one line, not a late failure
    engine = str(getattr(options.engine, "value", options.engine))
    if engine == "native":
        raise UsageError("--engine native: attnviz's own engine reads no pictures; use fused (the default) or hf")
    model = load_vlm(options.model, device=options.device, revision=options.revision,
                     trust_remote_code=options.trust_remote_code, engine="hf" if engine == "hf" else "fused")
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
            from ..fileio import write_json

            write_json(path, document)
        else:
            from ..tables import write_rows

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
    from ..api import read_image, reads_pictures
    from ..tui.explorer import Explorer

    checked_pictures(options, images, [], (), "", text=text)
    for picture in images:
        read_image(picture)
    load = {"device": options.device, "revision": options.revision, "trust_remote_code": options.trust_remote_code}
    if not reads_pictures(options.model):  # an image encoder (or a family found by name when it loads)
        def encoder() -> Any:
            from ..api import SavedSource, image_attention

            result = image_attention(images[0], options.model, **load)
            return Explorer(SavedSource(result, result.model_name), reading=reading)

        if text is not None:
            raise UsageError(f"{options.model} reads a picture alone (an image encoder), or is not one attnviz knows; "
                             "leave the text out, or give a vision-language model")
        return PictureExplorer(True, encoder)
    engine = str(getattr(options.engine, "value", options.engine))
    if engine == "native":
        raise UsageError("--engine native: attnviz's own engine reads no pictures; use fused (the default) or hf")

    def language() -> Any:
        from ..api import load_vlm
        from ..views.picture_stream import StreamedPictures

        model = load_vlm(options.model, **load, engine="hf" if engine == "hf" else "fused")
        # The matrices show each picture as one token: the model read a layer at a time, the full result's rows kept
        # only where the picture view shows them (every image token expanded keeps every row).
        return Explorer(model if expand else StreamedPictures(model), reading=reading, pictures=tuple(images),
                        expand=expand)

    return PictureExplorer(False, language)

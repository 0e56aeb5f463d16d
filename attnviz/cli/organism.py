"""``attnviz organism``: what a model organism's planted heads do, and its checkpoint written out (``--out``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..api import safe_text
from .common import cli_command, note, stdout_console, wrote
from .options import Width
from .outputs import StdoutFormat


@cli_command
def organism(
    config: str = typer.Argument(..., metavar="CONFIG", help="The organism's TOML ([model] type = \"organism\"), "
                                 "e.g. sample_configs/organism_needle.toml."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write its checkpoint into this new folder (a text "
                                    "organism's GPT-2 with its tokenizer; a picture organism's LLaVA or ViT with its "
                                    "processor), for transformers, kvpress, TransformerLens or a notebook to load by "
                                    "path.", show_default=False),
    fmt: StdoutFormat = typer.Option(StdoutFormat.table, "--format", help="What is printed on stdout: the table, "
                                       "or json (the description, its needle and every head), csv (one row per head)."),
    width: int | None = Width,
) -> None:
    """Show what each planted head of a model organism attends to (heads written by hand, so their behaviour is
    known exactly), the needle and question it declares, and where its checkpoint is built; --out writes that
    checkpoint to a folder of your own. Every command takes the organism as --model (built once, offline); a picture
    organism (organism_llava.toml, organism_vit.toml) goes with --image.

    Example: attnviz organism sample_configs/organism_needle.toml --out needle-organism · attnviz organism sample_configs/organism_llava.toml --format json
    """
    from ..api import PictureSpec, is_sound_organism, read_spec
    from ..api import describe_picture_head as describe_picture
    from ..api import describe_planted_head as describe

    if is_sound_organism(config):
        _sound_organism(config, out, fmt, width)
        return
    spec = read_spec(config)  # what is wrong with the file, else that it is not an organism, in one line
    planted = {(h.layer, h.head): h for h in spec.planted}
    encoder = isinstance(spec, PictureSpec) and not spec.language  # an image encoder: not causal
    unplanted = f"every token{'' if encoder else ' so far'}, equally; writes nothing (not planted)"
    rows = [{"layer": layer, "head": head, "kind": planted[(layer, head)].kind if (layer, head) in planted else "zero",
             "attends to": (unplanted if (layer, head) not in planted else
                            describe_picture(planted[(layer, head)], spec.family) if isinstance(spec, PictureSpec)
                            else describe(planted[(layer, head)]))}
            for layer in range(spec.layers) for head in range(spec.heads)]
    described: dict[str, object] = {"name": spec.name, "layers": spec.layers, "heads": spec.heads}
    if isinstance(spec, PictureSpec):
        described.update(family=spec.family, image_size=spec.image_size, patch_size=spec.patch_size, grid=spec.grid,
                         **({"positions": spec.positions, "seed": spec.seed} if spec.language else {}))
        title = (f"{spec.name}: {'a vision-language model (LLaVA-1.5' if spec.language else 'an image encoder (ViT'}"
                 f"'s layout), {spec.layers} layers × {spec.heads} heads, a {spec.grid} × {spec.grid} grid of "
                 f"{spec.patch_size}-pixel patches")
    else:
        described.update(positions=spec.positions, seed=spec.seed, needle=spec.needle, question=spec.question)
        title = f"{spec.name}: {spec.layers} layers × {spec.heads} heads, {spec.positions:,} positions"
    if fmt is StdoutFormat.csv:
        from .outputs import csv_text

        typer.echo(csv_text(rows, ("layer", "head", "kind", "attends to")), nl=False)
    elif fmt is StdoutFormat.json:
        typer.echo(json.dumps({**described, "planted": rows}, ensure_ascii=False, indent=2))
    else:
        from rich.table import Table

        table = Table(title=title, box=None, pad_edge=False)
        for name in ("L", "H", "kind", "attends to"):
            table.add_column(name, justify="right" if len(name) == 1 else "left")
        for row in rows:
            table.add_row(str(row["layer"]), str(row["head"]), str(row["kind"]), safe_text(str(row["attends to"])))
        console = stdout_console(width)
        console.print(table)
        if not isinstance(spec, PictureSpec) and spec.needle:
            console.print(f"needle: {safe_text(spec.needle)}\nquestion: {safe_text(spec.question or '(needle default)')}",
                          markup=False)
    if out is not None:
        from ..api import save_organism

        note(f"building {spec.name}")
        wrote(save_organism(config, out))


def _sound_organism(config: str, out: Path | None, fmt: StdoutFormat, width: int | None) -> None:
    """A sound organism (a tiny Whisper, ``family = "whisper"``): each decoder head's kind and what it reads over
    the clip's time; ``--out`` its checkpoint with its processor."""
    from ..api import (
        check_checkpoint_folder,
        describe_sound_organism,
        read_sound_spec,
        save_sound_organism,
        sound_head_rows,
    )
    from .outputs import csv_text

    spec = read_sound_spec(config)
    if out is not None:
        check_checkpoint_folder(out)  # before the table: a folder that is not empty is one line
    rows = sound_head_rows(spec)
    title, described = describe_sound_organism(spec)
    if fmt is StdoutFormat.csv:
        typer.echo(csv_text(rows, ("layer", "head", "kind", "attends to")), nl=False)
    elif fmt is StdoutFormat.json:
        typer.echo(json.dumps({**described, "planted": rows}, ensure_ascii=False, indent=2))
    else:
        from rich.table import Table

        table = Table(title=safe_text(title), box=None, pad_edge=False)
        for name in ("L", "H", "kind", "attends to"):
            table.add_column(name, justify="right" if len(name) == 1 else "left")
        for row in rows:
            table.add_row(str(row["layer"]), str(row["head"]), str(row["kind"]), safe_text(str(row["attends to"])))
        stdout_console(width).print(table)
    if out is not None:
        note(f"building {spec.name}")
        wrote(save_sound_organism(config, out))

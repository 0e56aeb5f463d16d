"""``attnviz organism``: what a model organism's planted heads do, and its checkpoint written out (``--out``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..labels import safe_text
from .common import cli_command, note, stdout_console, wrote
from .options import Width
from .outputs import StdoutFormat


@cli_command
def organism(
    config: str = typer.Argument(..., metavar="CONFIG", help="The organism's TOML ([model] type = \"organism\"), "
                                 "e.g. sample_configs/organism_needle.toml."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write its checkpoint (GPT-2 layout, with its "
                                    "tokenizer) into this new folder, for transformers, kvpress, TransformerLens or "
                                    "a notebook to load by path.", show_default=False),
    fmt: StdoutFormat = typer.Option(StdoutFormat.table, "--format", help="What is printed on stdout: the table, "
                                       "or json (the description, its needle and every head), csv (one row per head)."),
    width: int | None = Width,
) -> None:
    """Show what each planted head of a model organism attends to (heads written by hand, so their behaviour is
    known exactly), the needle and question it declares, and where its checkpoint is built; --out writes that
    checkpoint to a folder of your own. Every command takes the organism as --model (built once, offline).

    Example: attnviz organism sample_configs/organism_needle.toml --out needle-organism · attnviz organism sample_configs/organism_duo.toml --format json
    """
    from ..organisms import read_spec
    from ..organisms.spec import describe

    spec = read_spec(config)  # what is wrong with the file, else that it is not an organism, in one line
    planted = {(h.layer, h.head): h for h in spec.planted}
    rows = [{"layer": layer, "head": head, "kind": planted[(layer, head)].kind if (layer, head) in planted else "zero",
             "attends to": describe(planted[(layer, head)]) if (layer, head) in planted else
             "every token so far, equally; writes nothing (not planted)"}
            for layer in range(spec.layers) for head in range(spec.heads)]
    if fmt is StdoutFormat.csv:
        from .outputs import csv_text

        typer.echo(csv_text(rows, ("layer", "head", "kind", "attends to")), nl=False)
    elif fmt is StdoutFormat.json:
        typer.echo(json.dumps({"name": spec.name, "layers": spec.layers, "heads": spec.heads,
                               "positions": spec.positions, "seed": spec.seed, "needle": spec.needle,
                               "question": spec.question, "planted": rows}, ensure_ascii=False, indent=2))
    else:
        from rich.table import Table

        table = Table(title=f"{spec.name}: {spec.layers} layers × {spec.heads} heads, {spec.positions:,} positions",
                      box=None, pad_edge=False)
        for name in ("L", "H", "kind", "attends to"):
            table.add_column(name, justify="right" if len(name) == 1 else "left")
        for row in rows:
            table.add_row(str(row["layer"]), str(row["head"]), str(row["kind"]), safe_text(str(row["attends to"])))
        console = stdout_console(width)
        console.print(table)
        if spec.needle:
            console.print(f"needle: {safe_text(spec.needle)}\nquestion: {safe_text(spec.question or '(needle default)')}",
                          markup=False)
    if out is not None:
        from ..organisms import save_organism

        note(f"building {spec.name}")
        wrote(save_organism(config, out))

"""``attnviz heads``: every statistic of every head, with labels, as a table, JSON or CSV."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..errors import UsageError
from .common import cli_command, stdout_console
from .options import (
    Device,
    DeviceMap,
    DeviceOpt,
    EngineChoice,
    EngineOpt,
    Model,
    Revision,
    Truncate,
    TrustRemoteCode,
    Verbose,
    Width,
    open_source,
)

BATCH = 16


class Format(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class Probe(str, Enum):
    induction = "induction"


@cli_command
def heads(
    text: str | None = typer.Argument(None, metavar="[TEXT]", help="Input text (or use --file / --probe).", show_default=False),
    model: str | None = Model,
    file: Path | None = typer.Option(None, "--file", "-f", help="A UTF-8 file of texts, one per line: statistics are averaged over them.", show_default=False),
    probe: Probe | None = typer.Option(None, "--probe", help="induction: random tokens repeated twice (causal models).", show_default=False),
    sort: str | None = typer.Option(None, "--sort", help="Sort by this column, largest first (e.g. entropy, prev_score, induction).", show_default=False),
    top: int | None = typer.Option(None, "--top", min=1, help="Show only the first N heads (after --sort).", show_default=False),
    fmt: Format = typer.Option(Format.table, "--format", help="table, json (one object per head) or csv."),
    width: int | None = Width,
    truncate: bool = Truncate,
    engine: EngineChoice = EngineOpt,
    revision: str | None = Revision,
    device: Device = DeviceOpt,
    device_map: str | None = DeviceMap,
    trust_remote_code: bool = TrustRemoteCode,
    verbose: bool = Verbose,
) -> None:
    """One row per head: entropy, self/previous/next-token, [CLS]/[SEP]/punctuation, sinks, distance, induction, labels.

    Example: attnviz heads "The cat sat on the mat." --sort prev_score --top 10
    """
    from ..heads import LABELS, STATISTICS

    columns = ["layer", "head", *STATISTICS]
    if sort is not None and sort not in columns:
        raise UsageError(f"--sort {sort!r} is not a column; use one of {', '.join(columns)}")
    given = sum(x is not None for x in (text, file, probe))
    if given != 1:
        raise UsageError("give exactly one of TEXT, --file FILE or --probe induction")
    texts = None
    if file is not None:
        from ..inputs import read_lines

        texts = read_lines(file)
    source = open_source(model, engine=engine, causal=None, revision=revision, device=device,
                         device_map=device_map, trust_remote_code=trust_remote_code, verbose=verbose)
    if probe is not None:
        from ..heads import head_table
        from ..probes import induction_probe

        table = head_table([induction_probe(source)])
    else:
        from ..api import head_table_of_texts

        # Padded batches of modest size, each layer's statistics taken as it is computed: memory stays flat.
        table = head_table_of_texts(source, texts if texts is not None else [text], truncate=truncate,
                                    batch_size=BATCH)
    rows = table.rows()
    if sort is not None:
        rows.sort(key=lambda row: row[sort], reverse=sort not in ("layer", "head"))
    rows = rows[:top] if top else rows
    if fmt is Format.json:
        import json

        typer.echo(json.dumps(rows, ensure_ascii=False, indent=1))
    elif fmt is Format.csv:
        import csv
        import sys

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([*columns, "labels"])
        for row in rows:
            writer.writerow([row[c] for c in columns] + [";".join(row["labels"])])
    else:
        from ..render.tables import fitting_columns, head_stats_table

        console = stdout_console(width)
        what = "the induction probe" if probe else (f"{table.n_texts} texts (averaged)" if texts else "one text")
        shown = fitting_columns(list(STATISTICS), console.width, keep_first=sort)
        console.print(head_stats_table(rows, shown, title=f"{table.model_name} · {what}"))
        hidden = [c for c in STATISTICS if c not in shown]
        if hidden:
            console.print(f"not shown at this width: {', '.join(hidden)} (widen with --width, or use --format csv/json)",
                          style="dim")
        console.print(
            "labels: " + "; ".join(f"{name} = {stat} ≥ {thr}" for name, (stat, thr) in LABELS.items()), style="dim"
        )

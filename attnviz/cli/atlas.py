"""``attnviz atlas TEXTS --vs-model OTHER``: which heads changed between two checkpoints, over a corpus."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from ..errors import UsageError
from .common import cli_command, stdout_console
from .options import (
    Device,
    DeviceOpt,
    Dtype,
    DtypeOpt,
    EngineChoice,
    EngineOpt,
    Model,
    Revision,
    Truncate,
    TrustRemoteCode,
    Verbose,
    Width,
    model_options,
)


class AtlasFormat(str, Enum):
    table = "table"
    json = "json"


@cli_command
def atlas(
    texts: Path = typer.Argument(..., metavar="TEXTS", help="A UTF-8 file of texts, one per line (or a CSV or Parquet "
                                 "file with --column); or the folder of an export with the parquet format (its "
                                 "heads.parquet: nothing runs).", show_default=False),
    vs_model: str | None = typer.Option(None, "--vs-model", help="The other checkpoint (a fine-tuned model, say): "
                                        "each head's change from --model to it.", show_default=False),
    model: str | None = Model,
    column: str | None = typer.Option(None, "--column", help="A CSV or Parquet TEXTS: the column holding the texts "
                                      "(default text).", show_default=False),
    fmt: AtlasFormat = typer.Option(AtlasFormat.table, "--format", help="table, or json: every head in order of "
                                    "change, each with its layer and head."),
    top: int | None = typer.Option(None, "--top", min=1, help="Only the N heads that changed most (with --vs-model), "
                                   "or the N highest of each statistic.", show_default=False),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the atlas as one offline page (.html): the "
                                    "layers × heads grid of a statistic's mean, and per head its distribution and "
                                    "the texts where it is highest.", show_default=False),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=100, help="Bootstrap resamples of the texts (95% interval)."),
    permutations: int = typer.Option(1000, "--permutations", min=100, help="Sign-flip permutations (p-values)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the resampling: the same seed, the same intervals."),
    width: int | None = Width,
    truncate: bool = Truncate,
    engine: EngineChoice = EngineOpt,
    revision: str | None = Revision,
    device: Device = DeviceOpt,
    dtype: Dtype | None = DtypeOpt,
    trust_remote_code: bool = TrustRemoteCode,
    verbose: bool = Verbose,
) -> None:
    """What heads do across a corpus: each statistic's mean per head, how often each head earns each label, the
    statistics' distributions and the texts where a head shows each most. With --vs-model, which heads changed
    from --model to it instead: per head, the distance between the two models' attention (Jensen-Shannon,
    per query row) and each statistic's change, with bootstrap 95% intervals and permutation p-values.

    Example: attnviz atlas examples/texts.txt --vs-model ./finetuned --top 10
    """
    from ..inputs import read_texts

    if out is not None and (out.suffix.lower() != ".html" or vs_model is not None):
        raise UsageError("--out writes the atlas page: a .html file, without --vs-model (whose changes print as a "
                         "table or JSON)")
    if vs_model is None:
        _corpus(texts, model=model, column=column, fmt=fmt, top=top, width=width, truncate=truncate, engine=engine,
                revision=revision, device=device, dtype=dtype, trust_remote_code=trust_remote_code, out=out)
        return
    if texts.is_dir():
        raise UsageError(f"--vs-model runs both models on the texts; {texts} is a folder: give the file of texts")

    tabular = column is not None or texts.suffix.lower() in (".csv", ".parquet")
    corpus = read_texts(str(texts), column=column or "text", kind="auto" if tabular else "lines")
    options = model_options(model, engine=engine, causal=None, revision=revision, device=device, device_map=None,
                            trust_remote_code=trust_remote_code, verbose=verbose, dtype=dtype)
    from dataclasses import replace

    source = options.load()
    other = replace(options, model=vs_model).load()
    if source.capabilities.fixed_input or other.capabilities.fixed_input:
        raise UsageError("atlas runs both models on TEXTS; a saved result or a matrices config has a fixed input")
    from ..api import checkpoint_diff

    diff = checkpoint_diff(source, other, corpus, truncate=truncate, bootstrap=bootstrap, permutations=permutations,
                           seed=seed)
    if fmt is AtlasFormat.json:
        typer.echo(json.dumps(diff.document(top), ensure_ascii=False, allow_nan=False, indent=1))
        return
    console = stdout_console(width)
    table = Table(title=Text(f"{diff.model} → {diff.other} · {diff.n_texts} texts · heads in order of change",
                             style="bold"), title_justify="left", show_edge=False, pad_edge=False)
    for name, justify in (("#", "right"), ("L", "right"), ("H", "right"), ("distance [95%]", "left"),
                          ("p", "right"), ("largest change of a statistic [95%], p", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for rank, head in enumerate(diff.heads[:top] if top else diff.heads, 1):
        name, change = max(head.stats.items(), key=lambda item: abs(item[1].mean))
        table.add_row(str(rank), str(head.layer), str(head.head),
                      f"{head.distance.mean:.4f} [{head.distance.low:.4f}, {head.distance.high:.4f}]",
                      f"{head.distance.p:.3f}",
                      f"{name} {change.mean:+.3f} [{change.low:+.3f}, {change.high:+.3f}], p {change.p:.3f}")
    console.print(table)
    console.print(Text("distance: the mean Jensen-Shannon divergence of each query row between the two models (≤ ln 2); "
                       f"intervals: {diff.bootstrap} bootstrap resamples of the texts; p: {diff.permutations} "
                       "sign-flip permutations of the paired differences. --format json has every statistic.",
                       style="dim"))


def _corpus(texts: Path, *, model: str | None, column: str | None, fmt: AtlasFormat, top: int | None,
            width: int | None, truncate: bool, engine: EngineChoice, revision: str | None, device: Device,
            dtype: Dtype | None, trust_remote_code: bool, out: Path | None = None) -> None:
    """The corpus's atlas numbers: from an export folder as it is, or from a file of texts exported first."""
    import tempfile

    from ..export.atlas_data import atlas_data, document

    if texts.is_dir():
        data = atlas_data(texts)
    else:
        from .heads_parquet import parquet_settings, write_parquet
        from .options import reading

        options = model_options(model, engine=engine, causal=None, revision=revision, device=device, device_map=None,
                                trust_remote_code=trust_remote_code, verbose=False, dtype=dtype)
        settings = parquet_settings(options, truncate=truncate, layer=None, column=column,
                                    reading=reading(False, False, False), batch_size=8)
        with tempfile.TemporaryDirectory() as folder:
            write_parquet(texts, Path(folder), settings, verbose=False, quiet=True)
            data = atlas_data(folder)
    if out is not None:
        from ..export.atlas_data import attach_attention
        from ..render.atlas_page import render_atlas

        page = document(data)
        options = model_options(model, engine=engine, causal=None, revision=revision, device=device, device_map=None,
                                trust_remote_code=trust_remote_code, verbose=False, dtype=dtype)
        attach_attention(page, options.load(), data.layers, data.n_heads)  # each cited text's attention, drawn
        typer.echo(f"wrote {render_atlas(page, out)}")
        return
    if fmt is AtlasFormat.json:
        typer.echo(json.dumps(document(data, top), ensure_ascii=False, allow_nan=False, indent=1))
        return
    from ..analysis.statistics import short_name

    console = stdout_console(width)
    shown = top or 3
    table = Table(title=Text(f"{data.model} · {data.n_texts} texts · the heads with the highest corpus mean",
                             style="bold"), title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("statistic")
    table.add_column(f"top {shown} heads (L·H mean)")
    for stat in data.stats:
        order = data.means[stat].flatten().argsort()[::-1][:shown]
        table.add_row(short_name(stat), "  ".join(
            f"L{data.layers[i // data.n_heads]}·H{i % data.n_heads} {data.means[stat].flat[i]:.3f}" for i in order))
    for label, rates in sorted(data.label_rates.items()):
        order = rates.flatten().argsort()[::-1][:shown]
        table.add_row(f"[{label}]", "  ".join(
            f"L{data.layers[i // data.n_heads]}·H{i % data.n_heads} {rates.flat[i]:.0%}" for i in order if rates.flat[i] > 0))
    console.print(table)
    console.print(Text("[label]: the share of texts in which a head earns it. --format json has every head's means, "
                       "histograms and the texts where it shows each statistic most.", style="dim"))

"""``attnviz export``: every text of a file to images, npz and JSON, with a manifest; resumable and shardable."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..errors import UsageError, in_cli_terms
from .common import FLAGS, cli_command, fail, note, renamed, stdout_console
from .options import (
    CMAP_HELP,
    DTYPE_HELP,
    ENGINE_HELP,
    HIDE_SPECIAL_HELP,
    PAIR_HELP,
    RENORMALIZE_HELP,
    WORDS_HELP,
    AllowOutsidePictures,
    Causal,
    Cmap,
    Column,
    Device,
    Dtype,
    EngineChoice,
    Field,
    ImageFiles,
    InputFormat,
)

_NOT_GIVEN = None  # every option defaults to None so that --config values show through


@cli_command
def export(
    inputs: list[str] | None = typer.Argument(
        None, metavar="INPUT|SHARD_DIR",
        help="Texts: a text file (one per line), .jsonl, .csv, or - for stdin. With --merge: the shard folders to join.",
        show_default=False),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the results and manifest.jsonl.", show_default=False),
    model: str | None = typer.Option(_NOT_GIVEN, "--model", "-m", help="Model (default: the embedded all-MiniLM-L6-v2).", show_default=False),
    layers: str | None = typer.Option(_NOT_GIVEN, "--layer", "-l", help="Layers to export: a number, a list 0,2,4-6, or all (default).", show_default=False),
    heads: str | None = typer.Option(_NOT_GIVEN, "--head", help="Heads to draw one by one too: a number or a list (0,3).", show_default=False),
    old_layers: str | None = typer.Option(None, "--layers", hidden=True),
    old_heads: str | None = typer.Option(None, "--heads", hidden=True),
    grid: bool | None = typer.Option(_NOT_GIVEN, "--grid/--no-grid", help="A grid of every head per layer (default: yes, unless --heads).", show_default=False),
    formats: str | None = typer.Option(_NOT_GIVEN, "--formats", help="Some of png,svg,pdf,html,npz,json,parquet (default png,npz,json). parquet: heads.parquet, one row per text × layer × head, and texts.parquet (needs pyarrow).", show_default=False),
    batch_size: int | None = typer.Option(_NOT_GIVEN, "--batch-size", help="Texts per forward pass (default 8).", show_default=False),
    jobs: int | None = typer.Option(_NOT_GIVEN, "--jobs", "-j", help="How many workers at once (default 2): processes drawing images, or with --backend ray the Ray actors, each holding its own model.", show_default=False),
    config: str | None = typer.Option(None, "--config", help="A TOML file with an [export] table; flags override it. sample_configs/batch.toml works from any folder.", show_default=False),
    shard: str | None = typer.Option(_NOT_GIVEN, "--shard", help="K/N: export only shard K of N (e.g. one task of a Slurm array).", show_default=False),
    input_format: str | None = InputFormat,
    field: str | None = Field,
    column: str | None = Column,
    float16: bool | None = typer.Option(_NOT_GIVEN, "--float16/--float32", help="Store attentions in the npz as float16.", show_default=False),
    truncate: bool | None = typer.Option(_NOT_GIVEN, "--truncate/--no-truncate", help="Cut texts longer than the model's maximum.", show_default=False),
    engine: EngineChoice | None = typer.Option(_NOT_GIVEN, "--engine", help=ENGINE_HELP, show_default=False),
    device: Device | None = typer.Option(_NOT_GIVEN, "--device", help="Where the model runs.", show_default=False),
    dtype: Dtype | None = typer.Option(_NOT_GIVEN, "--dtype", help=DTYPE_HELP, show_default=False),
    revision: str | None = typer.Option(_NOT_GIVEN, "--revision", help="Hub branch, tag or commit of --model.", show_default=False),
    trust_remote_code: bool | None = typer.Option(_NOT_GIVEN, "--trust-remote-code/--no-trust-remote-code", help="Let a hub model run its own Python code. Read that code first.", show_default=False),
    cmap: Cmap | None = typer.Option(_NOT_GIVEN, "--cmap", help=CMAP_HELP, show_default=False),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Say which engine ran, on which device."),
    causal: bool | None = Causal,
    pair: str | None = typer.Option(_NOT_GIVEN, "--pair", help=PAIR_HELP, show_default=False),
    hide_special: bool | None = typer.Option(_NOT_GIVEN, "--hide-special/--keep-special", help=HIDE_SPECIAL_HELP, show_default=False),
    renormalize: bool | None = typer.Option(_NOT_GIVEN, "--renormalize/--no-renormalize", help=RENORMALIZE_HELP, show_default=False),
    words: bool | None = typer.Option(_NOT_GIVEN, "--words/--pieces", help=WORDS_HELP, show_default=False),
    style: str | None = typer.Option(_NOT_GIVEN, "--style", help="figure (labelled, as attnviz heatmap) or tiles (bare colours, PNG, far faster).", show_default=False),
    quiet: bool | None = typer.Option(_NOT_GIVEN, "--quiet/--progress", "-q", help="No progress: no bar at a terminal, and no progress lines on stderr elsewhere.", show_default=False),
    backend: str | None = typer.Option(_NOT_GIVEN, "--backend", help="local (this machine: one process runs the model, --jobs draw) or ray (--jobs Ray actors, one model each; needs Ray).", show_default=False),
    ray_address: str | None = typer.Option(_NOT_GIVEN, "--ray-address", help="With --backend ray: an existing cluster (auto, or the head's host:port; ray://host:port needs ray[client]); default: a local cluster with this machine's CPUs.", show_default=False),
    image: list[Path] = ImageFiles,
    allow_outside_pictures: bool = AllowOutsidePictures,
    merge: bool = typer.Option(False, "--merge", help="Instead of exporting: join the shard folders given as arguments into --out (--merge shards/*, or --merge a --merge b).", show_default=False),
) -> None:
    """Export attention for every text of INPUT: image grids per layer, .npz arrays and head statistics as JSON.

    A rerun skips finished items; --shard K/N splits the work; --merge joins the shards.
    Example: attnviz export texts.txt --out results/ --layer 0,5 --formats png,npz

    With a vision-language model, each text is read with its pictures (the corpus's "image" field or column, or
    --image for every text): per text its .npz, .stats.json (each head on the pictures) and a PNG per layer of heat
    over them; parquet: pictures.parquet.

    With --merge, every argument is a shard folder and nothing is exported:
    attnviz export --merge shards/* --out results/ (the older --merge a --merge b means the same).
    """
    from ..export import build_settings, run_export
    from ..export import merge as merge_dirs

    layers = renamed(layers, old_layers, "--layers", "--layer")  # every command says --layer/--head
    heads = renamed(heads, old_heads, "--heads", "--head")
    engine, device, dtype, cmap = (None if v is None else v.value for v in (engine, device, dtype, cmap))
    console = stdout_console()
    export_options = {
        "model": model, "layers": layers, "heads": heads, "grid": grid, "formats": formats, "batch_size": batch_size,
        "input_format": input_format, "style": style,
        "jobs": jobs, "shard": shard, "field": field, "column": column, "float16": float16,
        "truncate": truncate, "engine": engine, "device": device, "dtype": dtype, "quiet": quiet, "revision": revision,
        "trust_remote_code": trust_remote_code, "cmap": cmap, "causal": causal, "pair": pair,
        "hide_special": hide_special, "renormalize": renormalize, "words": words, "backend": backend,
        "ray_address": ray_address,
    }
    inputs = inputs or []
    if merge:
        _check_merge_options(inputs, config, export_options)
        manifest, count = merge_dirs([Path(folder) for folder in inputs], out)
        if not quiet:
            console.print(f"merged {count} items from {len(inputs)} folders into {manifest}")
        return
    if not inputs:
        raise UsageError("give INPUT (a file of texts, or - for stdin), or --merge SHARD_DIR…")
    if len(inputs) > 1:
        raise UsageError(
            f"give one INPUT, not {len(inputs)} ({' '.join(inputs[:3])}{' …' if len(inputs) > 3 else ''}); "
            "to join shard folders add --merge"
        )
    input = inputs[0]
    settings = build_settings(config, export_options)
    from ..api import hears_sound, reads_pictures
    from ..render.progress import export_progress

    sound = not image and settings.model is not None and hears_sound(settings.model)
    pictures = not sound and (bool(image) or (settings.model is not None and reads_pictures(settings.model)))
    if sound:
        from ..export.sounds import check_settings as check_sound_settings

        check_sound_settings(settings)
        if allow_outside_pictures:
            raise UsageError("--allow-outside-pictures goes with a corpus of pictures; a corpus of clips keeps its "
                             "clips inside its folder")
    elif pictures:
        from ..export.pictures import check_settings

        if settings.model is None:
            from ..api import needs_picture_model

            raise UsageError(needs_picture_model())
        check_settings(settings)
    elif allow_outside_pictures:
        raise UsageError("--allow-outside-pictures goes with a corpus of pictures (a vision-language model); leave it "
                         "out")

    # A bar at a terminal; otherwise a plain line on stderr now and then (a log, a cluster job).
    with export_progress(console, enabled=not settings.quiet) as (start, advance):
        try:
            said = (lambda source: note(source.describe())) if verbose else None
            if sound:
                from ..export.sounds import run_sound_export

                summary = run_sound_export(input, out, settings, on_start=start, on_item=advance)
            elif pictures:
                from ..export.pictures import run_picture_export

                summary = run_picture_export(input, out, settings, image, on_start=start, on_item=advance,
                                             allow_outside=allow_outside_pictures)
            else:
                summary = run_export(input, out, settings, on_start=start, on_item=advance, on_source=said)
        except KeyboardInterrupt:
            # The export's own note (attnviz.export.run), as a Ctrl-C during a module's import says it too
            raise fail(f"interrupted; what is finished is kept in {out}; rerun the same command to resume", 130) from None
    done = f"{summary.exported} exported, {summary.skipped} already done"
    if summary.removed:
        shown = ", ".join(summary.removed[:3]) + (f" and {len(summary.removed) - 3} more" if len(summary.removed) > 3 else "")
        sys.stderr.write(f"attnviz: removed {len(summary.removed)} files of an earlier export with other settings "
                         f"or texts, which this run does not make: {shown}\n")
    if summary.failed:
        first = "; ".join(f"item {i}: {in_cli_terms(msg, FLAGS)}" for i, msg in summary.failed[:3])
        more = f" (and {len(summary.failed) - 3} more)" if len(summary.failed) > 3 else ""
        sys.stderr.write(
            f"attnviz: error: {len(summary.failed)} of {summary.items} items failed ({done}); see {summary.manifest}: "
            f"{first}{more}\n"
        )
        raise typer.Exit(1)
    if not settings.quiet:
        console.print(f"{summary.items} items: {done}; manifest {summary.manifest}")


def _check_merge_options(folders: list[str], config: str | None, options: dict[str, object]) -> None:
    """--merge only joins folders: an export option beside it would be silently ignored, so refuse it."""
    if not folders:
        raise UsageError("--merge needs the shard folders to join, e.g. attnviz export --merge shards/* --out results/")
    given = [name for name, value in options.items() if value is not None and name != "quiet"]
    if config is not None:
        given.insert(0, "config")
    if given:
        flag = FLAGS.get(given[0], "--" + given[0].replace("_", "-"))  # layers: --layer, as the command spells it
        raise UsageError(f"{flag} applies to exporting; --merge only joins shard folders made with their own settings")

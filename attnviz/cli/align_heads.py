"""``attnviz align-heads``: which cross-attention heads of a Whisper model line words up with time, found over clips
with reference word timings (issue 61 item 4): the heads ranked, a set chosen, written in the three forms people
load, and a copy of the model with it set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ..errors import UsageError
from .common import cli_command, echo_json, note, stdout_console
from .options import Device, DeviceOpt, Revision, Verbose, Width, example_path, ray_options
from .outputs import StdoutFormat, announcer, check_outputs, csv_text

SOUND_ORGANISM = "sample_configs/organism_whisper.toml"


RAY = ray_options("the clips")


@cli_command(flags={"write_config": "--write-config", "references": "--references"})
def align_heads(
    corpus: Path = typer.Argument(..., metavar="CORPUS", help="The clips: a CSV or JSONL of rows audio,reference[,text] "
                                  "(paths relative to it, inside its folder), a folder of clips each with a reference "
                                  "of the same name (a.wav and a.TextGrid, a.json or a.csv), or one clip.",
                                  show_default=False, callback=example_path),
    model: str = typer.Option(..., "--model", "-m", show_default=False,
                              help="A Whisper checkpoint: a folder saved with its processor, a hub id such as "
                                   f"openai/whisper-tiny, or a sound organism's TOML such as {SOUND_ORGANISM}."),
    references: Path | None = typer.Option(None, "--references", help="For one clip: its reference file (a Praat "
                                           "TextGrid with a 'words' tier, JSON [{word, start, end}] or CSV "
                                           "word,start,end); for a folder of clips: the folder holding the "
                                           "references. Default: beside the clips. Clips without references are "
                                           "scored without labels (arXiv 2509.09987's score).", show_default=False,
                                           callback=example_path),
    language: str | None = typer.Option(None, "--language", help="The spoken language, a code such as en (a "
                                        "multilingual model's prompt names it). Default: the one the model hears.",
                                        show_default=False),
    tolerance: float = typer.Option(0.001, "--tolerance", min=0.0, max=10.0, help="The greedy set grows while a "
                                    "head lowers its mean error by more than this many seconds."),
    max_heads: int | None = typer.Option(None, "--max-heads", min=1, help="The set's heads at most (default: twice "
                                         "the decoder's layers).", show_default=False),
    top: int | None = typer.Option(None, "--top", min=1, help="Show only the first N heads of the ranking.",
                                   show_default=False),
    fmt: StdoutFormat = typer.Option(StdoutFormat.table, "--format", help="What is printed on stdout: the table "
                                     "and the set, or json (the whole search), csv (the heads ranked)."),
    out: list[Path] = typer.Option([], "--out", "-o", help="Write a file (repeatable), its kind from its extension: "
                                   ".json (the whole search: every head, the set and its three forms), .csv (the "
                                   "heads ranked), .png (the layers × heads grid of the error, the set marked), "
                                   ".html (one offline page: the grid, the set's three forms, every head ranked).",
                                   show_default=False),
    write_config: Path | None = typer.Option(None, "--write-config", metavar="FOLDER", help="Write a copy of the "
                                             "model in FOLDER (new or empty) with generation_config.json's "
                                             "alignment_heads set to the set found: transformers' "
                                             "generate(return_token_timestamps=True) then reads it.",
                                             show_default=False),
    backend: str = RAY[0],
    jobs: int = RAY[1],
    ray_address: str | None = RAY[2],
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print no progress."),
    revision: str | None = Revision,
    device: Device = DeviceOpt,
    verbose: bool = Verbose,
    width: int | None = Width,
) -> None:
    """Find a Whisper model's alignment heads: each clip is read once, its reference transcript teacher-forced, and
    every decoder head's own word timings (openai-whisper's steps, that head alone) are scored against the
    reference: the mean absolute error of the word boundaries and the share within 20, 50 and 100 ms. Heads are
    ranked, and a set is grown greedily from the best while it lowers the error. Prints the ranking and the set as
    generation_config's alignment_heads, openai-whisper's mask and whisper.cpp's array.

    Example: attnviz align-heads examples/organism_whisper.flac --model sample_configs/organism_whisper.toml --out heads.png
    """
    from ..api import head_search_suffixes

    outputs = check_outputs(out, head_search_suffixes)
    if write_config is not None and write_config.is_dir() and any(write_config.iterdir()):
        raise UsageError(f"[[write_config]] {write_config} exists and is not empty; give a new or empty folder")
    from ..api import check_backend, find_alignment_heads, load_whisper, read_head_corpus

    check_backend(backend, ray_address, jobs)
    clips = read_head_corpus(corpus, references=references)  # a wrong corpus is said before the model loads
    loaded = load_whisper(model, device=device.value, revision=revision)
    if verbose:
        note(f"{loaded.name}: Whisper, {loaded.config.decoder_layers} decoder layers × "
             f"{loaded.config.decoder_attention_heads} heads, on {loaded.device}")

    def progress(done: int, total: int, name: str) -> None:
        if not quiet and fmt is StdoutFormat.table and total > 1:
            note(f"align-heads: clip {done} of {total} ({name})")

    search = find_alignment_heads(clips, loaded if backend == "local" else model, language=language,
                                  tolerance=tolerance, max_heads=max_heads, progress=progress, backend=backend,
                                  jobs=jobs, ray_address=ray_address, device=device.value, revision=revision)
    for path in outputs:
        from ..api import write_head_search

        write_head_search(path, search)
        announcer(fmt)(path)
    if write_config is not None:
        from ..api import write_alignment_config

        write_alignment_config(write_config, model, search.chosen, loaded=loaded, revision=revision)
        announcer(fmt)(write_config)
    rows = search.rows()[:top] if top else search.rows()
    if fmt is StdoutFormat.json:
        echo_json(search.to_dict())
        return
    if fmt is StdoutFormat.csv:
        from ..api import head_search_columns

        typer.echo(csv_text(rows, head_search_columns), nl=False)
        return
    _print_table(search, rows, width)


def _print_table(search: Any, rows: list[dict[str, Any]], width: int | None) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..api import safe_text

    console = stdout_console(width)
    clips = len(search.clips)
    how = ("each head's own word timings against the references" if search.labelled
           else "no references: the label-free score of arXiv 2509.09987 (higher is better)")
    console.print(Text(f"{safe_text(search.model)}: {search.layers} decoder layers × {search.per_layer} heads over "
                       f"{clips} clip{'' if clips == 1 else 's'}; {how}"))
    table = Table(box=None, pad_edge=False)
    for column in ("rank", "layer", "head"):
        table.add_column(column, justify="right")
    if search.labelled:
        for column in ("error (s)", "≤20 ms", "≤50 ms", "≤100 ms"):
            table.add_column(column, justify="right")
    table.add_column("label-free", justify="right")
    table.add_column("set")
    for row in rows:
        cells = [str(row["rank"]), str(row["layer"]), str(row["head"])]
        if search.labelled:
            cells += [f"{row['error']:.3f}", f"{100 * row['within_20ms']:.0f}%", f"{100 * row['within_50ms']:.0f}%",
                      f"{100 * row['within_100ms']:.0f}%"]
        cells += [f"{row['label_free']:.2f}", "✓" if row["chosen"] else ""]
        table.add_row(*cells)
    console.print(table)
    forms = search.forms()
    from ..api import head_name

    chosen = ", ".join(head_name(layer, head) for layer, head in search.chosen)
    said = f"; its error {search.set_error:.3f} s" if search.set_error is not None else ""
    console.print(Text(f"\nthe set: {chosen}{said}"))
    console.print(Text(f"generation_config.json alignment_heads: {forms['alignment_heads']}"))
    console.print(Text(f"openai-whisper mask: {forms['openai_mask']}"))
    console.print(Text("whisper.cpp:\n" + forms["whisper_cpp"].rstrip("\n")))

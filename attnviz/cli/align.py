"""``attnviz align``: each word's start and end in a sound clip, from a Whisper model's alignment heads (issue 61
item 3): a table, JSON or CSV on stdout, and JSON, CSV, SubRip, WebVTT and Praat TextGrid files."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import typer

from ..errors import UsageError
from .common import cli_command, echo_json, note, stdout_console
from .options import Device, DeviceOpt, Revision, Width, example_path, text_from_file
from .outputs import StdoutFormat, announcer, check_outputs, csv_text

EXAMPLE_CLIP = "examples/organism_whisper.flac"
"""The clip the help's example and the docs' lines read (installed with attnviz: they run from any folder)."""
SOUND_ORGANISM = "sample_configs/organism_whisper.toml"
ORIGINS = {"given": "--heads", "generation_config": "the checkpoint's alignment_heads",
           "default": "openai-whisper's default: the decoder's last half"}


class Level(str, Enum):
    word = "word"
    token = "token"


class Task(Enum):  # not a str: its member translate would hide str.translate
    transcribe = "transcribe"
    translate = "translate"


def parse_heads(text: str) -> list[tuple[int, int]]:
    """``--heads 2:2,3:0`` → [(2, 2), (3, 0)]: layer:head pairs, comma-separated, each numbered from 0 (whether each
    lies inside the decoder is checked once the model is loaded)."""
    pairs = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        layer, colon, head = part.partition(":")
        if not colon or not layer.strip().isdigit() or not head.strip().isdigit():
            shown = part if len(part) <= 20 else part[:17] + "..."
            raise UsageError(f"--heads {shown!r} is not LAYER:HEAD; give pairs of numbers from 0, such as 2:2,3:0")
        pairs.append((int(layer), int(head)))
    if not pairs:
        raise UsageError("--heads names no head; give LAYER:HEAD pairs such as 2:2,3:0")
    return pairs


@cli_command(flags={"heads": "--heads", "max_chars": "--line-chars", "max_seconds": "--cue-seconds"})
def align(
    clip: Path = typer.Argument(..., metavar="CLIP", help="The sound: a WAV, FLAC, OGG or MP3 file, mixed to mono and "
                                "resampled to the model's rate; longer than the model's window (30 s for Whisper), "
                                "heard one window after another (without --text).",
                                show_default=False, callback=example_path),
    model: str = typer.Option(..., "--model", "-m", show_default=False,
                              help="A Whisper checkpoint: a folder saved with its processor, a hub id such as "
                                   f"openai/whisper-tiny, or a sound organism's TOML such as {SOUND_ORGANISM} "
                                   "(offline, its alignment head planted by hand)."),
    text: str | None = typer.Option(None, "--text", help="The transcript, read by the model as it is "
                                    "(teacher-forced) and timed; without it, the model's own greedy transcript.",
                                    show_default=False),
    text_file: Path | None = typer.Option(None, "--text-file", metavar="<path>", help="Read the transcript from a "
                                          "UTF-8 file instead of --text (- reads standard input).",
                                          show_default=False),
    heads: str | None = typer.Option(None, "--heads", metavar="LAYER:HEAD,...", help="The cross-attention heads "
                                     "the timings are read from, e.g. 2:2,3:0 (decoder layer:head, from 0). Default: "
                                     "the checkpoint's generation_config alignment_heads, else every head of the "
                                     "decoder's last half (openai-whisper's default).", show_default=False),
    language: str | None = typer.Option(None, "--language", help="The spoken language, a code such as en or zh (a "
                                        "multilingual model's prompt names it). Default: the one the model hears.",
                                        show_default=False),
    task: Task = typer.Option(Task.transcribe, "--task", help="A multilingual model's task: transcribe, or translate "
                              "(the transcript in English)."),
    level: Level = typer.Option(Level.word, "--level", help="The rows of the table and the CSV: word, or token (the "
                                "model's own pieces). JSON and TextGrid hold both; subtitles are lines of words."),
    fmt: StdoutFormat = typer.Option(StdoutFormat.table, "--format", help="What is printed on stdout: the table "
                                     "(start and end in seconds), or json (the whole alignment), csv (one row per "
                                     "word or token)."),
    out: list[Path] = typer.Option([], "--out", "-o", help="Write a file (repeatable), its kind from its extension: "
                                   ".json (the whole alignment: the model, the heads read, each word and token with "
                                   "its start, end and probability), .csv (one row per word or token, as --level "
                                   "says), .srt and .vtt (SubRip and WebVTT subtitles: lines of words), .TextGrid "
                                   "(Praat: a words tier and a tokens tier).", show_default=False),
    line_chars: int = typer.Option(42, "--line-chars", min=1, max=1000, help="Subtitles: a line's characters at "
                                   "most (a longer word is a line of its own)."),
    cue_seconds: float = typer.Option(7.0, "--cue-seconds", min=0.1, max=3600, help="Subtitles: a line's seconds "
                                      "at most (a longer word is a line of its own)."),
    revision: str | None = Revision,
    device: Device = DeviceOpt,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Say which model was loaded, its decoder's shape "
                                 "and where it runs."),
    width: int | None = Width,
) -> None:
    """Time each word of a sound clip from a Whisper model's cross-attention: the alignment heads' attention over
    the clip, normalised, median-filtered, averaged and followed by dynamic time warping, as openai-whisper's word
    timestamps are found. The transcript is --text (teacher-forced) or the model's own. Prints each word's start and
    end; --out writes JSON, CSV, SubRip and WebVTT subtitles, or a Praat TextGrid.

    Example: attnviz align examples/organism_whisper.flac --model sample_configs/organism_whisper.toml --out words.srt
    """
    if text is not None and text_file is not None:
        raise UsageError(f"give --text or --text-file {text_file}, not both")
    text = text_from_file(None, text_file) if text_file is not None else text
    chosen = parse_heads(heads) if heads is not None else None
    from ..api import alignment_suffixes

    outputs = check_outputs(out, alignment_suffixes)
    from ..api import audio_header

    audio_header(clip)  # a missing, damaged or too long clip is said before the model loads
    from ..api import align as run_align
    from ..api import alignment_document, alignment_rows, heads_origin, load_whisper, write_alignment

    loaded = load_whisper(model, device=device.value, revision=revision)
    if verbose:
        note(f"{loaded.name}: Whisper, {loaded.config.decoder_layers} decoder layers × "
             f"{loaded.config.decoder_attention_heads} heads, on {loaded.device}")
    found = run_align(clip, loaded, text=text, heads=chosen, language=language, task=task.value)
    origin = heads_origin(loaded, chosen)
    for path in outputs:
        write_alignment(path, found, model=loaded.name, level=level.value, max_chars=line_chars,
                        max_seconds=cue_seconds, heads_from=origin)
        announcer(fmt)(path)
    if fmt is StdoutFormat.json:
        echo_json(alignment_document(found, model=loaded.name, heads_from=origin))
        return
    rows = alignment_rows(found, level.value)
    if fmt is StdoutFormat.csv:
        from ..api import alignment_columns

        typer.echo(csv_text(rows, alignment_columns[level.value]), nl=False)
        return
    _print_table(found, rows, level.value, loaded.name, origin, width)


def _print_table(found: Any, rows: list[dict[str, Any]], level: str, name: str, origin: str,
                 width: int | None) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..api import head_name, safe_text

    heads = ", ".join(head_name(layer, head) for layer, head in found.heads)
    if len(heads) > 80:
        heads = f"{len(found.heads)} heads"
    said = f", {found.language}" if found.language else ""
    title = (f"{safe_text(name)}: {len(rows)} {level}{'' if len(rows) == 1 else 's'} in {found.duration:.2f} s"
             f"{said}; heads {heads} ({ORIGINS.get(origin, origin)})")
    console = stdout_console(width)
    if not rows:
        console.print(Text(f"{title}\nno words: the transcript is empty"))
        return
    console.print(Text(title))
    table = Table(box=None, pad_edge=False)
    table.add_column(level)
    for column in ("start", "end", "probability"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(Text(safe_text(str(row[level]).strip() or str(row[level]))), f"{row['start']:.2f}",
                      f"{row['end']:.2f}", f"{row['probability']:.2f}")
    console.print(table)

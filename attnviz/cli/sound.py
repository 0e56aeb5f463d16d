"""``heatmap --audio``: a Whisper decoder's cross-attention over a sound clip (issue 61 item 2), each token's weights
over time in the terminal (blocks of round seconds with a seconds axis), or under the clip's log-mel spectrogram
(``--out x.png``, .svg, .pdf), its numbers (``--out x.json``) or the whole result (``--out x.npz``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from .common import given, stdout_console, wrote
from .outputs import write_document

SOUND_OUTPUTS = (".png", ".svg", ".pdf", ".json", ".npz")
UNUSED = ("image", "query", "rows", "cols", "kind", "pair", "target", "hide_special", "renormalize", "words",
          "values", "fit", "vmax", "colour_scale", "per_panel", "blocky", "engine", "causal", "device_map", "dtype",
          "trust_remote_code")


def refuse_unused_with_audio(names: tuple[str, ...] = UNUSED) -> None:
    """One line naming the first of these options (parameter names) given beside ``--audio``."""
    for name in names:
        if given(name):
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} does not go with --audio (the command draws each token's cross-attention over "
                             f"the clip's time): leave out {flag}")


def audio_heatmap(options: Any, text: str | None, audio: Path, *, layer: int | None, head: Any, out: list[Path],
                  cmap: str, width: int | None) -> None:
    """Check, run and show (see the module)."""
    from ..api import audio_header, write_document
    from ..render.sound_figure import render_sound_figure
    from ..render.terminal import render_terminal
    from ..views.sound_heat import sound_heatmap
    from .outputs import check_outputs

    refuse_unused_with_audio()
    if options.model is None:
        raise UsageError("--audio needs --model: a Whisper checkpoint (a folder, a hub id such as openai/whisper-tiny, "
                         "or sample_configs/organism_whisper.toml)")
    checked = check_outputs(out, SOUND_OUTPUTS, written="with --audio, --out writes .png, .svg or .pdf (the heat "
                            "under the spectrogram), .json (the numbers shown) or .npz (the whole result)")
    audio_header(audio)  # a missing, damaged or too long clip is said before the model loads
    shown = sound_heatmap(audio, options.model, text=text, layer=layer, head=head, device=options.device,
                          revision=options.revision, cmap=cmap)
    for path in checked:
        suffix = path.suffix.lower()
        if suffix == ".npz":
            shown.result.save(path)
        elif suffix == ".json":
            write_document(path, shown.heat.document())
        else:
            render_sound_figure(shown.heat, path)
        wrote(path)
    if checked:
        return
    console = stdout_console(width)
    render_terminal(shown.heat.terminal_view(console.width), console)


HEADS_UNUSED = ("file", "probe", "columns", "column", "field", "input_format", "layer", "kind", "target", "only_head",
                "pair", "hide_special", "renormalize", "words", "importance", "ablate", "vs", "retrieval", "image")
HEADS_OUTPUTS = (".json", ".csv", ".parquet")


def audio_heads(options: Any, text: str | None, audio: Path, *, sort: str | None, top: int | None, fmt: str,
                out: list[Path], width: int | None) -> None:
    """``heads --audio``: each decoder cross-attention head's statistics over the clip's time
    (:mod:`attnviz.audio.cross_stats`), a table, JSON or CSV on stdout and ``--out`` files."""
    import json

    import typer
    from rich.table import Table

    from ..api import audio_header, csv_text, safe_text, sound_head_columns, sound_head_statistics
    from .outputs import StdoutFormat, announcer, check_outputs, write_table

    refuse_unused_with_audio(HEADS_UNUSED)
    if options.model is None:
        raise UsageError("--audio needs --model: a Whisper checkpoint (a folder, a hub id such as openai/whisper-tiny, "
                         "or sample_configs/organism_whisper.toml)")
    columns = list(sound_head_columns)
    if sort is not None and sort not in columns:
        raise UsageError(f"--sort {sort!r} is not a statistic of heads --audio; choose one of {', '.join(columns)}")
    checked = check_outputs(out, HEADS_OUTPUTS, written="with --audio, --out writes .json, .csv or .parquet (the "
                            "table)")
    audio_header(audio)
    found = sound_head_statistics(audio, options.model, text=text, device=options.device, revision=options.revision)
    rows = found.rows
    if sort is not None and sort not in ("layer", "head"):
        rows = sorted(rows, key=lambda r: (-float(r[sort]), r["layer"], r["head"]))
    for path in checked:
        if path.suffix.lower() == ".json":
            write_document(path, found.document())
        else:
            write_table(path, rows, columns)
        announcer(StdoutFormat(fmt))(path)
    shown = rows[:top] if top else rows
    if fmt == "json":
        typer.echo(json.dumps({**found.document(), "heads": shown}, ensure_ascii=False))
        return
    if fmt == "csv":
        typer.echo(csv_text(shown, columns), nl=False)
        return
    said = "the transcript given" if found.teacher_forced else "its own transcript"
    table = Table(title=f"{safe_text(found.model)}: each cross-attention head over the clip's {found.duration:.2f} s, "
                  f"{said} ({found.tokens} tokens)", box=None, pad_edge=False)
    for name in ("L", "H", "clip", "entropy", "focus", "monotonic", "diagonal", "label-free", "aligns"):
        table.add_column(name, justify="right")
    for row in shown:
        table.add_row(str(row["layer"]), str(row["head"]), f"{row['clip_share']:.3f}", f"{row['entropy']:.3f}",
                      f"{row['focus']:.3f}", f"{row['monotonicity']:+.3f}", f"{row['diagonal']:.3f}",
                      f"{row['label_free']:.1f}", "yes" if row["alignment"] else "")
    console = stdout_console(width)
    console.print(table)
    console.print("clip: weight on the clip (not its padding); entropy: 0 one position, 1 even; focus: FastSpeech's "
                  "focus rate; monotonic: Spearman's ρ of token order and time; diagonal: MultiSpeech's diagonal "
                  "rate; label-free: arXiv 2509.09987's score; aligns: one of the model's alignment heads "
                  "(docs/sound.md)", style="dim", highlight=False)


def speech_encoder_options(options: Any, audio: Path, text: str | None) -> Any:
    """For ``--audio`` with a speech encoder as ``--model`` (wav2vec2, HuBERT, WavLM): the model options that load
    its self-attention over the clip as a fixed result (:func:`attnviz.api.heard_source`), which the command then
    draws as any result; None for a Whisper, which the sound commands read."""
    from dataclasses import replace

    from ..api import audio_header, hearing_kind

    if options.model is None:
        raise UsageError("--audio needs --model: a Whisper checkpoint (a folder, a hub id such as openai/whisper-tiny, "
                         "or sample_configs/organism_whisper.toml), or a speech encoder such as "
                         "facebook/hubert-base-ls960")
    if hearing_kind(options.model) in ("whisper", "seq2seq"):
        return None
    if text is not None:
        raise UsageError(f"{options.model} is not a Whisper: a speech encoder hears the clip alone (its "
                         "self-attention over the frames); leave out TEXT")
    audio_header(audio)
    return replace(options, audio=audio)


ATLAS_UNUSED = ("column", "field", "input_format", "importance", "ablate", "vs", "old_vs", "retrieval", "per_text",
                "permutations", "force", "embed_tokens", "truncate", "allow_outside_pictures")


def audio_atlas(options: Any, corpus: Path, vs_model: str | None, *, fmt: str, top: int | None, out: Path | None,
                bootstrap: int, seed: int, width: int | None) -> None:
    """``atlas CORPUS --model WHISPER``: each cross-attention head across the clips (:mod:`attnviz.audio.atlas`),
    or with ``--vs-model`` which heads a fine-tuning changed; a table, JSON, or one offline page (``--out x.html``)."""
    import typer
    from rich.console import Console
    from rich.table import Table

    from ..api import safe_text, sound_atlas, sound_atlas_page
    from ..render.progress import export_progress

    for name in ATLAS_UNUSED:
        if given(name):
            flag = {"vs": "--similar-to", "old_vs": "--vs", "embed_tokens": "--embed-tokens"}.get(
                name, "--" + name.replace("_", "-"))
            raise UsageError(f"{flag} does not go with a Whisper's atlas (each cross-attention head's statistics "
                             f"over the clips' time): leave out {flag}")
    if out is not None:
        from .outputs import check_outputs

        check_outputs([out], (".html",), written="--out writes the atlas page, a file ending in .html")  # no link, pipe, device
    with export_progress(Console(stderr=True), enabled=fmt == "table" and out is None, doing="atlas",
                         label="atlas: hearing", unit="clips") as (start, advance):
        started = [False]

        def heard(done: int, total: int) -> None:
            if not started[0]:
                start(total, 0)
                started[0] = True
            advance()

        atlas = sound_atlas(corpus, options.model, vs_model=vs_model, bootstrap=bootstrap, seed=seed,
                            device=options.device, revision=options.revision, on_clip=heard)
    if out is not None:
        wrote(sound_atlas_page(atlas, out))
        return
    rows = atlas.heads if atlas.vs_model is not None else sorted(atlas.heads, key=lambda r: -r["diagonal"])
    rows = rows[:top] if top else rows
    if fmt == "json":
        import json

        typer.echo(json.dumps({**atlas.to_dict(), "heads": rows}, ensure_ascii=False))
        return
    changed = atlas.vs_model is not None
    title = (f"{safe_text(atlas.model)} → {safe_text(str(atlas.vs_model))}: each cross-attention head's change over "
             f"{len(atlas.clips)} clips, largest change of the diagonal rate first (its 95% bootstrap interval)"
             if changed else f"{safe_text(atlas.model)}: each cross-attention head over {len(atlas.clips)} clips, "
             "highest diagonal rate first")
    table = Table(title=title, box=None, pad_edge=False)
    names = ("diagonal", "monotonicity", "entropy", "clip_share")
    for name in ("L", "H", *(("Δ " + n) if changed else n for n in names), "aligns"):
        table.add_column(name, justify="right")
    for row in rows:
        cells = ([f"{row['d_diagonal']:+.3f} [{row['d_diagonal_low']:+.3f}, {row['d_diagonal_high']:+.3f}]",
                  *(f"{row['d_' + n]:+.3f}" for n in names[1:])] if changed else [f"{row[n]:.3f}" for n in names])
        table.add_row(str(row["layer"]), str(row["head"]), *cells, "yes" if row["alignment"] else "")
    stdout_console(width).print(table)


def heard_options(options: Any, audio: Path, text: str | None, *, image: bool, pair: str | None,
                  target: str | None) -> tuple[Any, Any]:
    """``tui --audio``: the model options that load the clip heard (:func:`attnviz.api.heard_source`: a Whisper,
    each text teacher-forced; a speech encoder, its frames), and the kind shown first (a Whisper's cross-attention)."""
    from dataclasses import replace

    from ..api import audio_header, hearing_kind
    from .options import KindChoice

    if image or pair is not None or target is not None:
        flag = "--image" if image else "--pair" if pair is not None else "--target"
        raise UsageError(f"{flag} does not go with --audio (the model hears the clip); leave out {flag}")
    heard = speech_encoder_options(options, audio, text)  # the model checked, a speech encoder's text refused
    if heard is not None:
        return heard, KindChoice.encoder
    if hearing_kind(options.model) == "seq2seq" and text is not None:
        raise UsageError(f"{options.model} is read with its own transcript in the terminal app; leave out TEXT "
                         "(attnviz heatmap --audio teacher-forces one)")
    audio_header(audio)
    return replace(options, audio=audio), KindChoice.cross

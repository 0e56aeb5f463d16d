"""An export of sound clips heard by a Whisper model (issue 61 item 1): the clips of a corpus (a CSV or JSONL of rows
``audio[, text][, reference]``, a folder of clips, or one clip: :func:`attnviz.audio.references.read_head_corpus`,
each path inside the corpus's folder unless allowed), each with its transcript teacher-forced where the row gives
one (or its reference's words), else the model's own greedy transcript. Per clip, from one pass:

* ``{stem}.json``: the transcript, its words' times from the model's alignment heads (:mod:`attnviz.audio.timing`,
  as ``attnviz align``) and each cross-attention head's statistics over time (:mod:`attnviz.audio.cross_stats`, as
  ``attnviz heads --audio``);
* ``{stem}.L{layer}.png``: each decoder layer's cross-attention over time under the clip's log-mel spectrogram, a
  panel per head (or the heads given), as ``attnviz heatmap --audio --head all --out x.png`` draws it;
* ``{stem}.npz``: the result (:func:`attnviz.audio.whisper.whisper_attention`'s) over the clip's positions
  (:func:`attnviz.audio.whisper.clip_only`: the window's padding after the clip, silence, left out, so a 2-s clip's
  encoder attention is 100 × 100 weights a head, not 1,500 × 1,500; ``metadata["cropped_to_clip"]``);

and with ``parquet`` one ``sounds.parquet``: a row per clip × layer × head of the statistics. Resumable and
shardable as every export (the manifest, journal and lock); an item's hash covers its text and its clip's bytes. A
clip the model cannot hear (damaged, longer than its window) is a failed item and the others go on."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..fileio import atomic_write
from .blocks import ExportSummary
from .item_runs import run_loaded_items
from .items import Item, slug
from .settings import ExportSettings

FORMATS = ("png", "npz", "json", "parquet")
TABLE = "sounds.parquet"


@dataclass(frozen=True)
class SoundItem(Item):
    """One clip: ``text`` the transcript given ("" for the model's own)."""

    clip: Path = Path()

    @property
    def hash(self) -> str:
        """SHA-256 of the text and the clip's bytes, first 16 hex digits."""
        digest = hashlib.sha256(self.text.encode("utf-8") + b"\0")
        with open(self.clip, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()[:16]

    @property
    def stem(self) -> str:
        return f"{self.index:06d}-{slug(self.clip.stem)}"


def check_settings(settings: ExportSettings) -> None:
    """What an export of clips cannot do, each one line before anything loads."""
    other = [f for f in settings.formats if f not in FORMATS]
    if other:
        raise UsageError(f"[[formats={','.join(other)}]]: an export of clips writes {', '.join(FORMATS)}")
    if settings.backend != "local":
        raise UsageError("an export of clips runs on this machine (the local backend)")
    if settings.engine not in ("auto", "hf"):
        raise UsageError(f"[[engine={settings.engine}]]: a Whisper runs on transformers' eager attention (hf, or auto)")
    if settings.pair is not None or settings.hide_special or settings.renormalize or settings.words:
        raise UsageError("an export of clips reads each transcript as Whisper writes it: no [[pair]], "
                         "[[hide_special]], [[renormalize]] or [[words]]")
    if "parquet" in settings.formats:
        from ..tables import pyarrow

        pyarrow()


def sound_items(source: str | os.PathLike[str], *, allow_outside: bool = False) -> list[SoundItem]:
    """The clips of ``source`` (see the module) as items, each clip's header read (a damaged or too long clip is one
    line naming it, before the model loads)."""
    from ..audio.read import audio_header
    from ..audio.references import read_head_corpus
    clips = read_head_corpus(source, allow_outside=allow_outside)
    for path in dict.fromkeys(c.audio for c in clips):
        audio_header(path)
    items = []
    for index, clip in enumerate(clips):
        text = clip.text if clip.text is not None else (
            " ".join(w.word for w in clip.reference) if clip.reference is not None else "")
        items.append(SoundItem(index, text, clip.audio))
    return items


def run_sound_export(source_path: str, out_dir: Path, settings: ExportSettings, *, on_start: Any = None,
                     on_item: Any = None, allow_outside: bool = False) -> ExportSummary:
    """Export this shard of ``source_path``'s clips into ``out_dir`` (see the module)."""
    check_settings(settings)
    all_items = sound_items(source_path, allow_outside=allow_outside)

    def load() -> Any:
        from ..audio.model import load_whisper

        return load_whisper(str(settings.model), device=settings.device, revision=settings.revision)

    return run_loaded_items(out_dir, settings, all_items, load, _export_item,
                            (lambda items: _table(out_dir, items)) if "parquet" in settings.formats else None,
                            on_start=on_start, on_item=on_item)


def _export_item(loaded: Any, item: SoundItem, out_dir: Path,
                 settings: ExportSettings) -> tuple[list[str], dict[str, Any]]:
    from ..audio.cross_stats import pass_head_statistics
    from ..audio.timing import alignment_heads, decoder_of, word_alignment
    from ..audio.whisper import as_result, clip_only, forward
    from ..layer_range import check_heads, check_layers

    layers_count = int(loaded.config.decoder_layers)
    heads_count = int(loaded.config.decoder_attention_heads)
    layers = list(range(layers_count)) if settings.layers is None else list(settings.layers)
    check_layers(layers, owner=f"the decoder of {loaded.name}", count=layers_count)
    if settings.heads is not None:
        check_heads(settings.heads, owner=f"the decoder of {loaded.name}", count=heads_count, option="heads")
    marked = alignment_heads(loaded)
    run = forward(item.clip, loaded, text=item.text or None, language=None, task="transcribe",
                  encoder="npz" in settings.formats, weights=True, scores=range(layers_count), text_only=True)
    files: list[str] = []
    result = as_result(loaded, run)
    if "npz" in settings.formats:  # the clip's positions only: the window's padding is silence
        files.append(clip_only(result).save(out_dir / f"{item.stem}.npz", float16=settings.float16).name)
    per_second = loaded.sampling_rate / (loaded.hop_length * loaded.stride)
    aligned = word_alignment(run.scores, run.logits, run.read, run.heard.positions, decoder_of(loaded), per_second,
                             marked, duration=run.heard.seconds)
    table = pass_head_statistics(loaded, run, marked)
    if "json" in settings.formats or "parquet" in settings.formats:
        doc = {"index": item.index, "hash": item.hash, "clip": str(item.clip), "model": loaded.name,
               "transcript": table.transcript, "teacher_forced": table.teacher_forced, "language": run.read.language,
               "duration": run.heard.seconds, "alignment_heads": [list(h) for h in marked],
               "words": [{"word": w.word, "start": w.start, "end": w.end, "probability": w.probability}
                         for w in aligned.words],
               "heads": [row for row in table.rows if row["layer"] in layers]}
        path = out_dir / f"{item.stem}.json"
        text = json.dumps(doc, ensure_ascii=False, allow_nan=False, sort_keys=True, indent=1) + "\n"
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
        files.append(path.name)
    if "png" in settings.formats:
        files.extend(_pictures(loaded, run, result, item, out_dir, settings, layers))
    return files, {"tokens": len(run.read.text_ids), "duration": round(run.heard.seconds, 6),
                   "words": len(aligned.words)}


def _pictures(loaded: Any, run: Any, result: Any, item: SoundItem, out_dir: Path, settings: ExportSettings,
              layers: list[int]) -> list[str]:
    """Each layer's cross-attention under the spectrogram (every head, or those given)."""
    from dataclasses import replace

    import numpy as np

    from ..render.sound_figure import render_sound_figure
    from ..views.sound_heat import sound_heat

    mel = np.asarray(run.heard.features[0, :, : run.heard.frames].float().cpu().numpy(), dtype=np.float64)
    frame = loaded.hop_length / loaded.sampling_rate
    grid = settings.grid if settings.grid is not None else not settings.heads
    names = []
    for layer in layers:
        heat = sound_heat(result, layer=layer, head="all", mel=mel, frame_seconds=frame, cmap=settings.cmap)
        if not grid and settings.heads:
            keep = list(settings.heads)
            heat = replace(heat, panels=heat.panels[keep], panel_titles=[heat.panel_titles[h] for h in keep],
                           heads=keep, columns=None)
        path = out_dir / f"{item.stem}.L{layer}.png"
        render_sound_figure(heat, path)
        names.append(path.name)
    return names


def _table(out_dir: Path, items: list[SoundItem]) -> None:
    """``sounds.parquet``: a row per clip × layer × head, from each finished clip's ``.json``."""
    from ..audio.cross_stats import COLUMNS
    from ..tables import write_rows

    rows: list[dict[str, Any]] = []
    for item in items:
        found = json.loads((out_dir / f"{item.stem}.json").read_text(encoding="utf-8"))
        rows.extend({"index": item.index, "clip": found["clip"], "transcript": found["transcript"], **head}
                    for head in found["heads"])
    write_rows(out_dir / TABLE, rows, ("index", "clip", "transcript", *COLUMNS))

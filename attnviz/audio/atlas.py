"""What a Whisper's cross-attention heads do across a corpus of clips (``attnviz atlas CORPUS --model WHISPER``;
issue 61 item 1), and which of them a fine-tuning changed (``--vs-model``).

Each clip is read once (its text, else its reference's words, else the model's own transcript; the corpus as
``align-heads`` and ``export`` read it: :func:`attnviz.audio.references.read_head_corpus`) and every head's
statistics over time are taken as ``heads --audio`` takes them (:mod:`.cross_stats`). Per head across the clips: each
statistic's mean and the clip where it is highest, and whether the head is one of the model's alignment heads.

With ``vs_model`` (a fine-tuned Whisper of the same shape), each clip is read by both models with the same
transcript (its text or reference's, else the first model's own, teacher-forced into both), and per head each
statistic's change (the second model's minus the first's, averaged over the clips) with a 95% interval from
``bootstrap`` resamples of the clips (percentiles, seeded by ``seed``); heads are listed by how far their diagonal
rate moved, the one statistic that says whether a head lines words up with time."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InputError, UsageError
from .cross_stats import STATISTICS

CHANGED_BY = "diagonal"
"""The statistic whose change orders the heads of a comparison."""


@dataclass
class SoundAtlas:
    """The heads across :attr:`clips` (:attr:`heads`: one row per decoder layer × head), and with a second model,
    its name (:attr:`vs_model`) and each statistic's change per head (``d_NAME``, ``d_NAME_low``, ``d_NAME_high``)."""

    model: str
    layers: int
    per_layer: int
    clips: list[str]
    heads: list[dict[str, Any]] = field(default_factory=list)
    vs_model: str | None = None

    def grid(self, name: str) -> np.ndarray:
        """``[layers, heads]`` of one column of :attr:`heads`."""
        found = np.full((self.layers, self.per_layer), np.nan)
        for row in self.heads:
            found[row["layer"], row["head"]] = row[name]
        return found

    def columns(self) -> tuple[str, ...]:
        base = ("layer", "head", *STATISTICS, "alignment")
        if self.vs_model is None:
            return (*base, *(f"top_{name}" for name in STATISTICS))
        return (*base, *(f"d_{name}{end}" for name in STATISTICS for end in ("", "_low", "_high")))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "sound_atlas", "model": self.model, "vs_model": self.vs_model, "decoder_layers": self.layers,
                "heads_per_layer": self.per_layer, "clips": list(self.clips), "heads": self.heads}


def sound_atlas(corpus: str | os.PathLike[str], model: Any, *, vs_model: Any = None, language: str | None = None,
                task: str = "transcribe", bootstrap: int = 1000, seed: int = 0, device: str = "cpu",
                revision: str | None = None, allow_outside: bool = False,
                on_clip: Callable[[int, int], None] | None = None) -> SoundAtlas:
    """The atlas of the clips of ``corpus`` on the Whisper ``model`` (see the module); ``on_clip(done, total)``
    after each clip."""
    from .cross_stats import pass_head_statistics
    from .model import whisper_model
    from .references import read_head_corpus
    from .timing import alignment_heads
    from .whisper import forward

    if bootstrap < 1:
        raise UsageError(f"[[bootstrap={bootstrap}]]: give at least 1 resample")
    clips = read_head_corpus(corpus, allow_outside=allow_outside)
    if not clips:
        raise InputError("the corpus has no clips")
    loaded = whisper_model(model, device=device, revision=revision)
    other = None if vs_model is None else whisper_model(vs_model, device=device, revision=revision)
    layers, per_layer = int(loaded.config.decoder_layers), int(loaded.config.decoder_attention_heads)
    if other is not None and (int(other.config.decoder_layers), int(other.config.decoder_attention_heads)) != (
            layers, per_layer):
        raise UsageError(f"{other.name} has {other.config.decoder_layers} decoder layers × "
                         f"{other.config.decoder_attention_heads} heads and {loaded.name} {layers} × {per_layer}: "
                         "compare two checkpoints of one shape (a model and its fine-tuning)")
    marked = alignment_heads(loaded)
    tables: list[list[dict[str, Any]]] = []
    changes: list[list[dict[str, Any]]] = []
    for done, clip in enumerate(clips, start=1):
        text = clip.text if clip.text is not None else (
            " ".join(w.word for w in clip.reference) if clip.reference is not None else None)
        run = forward(clip.audio, loaded, text=text, language=language, task=task, encoder=False, weights=True,
                      scores=range(layers), text_only=True)
        tables.append(pass_head_statistics(loaded, run, marked).rows)
        if other is not None:
            said = text if text is not None else loaded.tokenizer.decode(list(run.read.text_ids))
            theirs = forward(clip.audio, other, text=said or None, language=run.read.language, task=task,
                             encoder=False, weights=True, scores=range(layers), text_only=True)
            changes.append(pass_head_statistics(other, theirs, alignment_heads(other)).rows)
        if on_clip is not None:
            on_clip(done, len(clips))
    names = [clip.name for clip in clips]
    heads = _summarise(tables, changes, names, bootstrap, seed)
    return SoundAtlas(loaded.name, layers, per_layer, names, heads, None if other is None else other.name)


def _summarise(tables: Sequence[list[dict[str, Any]]], changes: Sequence[list[dict[str, Any]]], names: list[str],
               bootstrap: int, seed: int) -> list[dict[str, Any]]:
    """Per head: each statistic's mean over the clips (and the clip where it is highest), or its change."""
    count = len(tables[0])
    values = {name: np.array([[t[k][name] for k in range(count)] for t in tables]) for name in STATISTICS}
    rows = []
    for k in range(count):
        row: dict[str, Any] = {"layer": tables[0][k]["layer"], "head": tables[0][k]["head"],
                               **{name: float(values[name][:, k].mean()) for name in STATISTICS},
                               "alignment": bool(tables[0][k]["alignment"])}
        if not changes:
            row.update({f"top_{name}": names[int(np.argmax(values[name][:, k]))] for name in STATISTICS})
        rows.append(row)
    if not changes:
        return rows
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(tables), size=(bootstrap, len(tables)))
    for name in STATISTICS:
        theirs = np.array([[t[k][name] for k in range(count)] for t in changes])
        delta = theirs - values[name]  # [clips, heads]
        resampled = delta[picks].mean(axis=1)  # [bootstrap, heads]
        low, high = np.percentile(resampled, [2.5, 97.5], axis=0)
        for k, row in enumerate(rows):
            row.update({f"d_{name}": float(delta[:, k].mean()), f"d_{name}_low": float(low[k]),
                        f"d_{name}_high": float(high[k])})
    return sorted(rows, key=lambda r: (-abs(r[f"d_{CHANGED_BY}"]), r["layer"], r["head"]))


def sound_atlas_page(atlas: SoundAtlas, path: str | os.PathLike[str]) -> Any:
    """The atlas as one offline page (no script, no request): the layers × heads grid of the mean diagonal rate (or
    of its change), and the table of every head."""
    import html

    from ..fileio import scratch_folder
    from .head_outputs import head_grid_png, png_tag, static_page

    changed = atlas.vs_model is not None
    name = f"d_{CHANGED_BY}" if changed else CHANGED_BY
    marked = [(r["layer"], r["head"]) for r in atlas.heads if r["alignment"]]
    what = (f"the change of each head's diagonal rate from {atlas.model} to {atlas.vs_model}" if changed else
            "each head's diagonal rate (MultiSpeech): 1 when it walks through the clip as the words do")
    with scratch_folder("atlas") as folder:
        figure = png_tag(head_grid_png(atlas.grid(name), folder / "grid.png", title=f"{atlas.model}: {what}, over "
                                       f"{len(atlas.clips)} clip{'' if len(atlas.clips) == 1 else 's'}",
                                       label=("change" if changed else "diagonal rate")
                                       + "; red: the model's alignment heads", cmap="RdBu_r" if changed else "viridis",
                                       outlined=marked, centred=changed), f"{what} as a grid of layers by heads")
    columns = atlas.columns()
    shown = [c for c in columns if not c.startswith("top_") and not c.endswith(("_low", "_high"))]
    head_rows = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(row, c))}</td>" for c in shown) + "</tr>"
                        for row in atlas.heads)
    title = (f"attnviz atlas · {atlas.model}" + (f" → {atlas.vs_model}" if changed else "")
             + f" · {len(atlas.clips)} clips")
    body = (f"<p>{html.escape(what[0].upper() + what[1:])}, per decoder layer × head (statistics of its "
            "cross-attention over each clip's time, as <code>attnviz heads --audio</code> gives them, averaged over "
            f"the clips; docs/sound.md defines them).</p>\n{figure}\n<h2>Heads</h2>\n<table><tr>"
            + "".join(f"<th>{html.escape(c)}</th>" for c in shown) + f"</tr>{head_rows}</table>\n")
    return static_page(path, title, body)


def _cell(row: dict[str, Any], name: str) -> str:
    value = row[name]
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        if name.startswith("d_"):
            return f"{value:+.3f} [{row[name + '_low']:+.3f}, {row[name + '_high']:+.3f}]"
        return f"{value:.3f}"
    return str(value)

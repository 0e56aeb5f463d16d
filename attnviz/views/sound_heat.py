"""What ``heatmap --audio`` shows, as data (issue 61 item 2): a Whisper decoder's cross-attention over time, each
token's weights over the encoder's positions that hold the clip (the 30-s window's padding after it cropped), a panel
per layer × head (one head, their mean, or every head), on one colour scale across the panels.

Each row is the decoder step that *writes* its token (row i of the result reads token i and predicts token i + 1):
openai-whisper's reading, where a word's time is where the model looks as it writes it, and the one the alignment
heads are trained and planted on. The step that reads end of text writes nothing and is left out.

:meth:`SoundHeat.terminal_view` puts the positions into blocks of a round number of seconds sized to the terminal's
width (each block the max, or the mean, of its positions, said in the title), labelled with a seconds axis, as the
:class:`~attnviz.render.view.HeatmapView` the terminal renderer draws; :mod:`attnviz.render.sound_figure` draws the
full-resolution panels under the clip's log-mel spectrogram."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from ..render.view import HeadChoice, HeatmapView, matrix_view

Pool = Literal["max", "mean"]
BLOCKS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1500)  # positions per terminal column: 0.02 s to 30 s, round seconds
TICKS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)  # seconds between the axis' labels
TICK_GAP = 3  # columns between two labels at least
LABEL_MAX = 14  # the terminal renderer's row label width
ROW_AXIS = "tokens (each row the step that writes its token)"


@dataclass(frozen=True)
class SoundHeat:
    """The cross-attention of a clip ready to draw: ``panels`` ``[P, tokens, positions]`` (the clip's positions only),
    ``tokens`` the token each row writes, ``mel`` the clip's log-mel frames ``[mels, frames]`` (the feature
    extractor's, None where not computed) of ``frame_seconds`` each."""

    model: str
    panels: np.ndarray
    panel_titles: list[str]
    tokens: list[str]
    seconds_per_position: float
    duration: float
    what: str
    layers: list[int]
    heads: list[int] | str
    teacher_forced: bool
    transcript: str
    mel: np.ndarray | None = None
    frame_seconds: float = 0.01
    cmap: str = "viridis"
    columns: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def positions(self) -> int:
        return int(self.panels.shape[2])

    @property
    def title(self) -> str:
        return f"{self.model} · cross-attention over time · {self.what}"

    def block_size(self, width: int) -> int:
        """Positions per terminal column: the smallest round number of seconds (:data:`BLOCKS`) whose columns fit
        ``width`` beside the row labels, two characters a column."""
        label = min(LABEL_MAX, max((len(t) for t in self.tokens), default=1))
        cells = max(1, (width - label - 1) // 2)
        return next((n for n in BLOCKS if math.ceil(self.positions / n) <= cells), BLOCKS[-1])

    def blocks(self, size: int, pool: Pool = "max") -> np.ndarray:
        """The panels in blocks of ``size`` positions along time, each the max or mean of its positions (the last
        block of fewer where the clip ends inside it): ``[P, tokens, ceil(positions / size)]``."""
        count = math.ceil(self.positions / size)
        out = np.empty((*self.panels.shape[:2], count))
        for j in range(count):
            part = self.panels[:, :, j * size : (j + 1) * size]
            out[:, :, j] = part.max(axis=2) if pool == "max" else part.mean(axis=2)
        return out

    def time_labels(self, size: int) -> list[str]:
        """Each block's column label: its start in seconds (``0.5``) every few columns (a round number of seconds
        apart, :data:`TICK_GAP` columns at least), empty elsewhere (the terminal draws a dot)."""
        step = size * self.seconds_per_position
        count = math.ceil(self.positions / size)
        tick = next((t for t in TICKS if t >= step * TICK_GAP - 1e-9 and _multiple(t, step)), None)
        every = TICK_GAP if tick is None else round(tick / step)
        return [f"{j * step:g}" if j % every == 0 else "" for j in range(count)]

    def terminal_view(self, width: int, *, pool: Pool = "max") -> HeatmapView:
        """The panels in blocks sized to ``width`` (:meth:`block_size`), with a seconds axis, for
        :func:`attnviz.render.terminal.render_terminal`."""
        size = self.block_size(width)
        step = size * self.seconds_per_position
        how = "" if size == 1 else f" (the {pool} of its {size} positions)"
        title = f"{self.title} · each column {step:g} s{how} · one colour scale across the panels"
        shown = self.positions * self.seconds_per_position
        view = matrix_view(self.blocks(size, pool), self.tokens, self.time_labels(size), title=title,
                           panel_titles=self.panel_titles, cmap=self.cmap, notes=self.notes, row_axis=ROW_AXIS,
                           col_axis=f"time in seconds, over the clip's {shown:.2f} s", columns=self.columns)
        return replace(view, col_labels=self.time_labels(size))  # unlabelled columns empty (a dot), not "∅"

    def document(self) -> dict[str, Any]:
        """The numbers shown (``--out x.json``): each panel's weights over the clip's positions."""
        return {"model": self.model, "what": self.what, "layers": self.layers, "heads": self.heads,
                "tokens": self.tokens, "teacher_forced": self.teacher_forced, "transcript": self.transcript,
                "seconds_per_position": self.seconds_per_position, "duration": self.duration,
                "positions": self.positions,
                "panels": [{"title": t, "weights": p.tolist()} for t, p in zip(self.panel_titles, self.panels,
                                                                               strict=True)]}


def _multiple(tick: float, step: float) -> bool:
    ratio = tick / step
    return abs(ratio - round(ratio)) < 1e-6


def sound_panels(result: Any, layer: int | None,
                 head: HeadChoice) -> tuple[np.ndarray, list[str], str, list[int], list[int] | str, int | None]:
    """The cross-attention panels of ``result`` (:func:`attnviz.audio.whisper.whisper_attention`'s) cropped to the
    clip's positions, the rows that write a token: one ``layer`` (None: every layer) × ``head`` (a number, ``all``
    or ``mean``). Returns the panels ``[P, tokens, positions]``, their titles, what they show, the layers, the heads
    and the panels per grid row."""
    from ..labels import head_name
    from ..layer_range import check_heads, check_layer

    cross = result.cross_attentions
    n_layers, n_heads = int(cross.shape[0]), int(cross.shape[1])
    owner = f"the decoder of {result.model_name}"
    layers = list(range(n_layers)) if layer is None else [check_layer(layer, owner=owner, count=n_layers)]
    kept = int(result.metadata["audio_positions"])
    weights = np.asarray(cross[layers][:, :, :-1, :kept], dtype=np.float64)  # [layers, heads, tokens, positions]
    where = "every layer" if layer is None else f"L{layers[0]}"
    if head == "mean":
        titles = [f"L{la} mean of heads" for la in layers]
        return weights.mean(axis=1), titles, f"{where}, mean of heads", layers, "mean", None
    if head == "all":
        titles = [head_name(la, h) for la in layers for h in range(n_heads)]
        return (weights.reshape(-1, *weights.shape[2:]), titles, f"{where}, every head", layers, list(range(n_heads)),
                n_heads)
    chosen = check_heads([head], owner=owner, count=n_heads)[0]
    titles = [head_name(la, chosen) for la in layers]
    what = head_name(layers[0], chosen) if layer is not None else f"{where}, head {chosen}"
    return weights[:, chosen], titles, what, layers, [chosen], None


def sound_heat(result: Any, *, layer: int | None, head: HeadChoice, mel: np.ndarray | None = None,
               frame_seconds: float = 0.01, cmap: str = "viridis") -> SoundHeat:
    """``result``'s cross-attention over time as :class:`SoundHeat` (see :func:`sound_panels`); ``mel``: the clip's
    log-mel frames, drawn under the heat in pictures."""
    panels, titles, what, layers, heads, columns = sound_panels(result, layer, head)
    meta = result.metadata
    forced = bool(meta.get("teacher_forced"))
    said = "the transcript given, teacher-forced" if forced else "the model's own greedy transcript"
    notes = [f"{said}: {meta.get('transcript', '').strip()!r}",
             f"the clip's {meta['duration']:.2f} s of the model's window; the padding after it is not shown"]
    return SoundHeat(model=result.model_name, panels=panels, panel_titles=titles,
                     tokens=list(result.target_tokens[1:]), seconds_per_position=float(meta["seconds_per_position"]),
                     duration=float(meta["duration"]), what=what, layers=layers, heads=heads, teacher_forced=forced,
                     transcript=str(meta.get("transcript", "")), mel=mel, frame_seconds=frame_seconds, cmap=cmap,
                     columns=columns, notes=notes)


@dataclass(frozen=True)
class SoundHeatmap:
    """What ``heatmap --audio`` computed: the whole ``result`` (``--out x.npz``) and the ``heat`` it shows."""

    result: Any
    heat: SoundHeat


def sound_heatmap(audio: str | os.PathLike[str], model: str, *, text: str | None = None, layer: int | None = None,
                  head: HeadChoice = 0, language: str | None = None, device: str = "cpu",
                  revision: str | None = None, cmap: str = "viridis") -> SoundHeatmap:
    """A Whisper ``model`` (a folder, hub id or sound organism's TOML) over the clip ``audio``, ``text``
    teacher-forced or its own transcript: its cross-attention over time (:func:`sound_heat`), with the clip's
    log-mel spectrogram, the feature extractor's (:func:`attnviz.audio.hearing.hear`); another speech
    encoder-decoder's (:mod:`attnviz.audio.seq2seq`) without the spectrogram."""
    from ..audio.encoders import hearing_kind
    from ..audio.hearing import hear
    from ..audio.model import load_whisper
    from ..audio.whisper import whisper_attention

    if hearing_kind(model) == "seq2seq":  # another speech encoder-decoder: its cross-attention, no spectrogram
        from ..audio.seq2seq import speech_seq2seq_attention

        found = speech_seq2seq_attention(audio, model, text=text, device=device, revision=revision)
        return SoundHeatmap(found, sound_heat(found, layer=layer, head=head, cmap=cmap))
    loaded = load_whisper(model, device=device, revision=revision)
    result = whisper_attention(audio, loaded, text=text, language=language)
    heard = hear(audio, loaded)
    mel = np.asarray(heard.features[0, :, : heard.frames].float().cpu().numpy(), dtype=np.float64)
    heat = sound_heat(result, layer=layer, head=head, mel=mel, frame_seconds=loaded.hop_length / loaded.sampling_rate,
                      cmap=cmap)
    return SoundHeatmap(result, heat)

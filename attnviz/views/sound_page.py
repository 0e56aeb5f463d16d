"""The page of a Whisper model hearing a clip (``attnviz view --audio``, issue 61 item 2), as data: what the page's
script (``render/assets/sound.js``) draws, computed here from one teacher-forced pass of the model.

* the clip's log-mel spectrogram (the feature extractor's frames, :func:`attnviz.audio.hearing.hear`) as a PNG, with
  its range for the colour bar;
* the clip itself as the model heard it (mono, at the model's rate), a 16-bit WAV in a ``data:`` URL: a word clicked
  plays from its start to its end;
* the words of the transcript (TEXT teacher-forced, else the model's greedy one) with their start and end, as
  :func:`attnviz.audio.timing.align` computes them from the alignment heads, and the rows that write each word's tokens;
* the decoder's cross-attention over the clip's positions, every layer × head, the rows that write each text token
  and end of text (row k writes token k; the prompt's rows are left out), and the alignment heads' mean at full
  resolution (what a hovered word shows first);
* the alignment heads' normalised weights (openai-whisper's steps 1 to 5: softmax over the clip, each column
  normalised over the tokens, median filter, mean over the heads: :func:`attnviz.audio.timing.alignment_matrix`),
  the tokens × time matrix the DTW path runs over, and that path (the one the word timings come from).

One pass of the model makes all of it (:func:`attnviz.audio.whisper.forward`, the encoder's self-attention not
computed): the heat rows are that pass's cross-attention (``whisper_attention``'s; of a greedy transcript, its
text tokens alone, as ``align`` reads it, where a model writes a special token inside it), the timings and the path
``align``'s. Weights are stored as half floats, gzipped (``attnviz.render.pyramid.encode_tile``); a model whose every
head would pass :data:`HEAT_CELLS` has its heads' rows max-pooled along time (the page says by how much), never the
alignment heads' mean."""

from __future__ import annotations

import base64
import io
import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CLIP_PARTS", "HEAT_CELLS", "SoundPage", "Sounds", "heard_clip", "sound_page"]

HEAT_CELLS = 8_000_000
"""Cells of cross-attention (layers × heads × tokens × positions) a page holds at most: past it, each head's rows are
max-pooled along time (whisper-small over 30 s of 100 tokens: 4 positions a cell)."""

SPECTROGRAM_CMAP = "gray_r"
"""The spectrogram's colours: loud dark, quiet light (a backdrop, apart from the attention's colours)."""

PATH_CMAP = "magma"
"""The alignment matrix's colours (apart from the attention's, whose scale differs)."""

CLIP_PARTS = ("audio", "spectrogram")
"""The entries of :meth:`SoundPage.data` that are the clip's alone, the same whatever the transcript: a server's page
(``attnviz serve --audio``) holds them once, and its answers for each transcript leave them out."""


@dataclass(frozen=True)
class SoundPage:
    """What the page shows (see the module). ``heat`` ``[layers, heads, rows, positions]`` is the cross-attention of
    the rows that write ``tokens`` (each text token, then end of text) over the clip's ``positions``; ``matrix``
    ``[rows, positions]`` the alignment heads' normalised weights, ``path_rows`` and ``path_columns`` the DTW path
    over it; ``words`` the alignment's words, ``word_rows`` the rows ``[a, b)`` that write each one's tokens."""

    model: str
    clip: str
    samples: np.ndarray
    rate: int
    mel: np.ndarray
    frame_seconds: float
    seconds_per_position: float
    tokens: list[str]
    words: tuple[Any, ...]
    word_rows: list[tuple[int, int]]
    heat: np.ndarray
    alignment_heads: tuple[tuple[int, int], ...]
    matrix: np.ndarray
    path_rows: np.ndarray
    path_columns: np.ndarray
    transcript: str
    teacher_forced: bool
    language: str | None
    layer: int | None = None
    head: int | None = None
    cmap: str = "viridis"
    notes: list[str] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return len(self.samples) / self.rate

    @property
    def positions(self) -> int:
        return int(self.heat.shape[3])

    @property
    def title(self) -> str:
        return f"attnviz · {self.model} hearing {self.clip}"

    @property
    def alignment_mean(self) -> np.ndarray:
        """The alignment heads' mean cross-attention ``[rows, positions]`` (what a word shows first)."""
        return np.mean([self.heat[layer, head] for layer, head in self.alignment_heads], axis=0)

    def pool(self) -> int:
        """Positions a stored cell of a head covers: 1, or as many as keep every head within :data:`HEAT_CELLS`."""
        layers, heads, rows, positions = self.heat.shape
        factor = max(1, math.ceil(layers * heads * rows * positions / HEAT_CELLS))
        while factor > 1 and layers * heads * rows * math.ceil(positions / factor) > HEAT_CELLS:
            factor += 1
        return factor

    def data(self, *, clip: bool = True) -> dict[str, Any]:
        """The JSON the page's script reads; ``clip=False``: without :data:`CLIP_PARTS` (the clip's sound and
        spectrogram, which a server's page holds once)."""
        from ..render.page import colormap_table
        from ..render.pyramid import encode_tile

        layers, heads, _, positions = self.heat.shape
        factor = self.pool()
        pooled = _pooled(self.heat, factor)
        mean = self.alignment_mean
        low, high = (float(self.matrix.min()), float(self.matrix.max())) if self.matrix.size else (0.0, 1.0)
        said = "the transcript given, teacher-forced" if self.teacher_forced else "the model's own greedy transcript"
        notes = [f"{said}: {self.transcript.strip()!r}", *self.notes]
        if factor > 1:
            notes.append(f"a head chosen below shows each {factor * self.seconds_per_position:g} s as the strongest of "
                         f"its {factor} positions (the page keeps {HEAT_CELLS:,} weights at most); the alignment "
                         "heads' mean is at full resolution")
        document = {
            "format": "attnviz-sound-page", "version": 1, "title": self.title, "model": self.model, "clip": self.clip,
            "duration": self.duration, "rate": self.rate, "language": self.language, "transcript": self.transcript,
            "teacherForced": self.teacher_forced, "secondsPerPosition": self.seconds_per_position,
            "positions": positions, "notes": notes,
            "tokens": list(self.tokens),
            "words": [{"text": w.word, "start": w.start, "end": w.end, "probability": w.probability,
                       "rows": [a, b]} for w, (a, b) in zip(self.words, self.word_rows, strict=True)],
            "layers": int(layers), "heads": int(heads),
            "alignmentHeads": [[int(la), int(h)] for la, h in self.alignment_heads],
            "heat": {"encoding": "f16", "pool": factor, "cols": int(pooled.shape[3]),
                     "values": [[encode_tile(pooled[la, h], "f16") for h in range(heads)] for la in range(layers)],
                     "vmax": [[float(pooled[la, h].max(initial=0.0)) for h in range(heads)] for la in range(layers)]},
            "alignmentMean": {"encoding": "f16", "values": encode_tile(mean, "f16"),
                              "vmax": float(mean.max(initial=0.0))},
            "alignment": {"encoding": "f16", "rows": int(self.matrix.shape[0]), "cols": int(self.matrix.shape[1]),
                          "values": encode_tile(self.matrix, "f16"), "low": low, "high": high,
                          "pathRows": [int(r) for r in self.path_rows],
                          "pathColumns": [int(c) for c in self.path_columns]},
            "initial": {"layer": self.layer, "head": self.head},
            "cmap": colormap_table(self.cmap), "pathCmap": colormap_table(PATH_CMAP),
        }
        if clip:  # (encoded only where asked: the same for every transcript)
            document["spectrogram"] = self.spectrogram()
            document["audio"] = {"src": "data:audio/wav;base64," + base64.b64encode(self.wav()).decode("ascii"),
                                 "rate": self.rate, "samples": len(self.samples)}
        return document

    def attention(self) -> dict[str, Any]:
        """The cross-attention at full resolution, as plain numbers (``attnviz serve --audio``'s ``/api/attention``):
        ``cross_attentions`` ``[layers][heads][rows][positions]``, row k writing ``tokens[k]`` (each text token,
        then end of text), each position ``secondsPerPosition`` of the clip."""
        layers, heads, _, positions = self.heat.shape
        return {"model": self.model, "clip": self.clip, "transcript": self.transcript,
                "teacherForced": self.teacher_forced, "language": self.language, "tokens": list(self.tokens),
                "layers": list(range(int(layers))), "heads": int(heads), "positions": int(positions),
                "secondsPerPosition": self.seconds_per_position,
                "alignmentHeads": [[int(la), int(h)] for la, h in self.alignment_heads],
                "cross_attentions": self.heat.tolist()}

    def spectrogram(self) -> dict[str, Any]:
        """The log-mel frames as a PNG ``data:`` URL (low frequencies at the bottom), with their range and colours."""
        from matplotlib import colormaps

        from ..render.page import colormap_table
        from ..render.png import encode_png

        mel = np.asarray(self.mel, dtype=np.float64)
        low, high = (float(mel.min()), float(mel.max())) if mel.size else (0.0, 1.0)
        span = high - low if high > low else 1.0
        shaded = colormaps[SPECTROGRAM_CMAP]((mel[::-1] - low) / span)[..., :3] if mel.size else np.zeros((1, 1, 3))
        png = encode_png(np.rint(shaded * 255).astype(np.uint8), dpi=96)
        return {"src": "data:image/png;base64," + base64.b64encode(png).decode("ascii"), "mels": int(mel.shape[0]),
                "frames": int(mel.shape[1]), "frameSeconds": self.frame_seconds, "low": low, "high": high,
                "cmap": colormap_table(SPECTROGRAM_CMAP)}

    def wav(self) -> bytes:
        """The clip as the model heard it: a 16-bit mono WAV at its rate."""
        from ..audio.read import soundfile_module

        buffer = io.BytesIO()
        soundfile_module().write(buffer, np.clip(self.samples, -1.0, 1.0), self.rate, format="WAV", subtype="PCM_16")
        return buffer.getvalue()

    def write(self, path: str | os.PathLike[str]) -> Path:
        """The page as one offline HTML file at ``path`` (atomically; :mod:`attnviz.render.sound_page`)."""
        from ..render.sound_page import render_sound_page

        return render_sound_page(self.data(), path)


def _pooled(heat: np.ndarray, factor: int) -> np.ndarray:
    """``heat`` ``[..., positions]`` max-pooled along time by ``factor`` (the last cell of what is left)."""
    if factor == 1:
        return heat
    count = math.ceil(heat.shape[-1] / factor)
    padded = np.full((*heat.shape[:-1], count * factor), -np.inf, dtype=heat.dtype)
    padded[..., : heat.shape[-1]] = heat
    return padded.reshape(*heat.shape[:-1], count, factor).max(axis=-1)


def sound_page(audio: str | os.PathLike[str] | np.ndarray, model: Any, text: str | None = None, *,
               layer: int | None = None, head: int | None = None, heads: Any = None, language: str | None = None,
               task: str = "transcribe", device: str = "cpu", revision: str | None = None,
               cmap: str = "viridis", name: str | None = None) -> SoundPage:
    """The page of a Whisper ``model`` (a folder, hub id, sound organism's TOML, or one
    :func:`~attnviz.audio.model.load_whisper` loaded) hearing ``audio`` (a sound file, or mono samples at the model's
    rate): ``text`` teacher-forced, else the model's greedy transcript; timed from ``heads`` (the alignment heads,
    as :func:`~attnviz.audio.timing.align` takes them; default the checkpoint's). ``layer`` and ``head``: the head a
    word's heat shows first (default: the alignment heads' mean); ``name``: the clip's name on the page (default:
    its file's, or "the samples"). Write it with :meth:`SoundPage.write`."""
    import torch

    from ..audio.model import whisper_model
    from ..audio.timing import alignment_heads, alignment_matrix, decoder_of, word_alignment
    from ..audio.whisper import forward
    from ..labels import printable
    from ..layer_range import check_heads, check_layer

    loaded = whisper_model(model, device=device, revision=revision)
    config = loaded.config
    n_layers, n_heads = int(config.decoder_layers), int(config.decoder_attention_heads)
    owner = f"the decoder of {loaded.name}"
    if head is not None and layer is None:
        from ..errors import UsageError

        raise UsageError(f"[[head]] {head} names a head of one layer: give [[layer]] too")
    if layer is not None:
        check_layer(layer, owner=owner, count=n_layers)
        head = check_heads([0 if head is None else head], owner=owner, count=n_heads)[0]
    chosen = alignment_heads(loaded, heads)
    run = forward(audio, loaded, text=text, language=language, task=task, encoder=False, weights=True,
                  scores=sorted({la for la, _ in chosen}), text_only=True)  # the text tokens align times
    read, heard = run.read, run.heard
    per_second = loaded.sampling_rate / (loaded.hop_length * loaded.stride)
    found = word_alignment(run.scores, run.logits, read, heard.positions, decoder_of(loaded), per_second, chosen,
                           duration=heard.seconds)
    start = len(read.prompt) - 1  # the row that writes the first text token (openai-whisper's len(sot_sequence))
    with torch.no_grad():
        matrix = alignment_matrix(run.scores, chosen, heard.positions, scores=True)[start:-1]
    heat = np.asarray(run.cross[:, :, start:-1, : heard.positions], dtype=np.float32)
    bounds = np.cumsum([0, *(len(w.tokens) for w in found.words)]).tolist()
    tokens = _token_labels(list(read.text_ids), found.words, bounds, decoder_of(loaded), printable)
    mel = np.asarray(heard.features[0, :, : heard.frames].float().cpu().numpy(), dtype=np.float32)
    clip = name if name is not None else "the samples" if isinstance(audio, np.ndarray) else Path(os.fspath(audio)).name
    notes = [f"the clip's {heard.seconds:.2f} s of the model's {loaded.window_seconds:g}-s window; the silence after "
             "it is not shown"]
    return SoundPage(model=loaded.name, clip=clip, samples=np.asarray(heard.samples, dtype=np.float32),
                     rate=int(heard.rate), mel=mel, frame_seconds=loaded.hop_length / loaded.sampling_rate,
                     seconds_per_position=float(loaded.seconds_per_position), tokens=tokens, words=found.words,
                     word_rows=list(itertools.pairwise(bounds)), heat=heat,
                     alignment_heads=tuple(chosen), matrix=np.asarray(matrix.numpy(), dtype=np.float32),
                     path_rows=found.rows, path_columns=found.columns,
                     transcript=loaded.tokenizer.decode(list(read.text_ids)), teacher_forced=bool(read.given),
                     language=read.language, layer=layer, head=head if layer is not None else None, cmap=cmap,
                     notes=notes)


@dataclass(frozen=True, eq=False)  # (its samples are an array: compared by identity)
class Sounds:
    """A server's clip and Whisper, fixed at its start (``attnviz serve --audio``; :func:`heard_clip` makes one): each
    transcript typed is teacher-forced over the clip, an empty one leaving the model its own greedy transcript, its
    page :func:`sound_page`'s. ``samples``: the clip as the model hears it (mono, at its rate, within its window), read
    once; ``clip``: its file's name; ``model``: the Whisper, loaded once."""

    samples: np.ndarray
    clip: str
    model: Any

    @property
    def name(self) -> str:
        return str(self.model.name)

    def page(self, text: str | None = None, *, cmap: str = "viridis") -> SoundPage:
        """The page of the clip with ``text`` teacher-forced (None, empty or blank: the model's own transcript)."""
        return sound_page(self.samples, self.model, text if text is not None and text.strip() else None, cmap=cmap,
                          name=self.clip)


def heard_clip(audio: str | os.PathLike[str], model: Any, *, device: str = "cpu",
               revision: str | None = None) -> Sounds:
    """The clip at ``audio`` (read as untrusted input: a missing, damaged or too long one refused in one line before
    the model loads) and the Whisper ``model`` (as :func:`sound_page` takes it), loaded once, for a server."""
    from ..audio.hearing import hear
    from ..audio.model import whisper_model
    from ..audio.read import audio_header

    audio_header(audio)
    loaded = whisper_model(model, device=device, revision=revision)
    heard = hear(audio, loaded)  # read once: every page hears these samples
    return Sounds(samples=heard.samples, clip=Path(os.fspath(audio)).name, model=loaded)


def _token_labels(ids: list[int], words: Any, bounds: list[int], decode: Any, printable: Any) -> list[str]:
    """Each row's label: its token's text without the space before it (a space alone made visible), as
    ``whisper_attention`` labels it; a token that is part of a character (a byte of 猫) its word and its place in it
    (``猫 (2/4)``); then end of text."""
    labels = []
    for k, token in enumerate(ids):
        text = decode([token])
        labels.append(text.strip() or printable(text))
        if "\ufffd" in text:
            w = next((i for i in range(len(words)) if bounds[i] <= k < bounds[i + 1]), None)
            if w is not None:
                size = bounds[w + 1] - bounds[w]
                labels[-1] = f"{words[w].word.strip()} ({k - bounds[w] + 1}/{size})"
    return [*labels, "<|endoftext|>"]

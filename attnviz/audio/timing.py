"""Word and token timings from Whisper's cross-attention, the way openai-whisper's ``timing.find_alignment``
computes them (``whisper/timing.py``, release 20250625), and transformers' token timestamps
(``WhisperGenerationMixin._extract_token_timestamps``) for comparison.

openai-whisper's steps (:func:`word_alignment`), over one teacher-forced pass of prompt + text + end of text:

1. the cross-attention scores (before the softmax) of the alignment heads ``[heads, tokens, positions]``, cropped
   to the positions that hold the clip (``num_frames // 2``);
2. a softmax over those positions (not the window's: the weights a model returns are a softmax over all 1,500
   positions, so the scores are read as the layer computes them, :func:`~attnviz.audio.whisper.cross_scores`);
3. normalised over tokens: each position's column less its mean, over its standard deviation (``unbiased=False``),
   over every row of the pass (a column the same for every token, which openai-whisper divides by zero, is 0);
4. a median filter of width 7 along time (:func:`~attnviz.audio.dtw.median_filter`);
5. the mean over heads, then the rows from no-timestamps to the last text token (each the step that predicts the
   next text token, then end of text);
6. dynamic time warping of the negated matrix (:func:`~attnviz.audio.dtw.dtw`); a row's time is where the path
   first reaches it (its "jump"), in positions over 50 a second;
7. words from the tokens (:mod:`.words`); a word starts at its first token's jump and ends at the next word's
   (the last word's at end of text's); its probability is the mean over its tokens of the softmax over the text
   tokens (ids below end of text) of the row that predicts it.

A token's timing is the same: from its row's jump to the next row's. openai-whisper's ``add_word_timestamps`` then
moves punctuation and clamps long words; that is not part of the alignment and is not done here.

The alignment heads: those given as (layer, head) pairs, else the model's ``generation_config.alignment_heads``,
else every head of the last half of the decoder's layers (openai-whisper's default, ``all_heads[n_text_layer //
2:]``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from .dtw import dtw, median_filter
from .model import WhisperModel, whisper_model
from .transcript import MAX_NEW_TOKENS, Transcript
from .words import Decode, split_words

Head = tuple[int, int]
FILTER_WIDTH = 7
"""openai-whisper's ``medfilt_width`` and transformers' ``median_filter_width``."""


@dataclass(frozen=True)
class TokenTiming:
    """One text token: its id, its text, when it starts and ends (seconds), and the probability the model gave it."""

    id: int
    text: str
    start: float
    end: float
    probability: float


@dataclass(frozen=True)
class WordTiming:
    """One word as openai-whisper's ``WordTiming``: its text, its tokens, start and end (seconds), probability."""

    word: str
    tokens: tuple[int, ...]
    start: float
    end: float
    probability: float


@dataclass(frozen=True)
class Alignment:
    """The timings of one clip's transcript: its words and tokens, the heads they were read from, and the DTW path
    (``rows`` and ``columns``: for each step, the row of the text matrix — row 0 predicts the first text token, the
    last predicts end of text — and the encoder position)."""

    words: tuple[WordTiming, ...]
    tokens: tuple[TokenTiming, ...]
    heads: tuple[Head, ...]
    language: str | None
    duration: float
    rows: np.ndarray
    columns: np.ndarray


def alignment_heads(loaded: WhisperModel, heads: Sequence[Sequence[int]] | None = None) -> list[Head]:
    """The heads timings are read from (see the module), each checked against the decoder's shape."""
    layers, per_layer = int(loaded.config.decoder_layers), int(loaded.config.decoder_attention_heads)
    if heads is None:
        heads = getattr(loaded.network.generation_config, "alignment_heads", None) or None
    if heads is None:
        return [(layer, head) for layer in range(layers // 2, layers) for head in range(per_layer)]
    return checked_heads(heads, layers, per_layer)


def checked_heads(heads: Sequence[Sequence[int]], layers: int, per_layer: int) -> list[Head]:
    """``heads`` as (layer, head) pairs, each inside ``layers`` × ``per_layer``, none twice, at least one."""
    found: list[Head] = []
    for pair in heads:
        if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair):
            raise UsageError(f"[[heads]]: {list(pair)!r} is not a (layer, head) pair of whole numbers")
        layer, head = int(pair[0]), int(pair[1])
        if not (0 <= layer < layers and 0 <= head < per_layer):
            raise UsageError(f"[[heads]]: layer {layer}, head {head} is outside the decoder's {layers} layers × "
                             f"{per_layer} heads")
        if (layer, head) in found:
            raise UsageError(f"[[heads]]: layer {layer}, head {head} is named twice")
        found.append((layer, head))
    if not found:
        raise UsageError("[[heads]] names no head; give at least one (layer, head)")
    return found


def alignment_matrix(values: Any, heads: Sequence[Head], positions: int, *, scores: bool,
                     width: int = FILTER_WIDTH) -> Any:
    """Steps 1 to 4 and the mean over heads (see the module): ``values[layer][head]`` ``[tokens, window]`` → the
    ``[tokens, positions]`` matrix, float32. ``scores``: the values are scores before the softmax, made a softmax
    over the clip's positions (openai-whisper); else weights, cropped as they are (transformers)."""
    import torch

    weights = torch.stack([values[layer][head] for layer, head in heads])[:, :, :positions].float()
    if scores:
        weights = weights.softmax(dim=-1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    weights = median_filter(torch.nan_to_num((weights - mean) / std, nan=0.0), width)
    return weights.mean(dim=0)


def word_alignment(scores: Any, logits: Any, read: Transcript, positions: int, decode: Decode, per_second: float,
                   heads: Sequence[Head], *, width: int = FILTER_WIDTH, duration: float = 0.0) -> Alignment:
    """openai-whisper's ``find_alignment`` (see the module) over one teacher-forced pass of ``read.ids``:
    ``scores[layer][head]`` ``[T, window]`` its cross-attention's scores before the softmax (a mapping of the heads'
    layers, or a ``[layers, heads, T, window]`` tensor), ``logits`` ``[T, vocabulary]``; ``positions`` encoder
    positions hold the clip, ``per_second`` of them a second (50 for Whisper)."""
    import torch

    text = list(read.text_ids)
    empty = np.zeros(0, dtype=np.int64)
    if not text:
        return Alignment((), (), tuple(heads), read.language, duration, empty, empty)
    start = len(read.prompt) - 1  # the no-timestamps row: openai-whisper's len(sot_sequence)
    matrix = alignment_matrix(scores, heads, positions, scores=True, width=width)[start:-1]
    rows, columns = dtw(-matrix.double().numpy())
    jumps = np.pad(np.diff(rows), (1, 0), constant_values=1).astype(bool)
    times = columns[jumps] / per_second
    probabilities = torch.softmax(logits[start:, : read.eot].float(), dim=-1)
    chosen = probabilities[np.arange(len(text)), text].tolist()
    words, groups = split_words([*text, read.eot], decode, read.eot, read.language)
    bounds = np.pad(np.cumsum([len(g) for g in groups[:-1]]), (1, 0))
    word_timings = tuple(
        WordTiming(word, tuple(group), float(times[a]), float(times[b]), float(np.mean(chosen[a:b])))
        for word, group, a, b in zip(words[:-1], groups[:-1], bounds[:-1], bounds[1:], strict=True))  # end of text: no word
    token_timings = tuple(TokenTiming(t, decode([t]), float(times[k]), float(times[k + 1]), float(chosen[k]))
                          for k, t in enumerate(text))
    if len(groups) <= 1:  # end of text alone: openai-whisper returns no words
        word_timings = ()
    return Alignment(word_timings, token_timings, tuple(heads), read.language, duration, rows, columns)


def token_timestamps(cross: Any, heads: Sequence[Head], positions: int, prompt_length: int, *,
                     time_precision: float = 0.02, width: int = FILTER_WIDTH) -> np.ndarray:
    """transformers' ``_extract_token_timestamps`` for one sequence whose tokens (prompt, text, end of text) ``cross``
    ``[layers, heads, T, window]`` covers, teacher-forced: what ``generate(return_token_timestamps=True)`` returns
    for it. Its rows are those ``generate`` holds (every token but the last is read once), the prompt's left out;
    cropped to ``positions`` without renormalising; the steps of the module from 3 on; one time per token, 0 for the
    prompt's, a token's time the jump of the row that reads it, end of text's repeating the last."""
    rows = cross.shape[2] - 1  # the last token (end of text) is never read by generate
    matrix = alignment_matrix(cross[:, :, prompt_length:rows], heads, positions, scores=False, width=width)
    times = np.zeros(rows + 1, dtype=np.float32)
    if matrix.shape[0] == 0:
        return times
    path_rows, columns = dtw(-matrix.double().numpy())
    jumps = np.pad(np.diff(path_rows), (1, 0), constant_values=1).astype(bool)
    jump_times = columns[jumps] * time_precision
    times[prompt_length:rows] = jump_times
    times[rows] = jump_times[-1]
    return times


def decoder_of(loaded: WhisperModel) -> Decode:
    """Ids to text with special tokens written out, by the tokenizer's own backend (no clean-up of spaces)."""
    backend = loaded.tokenizer.backend_tokenizer

    def decode(ids: list[int]) -> str:
        return str(backend.decode([int(i) for i in ids], skip_special_tokens=False))

    return decode


def align(audio: str | os.PathLike[str] | np.ndarray, model: str | WhisperModel, *, text: str | None = None,
          heads: Sequence[Sequence[int]] | None = None, language: str | None = None, task: str = "transcribe",
          max_new_tokens: int = MAX_NEW_TOKENS, width: int = FILTER_WIDTH, device: str = "cpu",
          revision: str | None = None) -> Alignment:
    """Word and token timings of ``audio`` (a sound file, or mono samples at the model's rate): ``text``
    teacher-forced, or the model's greedy transcript; from ``heads`` (see the module); one pass, only the heads'
    layers' cross-attention scores kept. A file longer than the model's window is aligned window after window
    (:mod:`.long_form`; without ``text``)."""
    from .whisper import forward

    loaded = whisper_model(model, device=device, revision=revision)
    if not isinstance(audio, np.ndarray):
        from .read import audio_header

        seconds = audio_header(audio).seconds
        if seconds > loaded.window_seconds + 1e-9:  # window after window (:mod:`.long_form`)
            from .long_form import align_windows, refuse_text_beyond_window

            if text is not None:
                refuse_text_beyond_window(seconds, loaded)
            return Alignment(*align_windows(audio, loaded, align, heads=heads, language=language, task=task,
                                            max_new_tokens=max_new_tokens, width=width))
    chosen = alignment_heads(loaded, heads)
    run = forward(audio, loaded, text=text, language=language, task=task, max_new_tokens=max_new_tokens,
                  encoder=False, weights=False, scores=[layer for layer, _ in chosen], text_only=True)
    per_second = loaded.sampling_rate / (loaded.hop_length * loaded.stride)
    return word_alignment(run.scores, run.logits, run.read, run.heard.positions, decoder_of(loaded), per_second,
                          chosen, width=width, duration=run.heard.seconds)

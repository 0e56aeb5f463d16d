"""Word timings of a clip longer than the model's window (issue 61 item 1: Whisper hears 30 s at once), window after
window, as long-form transcription seeks through a recording (openai-whisper's ``transcribe`` and transformers'
sequential long-form ``generate``): each window is heard from the current seek, transcribed greedily and aligned
(:func:`attnviz.audio.timing.align` on its samples), and the next window starts where this one's words end.

openai-whisper seeks to the last timestamp token its model writes, so a word the window's end cuts is heard again
whole in the next window. These timings are read without timestamp tokens (``<|notimestamps|>``, as
``find_alignment``'s pass is), so the seek comes from the alignment itself: unless the window is the clip's last, its
last word is dropped when it ends within :data:`CUT_SECONDS` of the window's end (it may be cut) and the next window
starts at that word's start, so the word is heard again whole; otherwise the next window starts at this one's end.
A window always moves the seek forward (a dropped word starting in the window's first :data:`CUT_SECONDS` is kept).
The language is the one given, else the one the model hears in the first window, kept for the others (as
``transcribe`` does). Each word's and token's times are the window's plus its start; the DTW path is each window's,
its rows and positions counted on from the windows before. A transcript given (``text``) is one window's: a clip
longer than the window is refused with it, as there is no telling which words each window holds."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import InputError

CUT_SECONDS = 1.0
"""A last word ending this close to its window's end may be cut by it: it is heard again in the next window."""
MIN_WINDOW_SECONDS = 0.1
"""Sound left after the last window shorter than this is not heard (under five encoder positions)."""


def align_windows(audio: str | os.PathLike[str], loaded: Any, one: Callable[..., Any], *,
                  heads: Sequence[Sequence[int]] | None, language: str | None, task: str, max_new_tokens: int,
                  width: int) -> tuple[Any, ...]:
    """The fields of the :class:`~attnviz.audio.timing.Alignment` of the whole of a clip longer than ``loaded``'s
    window (see the module), each window aligned by ``one`` (:func:`attnviz.audio.timing.align` on its samples):
    its words, tokens, heads, language, duration, and the path's rows and columns."""
    from .read import read_audio

    align = one
    rate = loaded.sampling_rate
    samples = read_audio(audio, rate=rate)
    window = loaded.window_samples
    per_position = loaded.hop_length * loaded.stride
    words: list[Any] = []
    tokens: list[Any] = []
    rows: list[np.ndarray] = []
    columns: list[np.ndarray] = []
    seek, row_base, chosen = 0, 0, None
    while len(samples) - seek >= MIN_WINDOW_SECONDS * rate:
        chunk = samples[seek: seek + window]
        found = align(chunk, loaded, heads=heads, language=language, task=task, max_new_tokens=max_new_tokens,
                      width=width)
        language, chosen = found.language, found.heads
        last = seek + len(chunk) >= len(samples)
        kept = list(found.words)
        step = len(chunk)
        if not last and len(kept) > 1 and kept[-1].end >= len(chunk) / rate - CUT_SECONDS \
                and kept[-1].start >= CUT_SECONDS:
            step = round(kept[-1].start * rate)
            kept = kept[:-1]
        offset = seek / rate
        kept_ids = sum(len(w.tokens) for w in kept)
        words += [replace(w, start=w.start + offset, end=w.end + offset) for w in kept]
        tokens += [replace(t, start=t.start + offset, end=t.end + offset) for t in found.tokens[:kept_ids]]
        if len(found.rows):
            rows.append(found.rows + row_base)
            columns.append(found.columns + seek // per_position)
            row_base += int(found.rows.max()) + 1
        seek += max(step, 1)
    empty = np.zeros(0, dtype=np.int64)
    return (tuple(words), tuple(tokens), tuple(chosen or ()), language, len(samples) / rate,
            np.concatenate(rows) if rows else empty, np.concatenate(columns) if columns else empty)


def refuse_text_beyond_window(seconds: float, loaded: Any) -> None:
    """A transcript given for a clip longer than the window (see the module), refused with the limit and the fix."""
    raise InputError(f"the clip is {seconds:.1f} s long, more than the {loaded.window_seconds:g} s {loaded.name} "
                     "hears at once, and a given transcript cannot be shared among its windows; leave out the text "
                     "(each window is transcribed and aligned in turn), or cut the clip and give each piece its text")

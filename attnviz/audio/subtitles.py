"""An :class:`~attnviz.audio.timing.Alignment` written in the forms people load (issue 61 item 3, ``attnviz align``):
a JSON document (the whole alignment), CSV rows of words or tokens, SubRip (``.srt``) and WebVTT (``.vtt``) subtitles,
and a Praat TextGrid (long text format). Each writer is a pure function of the alignment, returning text.

Subtitles are cues of words (:func:`cues`): one line each, a cue closed before it would grow past ``max_chars``
characters (42, the usual subtitle line) or ``max_seconds`` seconds (7), and after a word that ends a sentence. A cue
runs from its first word's start to its last word's end. A single word longer than either limit is a cue of its own,
whatever its length: its text cannot be cut.

- SubRip has no escapes: a cue's text is written as it is (a player may read ``<b>`` as its bold tag), but ``-->``,
  which a reader takes for a timing line, is written ``->``, as openai-whisper's own writer does.
- WebVTT (W3C, "WebVTT: The Web Video Text Tracks Format", cue text): ``&``, ``<`` and ``>`` are written ``&amp;``,
  ``&lt;`` and ``&gt;``, so cue text never holds ``-->`` nor a tag, and reads back as the words were.
- In both, line breaks and other control characters in a word become spaces (a blank line would end the cue), and a
  cue whose text is empty is left out.
- Times are rounded to the millisecond: ``HH:MM:SS,mmm`` (SubRip) and ``HH:MM:SS.mmm`` (WebVTT).

The TextGrid (Praat's long text format, ``File type = "ooTextFile"``) has two IntervalTiers, ``words`` and
``tokens``, each covering 0 to the clip's duration: an interval per word (or token), its text without the space
before it, and an empty interval for every gap, before the first, between two and after the last. Praat's intervals
last longer than 0: a word of zero duration (two words the DTW path reaches at one position) is joined to the word
after it (the last, to the word before), its text and the next one's in one interval. A quote in a text is written
twice, as Praat does."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .timing import Alignment

Level = Literal["word", "token"]

SUFFIXES = (".json", ".csv", ".srt", ".vtt", ".textgrid")
"""The files :func:`alignment_text` writes, by extension (compared in lower case: ``.TextGrid`` is Praat's)."""
MAX_CHARS = 42
"""A subtitle line's characters at most (the usual broadcast line)."""
MAX_SECONDS = 7.0
"""A cue's seconds at most (the usual longest subtitle)."""
COLUMNS: dict[str, tuple[str, ...]] = {"word": ("word", "start", "end", "probability"),
                                       "token": ("token", "id", "start", "end", "probability")}
"""The CSV's columns at each level."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_SENTENCE_END = (".", "?", "!", "。", "？", "！", "…")


@dataclass(frozen=True)
class Cue:
    """One subtitle: its text (one line) and when it shows (seconds)."""

    start: float
    end: float
    text: str


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters as spaces."""
    return _CONTROL.sub(" ", text)


def cues(alignment: Alignment, *, max_chars: int = MAX_CHARS, max_seconds: float = MAX_SECONDS) -> list[Cue]:
    """The alignment's words grouped into subtitle lines (see the module)."""
    if max_chars < 1 or not max_seconds > 0:
        from ..errors import UsageError

        raise UsageError(f"[[max_chars={max_chars}]] and [[max_seconds={max_seconds}]]: give a line at least 1 "
                         "character and more than 0 seconds long")
    found: list[Cue] = []
    current: list[Any] = []

    def close() -> None:
        text = "".join(one_line(w.word) for w in current).strip()
        if current and text:
            found.append(Cue(current[0].start, current[-1].end, text))
        current.clear()

    for word in alignment.words:
        if current:
            longer = "".join(one_line(w.word) for w in [*current, word]).strip()
            if len(longer) > max_chars or word.end - current[0].start > max_seconds:
                close()
        current.append(word)
        if one_line(word.word).rstrip().endswith(_SENTENCE_END):
            close()
    close()
    return found


def milliseconds(seconds: float) -> int:
    """``seconds`` rounded to the millisecond (never below 0)."""
    return max(0, round(seconds * 1000))


def timestamp(seconds: float, separator: str = ",") -> str:
    """``HH:MM:SS,mmm`` (SubRip; ``separator="."``: WebVTT's ``HH:MM:SS.mmm``)."""
    total = milliseconds(seconds)
    hours, rest = divmod(total, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole:02d}{separator}{millis:03d}"


def srt_text(alignment: Alignment, *, max_chars: int = MAX_CHARS, max_seconds: float = MAX_SECONDS) -> str:
    """SubRip subtitles of the words: numbered cues, ``start --> end``, the line, a blank line."""
    blocks = [f"{n}\n{timestamp(cue.start)} --> {timestamp(cue.end)}\n{cue.text.replace('-->', '->')}\n"
              for n, cue in enumerate(cues(alignment, max_chars=max_chars, max_seconds=max_seconds), start=1)]
    return "\n".join(blocks)


def vtt_escape(text: str) -> str:
    """WebVTT cue text for ``text``: ``&``, ``<`` and ``>`` as character references."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def vtt_text(alignment: Alignment, *, max_chars: int = MAX_CHARS, max_seconds: float = MAX_SECONDS) -> str:
    """WebVTT subtitles of the words: the ``WEBVTT`` line, then each cue's timing and line after a blank line."""
    blocks = [f"{timestamp(cue.start, '.')} --> {timestamp(cue.end, '.')}\n{vtt_escape(cue.text)}\n"
              for cue in cues(alignment, max_chars=max_chars, max_seconds=max_seconds)]
    return "\n".join(["WEBVTT\n", *blocks])


def _number(seconds: float) -> str:
    """A time as Praat writes it: no trailing zeros (``0``, ``0.3``, ``1.52``)."""
    text = f"{round(seconds, 6):.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _quoted(text: str) -> str:
    return '"' + one_line(text).replace('"', '""') + '"'


def tier_intervals(spans: Sequence[tuple[float, float, str]], duration: float) -> list[tuple[float, float, str]]:
    """``spans`` (start, end, text) as a tier's intervals from 0 to ``duration``: texts stripped, spans of zero
    duration joined to the next (the last to the one before), an empty interval in every gap."""
    kept: list[list[Any]] = []
    pending = ""
    for start, end, text in spans:
        text = f"{pending} {one_line(text).strip()}".strip()
        if end <= start:  # no time of its own: its text goes with the next span
            pending = text
            continue
        pending = ""
        if kept and start < kept[-1][1]:  # never before the last one ends (the path does not go back)
            start = kept[-1][1]
            if end <= start:
                kept[-1][2] = f"{kept[-1][2]} {text}".strip()
                continue
        kept.append([start, end, text])
    if pending:
        if kept:
            kept[-1][2] = f"{kept[-1][2]} {pending}".strip()
        else:  # every span without time: one interval over the clip, or none on a clip of no time
            return [(0.0, duration, pending)] if duration > 0 else []
    intervals: list[tuple[float, float, str]] = []
    at = 0.0
    for start, end, text in kept:
        if start > at:
            intervals.append((at, start, ""))
        intervals.append((start, end, text))
        at = end
    if duration > at:
        intervals.append((at, duration, ""))
    return intervals


def textgrid_text(alignment: Alignment) -> str:
    """A Praat TextGrid in the long text format: tiers ``words`` and ``tokens`` (see the module)."""
    words = [(w.start, w.end, w.word) for w in alignment.words]
    tokens = [(t.start, t.end, t.text) for t in alignment.tokens]
    end = max([alignment.duration, *(e for _, e, _ in words), *(e for _, e, _ in tokens)])
    tiers = [("words", tier_intervals(words, end)), ("tokens", tier_intervals(tokens, end))]
    lines = ['File type = "ooTextFile"', 'Object class = "TextGrid"', "", "xmin = 0 ", f"xmax = {_number(end)} ",
             "tiers? <exists> ", f"size = {len(tiers)} ", "item []: "]
    for n, (name, intervals) in enumerate(tiers, start=1):
        lines += [f"    item [{n}]:", '        class = "IntervalTier" ', f"        name = {_quoted(name)} ",
                  "        xmin = 0 ", f"        xmax = {_number(end)} ", f"        intervals: size = {len(intervals)} "]
        for k, (start, stop, text) in enumerate(intervals, start=1):
            lines += [f"        intervals [{k}]:", f"            xmin = {_number(start)} ",
                      f"            xmax = {_number(stop)} ", f"            text = {_quoted(text)} "]
    return "\n".join(lines) + "\n"


HEADS_FROM = ("given", "generation_config", "default")
"""Where an alignment's heads came from: given by the caller, the checkpoint's ``generation_config.alignment_heads``,
or openai-whisper's default (every head of the decoder's last half)."""


def heads_origin(loaded: Any, given: Sequence[Sequence[int]] | None) -> str:
    """Which of :data:`HEADS_FROM` :func:`~attnviz.audio.timing.align` reads for ``loaded`` (a
    :class:`~attnviz.audio.model.WhisperModel`) when handed ``given``."""
    if given is not None:
        return "given"
    if getattr(loaded.network.generation_config, "alignment_heads", None):
        return "generation_config"
    return "default"


def alignment_document(alignment: Alignment, *, model: str | None = None,
                       heads_from: str | None = None) -> dict[str, Any]:
    """The whole alignment as a JSON document: the model, the heads read (and where they came from, one of
    :data:`HEADS_FROM`, where known), the language, the clip's duration, the transcript, each word (its text,
    start, end, probability and token ids) and each token."""
    return {
        "model": model,
        "heads": [[layer, head] for layer, head in alignment.heads],
        "heads_from": heads_from,
        "language": alignment.language,
        "duration": alignment.duration,
        "text": "".join(w.word for w in alignment.words) if alignment.words else
                "".join(t.text for t in alignment.tokens),
        "words": [{"word": w.word, "start": w.start, "end": w.end, "probability": w.probability,
                   "tokens": list(w.tokens)} for w in alignment.words],
        "tokens": [{"id": t.id, "text": t.text, "start": t.start, "end": t.end, "probability": t.probability}
                   for t in alignment.tokens],
    }


def alignment_rows(alignment: Alignment, level: Level = "word") -> list[dict[str, Any]]:
    """One row per word (``word``, ``start``, ``end``, ``probability``) or per token (``token``, ``id``, …)."""
    if level == "token":
        return [{"token": t.text, "id": t.id, "start": t.start, "end": t.end, "probability": t.probability}
                for t in alignment.tokens]
    return [{"word": w.word, "start": w.start, "end": w.end, "probability": w.probability} for w in alignment.words]


def alignment_csv(alignment: Alignment, level: Level = "word") -> str:
    """:func:`alignment_rows` as CSV with a header."""
    from ..tables import csv_text

    return csv_text(alignment_rows(alignment, level), COLUMNS[level])


def alignment_text(alignment: Alignment, suffix: str, *, model: str | None = None, level: Level = "word",
                   max_chars: int = MAX_CHARS, max_seconds: float = MAX_SECONDS, heads_from: str | None = None) -> str:
    """The file of kind ``suffix`` (one of :data:`SUFFIXES`, any case) for ``alignment``."""
    kind = suffix.lower()
    if kind == ".json":
        from ..labels import json_text

        return json_text(alignment_document(alignment, model=model, heads_from=heads_from), indent=1) + "\n"
    if kind == ".csv":
        return alignment_csv(alignment, level)
    if kind == ".srt":
        return srt_text(alignment, max_chars=max_chars, max_seconds=max_seconds)
    if kind == ".vtt":
        return vtt_text(alignment, max_chars=max_chars, max_seconds=max_seconds)
    if kind == ".textgrid":
        return textgrid_text(alignment)
    from ..errors import UnknownFormatError

    raise UnknownFormatError(f"an alignment is written as {', '.join(SUFFIXES)}, not {suffix or '(no extension)'!r}")


def write_alignment(path: str | Path, alignment: Alignment, *, model: str | None = None, level: Level = "word",
                    max_chars: int = MAX_CHARS, max_seconds: float = MAX_SECONDS, heads_from: str | None = None) -> Path:
    """``alignment`` written to ``path`` (atomically), its kind from its extension (:func:`alignment_text`)."""
    from ..tables import write_text

    path = Path(path)
    text = alignment_text(alignment, path.suffix, model=model, level=level, max_chars=max_chars,
                          max_seconds=max_seconds, heads_from=heads_from)
    write_text(path, text)
    return path

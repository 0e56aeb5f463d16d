"""The files an alignment is written as (attnviz/audio/subtitles.py: JSON, CSV, SubRip, WebVTT, Praat TextGrid), each
read back by a small parser written here from the formats' own descriptions (not from the writer), its times equal to
the alignment's to the millisecond; and the edge cases: an empty transcript, words holding ``-->``, ``<b>``, ``&``,
quotes or a line break, a line longer than 7 s or 42 characters, a word of no duration."""

from __future__ import annotations

import csv
import html
import io
import json
import re

import numpy as np
import pytest

from attnviz.audio.subtitles import (
    COLUMNS,
    SUFFIXES,
    alignment_csv,
    alignment_document,
    alignment_text,
    cues,
    srt_text,
    textgrid_text,
    timestamp,
    vtt_text,
    write_alignment,
)
from attnviz.audio.timing import Alignment, TokenTiming, WordTiming
from attnviz.errors import UnknownFormatError, UsageError


def alignment(words: list[tuple[str, float, float]], duration: float = 3.0, language: str | None = "en") -> Alignment:
    """An alignment of ``words`` (text, start, end), each one token of its own (ids from 100)."""
    timed = tuple(WordTiming(text, (100 + i,), start, end, 0.5 + i / 100) for i, (text, start, end) in enumerate(words))
    tokens = tuple(TokenTiming(100 + i, text, start, end, 0.5 + i / 100) for i, (text, start, end) in enumerate(words))
    empty = np.zeros(0, dtype=np.int64)
    return Alignment(timed, tokens, ((2, 2), (3, 0)), language, duration, empty, empty)


SPOKEN = alignment([(" the", 0.12, 0.4), (" cat", 0.4, 0.66), (" sat.", 0.66, 1.02), (" Then", 1.3, 1.58),
                    (" it", 1.58, 1.7), (" ran", 1.7, 2.24)], duration=2.5)


# --- independent readers -------------------------------------------------------------------------------------------

TIME = r"(\d{2,}):(\d{2}):(\d{2})[,.](\d{3})"


def ms(match: tuple[str, str, str, str]) -> int:
    hours, minutes, seconds, millis = (int(v) for v in match)
    return ((hours * 60 + minutes) * 60 + seconds) * 1000 + millis


def read_srt(text: str) -> list[tuple[int, int, str]]:
    """SubRip: blocks apart by a blank line, each a counter, ``start --> end`` with a comma before the milliseconds,
    then the text lines."""
    found = []
    for n, block in enumerate(b for b in text.split("\n\n") if b.strip()):
        lines = block.strip("\n").split("\n")
        assert lines[0] == str(n + 1), block
        timing = re.fullmatch(rf"{TIME} --> {TIME}", lines[1])
        assert timing and "," in lines[1] and "." not in lines[1], lines[1]
        found.append((ms(timing.groups()[:4]), ms(timing.groups()[4:]), "\n".join(lines[2:])))
    return found


def read_vtt(text: str) -> list[tuple[int, int, str]]:
    """WebVTT: the WEBVTT line, then cues apart by blank lines, each a ``start --> end`` line with a full stop before
    the milliseconds and its text; character references undone. A cue's text holds no ``-->`` and no ``<``."""
    assert text.startswith("WEBVTT\n")
    header, *blocks = text.split("\n\n")
    assert header.strip() == "WEBVTT"
    found = []
    for block in (b for b in blocks if b.strip()):
        lines = block.strip("\n").split("\n")
        timing = re.fullmatch(rf"{TIME} --> {TIME}", lines[0])
        assert timing and "." in lines[0] and "," not in lines[0], lines[0]
        payload = "\n".join(lines[1:])
        assert "-->" not in payload and "<" not in payload and not re.search(r"&(?!amp;|lt;|gt;)", payload), payload
        found.append((ms(timing.groups()[:4]), ms(timing.groups()[4:]), html.unescape(payload)))
    return found


def read_textgrid(text: str) -> tuple[float, dict[str, list[tuple[float, float, str]]]]:
    """Praat's long text format: the grid's xmax, and each IntervalTier's intervals (xmin, xmax, text, a doubled
    quote read as one); every tier checked to cover 0 to xmax without gaps, each interval longer than 0."""
    assert text.startswith('File type = "ooTextFile"\nObject class = "TextGrid"\n')
    grid_max = float(re.search(r"^xmax = (\S+)", text, re.MULTILINE).group(1))
    assert re.search(r"^xmin = 0 ?$", text, re.MULTILINE) and "tiers? <exists>" in text
    size = int(re.search(r"^size = (\d+)", text, re.MULTILINE).group(1))
    tiers: dict[str, list[tuple[float, float, str]]] = {}
    items = re.split(r"^\s+item \[\d+\]:\s*$", text, flags=re.MULTILINE)[1:]
    assert len(items) == size
    for item in items:
        assert re.search(r'class = "IntervalTier"', item)
        name = re.search(r'name = "((?:[^"]|"")*)"', item).group(1)
        count = int(re.search(r"intervals: size = (\d+)", item).group(1))
        intervals = [(float(a), float(b), t.replace('""', '"')) for a, b, t in re.findall(
            r'intervals \[\d+\]:\s*xmin = (\S+)\s*xmax = (\S+)\s*text = "((?:[^"]|"")*)"', item)]
        assert len(intervals) == count, name
        at = 0.0
        for start, end, _ in intervals:
            assert start == at and end > start, (name, intervals)
            at = end
        assert at == grid_max or not intervals, (name, at, grid_max)
        tiers[name] = intervals
    return grid_max, tiers


def millis(seconds: float) -> int:
    return round(seconds * 1000)


# --- the writers read back -----------------------------------------------------------------------------------------


def test_srt_and_vtt_read_back_as_the_cues_to_the_millisecond():
    expected = [(millis(c.start), millis(c.end), c.text) for c in cues(SPOKEN)]
    assert expected == [(120, 1020, "the cat sat."), (1300, 2240, "Then it ran")]  # a sentence's end closes a line
    assert read_srt(srt_text(SPOKEN)) == expected
    assert read_vtt(vtt_text(SPOKEN)) == expected


def test_the_textgrid_reads_back_with_gaps_as_empty_intervals():
    grid_max, tiers = read_textgrid(textgrid_text(SPOKEN))
    assert grid_max == 2.5 and list(tiers) == ["words", "tokens"]
    words = tiers["words"]
    assert [t for _, _, t in words] == ["", "the", "cat", "sat.", "", "Then", "it", "ran", ""]
    timed = [(millis(a), millis(b), t) for a, b, t in words if t]
    assert timed == [(millis(w.start), millis(w.end), w.word.strip()) for w in SPOKEN.words]
    assert tiers["tokens"] == words  # one token a word here


def test_json_and_csv_hold_the_alignments_times():
    document = json.loads(alignment_text(SPOKEN, ".json", model="m", heads_from="given"))
    assert document["model"] == "m" and document["heads"] == [[2, 2], [3, 0]] and document["heads_from"] == "given"
    assert document["text"] == " the cat sat. Then it ran" and document["duration"] == 2.5
    assert [(w["word"], w["start"], w["end"], w["tokens"]) for w in document["words"]] == \
        [(w.word, w.start, w.end, list(w.tokens)) for w in SPOKEN.words]
    assert [(t["id"], t["text"], t["start"], t["end"]) for t in document["tokens"]] == \
        [(t.id, t.text, t.start, t.end) for t in SPOKEN.tokens]
    for level in ("word", "token"):
        rows = list(csv.DictReader(io.StringIO(alignment_csv(SPOKEN, level))))
        assert tuple(rows[0]) == COLUMNS[level]
        assert [(r[level], float(r["start"]), float(r["end"])) for r in rows] == \
            [(w.word, w.start, w.end) for w in SPOKEN.words]


def test_write_alignment_by_extension(tmp_path):
    for suffix in (".json", ".csv", ".srt", ".vtt", ".TextGrid"):
        path = write_alignment(tmp_path / f"a{suffix}", SPOKEN, model="m")
        assert path.read_text(encoding="utf-8") == alignment_text(SPOKEN, suffix, model="m")
    assert {".json", ".csv", ".srt", ".vtt", ".textgrid"} == set(SUFFIXES)
    with pytest.raises(UnknownFormatError, match=r"not '\.txt'"):
        alignment_text(SPOKEN, ".txt")


def test_timestamps():
    assert timestamp(0) == "00:00:00,000" and timestamp(0.3) == "00:00:00,300" and timestamp(1.8, ".") == "00:00:01.800"
    assert timestamp(3723.4567) == "01:02:03,457" and timestamp(0.0004) == "00:00:00,000"
    assert timestamp(59.9996) == "00:01:00,000"  # rounded, carried into the minute


# --- edge cases ----------------------------------------------------------------------------------------------------


def test_an_empty_transcript():
    empty = alignment([], duration=1.5)
    assert cues(empty) == [] and srt_text(empty) == "" and read_vtt(vtt_text(empty)) == []
    grid_max, tiers = read_textgrid(textgrid_text(empty))
    assert grid_max == 1.5 and tiers == {"words": [(0.0, 1.5, "")], "tokens": [(0.0, 1.5, "")]}
    document = alignment_document(empty)
    assert document["words"] == [] and document["tokens"] == [] and document["text"] == ""
    assert alignment_csv(empty) == "word,start,end,probability\n"
    nothing = alignment([], duration=0.0)
    assert read_textgrid(textgrid_text(nothing)) == (0.0, {"words": [], "tokens": []})


def test_words_with_arrows_tags_ampersands_quotes_and_line_breaks():
    tricky = alignment([(" a-->b", 0.0, 0.5), (" <b>bold</b>", 0.5, 1.0), (" R&D", 1.0, 1.4), (' say "hi"', 1.4, 1.8),
                        (" two\nlines", 1.8, 2.0)])
    line = 'a-->b <b>bold</b> R&D say "hi" two lines'
    assert [c.text for c in cues(tricky)] == [line]
    assert read_vtt(vtt_text(tricky)) == [(0, 2000, line)]  # escaped as the spec says, read back as it was
    assert "--&gt;" in vtt_text(tricky) and "&lt;b&gt;" in vtt_text(tricky) and "R&amp;D" in vtt_text(tricky)
    assert read_srt(srt_text(tricky)) == [(0, 2000, line.replace("-->", "->"))]  # SubRip: as openai-whisper writes it
    _, tiers = read_textgrid(textgrid_text(tricky))
    assert [t for _, _, t in tiers["words"] if t] == ["a-->b", "<b>bold</b>", "R&D", 'say "hi"', "two lines"]


def test_a_line_longer_than_7_seconds_or_42_characters_is_split():
    slow = alignment([(f" w{i}", float(i), float(i + 1)) for i in range(10)], duration=10.0)
    split = cues(slow)
    assert [(c.start, c.end) for c in split] == [(0.0, 7.0), (7.0, 10.0)]
    assert all(c.end - c.start <= 7 for c in split)
    assert read_srt(srt_text(slow)) == [(0, 7000, "w0 w1 w2 w3 w4 w5 w6"), (7000, 10000, "w7 w8 w9")]
    assert [c.text for c in cues(slow, max_seconds=2.5)] == ["w0 w1", "w2 w3", "w4 w5", "w6 w7", "w8 w9"]
    wordy = alignment([(" abcdefghi", i * 0.1, (i + 1) * 0.1) for i in range(9)])
    lines = [c.text for c in cues(wordy)]
    assert all(len(text) <= 42 for text in lines) and lines[0] == "abcdefghi abcdefghi abcdefghi abcdefghi"
    assert " ".join(lines) == " ".join(["abcdefghi"] * 9)
    long_word = alignment([(" hello", 0.0, 0.5), (" mmmmmm", 0.5, 9.0), (" bye", 9.0, 9.5)], duration=10.0)
    assert [(c.start, c.end, c.text) for c in cues(long_word)] == [(0.0, 0.5, "hello"), (0.5, 9.0, "mmmmmm"),
                                                                   (9.0, 9.5, "bye")]  # a word is never cut
    with pytest.raises(UsageError, match="max_chars=0"):
        cues(slow, max_chars=0)


def test_words_written_without_spaces_make_lines_without_spaces():
    chinese = alignment([("猫", 0.0, 0.3), ("坐", 0.3, 0.6), ("在", 0.6, 0.9), ("垫子上", 0.9, 1.5), ("。", 1.5, 1.6),
                         ("狗", 1.8, 2.0)], language="zh")
    assert [c.text for c in cues(chinese)] == ["猫坐在垫子上。", "狗"]
    _, tiers = read_textgrid(textgrid_text(chinese))
    assert [t for _, _, t in tiers["words"]] == ["猫", "坐", "在", "垫子上", "。", "", "狗", ""]


def test_a_word_of_no_duration_joins_the_next_in_the_textgrid():
    stuck = alignment([(" a", 0.2, 0.2), (" b", 0.2, 0.6), (" c", 0.6, 1.0), (" d", 1.0, 1.0)], duration=1.2)
    _, tiers = read_textgrid(textgrid_text(stuck))  # the reader refuses an interval of no duration
    assert tiers["words"] == [(0.0, 0.2, ""), (0.2, 0.6, "a b"), (0.6, 1.0, "c d"), (1.0, 1.2, "")]
    assert read_srt(srt_text(stuck)) == [(200, 1000, "a b c d")]

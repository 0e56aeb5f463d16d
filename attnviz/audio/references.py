"""Reference word timings, and corpora of clips with them, for finding a Whisper model's alignment heads
(:mod:`.head_search`, ``attnviz align-heads``).

A clip's reference (e.g. from a forced aligner) is one of:

- a Praat TextGrid (long or short text format): its interval tier named ``words`` (any case), else its only interval
  tier; intervals whose text is empty or a silence mark (``sil``, ``sp``, ``spn``, ``<eps>``, ``<sil>``) are no words;
- JSON: ``[{"word": ..., "start": ..., "end": ...}, ...]`` (or ``{"words": [...]}``);
- CSV with a header naming ``word``, ``start`` and ``end``.

Times are seconds, finite, from 0, each word's start at most its end. A corpus is a CSV or JSONL of rows ``audio,
reference[, text]`` (the paths relative to the corpus file's folder and inside it, as the picture corpora of
:mod:`attnviz.images.corpus` are: a path that leaves it is refused by its row, in the same words whether or not the
file exists), or a folder of clips, each with a reference file of the same name beside it (``a.wav`` and
``a.TextGrid``, ``a.json`` or ``a.csv``), or one clip. A corpus without references is scored without labels."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, ResourceError
from ..fileio import corpus_path

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
REFERENCE_SUFFIXES = (".textgrid", ".json", ".csv")
SILENCES = frozenset({"", "sil", "sp", "spn", "<eps>", "<sil>", "<unk>"})
MAX_CLIPS = 100_000
MAX_REFERENCE_BYTES = 16 * 1024 * 1024
MAX_WORDS = 10_000


@dataclass(frozen=True)
class ReferenceWord:
    word: str
    start: float
    end: float


@dataclass(frozen=True)
class Clip:
    """One clip of a corpus: its sound file, its reference words (None: no reference) and the transcript to
    teacher-force (None: the reference's words joined by spaces, or without a reference the model's own)."""

    audio: Path
    reference: tuple[ReferenceWord, ...] | None
    text: str | None = None
    reference_path: Path | None = None

    @property
    def name(self) -> str:
        return self.audio.name


def normalise(word: str) -> str:
    """A word as references and alignments are matched: casefolded, punctuation and spaces removed."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", word).casefold()
                   if not unicodedata.category(ch).startswith(("P", "Z")) and not ch.isspace())


def read_reference(path: str | os.PathLike[str]) -> tuple[ReferenceWord, ...]:
    """The words of the reference file ``path`` (see the module), by its extension."""
    path = Path(path)
    text = _read_text(path)
    suffix = path.suffix.lower()
    if suffix == ".textgrid":
        words = _textgrid_words(path, text)
    elif suffix == ".json":
        words = _json_words(path, text)
    elif suffix == ".csv":
        words = _csv_words(path, text)
    else:
        raise InputError(f"{path}: a reference is a .TextGrid, .json or .csv file of word timings, not "
                         f"{path.suffix or 'a file without an extension'}")
    if not words:
        raise InputError(f"{path} holds no words; give each word's start and end")
    if len(words) > MAX_WORDS:
        raise ResourceError(f"{path} holds {len(words):,} words; at most {MAX_WORDS:,} (one 30-s clip's)")
    return tuple(words)


def _read_text(path: Path) -> str:
    try:
        if not path.is_file():
            raise InputError(f"{path} is not a file; give a reference file of word timings")
        if path.stat().st_size > MAX_REFERENCE_BYTES:
            raise ResourceError(f"{path} is over {MAX_REFERENCE_BYTES // 2**20} MiB; a clip's reference is smaller")
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    for encoding in ("utf-8-sig", "utf-16"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise InputError(f"{path} is not UTF-8 (nor UTF-16) text")


def _word(path: Path, where: str, word: object, start: object, end: object) -> ReferenceWord | None:
    try:
        a, b = float(start), float(end)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{path} {where}: start {start!r} and end {end!r} are not numbers of seconds") from None
    if not (math.isfinite(a) and math.isfinite(b)) or a < 0 or b < a:
        raise InputError(f"{path} {where}: start {a:g} and end {b:g} are not times from 0 with the start first")
    text = str(word if word is not None else "").strip()
    return None if text.casefold() in SILENCES else ReferenceWord(text, a, b)


_TOKEN = re.compile(r'"(?:[^"]|"")*"|\[\s*\d+\s*\]|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|<exists>')


def _textgrid_words(path: Path, text: str) -> list[ReferenceWord]:
    """Praat's text TextGrid, long or short: its strings and numbers in order, labels and item numbers skipped."""
    tokens = [t for t in _TOKEN.findall(text) if not t.startswith("[")]
    bad = InputError(f"{path} is not a Praat TextGrid (ooTextFile) of interval tiers")

    def string(k: int) -> str:
        if k >= len(tokens) or not tokens[k].startswith('"'):
            raise bad
        return tokens[k][1:-1].replace('""', '"')

    def number(k: int) -> float:
        if k >= len(tokens) or tokens[k].startswith(('"', "<")):
            raise bad
        return float(tokens[k])

    if len(tokens) < 2 or string(0) != "ooTextFile" or string(1) != "TextGrid":
        raise bad
    k = 4  # the grid's xmin, xmax
    if k < len(tokens) and tokens[k] == "<exists>":
        k += 1
    tiers = int(number(k))
    k += 1
    found: list[tuple[str, list[ReferenceWord]]] = []
    for _ in range(tiers):
        kind, name = string(k), string(k + 1)
        count = int(number(k + 4))
        k += 5
        if count < 0 or count > 10 * MAX_WORDS:
            raise bad
        if kind == "IntervalTier":
            words = []
            for i in range(count):
                word = _word(path, f"tier {name!r} interval {i + 1}", string(k + 2), number(k), number(k + 1))
                if word is not None:
                    words.append(word)
                k += 3
            found.append((name, words))
        else:  # a TextTier of points: time and mark
            k += 2 * count
    named = [words for name, words in found if name.strip().casefold() == "words"]
    if named:
        return named[0]
    if len(found) == 1:
        return found[0][1]
    names = ", ".join(repr(name) for name, _ in found) or "none"
    raise InputError(f"{path}: no interval tier named 'words' among its interval tiers ({names}); name the words' "
                     "tier 'words'")


def _json_words(path: Path, text: str) -> list[ReferenceWord]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path} is not JSON ({exc})") from None
    if isinstance(data, dict) and "words" in data:
        data = data["words"]
    if not isinstance(data, list):
        raise InputError(f'{path}: give a list of {{"word", "start", "end"}} objects')
    words = []
    for i, item in enumerate(data, start=1):
        if not isinstance(item, dict) or not {"word", "start", "end"} <= set(item):
            raise InputError(f'{path} item {i}: give each word as {{"word": ..., "start": ..., "end": ...}}')
        word = _word(path, f"item {i}", item["word"], item["start"], item["end"])
        if word is not None:
            words.append(word)
    return words


def _csv_words(path: Path, text: str) -> list[ReferenceWord]:
    reader = csv.DictReader(io.StringIO(text))
    fields = {f.strip().casefold(): f for f in reader.fieldnames or []}
    if not {"word", "start", "end"} <= set(fields):
        raise InputError(f"{path}: its header names {', '.join(reader.fieldnames or []) or 'nothing'}; give word, "
                         "start, end")
    words = []
    for i, row in enumerate(reader, start=2):
        word = _word(path, f"line {i}", row[fields["word"]], row[fields["start"]], row[fields["end"]])
        if word is not None:
            words.append(word)
    return words


def read_head_corpus(source: str | os.PathLike[str], *, references: str | os.PathLike[str] | None = None,
                     allow_outside: bool = False) -> list[Clip]:
    """The clips of ``source`` (see the module): a CSV or JSONL corpus, a folder of clips, or one clip.
    ``references``: for one clip, its reference file; for a folder, the folder its references are in (default:
    beside the clips). ``examples/NAME`` missing here is the copy installed with attnviz."""
    from ..inputs import example_file

    source = example_file(Path(source))
    if source.is_dir():
        return _folder_clips(source, Path(references) if references is not None else source)
    if source.suffix.lower() in AUDIO_SUFFIXES:
        if not source.is_file():
            raise InputError(f"{source} is not a file; give a sound clip, a folder of clips or a corpus")
        found = Path(references) if references is not None else _beside(source, source.parent)
        return [Clip(source, read_reference(found) if found is not None else None, None, found)]
    if references is not None:
        raise InputError(f"{source}: a corpus names each clip's reference in its 'reference' column; [[references]] "
                         "goes with one clip or a folder of clips")
    if source.suffix.lower() not in (".csv", ".jsonl"):
        raise InputError(f"{source}: give a sound clip, a folder of clips, or a corpus (.csv or .jsonl) of rows "
                         "audio, reference[, text]")
    rows = _corpus_rows(source)
    inside = source.parent.resolve()
    clips = []
    for number, row in enumerate(rows, start=1):
        audio = (row.get("audio") or "").strip()
        if not audio:
            raise InputError(f"{source} row {number}: its 'audio' names no clip; give every row its clip")
        sound = corpus_path(source, number, inside, audio, what="clip", allow_outside=allow_outside)
        written = (row.get("reference") or "").strip()
        reference = (corpus_path(source, number, inside, written, what="reference", allow_outside=allow_outside)
                     if written else None)
        text = (row.get("text") or "").strip() or None
        clips.append(Clip(sound, read_reference(reference) if reference is not None else None, text, reference))
    return _checked(source, clips)


def _corpus_rows(source: Path) -> list[dict[str, str]]:
    text = _read_text(source)
    if source.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        fields = [f.strip().casefold() for f in reader.fieldnames or []]
        if "audio" not in fields:
            raise InputError(f"{source}: its header names {', '.join(reader.fieldnames or []) or 'nothing'}; give "
                             "audio, reference[, text]")
        rows = [{k.strip().casefold(): (v or "") for k, v in row.items() if k is not None} for row in reader]
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                raise InputError(f"{source} line {number} is not JSON") from None
            if not isinstance(item, dict):
                raise InputError(f'{source} line {number}: give an object {{"audio": ..., "reference": ...}}')
            rows.append({str(k).casefold(): "" if v is None else str(v) for k, v in item.items()})
    rows = [row for row in rows if any(v.strip() for v in row.values())]
    if len(rows) > MAX_CLIPS:
        raise ResourceError(f"{source} has {len(rows):,} rows; at most {MAX_CLIPS:,}")
    return rows




def _beside(clip: Path, folder: Path) -> Path | None:
    """The reference named as ``clip`` in ``folder`` (a.TextGrid, a.json or a.csv, any case), or None."""
    try:
        found = [p for p in folder.iterdir() if p.stem == clip.stem and p.suffix.lower() in REFERENCE_SUFFIXES]
    except OSError as exc:
        raise InputError(f"{folder}: cannot list it ({exc.strerror or exc})") from None
    if len(found) > 1:
        raise InputError(f"{clip.name} has {len(found)} references in {folder} ({', '.join(sorted(p.name for p in found))}); "
                         "keep one")
    return found[0] if found else None


def _folder_clips(folder: Path, references: Path) -> list[Clip]:
    clips = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() in AUDIO_SUFFIXES and path.is_file():
            found = _beside(path, references)
            clips.append(Clip(path, read_reference(found) if found is not None else None, None, found))
            if len(clips) > MAX_CLIPS:
                raise ResourceError(f"{folder} has more than {MAX_CLIPS:,} clips")
    if not clips:
        raise InputError(f"{folder} holds no sound clip ({', '.join(AUDIO_SUFFIXES)})")
    return _checked(folder, clips)


def _checked(source: Path, clips: list[Clip]) -> list[Clip]:
    if not clips:
        raise InputError(f"{source} has no clips")
    missing = [c.name for c in clips if c.reference is None]
    if missing and len(missing) < len(clips):
        raise InputError(f"{source}: {len(missing)} of its {len(clips)} clips have no reference (the first: "
                         f"{missing[0]}); give every clip one, or none to score the heads without labels")
    return clips

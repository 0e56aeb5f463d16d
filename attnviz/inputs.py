"""Reading texts: one reader for every command (``heads --file``, ``export``), so a file means the
same everywhere: UTF-8 (a byte-order mark is not part of the first text), one text per line with
blank lines skipped and CRLF endings taken off, or JSONL (``field``) or CSV (``column``); errors
say which line is wrong."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import InputError

if TYPE_CHECKING:
    from pyarrow.parquet import ParquetFile


def read_texts(source: str | Path, *, field: str = "text", column: str = "text", kind: str = "auto",
               keep_blank: bool = False) -> list[str]:
    """Texts from ``source`` (``-`` for stdin). ``kind`` ``auto`` goes by the extension (``.jsonl``,
    ``.csv``, ``.parquet``, else one text per line); ``lines``, ``jsonl``, ``csv`` and ``parquet`` say it outright.
    ``keep_blank``: a CSV's or Parquet file's blank cells kept (as ``""``), so two columns read so stay row by row."""
    from .limits import texts_file_limit

    source = "-" if str(source) == "-" else source  # a Path("-") too: standard input, as everywhere
    name = "stdin" if source == "-" else str(source)
    source = source if source == "-" else example_file(source)
    limit = texts_file_limit()
    raw = read_stdin(limit, "a file of texts") if source == "-" else read_bounded(Path(source), limit, "file of texts")
    if kind == "parquet" or (kind in ("auto", "csv") and Path(source).suffix.lower() == ".parquet"):
        return _parquet(raw, column, name, keep_blank)  # [[column]] names a Parquet file's column as it names a CSV's
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is not part of the first text
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"{name} line {line} is not valid UTF-8; save the file as UTF-8") from None
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise InputError(f"{name} line {line} contains a NUL byte; is it a binary file?")
    suffix = Path(source).suffix.lower()
    if kind == "auto":
        kind = {".jsonl": "jsonl", ".csv": "csv"}.get(suffix, "lines")
    if kind == "jsonl":
        texts = _jsonl(text, field, name)
    elif kind == "csv":
        texts = _csv(text, column, name, keep_blank)
    else:
        texts = [line.rstrip("\r") for line in text.split("\n") if line.strip()]
    if not texts:
        raise InputError(f"{name} has no texts; put one text per line (or use .jsonl/.csv)")
    return texts


def corpus_kind(field: str | None, column: str | None, input_format: str | None) -> str:
    """How a file of texts is read, the same for ``export``, ``atlas`` and ``heads --file``: ``input_format``
    when given (not ``auto``); else ``--field`` means JSONL and ``--column`` CSV (or Parquet, by extension);
    else by extension (``auto``)."""
    if input_format is not None and input_format != "auto":
        return input_format
    if field is not None:
        return "jsonl"
    return "csv" if column is not None else "auto"


def read_corpus(source: str | Path, *, field: str | None = None, column: str | None = None,
                input_format: str | None = None) -> list[str]:
    """The texts of a file of many (``export``'s INPUT, ``atlas``'s TEXTS, ``heads --file``), read the one way
    :func:`corpus_kind` says."""
    return read_texts(source, field=field or "text", column=column or "text",
                      kind=corpus_kind(field, column, input_format))


def read_lines(path: str | Path) -> list[str]:
    """The non-blank lines of a UTF-8 text file, in order (:func:`read_texts` with ``kind=\"lines\"``)."""
    return read_texts(str(path), kind="lines")


def example_file(path: str | Path) -> Path:
    """``path`` itself if it exists; else, for ``examples/NAME`` (the files the README's commands read),
    the copy installed with attnviz, so ``attnviz export examples/texts.txt`` works from any folder, as
    ``--model sample_configs/tiny.toml`` does. Any other missing path comes back unchanged, for the
    caller to report: a mistyped path elsewhere never silently becomes an example."""
    from importlib.resources import as_file, files

    path = Path(path)
    if str(path) == "-" or path.exists() or len(path.parts) != 2 or path.parts[0] != "examples":
        return path
    try:
        installed = files("attnviz.examples") / path.name
    except ModuleNotFoundError:  # an install without them
        return path
    if not installed.is_file():
        return path
    with as_file(installed) as found:  # a real file for any normal install (not a zip)
        return Path(found)


def read_text_file(path: str | Path) -> str:
    """The one text in ``path`` (``--text-file``; ``-`` reads standard input): a regular file of at most
    :data:`attnviz.limits.MAX_TEXT_FILE` bytes of UTF-8, its final line breaks taken off, not empty."""
    from .limits import MAX_TEXT_FILE

    shown = "standard input" if str(path) == "-" else str(path)
    path = example_file(path)
    raw = read_stdin(MAX_TEXT_FILE, "one text") if str(path) == "-" else read_bounded(Path(path), MAX_TEXT_FILE, "text file")
    try:
        text = raw.decode("utf-8-sig").rstrip("\n")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    if not text.strip():
        raise InputError(f"{shown} is empty; it should hold the text to read")
    return text


def read_text_prefix(path: str | Path, max_chars: int, what: str = "text file") -> tuple[str, bool]:
    """The first ``max_chars`` characters of a UTF-8 text file or of standard input (``-``), and whether that is the
    whole of it: what a reader that needs only a start reads (a needle's haystack), however long the rest is. A
    folder, a FIFO or a device is refused before it is opened, as every reader here refuses them."""
    import codecs

    from .limits import check_regular

    shown = "standard input" if str(path) == "-" else str(path)
    limit = 4 * max_chars + 4  # UTF-8: at most 4 bytes a character
    if str(path) == "-":
        raw = sys.stdin.buffer.read(limit)
    else:
        with _reading(Path(path), what):
            check_regular(Path(path), what)
            with open(path, "rb") as handle:
                raw = handle.read(limit)
    whole = len(raw) < limit
    try:
        text = codecs.getincrementaldecoder("utf-8-sig")().decode(raw, final=whole)
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None
    return (text, whole) if len(text) <= max_chars else (text[:max_chars], False)


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (checked before it is opened, and
    again while it is read), or an :class:`InputError` naming it: the one reader for every file of text."""
    from .limits import read_small

    with _reading(path, what, limit):
        return read_small(path, limit=limit, what=what)
    raise AssertionError("unreachable")  # pragma: no cover  (the context manager raises or the read returns)


@contextmanager
def _reading(path: Path, what: str, limit: int | None = None) -> Iterator[None]:
    """A read of ``path`` whose failures are one :class:`InputError` each, naming it: missing, a folder, not a regular
    file, past ``limit`` bytes (where one is given), or refused by the machine."""
    from .errors import ResourceError
    from .limits import human

    try:
        yield
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; check the path") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a folder; give a {what} (or - for standard input)") from None
    except ResourceError as exc:
        if "folder" in exc.message:
            raise InputError(f"{path} is a folder; give a {what} (or - for standard input)") from None
        if "regular file" in exc.message or limit is None:
            raise InputError(exc.message) from None
        raise InputError(f"{path} is larger than the {human(limit)} a {what} may be; split it, or cut it first") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_stdin(limit: int, what: str) -> bytes:
    """At most ``limit`` bytes of standard input; more is refused (``yes | attnviz …`` ends)."""
    from .limits import human

    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"standard input holds more than the {human(limit)} {what} may be; split it, or cut it first")
    return data


def _jsonl(text: str, field: str, name: str) -> list[str]:
    texts = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{name} line {number} is not JSON ({exc.msg}); fix that line") from None
        except RecursionError:
            raise InputError(f"{name} line {number} nests too deeply to be a record; fix that line") from None
        if not isinstance(record, dict) or field not in record:
            keys = ", ".join(sorted(record)) if isinstance(record, dict) else "not an object"
            raise InputError(f"{name} line {number} has no field {field!r} ({keys}); choose it with [[field]]")
        value = record[field]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise InputError(f"{name} line {number}: field {field!r} holds {type(value).__name__}, not text")
        texts.append(value)
    return texts


def _csv(text: str, column: str, name: str, keep_blank: bool = False) -> list[str]:
    csv.field_size_limit(2**31 - 1)  # a long text is a valid field
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or column not in reader.fieldnames:
        found = ", ".join(reader.fieldnames or []) or "none"
        raise InputError(f"{name} has no column {column!r} (columns: {found}); choose it with [[column]]")
    try:
        return [row.get(column) or "" for row in reader if keep_blank or (row.get(column) or "").strip()]
    except csv.Error as exc:
        raise InputError(f"{name} line {reader.line_num} is not valid CSV ({exc})") from None


def _parquet(raw: bytes, column: str, name: str, keep_blank: bool = False) -> list[str]:
    """The non-blank texts of a Parquet file's string ``column`` (needs pyarrow, the ``parquet`` extra)."""
    from .errors import UsageError

    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(f"reading {name} needs pyarrow: pip install pyarrow (or pip install -e '.[parquet]' in attnviz's clone)") from None
    try:
        schema = pq.read_schema(pa.BufferReader(raw))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{name} is not a Parquet file ({exc})") from None
    if column not in schema.names:
        raise InputError(f"{name} has no column {column!r} (columns: {', '.join(schema.names) or 'none'}); "
                         "choose it with [[column]]")
    kind = schema.field(column).type
    inner = kind.value_type if pa.types.is_dictionary(kind) else kind  # pandas' category columns: dictionaries
    textual = (pa.types.is_string(inner) or pa.types.is_large_string(inner)
               or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(inner)))
    if not textual:
        raise InputError(f"{name}: column {column!r} holds {kind}, not text; choose a text column with [[column]]")
    try:
        values = _parquet_column(pq.ParquetFile(pa.BufferReader(raw)), column, name)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # a corrupt page; bytes that are not UTF-8
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise InputError(f"{name}: column {column!r} cannot be read ({type(exc).__name__}: {first}); the file is "
                         "damaged, or its text is not UTF-8") from None
    texts = [v or "" for v in values] if keep_blank else [v for v in values if v is not None and v.strip()]
    if not any(t.strip() for t in texts):
        raise InputError(f"{name} has no texts in column {column!r}")
    return texts


def _parquet_column(file: ParquetFile, column: str, name: str) -> list[str | None]:
    """A Parquet column's texts, row group by row group, within :func:`attnviz.limits.texts_file_limit`
    bytes unpacked: the sizes the metadata declares are checked before anything is read, and what is
    read is counted too (a file's metadata may lie), so a small file that unpacks to gigabytes (a
    "bomb") is refused, naming it."""
    import pyarrow as pa

    from .limits import human, texts_file_limit

    limit = texts_file_limit()
    meta = file.metadata
    index = file.schema_arrow.get_field_index(column)
    declared = sum(meta.row_group(g).column(index).total_uncompressed_size for g in range(meta.num_row_groups))
    too_large = f"{name}: column {column!r} unpacks to more than the {human(limit)} a file of texts may be; split it"
    if declared > limit or meta.num_rows > limit // 8:
        raise InputError(too_large)
    values: list[str | None] = []
    size = 0
    for group in range(meta.num_row_groups):
        chunk = file.read_row_group(group, columns=[column]).column(column).cast(pa.string())
        size += chunk.nbytes
        if size > limit:
            raise InputError(too_large)
        values.extend(chunk.to_pylist())
    return values

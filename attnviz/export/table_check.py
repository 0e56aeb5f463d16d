"""An export's Parquet tables (``heads.parquet``, ``texts.parquet``, ``importance.parquet``) read as untrusted
input, as :mod:`attnviz.result.file` reads a result ``.npz``: the file must be a regular file and a Parquet
table; its row count and each needed column's size come from its footer and are checked against the memory
budget (:func:`attnviz.limits.check_memory`) before any column is read; each column's type is checked
from the schema (integer keys, floating-point statistics, ``list<string>`` labels, string texts and hashes)
and, once read, its cells: no nulls, keys within range, statistics finite and within :data:`MAX_VALUE`.
Every refusal is one :class:`~attnviz.errors.InputError` line naming the file and the column.

Strings are read as dictionaries (Parquet's own encoding kept), so a column of 10^7 copies of one long text
costs its indices and one copy of the text, as its footer says, not 10^7 copies.
"""

from __future__ import annotations

import math
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..limits import check_memory

MAX_VALUE = 1e15
"""The largest magnitude of a statistic (or importance) a table may hold: no statistic attnviz writes is near
it (shares are at most 1, distances at most a context's length), and sums and differences of 10^8 of them stay
far from float64's overflow (a 1e308 once became inf in a mean, then a histogram of NaN)."""

MAX_KEY = 1 << 62
"""The largest ``text_index`` a table may hold."""

MAX_LABELS = 256
"""Different labels a ``labels`` column may hold (attnviz gives about a dozen); each costs a layers × heads grid."""

WORK_PER_ROW = 8 * 8
"""Bytes per row of the working arrays beside the columns (places, orders, histograms' bins)."""

_KINDS = {"integer": "integers", "float": "floating-point numbers", "string": "text", "labels": "lists of text"}
_DICTIONARY = {"string", "labels"}


class TableFile:
    """One Parquet file opened and checked: its ``rows`` and its columns' types, read one column at a time."""

    def __init__(self, path: Path, what: str, columns: dict[str, str], *, optional: Iterable[str] = ()) -> None:
        """Open ``path`` (``what`` it is, for messages) and check that it has ``columns`` (name → kind: integer,
        float, string or labels) of those kinds; those named in ``optional`` may be missing (see :attr:`names`)."""
        from .table import pyarrow

        pyarrow()
        import pyarrow.parquet as pq

        self.path = path
        self.what = what
        try:
            info = path.stat()
        except FileNotFoundError:
            raise InputError(f"{path} does not exist; give the folder of an export with the parquet format") from None
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{path} is not a regular file; {what} is a Parquet file an export writes")
        try:
            plain = pq.ParquetFile(path)
            schema = plain.schema_arrow
            metadata = plain.metadata
            self.rows = max(int(metadata.num_rows), sum(metadata.row_group(i).num_rows
                                                         for i in range(metadata.num_row_groups)))
            self.sizes, self.values = _column_sizes(metadata)
        except Exception as exc:  # pyarrow says a damaged footer many ways (ArrowInvalid, OSError, thrift errors)
            raise InputError(f"{path} is not a Parquet table ({_reason(exc)}); {what} is written by "
                             "attnviz heads [[format=parquet]]: write the export again") from None
        optional = set(optional)
        self.types: dict[str, Any] = {}
        for name, kind in columns.items():
            if name not in schema.names:
                if name in optional:
                    continue
                raise InputError(f"{path} has no {name!r} column; {what} has it when attnviz heads [[format=parquet]] "
                                 "wrote it: write the export again")
            self.types[name] = _checked_type(schema.field(name).type, kind, path, name)
        self.kinds = {name: columns[name] for name in self.types}
        self.names = list(self.types)
        dictionary = [name if self.kinds[name] == "string" else f"{name}.list.element"
                      for name in self.names if self.kinds[name] in _DICTIONARY]
        try:  # strings as dictionaries: Parquet's own encoding kept (see the module)
            self.file = pq.ParquetFile(path, read_dictionary=dictionary) if dictionary else plain
        except Exception as exc:
            raise InputError(f"{path} is not a Parquet table ({_reason(exc)}); write the export again") from None

    def nbytes(self, name: str) -> float:
        """The bytes column ``name`` takes once read, from the footer: its values' width times the rows, or for
        text (read as dictionaries) 4-byte indices and every page's uncompressed bytes."""
        kind = self.kinds[name]
        if kind in ("integer", "float"):
            return self.rows * (8 + self.types[name].bit_width // 8)  # read, then as 8-byte numpy values
        if kind == "string":
            return self.rows * 8 + self.sizes.get(name, 0)
        leaves = self.values.get(f"{name}.list.element", 0)
        return self.rows * 8 + leaves * 8 + self.sizes.get(f"{name}.list.element", 0)

    def check_memory(self, names: Iterable[str], *, extra: float = 0.0) -> None:
        """Refuse (before any column is read) if ``names``, with :data:`WORK_PER_ROW` and ``extra`` bytes beside
        them, would pass the memory budget."""
        needed = sum(self.nbytes(name) for name in names) + self.rows * WORK_PER_ROW + extra
        check_memory(needed, f"reading {self.path} ({self.rows:,} rows)")

    def read(self, name: str) -> Any:
        """Column ``name`` as a pyarrow ChunkedArray (dictionaries for text), with no null cell."""
        import pyarrow as pa

        try:
            if self.kinds[name] == "labels":  # a list of dictionaries is read a row group at a time (pyarrow cannot
                chunks = [chunk for group in range(self.file.metadata.num_row_groups)  # chunk one across them)
                          for chunk in self.file.read_row_group(group, columns=[name]).column(name).chunks]
                column = pa.chunked_array(chunks, type=self.file.schema_arrow.field(name).type)
            else:
                column = self.file.read(columns=[name]).column(name)
        except Exception as exc:  # a damaged page: ArrowInvalid, OSError (decompression), thrift errors
            raise InputError(f"{self.path}: column {name!r} cannot be read ({_reason(exc)}); the file is damaged or "
                             "cut short: write the export again") from None
        if self.kinds[name] in ("integer", "float") and pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if len(column) != self.rows:
            raise InputError(f"{self.path}: column {name!r} has {len(column):,} cells for {self.rows:,} rows; the file "
                             "is damaged: write the export again")
        if column.null_count:
            cells = "cell" if column.null_count == 1 else "cells"
            raise InputError(f"{self.path}: column {name!r} has {column.null_count:,} empty (null) {cells}; "
                             f"{self.what} written by attnviz has none")
        if self.kinds[name] in _DICTIONARY:
            try:
                column.validate(full=True)  # text that is UTF-8, offsets within their buffers
            except pa.ArrowException as exc:
                raise InputError(f"{self.path}: column {name!r} is not valid text ({_reason(exc)}); write the "
                                 "export again") from None
        return column

    def strings(self, name: str) -> tuple[np.ndarray, list[str]]:
        """A text column as ``(each row's code [rows] int64, the distinct texts)``: each text made a Python string
        once, however many rows hold it."""
        return codes(self.read(name))

    def integers(self, name: str, low: int, high: int) -> np.ndarray:
        """An integer column as int64, every value from ``low`` to ``high`` − 1."""
        import pyarrow.compute as pc

        column = self.read(name)
        if len(column):
            bounds = pc.min_max(column).as_py()
            if bounds["min"] < low or bounds["max"] >= high:
                bad = bounds["min"] if bounds["min"] < low else bounds["max"]
                raise InputError(f"{self.path}: column {name!r} holds {bad}, outside {low} to {high - 1}; "
                                 f"{self.what} was not written by attnviz")
        return column.to_numpy().astype(np.int64, copy=False)

    def floats(self, name: str, where: Callable[[int], str] | None = None) -> np.ndarray:
        """A floating-point column as numpy (float32 or float64), every value finite and within :data:`MAX_VALUE`
        (``where(row)`` says where the first value that is not lies)."""
        values = self.read(name).to_numpy()
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(values) <= MAX_VALUE)  # NaN compares false: caught too
        if bad.any():
            row = int(np.argmax(bad))
            value = float(values[row])
            said = "NaN" if math.isnan(value) else f"{value:g}"
            at = f" ({where(row)})" if where is not None else f" (row {row})"
            raise InputError(f"{self.path}: column {name!r} holds {said}{at}; each value there is a finite number "
                             f"within ±{MAX_VALUE:g}: write the export again")
        return values


def codes(column: Any) -> tuple[np.ndarray, list[str]]:
    """A dictionary-read text column as ``(indices [rows] int64, its distinct values)``."""
    import pyarrow as pa

    if not pa.types.is_dictionary(column.type):  # a table whose schema already says dictionary reads as one
        import pyarrow.compute as pc

        column = pc.dictionary_encode(column)
    combined = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return combined.indices.to_numpy().astype(np.int64, copy=False), combined.dictionary.to_pylist()


def _checked_type(kind_of: Any, kind: str, path: Path, name: str) -> Any:
    """The column's arrow type (its values' type, for a dictionary), if it is of ``kind``."""
    import pyarrow as pa

    found = kind_of.value_type if pa.types.is_dictionary(kind_of) else kind_of
    text = pa.types.is_string(found) or pa.types.is_large_string(found)
    if kind == "integer":
        fits = pa.types.is_integer(found)
    elif kind == "float":
        fits = pa.types.is_float32(found) or pa.types.is_float64(found)
    elif kind == "string":
        fits = text
    else:
        fits = False
        if pa.types.is_list(found) or pa.types.is_large_list(found):
            inner = found.value_type
            inner = inner.value_type if pa.types.is_dictionary(inner) else inner
            fits = pa.types.is_string(inner) or pa.types.is_large_string(inner)
    if not fits:
        raise InputError(f"{path}: column {name!r} holds {kind_of}, not {_KINDS[kind]}; it was not written by "
                         "attnviz heads [[format=parquet]]: write the export again")
    return found


def _column_sizes(metadata: Any) -> tuple[dict[str, int], dict[str, int]]:
    """Per column path (``labels.list.element`` for a list's values), its uncompressed bytes and its values, summed
    over the row groups, from the footer."""
    sizes: dict[str, int] = {}
    values: dict[str, int] = {}
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for i in range(row_group.num_columns):
            chunk = row_group.column(i)
            path = chunk.path_in_schema
            sizes[path] = sizes.get(path, 0) + max(0, int(chunk.total_uncompressed_size))
            values[path] = values.get(path, 0) + max(0, int(chunk.num_values))
    return sizes, values


def _reason(exc: BaseException) -> str:
    """The first line of what pyarrow said, short."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return first if len(first) <= 120 else first[:117] + "..."

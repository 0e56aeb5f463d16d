"""Rows of numbers as files: CSV, or Parquet through pyarrow (the optional extra ``parquet``), written atomically."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import UsageError


def pyarrow() -> Any:
    """The pyarrow module, or a message saying how to get it (it is the optional extra ``parquet``)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet
    except ImportError:
        raise UsageError("Parquet needs pyarrow, which is not installed: pip install pyarrow (or pip install -e '.[parquet]' in attnviz's clone) "
                         "(or pip install pyarrow)") from None
    return pa


def csv_text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """``rows`` as CSV with a header of ``columns`` (None written empty)."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row[c] is None else row[c] for c in columns])
    return buffer.getvalue()


def write_text(path: Path, text: str) -> None:
    from .fileio import atomic_write

    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_rows(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """``rows`` to ``path``: CSV, or Parquet by its extension."""
    if path.suffix.lower() != ".parquet":
        write_text(path, csv_text(rows, columns))
        return
    from .fileio import atomic_write

    pa = pyarrow()
    table = pa.table({c: [row[c] for row in rows] for c in columns})
    atomic_write(path, lambda tmp: pa.parquet.write_table(table, tmp))

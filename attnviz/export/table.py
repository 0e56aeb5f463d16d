"""Head statistics as Parquet: ``heads.parquet``, one row per text × layer × head, and ``texts.parquet``.

``heads.parquet`` has the text's ``text_index`` and ``text_hash`` (as the manifest has them), the
model's ``layer`` number, the ``head``, every statistic of :data:`attnviz.analysis.statistics.STATISTICS` as a
float64 column, the ``labels`` a head earns and its ``sinks`` (key positions). ``texts.parquet``
has one row per text: ``text_index``, ``text_hash``, ``text``, ``n_tokens`` and ``model``. pandas,
polars, DuckDB and pyarrow read both directly; join them on ``text_index``.

An export writes each block of texts as one part (``heads-{first index:06d}.parquet``, the rows of
both tables together), listed with its items in the manifest like any other file: resume, shards
and merge handle parts as they handle npz files. The two tables are assembled from the parts of
the finished items at the end of every run and every merge, so they always match the manifest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import atomic_write
from ..tables import pyarrow

HEADS_TABLE = "heads.parquet"
TEXTS_TABLE = "texts.parquet"
PART = re.compile(r"heads-(\d{6})\.parquet")
TEXT_COLUMNS = ("text_index", "text_hash", "text", "n_tokens", "model")


def part_name(first: int) -> str:
    """The part holding the block whose first item has index ``first``."""
    return f"heads-{first:06d}.parquet"


@dataclass
class TextRows:
    """One text's statistics for the tables: its :class:`attnviz.analysis.heads.HeadTable` (``[layers, heads]``
    per statistic), the model's numbers of those layers, and each head's labels (layer-major)."""

    index: int
    hash: str
    text: str
    model: str
    n_tokens: int
    table: Any
    layers: list[int]
    labels: list[list[str]]


def _schema() -> Any:
    from ..analysis.statistics import STATISTICS

    pa = pyarrow()
    return pa.schema([
        ("text_index", pa.int64()), ("text_hash", pa.string()), ("layer", pa.int32()), ("head", pa.int32()),
        *((name, pa.float64()) for name in STATISTICS),
        ("labels", pa.list_(pa.string())), ("sinks", pa.list_(pa.int32())),
        ("text", pa.string()), ("n_tokens", pa.int32()), ("model", pa.string()),
    ])


def rows_table(texts: Iterable[TextRows]) -> Any:
    """One pyarrow table of every head of ``texts`` (layer-major, then head), with each text's columns
    repeated on its rows (a part; Parquet stores the repeats once per page, dictionary-encoded).
    Statistics keep their full float64 precision (the JSON rounds them to 6 places for reading)."""
    import numpy as np

    from ..analysis.statistics import STATISTICS

    schema = _schema()
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    for text in texts:
        n_layers, n_heads = text.table.shape
        count = n_layers * n_heads
        for name, value in (("text_index", text.index), ("text_hash", text.hash), ("text", text.text),
                            ("n_tokens", text.n_tokens), ("model", text.model)):
            columns[name].append(np.full(count, value, dtype=object if isinstance(value, str) else np.int64))
        columns["layer"].append(np.repeat(np.asarray(text.layers, dtype=np.int32), n_heads))
        columns["head"].append(np.tile(np.arange(n_heads, dtype=np.int32), n_layers))
        for name in STATISTICS:
            columns[name].append(text.table.stats[name].double().flatten().numpy())
        columns["labels"].append(text.labels)
        sinks = text.table.sinks or {}
        columns["sinks"].append([sinks.get((layer, head), []) for layer in range(n_layers) for head in range(n_heads)])
    pa = pyarrow()
    arrays = []
    for field in schema:
        parts = columns[field.name]
        if field.name in ("labels", "sinks"):
            arrays.append(pa.array([v for part in parts for v in part], type=field.type))
        else:
            joined = np.concatenate(parts) if parts else np.zeros(0)
            arrays.append(pa.array(joined, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def write_table(table: Any, path: Path) -> Path:
    """``table`` to ``path`` as Parquet (zstd), atomically: a reader never sees half a file."""
    import pyarrow.parquet as pq

    atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
    return path


def write_part(out_dir: Path, first: int, texts: list[TextRows]) -> str:
    """The block starting at item ``first`` as one part in ``out_dir``; returns its file name."""
    name = part_name(first)
    write_table(rows_table(texts), out_dir / name)
    return name


def split(rows: Any) -> tuple[Any, Any]:
    """Head rows with their texts' columns → (``heads`` table, ``texts`` table), sorted by text, layer, head."""
    import numpy as np

    rows = rows.sort_by([("text_index", "ascending"), ("layer", "ascending"), ("head", "ascending")])
    heads = rows.drop_columns(["text", "n_tokens", "model"])
    index = rows.column("text_index").to_numpy()
    first = np.flatnonzero(np.r_[True, index[1:] != index[:-1]]) if len(index) else np.zeros(0, dtype=np.int64)
    return heads, rows.select(list(TEXT_COLUMNS)).take(first)


def assemble(folder: Path, entries: dict[int, dict[str, Any]], out: Path | None = None) -> list[Path]:
    """``heads.parquet`` and ``texts.parquet`` in ``out`` (default ``folder``) from the parts in
    ``folder`` that the finished ``entries`` (manifest entries by index) list, with their rows only."""
    import pyarrow.parquet as pq

    pa = pyarrow()
    finished = {index for index, entry in entries.items() if entry.get("status") == "ok"}
    parts = sorted({name for index in finished for name in entries[index].get("files", []) if PART.fullmatch(name)})
    tables = []
    for name in parts:
        try:
            tables.append(pq.read_table(folder / name, schema=_schema()))
        except (OSError, pa.ArrowInvalid) as exc:
            raise InputError(f"cannot read {folder / name} ({exc}); rerun the export to write it again") from None
    rows = pa.concat_tables(tables) if tables else _schema().empty_table()
    import pyarrow.compute as pc

    keep = pc.is_in(rows.column("text_index"), value_set=pa.array(sorted(finished), type=pa.int64()))
    heads, texts = split(rows.filter(keep))
    target = folder if out is None else out
    return [write_table(heads, target / HEADS_TABLE), write_table(texts, target / TEXTS_TABLE)]

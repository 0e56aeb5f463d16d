"""An export's per-head tables read as arrays: ``heads.parquet`` (every statistic) and ``importance.parquet``
(each text's head importance), one row per text × layer × head, placed in ``[texts, layers, heads]`` by
each row's keys with whole-column numpy (no sort, no loop over rows): what the atlas and the diff of two
exports read."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from .table_check import MAX_KEY, MAX_LABELS, TableFile, codes

KEYS = ["text_index", "layer", "head"]
IMPORTANCE_TABLE = "importance.parquet"


@dataclass
class HeadsTable:
    """An export's ``heads.parquet`` as arrays: ``values[statistic]`` ``[texts, layers, heads]``, the texts in
    ``text_index`` order (``indices``); ``labels``: the table's key and ``labels`` columns, where asked for."""

    path: Path
    stats: list[str]
    layers: list[int]
    n_heads: int
    indices: np.ndarray
    values: dict[str, np.ndarray]
    labels: object = None
    hashes: np.ndarray | None = None  # each text's text_hash (the table's column), in ``indices`` order


def read_heads(folder: str | Path, *, labels: bool = False) -> HeadsTable:
    """The head statistics of the export in ``folder`` (or a ``heads.parquet`` path), one row per text × layer ×
    head checked. Only the columns needed are read, one at a time, each checked (:mod:`.table_check`: types,
    nulls, ranges, finite statistics) after the footer's sizes were checked against the memory budget; each
    row's place in ``[texts, layers, heads]`` is computed from its keys and its values scattered there
    (whole-column numpy, no sort and no loop over rows)."""
    from ..analysis.statistics import STATISTICS
    from ..export.table import HEADS_TABLE

    folder = Path(folder)
    path = folder / HEADS_TABLE if folder.is_dir() else folder
    if not path.exists():
        raise InputError(f"{path} does not exist; give the folder of an export with the parquet format, which "
                         f"holds {HEADS_TABLE}")
    wanted = {**{k: "integer" for k in KEYS}, **{s: "float" for s in STATISTICS}, "text_hash": "string",
              **({"labels": "labels"} if labels else {})}
    table = TableFile(path, HEADS_TABLE, wanted, optional=[*STATISTICS, "text_hash", "labels"])
    stats = [s for s in STATISTICS if s in table.names]
    if not stats:
        raise InputError(f"{path} holds no head statistics (no column of {', '.join(STATISTICS)}); give the "
                         "heads.parquet of an export with the parquet format")
    # the keys, labels and hashes held while the statistics are read one at a time, each kept as [texts, layers, heads]
    table.check_memory([n for n in table.names if n not in stats] + stats[:1], extra=table.rows * 8 * len(stats))
    grid = Grid.of(table)
    values = {name: grid.scatter(table.floats(name, grid.where)) for name in stats}
    hashes = grid.hashes(table) if "text_hash" in table.names else None
    kept = grid.labels(table) if "labels" in table.names else None
    return HeadsTable(path, stats, grid.layers, grid.n_heads, grid.indices, values, kept, hashes)


class Grid:
    """Where each row of a table of one row per text × layer × head (checked) lies in ``[texts, layers, heads]``."""

    def __init__(self, path: Path, text: np.ndarray, layer: np.ndarray, head: np.ndarray) -> None:
        self.path, self.text, self.layer, self.head = path, text, layer, head
        rows = len(text)
        if rows == 0:
            raise InputError(f"{path} has no rows")
        self.indices, self.first, self.text_position = np.unique(text, return_index=True, return_inverse=True)
        layers, layer_position = np.unique(layer, return_inverse=True)
        self.layers = [int(x) for x in layers]
        self.n_heads = int(head.max()) + 1
        self.shape = (len(self.indices), len(layers), self.n_heads)
        cells = math.prod(self.shape)
        self.place = (self.text_position * len(layers) + layer_position) * self.n_heads + head  # each row's cell, flat
        if cells != rows or not (np.bincount(self.place, minlength=cells) == 1).all():
            raise InputError(f"{path} has {rows} rows, not one per text × layer × head ({self.shape[0]} × "
                             f"{self.shape[1]} × {self.shape[2]}); was it assembled from a finished export?")

    @classmethod
    def of(cls, table: TableFile) -> Grid:
        """The keys of ``table`` read and checked: text_index from 0, layer and head from 0 to MAX_INDEX − 1."""
        from ..limits import MAX_INDEX

        return cls(table.path, table.integers("text_index", 0, MAX_KEY), table.integers("layer", 0, MAX_INDEX),
                   table.integers("head", 0, MAX_INDEX))

    def where(self, row: int) -> str:
        return f"text {self.text[row]}, layer {self.layer[row]}, head {self.head[row]}"

    def scatter(self, column: np.ndarray) -> np.ndarray:
        """One value per row as ``[texts, layers, heads]``."""
        values = np.empty(column.shape, column.dtype)
        values[self.place] = column
        return values.reshape(self.shape)

    def hashes(self, table: TableFile) -> np.ndarray:
        """Each text's ``text_hash``, in ``indices`` order; refused where a text's rows say two."""
        code, names = table.strings("text_hash")
        mine = code[self.first]
        differ = code != mine[self.text_position]
        if differ.any():
            row = int(np.argmax(differ))
            raise InputError(f"{self.path}: column 'text_hash' gives text {self.text[row]} two hashes; its rows "
                             "come from two exports: write the export again")
        return np.asarray([names[c] for c in mine], dtype=object)

    def labels(self, table: TableFile) -> object:
        """The ``layer``, ``head`` and ``labels`` columns as one pyarrow table, no label empty (null), at most
        :data:`~.table_check.MAX_LABELS` different ones."""
        import pyarrow as pa
        import pyarrow.compute as pc

        column = table.read("labels")
        flat = pc.list_flatten(column)
        if flat.null_count:
            raise InputError(f"{self.path}: column 'labels' holds {flat.null_count:,} empty (null) labels; "
                             f"{table.what} written by attnviz has none")
        distinct = len(np.unique(codes(flat)[0])) if len(flat) else 0
        if distinct > MAX_LABELS:
            raise InputError(f"{self.path}: column 'labels' holds {distinct:,} different labels, more than the "
                             f"{MAX_LABELS} a table of attnviz's has room for; write the export again")
        return pa.table({"layer": self.layer, "head": self.head, "labels": column})


def importance_values(folder: str | Path, heads: HeadsTable) -> dict[str, np.ndarray]:
    """From an export folder's ``importance.parquet`` (``attnviz heads --importance``), where there: each text's
    ``importance`` per head scaled as the heads table scales the mean (Michel et al.: per layer, by the ℓ2 norm of
    the layer's mean importances, so each head's mean over the texts is its normalised importance) and, with
    an ablation, each text's ``ablation`` (the loss change), as ``[texts, layers, heads]`` arrays on ``heads``'s
    texts; empty without that table. Read and checked as the heads table is."""
    path = Path(folder) / IMPORTANCE_TABLE
    if not (Path(folder).is_dir() and (path.exists() or path.is_symlink())):
        return {}
    table = TableFile(path, IMPORTANCE_TABLE, {**{k: "integer" for k in KEYS}, "importance": "float",
                                               "ablation": "float"}, optional=["importance", "ablation"])
    names: list[str] = [n for n in ("importance", "ablation") if n in table.names]
    table.check_memory(KEYS + names[:1], extra=table.rows * 8 * len(names))
    grid = Grid.of(table)
    if grid.layers != heads.layers or grid.n_heads != heads.n_heads or not np.array_equal(grid.indices, heads.indices):
        raise InputError(f"{path} does not cover the texts, layers and heads of {heads.path}: write both in one "
                         "export, with importance, as Parquet")
    values = {name: grid.scatter(table.floats(name, grid.where)) for name in names}
    if "importance" in values:
        norm = np.linalg.norm(values["importance"].mean(axis=0), axis=1, keepdims=True)  # [layers, 1]
        values["importance"] = values["importance"] / np.where(norm > 0, norm, 1.0)
    return values


def importance_loss(folder: str | Path) -> tuple[str, str]:
    """The loss an export's ``importance.parquet`` took: its objective and the text it compared with (its
    schema's metadata), ``("", "")`` where the export has no importance."""
    path = Path(folder) / IMPORTANCE_TABLE
    if not (path.exists() or path.is_symlink()):
        return "", ""
    table = TableFile(path, IMPORTANCE_TABLE, {})
    meta = table.file.schema_arrow.metadata or {}
    said = []
    for key in (b"objective", b"vs"):
        try:
            said.append(meta.get(key, b"").decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(f"{path}: its metadata's {key.decode()!r} is not UTF-8 text; write the export "
                             "again") from None
    return said[0], said[1]

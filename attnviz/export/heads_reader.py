"""An export's per-head tables read as arrays: ``heads.parquet`` (every statistic) and ``importance.parquet``
(each text's head importance), one row per text × layer × head, placed in ``[texts, layers, heads]`` by
each row's keys with whole-column numpy (no sort, no loop over rows): what the atlas and the diff of two
exports read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

KEYS = ["text_index", "layer", "head"]


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
    head checked. Only the columns needed are read; each row's place in ``[texts, layers, heads]`` is computed
    from its keys and its values scattered there (whole-column numpy, no sort and no loop over rows)."""
    from ..analysis.statistics import STATISTICS
    from ..export.table import HEADS_TABLE, pyarrow

    pyarrow()
    import pyarrow.parquet as pq

    folder = Path(folder)
    path = folder / HEADS_TABLE if folder.is_dir() else folder
    if not path.is_file():
        raise InputError(f"{path} does not exist; give the folder of an export with the parquet format, which "
                         f"holds {HEADS_TABLE}")
    names = pq.read_schema(path).names
    stats = [s for s in STATISTICS if s in names]
    if not stats or not set(KEYS) <= set(names):
        raise InputError(f"{path} holds no head statistics")
    extra = (["labels"] if labels and "labels" in names else []) + (["text_hash"] if "text_hash" in names else [])
    table = pq.read_table(path, columns=KEYS + stats + extra)
    indices, layers, n_heads, values = cells(table, stats, path)
    hashes = None
    if "text_hash" in names:  # one row of each text gives its hash
        first = np.unique(table["text_index"].to_numpy(), return_index=True)[1]
        hashes = np.asarray(table["text_hash"].take(first).to_pylist(), dtype=object)
    kept = table.select(["layer", "head", "labels"]) if labels and "labels" in names else None
    return HeadsTable(path, stats, layers, n_heads, indices, values, kept, hashes)


def cells(table: object, columns: list[str], path: Path) -> tuple[np.ndarray, list[int], int, dict[str, np.ndarray]]:
    """A table of one row per text × layer × head (checked) as ``[texts, layers, heads]`` arrays per column: each
    row's place is computed from its keys and its value scattered there (whole-column numpy, no sort)."""
    if table.num_rows == 0:  # type: ignore[attr-defined]
        raise InputError(f"{path} has no rows")
    text, layer, head = (table[k].to_numpy() for k in KEYS)  # type: ignore[index]
    indices, text_position = np.unique(text, return_inverse=True)
    layers, layer_position = np.unique(layer, return_inverse=True)
    n_heads = int(head.max()) + 1
    shape = (len(indices), len(layers), n_heads)
    place = (text_position * len(layers) + layer_position) * n_heads + head  # each row's cell, flat
    if table.num_rows != np.prod(shape) or head.min() < 0 or \
            not (np.bincount(place, minlength=int(np.prod(shape))) == 1).all():  # type: ignore[attr-defined]
        raise InputError(f"{path} has {table.num_rows} rows, not one per text × layer × head "  # type: ignore[attr-defined]
                         f"({shape[0]} × {shape[1]} × {shape[2]}); was it assembled from a finished export?")
    values = {}
    for name in columns:
        column = table[name].to_numpy(zero_copy_only=False)  # type: ignore[index]
        values[name] = np.empty(column.shape, column.dtype)
        values[name][place] = column
        values[name] = values[name].reshape(shape)
    return indices, [int(x) for x in layers], n_heads, values


def importance_values(folder: str | Path, heads: HeadsTable) -> dict[str, np.ndarray]:
    """From an export folder's ``importance.parquet`` (``attnviz heads --importance``), where there: each text's
    ``importance`` per head scaled as the heads table scales the mean (Michel et al.: per layer, by the ℓ2 norm of
    the layer's mean importances, so each head's mean over the texts is its normalised importance) and, with
    an ablation, each text's ``ablation`` (the loss change), as ``[texts, layers, heads]`` arrays on ``heads``'s
    texts; empty without that table."""
    import pyarrow.parquet as pq

    path = Path(folder) / "importance.parquet"
    if not (Path(folder).is_dir() and path.is_file()):
        return {}
    names = [n for n in ("importance", "ablation") if n in pq.read_schema(path).names]
    indices, layers, n_heads, values = cells(pq.read_table(path, columns=KEYS + names), names, path)
    if layers != heads.layers or n_heads != heads.n_heads or not np.array_equal(indices, heads.indices):
        raise InputError(f"{path} does not cover the texts, layers and heads of {heads.path}: write both in one "
                         "export, with importance, as Parquet")
    if "importance" in values:
        norm = np.linalg.norm(values["importance"].mean(axis=0), axis=1, keepdims=True)  # [layers, 1]
        values["importance"] = values["importance"] / np.where(norm > 0, norm, 1.0)
    return values

"""A needle run's head scores as table columns, for ``heads --retrieval`` and the atlas: read from the run's
JSON (``attnviz needle --out RUN.json``) or its heads table (``.csv``, ``.parquet``)."""

from __future__ import annotations

import csv
import io
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import InputError
from ..labels import head_name
from ..limits import MAX_INDEX
from .result import MAX_HEADS
from .scores import RETRIEVAL_HEAD_FROM

COLUMNS = ("retrieval_score", "reasoning_score")
LABEL = "retrieval"


@dataclass
class RetrievalColumns:
    """Each head's two scores (``[layers, heads]``), the model they were measured on, and the label rule."""

    model_name: str | None
    columns: dict[str, Tensor]

    @property
    def shape(self) -> tuple[int, int]:
        first = self.columns[COLUMNS[0]]
        return int(first.shape[0]), int(first.shape[1])

    def check_layers(self, model_layers: int, model_name: str) -> None:
        """Refuse scores of a model with another number of layers than ``model_layers`` (before it runs)."""
        n_layers, heads = self.shape
        if n_layers != model_layers:
            raise InputError(f"the retrieval scores are of a model with {n_layers} layers × {heads} heads "
                             f"({self.model_name or 'unnamed'}); {model_name} has {model_layers} layers: give the "
                             "needle run of the same model")

    def for_layers(self, layers: list[int], n_heads: int, model_name: str,
                   model_layers: int | None = None) -> dict[str, Tensor]:
        """The columns of the table's ``layers`` (the model's numbers), checked to be the same model's shape:
        ``model_layers``, the model's number of layers where it is known (not a saved result's or an export's that
        may hold only some)."""
        if model_layers is not None:
            self.check_layers(model_layers, model_name)
        n_layers, heads = self.shape
        if heads != n_heads or any(not 0 <= layer < n_layers for layer in layers):
            raise InputError(f"the retrieval scores are of a model with {n_layers} layers × {heads} heads "
                             f"({self.model_name or 'unnamed'}); {model_name}'s table has layers "
                             f"{layers[0]}–{layers[-1]} × {n_heads} heads: give the needle run of the same model")
        index = torch.tensor(layers)
        return {name: values[index] for name, values in self.columns.items()}

    def attach(self, table: Any, model_layers: int | None = None) -> None:
        """Add the two columns and the ``retrieval`` label to a head table (:class:`attnviz.analysis.heads.HeadTable`)
        of the same model (checked: ``model_layers`` where the model's are known)."""
        n_layers, n_heads = table.shape
        table.stats.update(self.for_layers(table.layers or list(range(n_layers)), n_heads, table.model_name,
                                           model_layers))
        table.extra_labels.update(self.labels())

    @staticmethod
    def labels() -> dict[str, tuple[str, float]]:
        """label → (column, threshold): the paper's retrieval heads."""
        return {LABEL: (COLUMNS[0], RETRIEVAL_HEAD_FROM)}


def read_retrieval(path: str | Path) -> RetrievalColumns:
    """The scores of a needle run: its JSON, or its heads table as CSV or Parquet (columns layer, head,
    retrieval_score, reasoning_score). Read as untrusted input: every size is checked before anything is built
    from it (at most :data:`~.result.MAX_HEADS` heads)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".json", ".csv", ".parquet"):
        raise InputError(f"{path}: a needle run is read from .json, .csv or .parquet")
    if not (path.exists() or path.is_symlink()):
        raise InputError(f"{path} does not exist; give the .json, .csv or .parquet that attnviz's needle command "
                         "wrote")
    if suffix == ".json":
        from .result import NeedleResult

        result = NeedleResult.load(path)
        return RetrievalColumns(result.model_name, {
            "retrieval_score": torch.tensor(result.retrieval_scores(), dtype=torch.float64),
            "reasoning_score": torch.tensor(result.reasoning_scores(), dtype=torch.float64)})
    if suffix == ".csv":
        return _read_csv(path)
    return _read_parquet(path)


MAX_FIELD = 128 << 10  # characters of one field of a needle run's CSV (csv's own default): its fields are numbers


def _read_csv(path: Path) -> RetrievalColumns:
    from ..limits import read_small

    try:
        text = read_small(path, what="the retrieval table").decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; give the .csv that attnviz's needle command wrote") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None
    reader = csv.reader(io.StringIO(text))
    # csv's field limit is one setting of the whole process (a file of texts raises it): a needle table's fields
    # are numbers, so this read holds its own bound, and puts the process's back after.
    before = csv.field_size_limit(MAX_FIELD)
    layers, heads = array("q"), array("q")
    scores = {name: array("d") for name in COLUMNS}
    try:
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path} holds no heads")
        where = _columns_at(header, path)
        for row in reader:
            if not row:
                continue
            if len(layers) >= MAX_HEADS:
                raise InputError(f"{path} has more than {MAX_HEADS:,} rows: more heads than any model has")
            if len(row) != len(header):
                raise InputError(f"{path}: line {reader.line_num} has {len(row)} fields, not the header's "
                                 f"{len(header)}")
            layers.append(_index(row[where["layer"]], path))
            heads.append(_index(row[where["head"]], path))
            for name in COLUMNS:
                scores[name].append(_number(row[where[name]], path))
    except csv.Error as exc:
        raise InputError(f"{path}: line {reader.line_num} is not a heads table's row ({exc}); a needle run's "
                         "table holds numbers: give the .csv that attnviz's needle command wrote") from None
    finally:
        csv.field_size_limit(before)
    return _from_columns(np.asarray(layers, dtype=np.int64), np.asarray(heads, dtype=np.int64),
                         {name: np.asarray(values, dtype=np.float64) for name, values in scores.items()}, path)


def _columns_at(header: list[str], path: Path) -> dict[str, int]:
    missing = [c for c in ("layer", "head", *COLUMNS) if c not in header]
    if missing:
        raise InputError(f"{path} has no column {missing[0]}; write it with attnviz's needle command")
    return {c: header.index(c) for c in ("layer", "head", *COLUMNS)}


def _index(text: str, path: Path) -> int:
    """A layer's or head's number, from 0 to :data:`~attnviz.limits.MAX_INDEX`."""
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{path}: a layer, head or score is not a number") from None
    if not 0 <= value < MAX_INDEX:
        raise InputError(f"{path}: layer or head {value} is no model's (from 0 to {MAX_INDEX - 1:,})")
    return value


def _number(text: str, path: Path) -> float:
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{path}: a layer, head or score is not a number") from None


def _read_parquet(path: Path) -> RetrievalColumns:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"reading {path} needs pyarrow: pip install pyarrow (or pip install -e '.[parquet]' in attnviz's clone)") from None
    import pyarrow as pa

    from ..limits import MAX_SMALL_FILE, check_regular, human

    try:
        info = check_regular(path, "the retrieval table")
    except FileNotFoundError:
        raise InputError(f"{path} does not exist; give the .parquet that attnviz's needle command wrote") from None
    if info.st_size > MAX_SMALL_FILE:
        raise InputError(f"{path} is {human(info.st_size)}, more than the {human(MAX_SMALL_FILE)} a needle run's "
                         "heads table may be")
    try:
        with pq.ParquetFile(path) as parquet:  # its footer only: the rows and types, before any column is read
            schema, rows = parquet.schema_arrow, parquet.metadata.num_rows
            if rows > MAX_HEADS:
                raise InputError(f"{path} has {rows:,} rows: more heads than any model has (at most {MAX_HEADS:,})")
            for name in ("layer", "head", *COLUMNS):
                at = schema.get_field_index(name)
                if at < 0:
                    raise InputError(f"{path} has no column {name}; write it with attnviz's needle command")
                kind = schema.field(at).type
                if not (pa.types.is_integer(kind) or (name in COLUMNS and pa.types.is_floating(kind))):
                    raise InputError(f"{path}: column {name} holds {kind}, not "
                                     f"{'numbers' if name in COLUMNS else 'whole numbers'}; write it with attnviz's "
                                     "needle command")
            table = parquet.read(columns=["layer", "head", *COLUMNS])
    except InputError:
        raise
    except Exception as exc:  # pyarrow's errors are many types: a damaged or foreign file
        raise InputError(f"{path} is not a needle run's heads table ({type(exc).__name__}: "
                         f"{(str(exc).splitlines() or [''])[0][:160]})") from None
    if table.num_rows != rows or any(table.column(name).null_count for name in table.column_names):
        raise InputError(f"{path}: a layer, head or score is missing (null)")
    layers, heads = (table.column(name).to_numpy().astype(np.int64) for name in ("layer", "head"))
    if (layers < 0).any() or (heads < 0).any() or (layers >= MAX_INDEX).any() or (heads >= MAX_INDEX).any():
        raise InputError(f"{path}: a layer or head is no model's (from 0 to {MAX_INDEX - 1:,})")
    return _from_columns(layers, heads, {name: table.column(name).to_numpy().astype(np.float64) for name in COLUMNS},
                         path)


def _from_columns(layers: np.ndarray, heads: np.ndarray, scores: dict[str, np.ndarray], path: Path) -> RetrievalColumns:
    """The ``[layers, heads]`` grids of rows that name every head once (layers and heads from 0 to MAX_INDEX)."""
    if not len(layers):
        raise InputError(f"{path} holds no heads")
    n_layers, n_heads = int(layers.max()) + 1, int(heads.max()) + 1
    if len(layers) != n_layers * n_heads or n_layers * n_heads > MAX_HEADS:
        raise InputError(f"{path}: the rows are not every head of {n_layers} layers × {n_heads} heads once")
    flat = layers * n_heads + heads
    if len(np.unique(flat)) != len(flat):
        raise InputError(f"{path}: a head appears twice and another not at all")
    columns = {}
    for name, values in scores.items():
        bad = ~(np.isfinite(values) & (values >= 0))
        if bad.any():
            row = int(np.argmax(bad))
            raise InputError(f"{path}: {name} of {head_name(int(layers[row]), int(heads[row]))} is {values[row]}, "
                             "not a finite number ≥ 0")
        grid = np.empty(n_layers * n_heads, dtype=np.float64)
        grid[flat] = values
        columns[name] = torch.from_numpy(grid.reshape(n_layers, n_heads))
    return RetrievalColumns(None, columns)

"""A needle run's head scores as table columns, for ``heads --retrieval`` and the atlas: read from the run's
JSON (``attnviz needle --out RUN.json``) or its heads table (``.csv``, ``.parquet``)."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..errors import InputError
from ..labels import head_name
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

    def for_layers(self, layers: list[int], n_heads: int, model_name: str) -> dict[str, Tensor]:
        """The columns of the table's ``layers`` (the model's numbers), checked to be the same model's shape."""
        n_layers, heads = self.shape
        if heads != n_heads or any(not 0 <= layer < n_layers for layer in layers):
            raise InputError(f"the retrieval scores are of a model with {n_layers} layers × {heads} heads "
                             f"({self.model_name or 'unnamed'}); {model_name}'s table has layers "
                             f"{layers[0]}–{layers[-1]} × {n_heads} heads: give the needle run of the same model")
        index = torch.tensor(layers)
        return {name: values[index] for name, values in self.columns.items()}

    @staticmethod
    def labels() -> dict[str, tuple[str, float]]:
        """label → (column, threshold): the paper's retrieval heads."""
        return {LABEL: (COLUMNS[0], RETRIEVAL_HEAD_FROM)}


def read_retrieval(path: str | Path) -> RetrievalColumns:
    """The scores of a needle run: its JSON, or its heads table as CSV or Parquet (columns layer, head,
    retrieval_score, reasoning_score)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".json":
        from .result import NeedleResult

        result = NeedleResult.load(path)
        return RetrievalColumns(result.model_name, {
            "retrieval_score": torch.tensor(result.retrieval_scores(), dtype=torch.float64),
            "reasoning_score": torch.tensor(result.reasoning_scores(), dtype=torch.float64)})
    if suffix == ".csv":
        from ..limits import read_small

        try:
            rows = list(csv.DictReader(io.StringIO(read_small(path, what="the retrieval table").decode("utf-8"))))
        except UnicodeDecodeError:
            raise InputError(f"{path} is not UTF-8 text") from None
        return _from_rows(rows, path)
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(f"reading {path} needs pyarrow: pip install 'attnviz[parquet]'") from None
        from ..limits import check_regular

        check_regular(path, "the retrieval table")
        try:
            table = pq.read_table(path, columns=["layer", "head", *COLUMNS])
        except Exception as exc:  # pyarrow's errors are many types: a damaged or foreign file
            raise InputError(f"{path} is not a needle run's heads table ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:160]})") from None
        if table.num_rows > 1 << 20:
            raise InputError(f"{path} has {table.num_rows:,} rows: more heads than any model has")
        return _from_rows(table.to_pylist(), path)
    raise InputError(f"{path}: a needle run is read from .json, .csv or .parquet")


def _from_rows(rows: list[dict[str, object]], path: Path) -> RetrievalColumns:
    if not rows:
        raise InputError(f"{path} holds no heads")
    missing = [c for c in ("layer", "head", *COLUMNS) if c not in rows[0]]
    if missing:
        raise InputError(f"{path} has no column {missing[0]}; write it with attnviz's needle command")
    try:
        cells = [(int(str(r["layer"])), int(str(r["head"])), [float(str(r[c])) for c in COLUMNS]) for r in rows]
    except (TypeError, ValueError):
        raise InputError(f"{path}: a layer, head or score is not a number") from None
    n_layers = max(c[0] for c in cells) + 1
    n_heads = max(c[1] for c in cells) + 1
    if min(min(c[0], c[1]) for c in cells) < 0 or len(cells) != n_layers * n_heads or n_layers * n_heads > 1 << 20:
        raise InputError(f"{path}: the rows are not every head of {n_layers} layers × {n_heads} heads once")
    columns = {name: torch.full((n_layers, n_heads), math.nan, dtype=torch.float64) for name in COLUMNS}
    for layer, head, scores in cells:
        for name, value in zip(COLUMNS, scores, strict=True):
            if not math.isfinite(value) or value < 0:
                raise InputError(f"{path}: {name} of {head_name(layer, head)} is {value}, not a finite number ≥ 0")
            columns[name][layer, head] = value
    if any(bool(t.isnan().any()) for t in columns.values()):
        raise InputError(f"{path}: a head appears twice and another not at all")
    return RetrievalColumns(None, columns)

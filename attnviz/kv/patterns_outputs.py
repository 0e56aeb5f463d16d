"""The files a :class:`~attnviz.kv.patterns.PatternsResult` writes, as :mod:`attnviz.result_formats` registers
them: its JSON and its rows, one per head and budget (CSV, Parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLUMNS = ("budget", "layer", "head", "kv_head", "recall_a_shape", "recall_vertical_slash", "recall_block_sparse",
           "winner", "streaming_mass", "duo")


def write_json(result: Any, path: Path) -> None:
    from ..fileio import write_json as write

    write(path, result.to_dict())


def write_rows(result: Any, path: Path) -> None:
    from ..tables import write_rows as write

    write(path, result.rows(), COLUMNS)

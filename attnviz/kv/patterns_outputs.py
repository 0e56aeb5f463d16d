"""The files a :class:`~attnviz.kv.patterns.PatternsResult` writes, as :mod:`attnviz.result_formats` registers
them: its JSON and its rows, one per head and budget (CSV, Parquet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def columns() -> tuple[str, ...]:
    """The rows' columns: a recall column for every registered pattern (:mod:`attnviz.analysis.patterns_registry`)."""
    from ..analysis.patterns_registry import PATTERNS

    return ("budget", "layer", "head", "kv_head", *(f"recall_{p}" for p in PATTERNS), "winner", "streaming_mass",
            "duo")


def write_json(result: Any, path: Path) -> None:
    from ..fileio import write_json as write

    write(path, result.to_dict())


def write_rows(result: Any, path: Path) -> None:
    from ..tables import write_rows as write

    write(path, result.rows(), columns())

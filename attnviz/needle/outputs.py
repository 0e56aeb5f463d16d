"""The files a :class:`~attnviz.needle.result.NeedleResult` writes, as :mod:`attnviz.result_formats` registers
them: its JSON, its head table (CSV, Parquet), the grid's figure (PNG, SVG, PDF) and the page (HTML)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

HEAD_COLUMNS = ("rank", "layer", "head", "name", "retrieval_score", "reasoning_score", "retrieval")


def write_json(result: Any, path: Path) -> None:
    from ..fileio import write_json as write

    write(path, result.to_dict())


def write_rows(result: Any, path: Path) -> None:
    from ..tables import write_rows as write

    write(path, result.heads(), HEAD_COLUMNS)


def write_page(result: Any, path: Path) -> None:
    from ..render.needle_page import render_needle_page
    from .page import page_document

    render_needle_page(page_document(result), path)


def write_figure(result: Any, path: Path) -> None:
    from ..render.needle import needle_figure

    needle_figure(result.success(), result.lengths, result.depths, result.retrieval_scores(),
                  title=f"{result.model_name}: needle in a haystack ({result.engine})", path=path)

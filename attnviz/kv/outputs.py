"""The files a :class:`~attnviz.kv.result.KVResult` writes, as :mod:`attnviz.result_formats` registers them: its
JSON, its rows (CSV, Parquet), the curves of what each policy keeps (PNG, SVG, PDF) and the page (HTML)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROW_COLUMNS = ("policy", "budget", "layer", "kv_head", "kept", "recall", "error", "kl", "changed", "dropped")


def write_json(result: Any, path: Path) -> None:
    from ..fileio import write_json as write

    write(path, result.to_dict())


def write_rows(result: Any, path: Path) -> None:
    from ..tables import write_rows as write

    write(path, result.rows(), ROW_COLUMNS)


def write_page(result: Any, path: Path) -> None:
    from ..render.kv_page import render_kv_page
    from .page import page_document

    render_kv_page(page_document(result, result.need), path)


def write_figure(result: Any, path: Path) -> None:
    from ..render.kv import curves_figure

    curves: dict[str, list[tuple[float, float, float | None]]] = {}
    for run in sorted(result.runs, key=lambda r: (r.policy, sum(r.keys))):
        curves.setdefault(run.policy, []).append((sum(run.keys) / len(run.keys), run.recall, run.kl))
    curves_figure(curves, n_context=result.n_context, path=path,
                  title=f"{result.model_name}: what each policy keeps of {result.n_context:,} tokens")

"""Batch export over files of texts: batched, resumable, shardable. See ``attnviz export --help``.

Names are imported lazily: a drawing process imports ``attnviz.export.workers`` without loading
the pipeline (and torch) that ``run_export`` needs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MANIFEST", "ExportSettings", "ExportSummary", "build_settings", "merge", "run_export"]

_LAZY = {
    "MANIFEST": "manifest", "merge": "manifest", "ExportSummary": "run", "run_export": "run",
    "ExportSettings": "settings", "build_settings": "settings",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

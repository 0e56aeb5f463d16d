"""The numbers of a drawn view, as data: ``--out FILE.npz`` or ``--out FILE.json``.

What a command shows (rollout, attention flow, gradient-weighted attention, a heatmap…) is a
:class:`~attnviz.render.view.HeatmapView`; these write its matrices with everything needed to read
them: the labels of both axes, the panels' titles, what the values are and the notes. Numbers are
float64, as computed; nothing is rounded to the colour scale.

An ``.npz`` holds ``panels`` ``[P, Q, K]`` and string arrays (``row_labels``, ``col_labels``,
``panel_titles``, ``notes``) plus ``meta``, a JSON string; ``format`` is ``"attnviz-view"`` so that
:meth:`attnviz.result.AttentionResult.load` can tell it from a saved result.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import atomic_write
from .output import check_output_path

FORMAT = "attnviz-view"


def view_meta(view: Any) -> dict[str, Any]:
    """Everything about ``view`` but its matrices."""
    return {
        "format": FORMAT, "version": 1, "title": view.title, "value_name": view.value_name,
        "row_axis": view.row_axis, "col_axis": view.col_axis,
        "scale": {"vmin": _number(view.scale.vmin), "vmax": _number(view.scale.vmax), "cmap": view.scale.cmap},
    }


def write_view_npz(view: Any, path: str | os.PathLike[str], **_: Any) -> Path:
    """Write ``view``'s panels and labels to an ``.npz`` (``numpy.load`` reads it)."""
    path = check_output_path(path)
    arrays: dict[str, Any] = {  # names of the .npz members, for savez_compressed's **kwds
        "panels": np.asarray(view.panels, dtype=np.float64),
        "row_labels": np.array(view.row_labels, dtype=str),
        "col_labels": np.array(view.col_labels, dtype=str),
        "panel_titles": np.array(view.panel_titles, dtype=str),
        "notes": np.array(view.notes, dtype=str),
        "format": np.array(FORMAT),
        "meta": np.array(json.dumps(view_meta(view), ensure_ascii=False, allow_nan=False)),
    }

    def write(tmp: str) -> None:
        with open(tmp, "wb") as handle:  # a file object: numpy would append .npz to a bare name
            np.savez_compressed(handle, **arrays)

    return atomic_write(path, write)


def _number(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None  # JSON has no NaN or infinity


def write_view_json(view: Any, path: str | os.PathLike[str], **_: Any) -> Path:
    """Write ``view`` as JSON: ``panels`` is a list of matrices (rows of numbers; null where not finite)."""
    path = check_output_path(path)
    panels = np.asarray(view.panels, dtype=np.float64)
    document = {
        **view_meta(view),
        "panel_titles": list(view.panel_titles), "row_labels": list(view.row_labels),
        "col_labels": list(view.col_labels), "notes": list(view.notes),
        "panels": [[[_number(v) for v in row] for row in panel] for panel in panels.tolist()],
    }
    text = json.dumps(document, ensure_ascii=False, allow_nan=False)
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text + "\n", encoding="utf-8"))

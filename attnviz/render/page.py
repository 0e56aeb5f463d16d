"""What the interactive HTML page shows, as data: every head of every layer, compact.

A :class:`PageBuilder` takes layers as an engine computes them (``add_layer``), so a long input
never holds every layer's float matrices: each head is quantised at once (16 bits when the page
stays small, else 8: the colour scale has 256 steps, so either is invisible), gzipped and
base64-encoded, and the page's script decodes a head (with the browser's own
``DecompressionStream``) only when it is drawn. :func:`page_of_view` turns any
:class:`~attnviz.render.view.HeatmapView` (rollout, norms, one layer's grid) into a page too.
The page itself is written by :mod:`attnviz.render.html`.
"""

from __future__ import annotations

import base64
import gzip
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..labels import printable
from .page_views import PAGE_VIEWS

SIXTEEN_BITS_UP_TO = 4_000_000
"""Cells (heads × queries × keys) up to which a page stores 16-bit weights (to 1.5e-5); above, 8 bits."""


@dataclass
class Page:
    """Everything the page shows, JSON-ready (see :meth:`data`)."""

    title: str
    model: str
    kinds: dict[str, dict[str, Any]]  # kind → rows, cols, layers, heads, chunks [layer][head], vmax, bits
    stats: dict[str, Any] | None = None  # columns, rows (layer, head, values…, labels), descriptions
    qk: dict[str, Any] | None = None  # layer → head → q [n, d] and k [n, d] (query-key view)
    initial: dict[str, Any] = field(default_factory=dict)  # kind, layer, head, view shown first
    value_name: str = "attention weight"
    notes: list[str] = field(default_factory=list)
    live: dict[str, Any] | None = None  # attnviz serve: endpoint, text, and the extra fields (pair, target)
    extras: list[dict[str, Any]] = field(default_factory=list)  # other matrices (head distances): see add_matrix
    generation: dict[str, Any] | None = None  # a generated text's steps: attnviz.views.page_parts.generation_steps

    def add_matrix(self, name: str, values: Any, rows: list[str], cols: list[str], *, title: str = "",
                   value_name: str = "value", notes: list[str] | None = None) -> None:
        """Another matrix shown in its own tab (compare-heads' head distances), with a tooltip; a row or
        column named like ``L3H7`` opens that head when clicked."""
        array = np.asarray(values, dtype=np.float64)
        self.extras.append({"name": name, "title": title or name, "rows": list(rows), "cols": list(cols),
                            "values": [[float(f"{v:.4g}") for v in row] for row in array.tolist()],
                            "vmax": float(array.max(initial=0.0)), "valueName": value_name, "notes": list(notes or [])})

    def data(self, cmap: str = "viridis") -> dict[str, Any]:
        """The JSON the page's script reads, with the colour map as 256 RGB triples."""
        return {"title": self.title, "model": self.model, "kinds": self.kinds, "stats": self.stats, "qk": self.qk,
                "initial": self.initial, "valueName": self.value_name, "notes": self.notes, "live": self.live,
                "extras": self.extras, "generation": self.generation,
                "views": [view.script_data() for view in PAGE_VIEWS.values()],
                "cmap": colormap_table(cmap), "format": "attnviz-page", "version": 1}


class PageBuilder:
    """A :class:`Page` built one layer at a time (only compressed heads are kept)."""

    def __init__(self, title: str, model: str, *, cells: int) -> None:
        """``cells``: the heads × queries × keys the page will hold in all (chooses 8 or 16 bits)."""
        self.title, self.model = title, model
        self.bits = 16 if cells <= SIXTEEN_BITS_UP_TO else 8
        self.kinds: dict[str, dict[str, Any]] = {}

    def add_layer(self, layer: int, attentions: Any, *, rows: list[str], cols: list[str], kind: str = "self",
                  causal: bool = False, row_special: list[bool] | None = None,
                  col_special: list[bool] | None = None, breaks: list[int] | None = None) -> None:
        """One layer ``[heads, q, k]`` (a torch tensor or an array) of one kind of attention."""
        weights = np.asarray(attentions.float() if hasattr(attentions, "float") else attentions, dtype=np.float32)
        entry = self.kinds.setdefault(kind, {
            "rows": [printable(t) for t in rows], "cols": [printable(t) for t in cols],
            "rowSpecial": list(row_special or [False] * len(rows)),
            "colSpecial": list(col_special or [False] * len(cols)),
            "layers": [], "heads": int(weights.shape[0]), "chunks": [], "bits": self.bits, "vmax": 0.0,
            "causal": causal, "breaks": list(breaks or []), "scale": 1.0,
        })
        entry["layers"].append(int(layer))
        entry["chunks"].append([encode_matrix(head, self.bits) for head in weights])
        entry["vmax"] = max(entry["vmax"], float(weights.max(initial=0.0)))

    def finish(self, **extra: Any) -> Page:
        return Page(self.title, self.model, self.kinds, **extra)


def stats_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The page's head-statistics table from :meth:`attnviz.analysis.heads.HeadTable.rows` (layers as the model numbers them)."""
    from ..analysis.statistics import STATISTICS  # not at import: drawing processes never load torch

    columns = ["layer", "head", *STATISTICS]
    return {"columns": columns, "rows": [[row[c] for c in columns] + [row["labels"]] for row in rows],
            "descriptions": {name: statistic.description for name, statistic in STATISTICS.items()}}


def encode_matrix(matrix: np.ndarray, bits: int) -> str:
    """One head: weights in [0, 1] as unsigned integers (little-endian), gzipped, base64."""
    top = (1 << bits) - 1
    scaled = np.rint(np.clip(matrix, 0.0, 1.0) * top)
    raw = scaled.astype("<u2" if bits == 16 else "u1").tobytes()
    return base64.b64encode(gzip.compress(raw, compresslevel=6, mtime=0)).decode("ascii")


def decode_matrix(text: str, bits: int, shape: tuple[int, int]) -> np.ndarray:
    """The inverse of :func:`encode_matrix` (as the page's script does it), for tests and tools."""
    raw = gzip.decompress(base64.b64decode(text))
    values = np.frombuffer(raw, dtype="<u2" if bits == 16 else "u1").astype(np.float64)
    return (values / ((1 << bits) - 1)).reshape(shape)


def colormap_table(name: str) -> list[list[int]]:
    """256 RGB triples of a matplotlib colormap (the page draws with the same colours as the images)."""
    from matplotlib import colormaps

    table = colormaps[name](np.linspace(0.0, 1.0, 256))[:, :3]
    return np.rint(table * 255).astype(int).tolist()


def page_of_view(view: Any) -> Page:
    """A page of a :class:`~attnviz.render.view.HeatmapView`: its panels as the heads of one layer
    (rollout, norm-based attention, a grid of heads or of layers), values scaled into [0, 1] by the
    view's colour scale, which the page shows."""
    panels = np.asarray(view.panels, dtype=np.float64)
    low = min(float(view.scale.vmin), 0.0)  # below zero only for signed values (attention × gradient)
    span = view.scale.vmax - low if view.scale.vmax > low else 1.0
    builder = PageBuilder(view.title, view.title.split(" · ")[0], cells=int(panels.size))
    builder.add_layer(0, np.clip((panels - low) / span, 0.0, 1.0), rows=view.row_labels, cols=view.col_labels,
                      breaks=view.row_breaks)
    page = builder.finish(initial={"view": "matrix", "layer": 0, "head": 0}, value_name=view.value_name,
                          notes=list(view.notes))
    kind = page.kinds["self"]
    kind["panelTitles"] = list(view.panel_titles)
    # The page reads a value as offset + stored · scale and colours it from offset to vmax, as the view's scale.
    kind["scale"], kind["offset"], kind["vmax"] = float(span), low, float(low + span)
    return page

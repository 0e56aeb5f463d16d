"""What the interactive HTML page shows, as data: every head of every layer, compact.

A :class:`PageBuilder` takes layers as an engine computes them, whole or a block of query rows at a
time, so a long input never holds a layer's float matrices: each head becomes a pyramid of tiles
(:mod:`attnviz.render.pyramid`: the whole matrix max-pooled into one tile, then finer levels down
to single cells), encoded at once, within a budget of bytes that leaves out the finest levels of
a long input and says so. The page's script decodes a tile (with the browser's own
``DecompressionStream``) only when it is drawn. :func:`page_of_view` turns any
:class:`~attnviz.render.view.HeatmapView` (rollout, norms, one layer's grid) into a page too.
The page itself is written by :mod:`attnviz.render.html`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..labels import printable
from .page_views import PAGE_VIEWS
from .pyramid import FLOAT16_CELLS, TILE, Geometry, LayerPyramid, decode_tile, encode_lines, encode_tile, tiles_of

PAGE_BUDGET = 24_000_000
"""Bytes of tiles a page holds at most, by default: finer levels of a long input's matrix are left out."""

LEAVES_ALWAYS = 512
"""Tokens up to which a page holds every single cell whatever its budget (the head view draws them)."""

LINES = 4
"""Each query's strongest keys a long input's page holds (up to), for the head view's lines."""

LINES_BUDGET = 16_000_000
"""Bytes (before compression) of those lines a page holds at most: fewer keys a query on a long input
of many heads, none where even one would not fit (the head view says so)."""

WORKING_CELLS = 64_000_000
"""Cells of one layer's finest pooled level kept while a layer is read (256 MB of float32)."""

SinkMarker = Callable[[LayerPyramid, bool], Sequence[Sequence[int]]]
"""How a page's attention sinks are found: a layer's pyramid (its key columns' sums) and whether the layer is
causal → each head's sink keys. The statistics say what a sink is (:func:`attnviz.views.page_parts.page_sinks`);
the page draws what it is given."""


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
    held: dict[str, Any] = field(default_factory=dict, repr=False)  # kind → [layer][head] → every level's tiles kept
    tiles: dict[str, Any] | None = None  # attnviz serve: where the page asks for the tiles it does not hold
    left_out: list[str] = field(default_factory=list)  # what the page's budget left out (said unless a server has it)
    pictures: dict[str, Any] | None = None  # the pictures a model read, and each token's weights on their patches
    # (the picture view): attnviz.views.picture_page.picture_data

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
        served = ["the matrix's finer levels come from the server as you zoom in"] if self.left_out else []
        notes = self.notes + (served if self.tiles else self.left_out)
        return {"title": self.title, "model": self.model, "kinds": self.kinds, "stats": self.stats, "qk": self.qk,
                "initial": self.initial, "valueName": self.value_name, "notes": notes, "live": self.live,
                "extras": self.extras, "generation": self.generation, "tiles": self.tiles, "pictures": self.pictures,
                "views": [view.script_data() for view in PAGE_VIEWS.values()],
                "cmap": colormap_table(cmap), "format": "attnviz-page", "version": 1}


class PageBuilder:
    """A :class:`Page` built one layer at a time: each head's pyramid of tiles (only encoded tiles
    are kept), within a budget of bytes.

    A layer comes whole (:meth:`add_layer`) or as blocks of query rows: :meth:`start_layer` gives the
    :class:`~attnviz.render.pyramid.LayerPyramid` to add them to, :meth:`end_layer` encodes it. The
    levels kept are decided by what the first layer's tiles weigh: coarse to fine while the page,
    projected over ``layers`` layers, stays within ``budget`` bytes (a text of up to
    :data:`LEAVES_ALWAYS` tokens keeps every cell whatever it weighs)."""

    def __init__(self, title: str, model: str, *, cells: int, layers: int = 1, budget: int = PAGE_BUDGET,
                 hold: int = 0, sinks: SinkMarker | None = None) -> None:
        """``cells``: the heads × queries × keys of the page in all (half floats up to
        :data:`~attnviz.render.pyramid.FLOAT16_CELLS`, else a byte: see :meth:`encoding_of`);
        ``layers``: how many layers of each kind of attention it will hold; ``hold``: bytes of finer
        tiles to keep beyond the page's ``budget`` (a server answers them on request: :attr:`Page.held`);
        ``sinks``: how each layer's attention sinks are marked (None: none are, unless a layer is given its own)."""
        self.title, self.model, self.sinks = title, model, sinks
        self.encoding = "f16" if cells <= FLOAT16_CELLS else "log8"
        self.layers, self.budget, self.hold = max(1, layers), budget, max(budget, hold)
        self.kinds: dict[str, dict[str, Any]] = {}
        self._sizes: dict[str, list[int]] = {}  # kind → bytes of each level over the heads encoded so far
        self._heads_done: dict[str, int] = {}
        self._layer_bytes: dict[str, float | None] = {}  # kind → bytes of one layer's every level (None: not computed)

    def encoding_of(self, level: int, geometry: Geometry) -> str:
        """How a level's tiles are stored: half floats on a small page; else a byte, on a log scale for
        pooled levels and linear at the leaves (see :mod:`attnviz.render.pyramid`)."""
        if self.encoding == "f16":
            return "f16"
        return "lin8" if level == geometry.leaf else "log8"

    def start_layer(self, heads: int, *, rows: list[str], cols: list[str], kind: str = "self", causal: bool = False,
                    row_special: list[bool] | None = None, col_special: list[bool] | None = None,
                    breaks: list[int] | None = None, centre: float = 0.0) -> LayerPyramid:
        """The pyramid to add one layer's blocks of rows to (then :meth:`end_layer`)."""
        geometry = Geometry(len(rows), len(cols))
        entry = self.kinds.setdefault(kind, {
            "rows": [printable(t) for t in rows], "cols": [printable(t) for t in cols],
            "rowSpecial": list(row_special or [False] * len(rows)),
            "colSpecial": list(col_special or [False] * len(cols)),
            "layers": [], "heads": int(heads), "pyramids": [], "vmax": 0.0, "causal": causal,
            "breaks": list(breaks or []), "scale": 1.0, "offset": 0.0, "centre": float(centre),
            "tile": TILE, "levels": [{**level, "encoding": self.encoding_of(number, geometry)}
                                     for number, level in enumerate(geometry.script_data())],
            "encoding": self.encoding, "included": None, "held": None,
            "lines": self._lines_of(geometry, heads, centre),
        })
        held = entry["held"]
        finest = held - 1 if held is not None else self._first_finest(geometry, heads)
        return LayerPyramid(heads, len(rows), len(cols), finest=finest, centre=centre, lines=entry["lines"])

    def _lines_of(self, geometry: Geometry, heads: int, centre: float) -> int:
        """How many strongest keys a query the page holds: none where it holds every cell (the head view
        draws from them) or the values are not weights; else up to :data:`LINES`, within :data:`LINES_BUDGET`."""
        if max(geometry.rows, geometry.cols) <= LEAVES_ALWAYS or centre != 0:
            return 0
        return int(min(LINES, geometry.cols, LINES_BUDGET // (6 * heads * self.layers * geometry.rows)))

    def _first_finest(self, geometry: Geometry, heads: int) -> int:
        """The finest level worth computing before any tile was weighed: the first layer's tiles are
        weighed to decide what every layer keeps, so it goes as fine as :data:`WORKING_CELLS` allows
        while the pooled levels above (hopefully half a byte a cell) could fit one layer in the page.
        The leaves are not guessed at: a linear byte, mostly 0 over a long input, they may weigh a
        tenth of the level above them (3,450 tokens of 4 heads: 0.95 MB of leaves under 12 MB)."""
        if max(geometry.rows, geometry.cols) <= LEAVES_ALWAYS:
            return geometry.leaf
        finest, pooled = 0, 0
        for level in range(geometry.levels):
            if geometry.cells(level) * heads > WORKING_CELLS or pooled * heads * 0.5 > self.hold:
                break
            finest = level
            pooled += geometry.cells(level)
        return finest

    def end_layer(self, pyramid: LayerPyramid, layer: int, *, kind: str = "self",
                  sinks: Sequence[Sequence[int]] | None = None) -> None:
        """Encode one layer's pyramid (model layer number ``layer``), keeping the levels the budget allows;
        ``sinks``: each head's sink keys (default: the builder's marker finds them; none where the values are
        not weights)."""
        entry, levels, centre = self.kinds[kind], pyramid.levels(), pyramid.centre
        sizes = self._sizes.setdefault(kind, [0] * len(levels))
        if sinks is None:
            sinks = self.sinks(pyramid, entry["causal"]) if self.sinks is not None and centre == 0 else []
        col_max = pyramid.col_max_filled()
        heads = []
        for h in range(pyramid.heads):
            tiles = [tiles_of(grid[h], self.encoding_of(level, pyramid.geometry), centre)
                     for level, grid in enumerate(levels)]
            for level, found in enumerate(tiles[: len(sizes)]):
                sizes[level] += sum(len(text) for text in found.values())
            marked = np.asarray(sinks[h] if h < len(sinks) else [], dtype=int)
            rest = np.delete(col_max[h], marked)
            vmax = float(pyramid.row_max[h].max(initial=centre))
            heads.append({"tiles": tiles, "vmax": vmax, "sinks": [int(k) for k in marked],
                          "vmaxNoSinks": float(rest.max(initial=centre)) if rest.size else vmax,
                          "rowMax": encode_tile(pyramid.row_max[h][None, :], "f16")})
            if pyramid.lines:
                heads[-1]["lines"] = encode_lines(pyramid.line_keys[h], pyramid.line_weights[h])
        entry["layers"].append(int(layer))
        entry["pyramids"].append(heads)
        entry["vmax"] = max(entry["vmax"], *(head["vmax"] for head in heads))
        self._heads_done[kind] = self._heads_done.get(kind, 0) + pyramid.heads
        self._keep(kind, pyramid.geometry, pyramid.heads)

    def _keep(self, kind: str, geometry: Geometry, heads: int) -> None:
        """Decide (again) how many levels the page holds (``included``) and the builder keeps
        (``held``, for a server), and drop the finer ones already encoded."""
        entry, sizes = self.kinds[kind], self._sizes[kind]

        def within(budget: int) -> int:
            if max(geometry.rows, geometry.cols) <= LEAVES_ALWAYS:
                return len(sizes)
            total_heads = heads * max(self.layers, len(entry["layers"]))
            keep, spent = 1, sizes[0] / self._heads_done[kind] * total_heads
            for level in range(1, len(sizes)):
                spent += sizes[level] / self._heads_done[kind] * total_heads
                if spent > budget:
                    break
                keep = level + 1
            return keep

        if kind not in self._layer_bytes:  # the first layer: what one whole layer weighs, where every level was computed
            measured = len(sizes) == len(entry["levels"])
            self._layer_bytes[kind] = sum(sizes) / self._heads_done[kind] * heads if measured else None
        entry["held"] = within(self.hold) if entry["held"] is None else min(entry["held"], within(self.hold))
        entry["included"] = min(entry["held"], within(self.budget) if entry["included"] is None else
                                min(entry["included"], within(self.budget)))
        del sizes[entry["held"] :]
        for layer in entry["pyramids"]:
            for head in layer:
                del head["tiles"][entry["held"] :]

    def add_layer(self, layer: int, attentions: Any, *, rows: list[str], cols: list[str], kind: str = "self",
                  causal: bool = False, row_special: list[bool] | None = None, col_special: list[bool] | None = None,
                  breaks: list[int] | None = None, centre: float = 0.0,
                  sinks: Sequence[Sequence[int]] | None = None) -> None:
        """One whole layer ``[heads, q, k]`` (a torch tensor or an array) of one kind of attention (``sinks``:
        as :meth:`end_layer`'s)."""
        weights = np.asarray(attentions.float() if hasattr(attentions, "float") else attentions, dtype=np.float32)
        pyramid = self.start_layer(weights.shape[0], rows=rows, cols=cols, kind=kind, causal=causal,
                                   row_special=row_special, col_special=col_special, breaks=breaks, centre=centre)
        if weights.shape[1]:
            pyramid.add(0, weights)
        self.end_layer(pyramid, layer, kind=kind, sinks=sinks)

    def notes(self) -> list[str]:
        """What the page left out, in words, and what would hold it: a page of one layer only where one
        layer's every level was weighed and fits the budget."""
        out = []
        for kind, entry in self.kinds.items():
            if entry["included"] < len(entry["levels"]):
                factor = entry["levels"][entry["included"] - 1]["factor"]
                what = "" if len(self.kinds) == 1 else f"{kind}: "
                one_layer = self._layer_bytes.get(kind)
                fewer = "a page of one layer (view --layer) holds every cell, and " \
                    if len(entry["layers"]) > 1 and one_layer is not None and one_layer <= self.budget else ""
                out.append(f"{what}the matrix holds cells of down to {factor}×{factor} tokens (max-pooled); finer "
                           f"ones are left out to keep this page within {self.budget / 1e6:.3g} MB: {fewer}attnviz serve "
                           "computes single cells as you zoom in")
        return out

    def finish(self, **extra: Any) -> Page:
        """The page: each kind's tiles down to its ``included`` level; the finer ones kept (``hold``)
        in :attr:`Page.held`, which a server answers from and the page's data never carries."""
        kinds, held = {}, {}
        for name, entry in self.kinds.items():
            shown = entry["included"]
            kinds[name] = {**entry, "pyramids": [[{**head, "tiles": head["tiles"][:shown]} for head in layer]
                                                 for layer in entry["pyramids"]]}
            del kinds[name]["held"]
            held[name] = [[head["tiles"] for head in layer] for layer in entry["pyramids"]]
        page = Page(self.title, self.model, kinds, **extra)
        page.held, page.left_out = held, self.notes()
        return page


def head_values(entry: dict[str, Any], layer: int, head: int, level: int | None = None) -> np.ndarray:
    """One head's matrix at ``level`` (default: the leaves, one cell per query and key) from a page
    kind's tiles, in the page's units, as the page's script assembles it; for tests and tools."""
    level = len(entry["levels"]) - 1 if level is None else level
    if level >= entry["included"]:
        raise ValueError(f"the page holds levels 0 to {entry['included'] - 1}, not {level}")
    shape = entry["levels"][level]
    out = np.full((shape["rows"], shape["cols"]), entry["centre"], dtype=np.float64)
    for key, text in entry["pyramids"][layer][head]["tiles"][level].items():
        x, y = (int(v) * TILE for v in key.split(","))
        height, width = min(TILE, shape["rows"] - y), min(TILE, shape["cols"] - x)
        out[y : y + height, x : x + width] = decode_tile(text, shape["encoding"], (height, width))
    return entry["offset"] + out * entry["scale"]

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
                      breaks=view.row_breaks, centre=-low / span, sinks=view.marks or None)
    page = builder.finish(initial={"view": "matrix", "layer": 0, "head": 0}, value_name=view.value_name,
                          notes=list(view.notes))
    kind = page.kinds["self"]
    kind["panelTitles"] = list(view.panel_titles)
    # The page reads a value as offset + stored · scale and colours it from offset to vmax, as the view's scale.
    kind["scale"], kind["offset"], kind["vmax"] = float(span), low, float(low + span)
    return page

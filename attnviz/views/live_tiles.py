"""Tiles of a text's matrix on request, at any zoom level: what ``attnviz serve`` answers ``/api/tile`` with.

A page holds the levels its budget allows (:mod:`attnviz.render.page`); a server can answer every
other one. For the text being viewed it keeps each layer's queries and keys (an engine's
:class:`~attnviz.attention.rows.AttentionRows`: O(T·d), not O(T²)), or a short text's whole weights,
and the pooled tiles the page's builder kept beyond the page (``Page.held``). A tile at a level
it kept is decoded from them; any other is computed exactly: the weights of the tile's query rows
for one head, a block of rows at a time, max-pooled to the level (:mod:`attnviz.render.pyramid`).
At the leaves a tile is always computed, so it equals ``extract``'s weights to float rounding.

Tiles computed and row normalisers are kept in a ``store`` (by default one of the page's own, of
:data:`CACHED_TILES` entries; a server passes its cache bounded in bytes, where they belong to the
page's entry). A ``checkpoint`` callable, if given, is called between blocks of rows: it may raise
to stop the work (a server's client that has gone).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol

import numpy as np
import torch

from ..errors import UsageError
from ..render.pyramid import TILE, Geometry, decode_tile

CACHED_TILES = 256
"""Tiles computed on request kept for the next one (256 KB each at most), by a page's own store."""


class Store(Protocol):
    """Where a page keeps what it computed: ``get(key)`` (None if not kept) and ``put(key, value, owner=…)``."""

    def get(self, key: Hashable) -> Any: ...

    def put(self, key: Hashable, value: Any, size: int | None = None, *, owner: Hashable | None = None) -> bool: ...


class _OwnStore:
    """A page's own store: the last :data:`CACHED_TILES` entries, whatever their size."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()

    def keys(self) -> list[Hashable]:
        return list(self._entries)

    def get(self, key: Hashable) -> Any:
        if key in self._entries:
            self._entries.move_to_end(key)
        return self._entries.get(key)

    def put(self, key: Hashable, value: Any, size: int | None = None, *, owner: Hashable | None = None) -> bool:
        self._entries[key] = value
        while len(self._entries) > CACHED_TILES:
            self._entries.popitem(last=False)
        return True


class LiveTiles:
    """The tiles of one text's self-attention, every layer and head the page shows (see the module)."""

    def __init__(self, page: Any, layers: list[Any], *, store: Store | None = None, owned: bool = False) -> None:
        """``page``: the :class:`~attnviz.render.page.Page` built for the text (its ``held`` tiles);
        ``layers``: the :class:`~attnviz.sources.stream.ItemLayer` of each of its layers, in order;
        ``store``: where tiles and normalisers are kept (default: the page's own); ``owned``: they belong
        to this page's entry there (kept under :attr:`id`), and go when it goes."""
        entry = page.kinds["self"]
        self.id = secrets.token_urlsafe(9)
        self.store: Store = _OwnStore() if store is None else store
        self.owner: Hashable | None = self.id if owned else None
        self.layers, self.numbers = layers, list(entry["layers"])
        self.heads, self.n = int(entry["heads"]), len(entry["rows"])
        self.geometry = Geometry(self.n, len(entry["cols"]))
        self.causal = bool(entry["causal"])
        self.encodings = [level["encoding"] for level in entry["levels"]]
        self.held = page.held.get("self", [])
        # Each (layer, head)'s row normalisers (log-sum-exp), computed for the rows a tile first needs and
        # kept (5 bytes a row) in the store: a later tile over those rows computes its own columns only.

    def script_data(self, endpoint: str) -> dict[str, Any]:
        """What the page's script needs to ask for tiles."""
        return {"endpoint": endpoint, "page": self.id, "kind": "self"}

    @property
    def _normalisers(self) -> dict[tuple[int, int], Any]:
        """The normalisers computed for this page's tiles and still kept, by (layer index, head)."""
        keys = self.store.keys() if hasattr(self.store, "keys") else []
        return {k[2:]: self.store.get(k) for k in keys if k[:2] == (self.id, "norms")}

    def tile(self, layer: int, head: int, level: int, x: int, y: int,
             checkpoint: Callable[[], None] | None = None) -> tuple[np.ndarray, bool]:
        """Tile ``(x, y)`` (column, row of tiles) of ``level`` of model layer ``layer``'s ``head``:
        float32 ``[rows, cols]``, and whether it is exact (computed) rather than decoded from a kept tile.
        ``checkpoint`` is called between blocks of rows (it may raise to stop)."""
        index = self.check(layer, head, level, x, y)
        key = (self.id, "tile", index, head, level, x, y)
        kept_tile = self.store.get(key)
        if kept_tile is not None:
            return kept_tile, True
        kept = self.held[index][head] if index < len(self.held) else []
        rows, cols = self._shape(level, x, y)
        if level < len(kept) and level != self.geometry.leaf:
            text = kept[level].get(f"{x},{y}")
            values = np.zeros((rows, cols), np.float32) if text is None else \
                decode_tile(text, self.encodings[level], (rows, cols)).astype(np.float32)
            return values, False
        values = self._computed(index, head, level, x, y, checkpoint)
        self.store.put(key, values, values.nbytes, owner=self.owner)
        return values, True

    def check(self, layer: int, head: int, level: int, x: int, y: int) -> int:
        """The index of ``layer`` among the page's layers, if the tile is on the page; else a
        :class:`~attnviz.errors.UsageError` naming the parameter out of range."""
        if layer not in self.numbers:
            raise UsageError(f"[[layer={layer}]] is not on this page; it shows layers {', '.join(map(str, self.numbers))}")
        from ..layer_range import check_head

        check_head(head, owner="the model", count=self.heads)
        if not 0 <= level < self.geometry.levels:
            raise UsageError(f"[[level={level}]] is out of range; this text's matrix has levels 0 to "
                             f"{self.geometry.leaf}")
        rows, cols = self.geometry.shape(level)
        if not (0 <= x < -(-cols // TILE) and 0 <= y < -(-rows // TILE)):
            raise UsageError(f"tile [[x={x}]], [[y={y}]] is outside level {level}, which has "
                             f"{-(-cols // TILE)} × {-(-rows // TILE)} tiles")
        return self.numbers.index(layer)

    def _shape(self, level: int, x: int, y: int) -> tuple[int, int]:
        rows, cols = self.geometry.shape(level)
        return min(TILE, rows - y * TILE), min(TILE, cols - x * TILE)

    def _computed(self, index: int, head: int, level: int, x: int, y: int,
                  checkpoint: Callable[[], None] | None = None) -> np.ndarray:
        """The tile from the layer's queries and keys (or whole weights), max-pooled to ``level``."""
        from ..attention.rows import rows_per_block

        f = self.geometry.factor(level)
        r0, c0 = y * TILE * f, x * TILE * f
        r1, c1 = min(self.n, r0 + TILE * f), min(self.geometry.cols, c0 + TILE * f)
        out = torch.zeros(*self._shape(level, x, y))
        if self.causal and c0 > r1 - 1:
            return out.numpy()  # every key after every query of the tile: masked
        part = self.layers[index]
        made = part.made_from
        step = max(f, rows_per_block(1, c1 - c0) // f * f)  # whole pooled rows per block
        # Pooled levels: each row's normaliser once, then the tile's columns alone. The leaves: whole rows'
        # softmax, the same function as extract's (the normaliser's way differs by a few 1e-6).
        pooled_level = made is not None and f > 1
        if pooled_level:
            norms = self._rows_normalised(index, head, r0, r1, checkpoint)
        for start in range(r0, r1, step):
            if checkpoint is not None:
                checkpoint()
            stop = min(r1, start + step)
            if made is None:
                block = part.attentions[head, start:stop, c0:c1].float()
            elif not pooled_level:
                rows, item, n = made
                block = rows.block(item, start, stop, n, heads=slice(head, head + 1))[0, :, c0:c1].cpu()
            else:
                rows, item, n = made
                width = min(c1, n if rows.mask is None else min(n, rows.mask.visible(stop, start)))
                if width <= c0:
                    continue
                block = rows.columns(item, start, stop, c0, width, norms[None, start - r0 : stop - r0],
                                     heads=slice(head, head + 1))[0].cpu()
            if block.shape[1] == 0:
                continue
            pooled = block if f == 1 else torch.nn.functional.max_pool2d(block[None], f, ceil_mode=True)[0]
            top = (start - r0) // f
            out[top : top + pooled.shape[0], : pooled.shape[1]] = pooled
        return out.numpy()

    def _rows_normalised(self, index: int, head: int, r0: int, r1: int,
                         checkpoint: Callable[[], None] | None = None) -> torch.Tensor:
        """Rows ``r0 … r1 − 1``'s normalisers for one head, computing those not known yet (see __init__),
        a block of rows at a time."""
        from ..attention.rows import rows_per_block

        rows, item, n = self.layers[index].made_from
        kept = None if rows.memo is None else rows.memo.get((item, n))
        if kept is not None and bool(kept[1][r0:r1].all()):  # kept as the page was built
            return kept[0][head, r0:r1]
        key = (self.id, "norms", index, head)
        found = self.store.get(key)
        if found is None:
            found = (torch.zeros(self.n), torch.zeros(self.n, dtype=torch.bool))
            self.store.put(key, found, 5 * self.n, owner=self.owner)
        values, known = found
        missing = (~known[r0:r1]).nonzero().flatten()
        if missing.numel():
            first, stop = r0 + int(missing[0]), r0 + int(missing[-1]) + 1
            step = rows_per_block(1, n)
            for start in range(first, stop, step):
                if checkpoint is not None:
                    checkpoint()
                end = min(stop, start + step)
                values[start:end] = rows.normalisers(item, start, end, n, heads=slice(head, head + 1))[0].cpu()
                known[start:end] = True
        return values[r0:r1]

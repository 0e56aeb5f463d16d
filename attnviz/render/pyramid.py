"""A head's attention as a pyramid of tiles, so a page can show a matrix of any size and zoom into it.

Map viewers show the earth this way, and so does the page: level 0 is the whole matrix max-pooled
into one tile of at most :data:`TILE` × :data:`TILE` cells; each level below halves the pooling
factor, down to the leaves, where one cell is one query and one key. A pooled cell holds the
strongest value of the cells it covers (max-pooling: a strong weight never disappears, as in the
terminal's pooled heatmap); for signed values, the one furthest from ``centre``.

:class:`LayerPyramid` builds the levels of one layer from blocks of query rows, as an engine
hands them over (a long input's layer is never needed whole), keeping only the levels asked for
(``finest``), and the rows' and keys' maxima and the keys' column sums (for the colour scale that
leaves attention sinks out). :func:`encode_tile` stores a tile in a page: ``f16`` (IEEE half
floats: 3 significant digits, for pages of up to :data:`FLOAT16_CELLS` cells) or ``log8`` (one
byte on a log scale from 1e-6 to 1: 5.6 % apart, for long inputs), byte-shuffled, gzipped, base64.
The page's script decodes them the same way (``assets/page.js``); :func:`decode_tile` is its twin
for tests and tools.
"""

from __future__ import annotations

import base64
import gzip
import math
from dataclasses import dataclass

import numpy as np

TILE = 256
"""Cells on a tile's side."""

FLOAT16_CELLS = 4_000_000
"""Cells (heads × queries × keys of the whole page) up to which tiles are stored as half floats."""

LOG_FLOOR = 1e-6
"""The smallest value ``log8`` tells from 0."""


@dataclass(frozen=True)
class Geometry:
    """The levels of a ``rows`` × ``cols`` matrix (queries × keys)."""

    rows: int
    cols: int

    @property
    def levels(self) -> int:
        """How many levels: 1 when the matrix fits one tile, then one more for each halving."""
        longest = max(self.rows, self.cols, 1)
        return 1 + max(0, math.ceil(math.log2(longest / TILE))) if longest > TILE else 1

    @property
    def leaf(self) -> int:
        return self.levels - 1

    def factor(self, level: int) -> int:
        """Queries (and keys) per cell at ``level``: 1 at the leaves."""
        return 1 << (self.leaf - level)

    def shape(self, level: int) -> tuple[int, int]:
        f = self.factor(level)
        return -(-self.rows // f), -(-self.cols // f)

    def cells(self, level: int) -> int:
        r, c = self.shape(level)
        return r * c

    def script_data(self) -> list[dict[str, int]]:
        return [{"factor": self.factor(level), "rows": self.shape(level)[0], "cols": self.shape(level)[1]}
                for level in range(self.levels)]


def pool(values: np.ndarray, factor: int, centre: float = 0.0, *, offset: int = 0) -> np.ndarray:
    """``values`` ``[..., rows, cols]`` max-pooled ``factor`` × ``factor``: the largest value (weights,
    with ``centre`` 0, are never negative), or for signed values (another ``centre``) the one furthest
    from it. ``offset``: rows of the first pooled row that lie above ``values`` (a block that starts
    inside a pooled row). Edges pool what is there."""
    if factor == 1 and offset == 0:
        return values
    *lead, rows, cols = values.shape
    top = offset
    bottom = (-(rows + top)) % factor
    right = (-cols) % factor
    if top or bottom or right:  # a block that starts or ends inside a pooled cell: padded (a copy)
        padded = np.full((*lead, rows + top + bottom, cols + right), centre, dtype=values.dtype)
        padded[..., top : top + rows, :cols] = values
    else:  # whole pooled cells: reshaped as it is
        padded = np.ascontiguousarray(values)
    n_rows, n_cols = (rows + top + bottom) // factor, (cols + right) // factor
    # Down first (the element-wise max of whole rows, vectorised), then along the rows of factor times fewer
    # cells: 4 to 9 times faster than along the short inner axis first ([8, 64, 32768] at 16: 13 ms, not 118 ms).
    high = padded.reshape(*lead, n_rows, factor, n_cols * factor).max(axis=-2)
    high = high.reshape(*lead, n_rows, n_cols, factor).max(axis=-1)
    if centre == 0:
        return high
    low = padded.reshape(*lead, n_rows, factor, n_cols * factor).min(axis=-2)
    low = low.reshape(*lead, n_rows, n_cols, factor).min(axis=-1)
    return np.where(high - centre >= centre - low, high, low)


def merge(a: np.ndarray, b: np.ndarray, centre: float = 0.0) -> np.ndarray:
    """Cell by cell, the value further from ``centre`` (a pooled cell seen by two blocks)."""
    return np.where(np.abs(b - centre) > np.abs(a - centre), b, a)


class LayerPyramid:
    """The pyramid of one layer's heads ``[heads, rows, cols]``, built from blocks of query rows.

    ``finest``: the finest level kept (the coarser ones are pooled from it at the end). ``centre``:
    the value of nothing (0 for weights, which are never negative; a signed panel's zero)."""

    def __init__(self, heads: int, rows: int, cols: int, *, finest: int, centre: float = 0.0, lines: int = 0) -> None:
        self.geometry = Geometry(rows, cols)
        if not 0 <= finest < self.geometry.levels:
            raise ValueError(f"finest level {finest} is not one of the {self.geometry.levels} levels")
        self.heads, self.finest, self.centre = heads, finest, centre
        self.factor = self.geometry.factor(finest)
        self.grid = np.full((heads, *self.geometry.shape(finest)), centre, dtype=np.float32)
        self.row_max = np.full((heads, rows), -np.inf, dtype=np.float32)
        self.col_max = np.full((heads, cols), -np.inf, dtype=np.float32)
        self.col_sum = np.zeros((heads, cols), dtype=np.float64)
        self.rows_seen = 0
        # Each query's ``lines`` strongest keys (the head view of a long input draws them): key, weight.
        self.lines = min(lines, cols)
        self.line_keys = np.zeros((heads, rows, self.lines), dtype=np.uint32)
        self.line_weights = np.zeros((heads, rows, self.lines), dtype=np.float32)

    def add(self, first: int, block: np.ndarray) -> None:
        """Query rows ``first …`` of every head, ``[heads, rows, width]``: keys from ``width`` on are
        ``centre`` for these rows (causal attention hands over only what its rows can see)."""
        block = np.asarray(block, dtype=np.float32)
        heads, rows, width = block.shape
        if heads != self.heads or first != self.rows_seen or first + rows > self.geometry.rows \
                or width > self.geometry.cols:
            raise ValueError(f"a block of rows {first}… [{heads}, {rows}, {width}] does not continue rows 0…"
                             f"{self.rows_seen - 1} of [{self.heads}, {self.geometry.rows}, {self.geometry.cols}]")
        f = self.factor
        pooled = pool(block, f, self.centre, offset=first % f)
        top = first // f
        here = self.grid[:, top : top + pooled.shape[1], : pooled.shape[2]]
        here[...] = merge(here, pooled, self.centre)
        self.row_max[:, first : first + rows] = block.max(axis=-1) if width == self.geometry.cols else \
            np.maximum(block.max(axis=-1), self.centre)
        self.col_max[:, :width] = np.maximum(self.col_max[:, :width], block.max(axis=1))
        self.col_sum[:, :width] += block.sum(axis=1, dtype=np.float64)
        if self.lines and width:
            import torch  # not at import: drawing processes never load torch (and never ask for lines)

            count = min(self.lines, width)
            weights, keys = torch.from_numpy(block).topk(count, dim=-1)  # 10x numpy's argpartition
            self.line_keys[:, first : first + rows, :count] = keys.numpy()
            self.line_weights[:, first : first + rows, :count] = weights.numpy()
        self.rows_seen += rows

    def levels(self) -> list[np.ndarray]:
        """Levels 0 … ``finest``, each ``[heads, r, c]`` (coarsest first)."""
        if self.rows_seen != self.geometry.rows:
            raise ValueError(f"the pyramid has rows 0…{self.rows_seen - 1} of {self.geometry.rows}")
        out = [self.grid]
        for _ in range(self.finest):
            out.append(pool(out[-1], 2, self.centre))
        return out[::-1]

    def col_max_filled(self) -> np.ndarray:
        """Each key's largest value (``centre`` for keys no row sees)."""
        return np.where(np.isfinite(self.col_max), self.col_max, self.centre)


def tiles_of(grid: np.ndarray, encoding: str, centre: float = 0.0) -> dict[str, str]:
    """One head's level ``[r, c]`` cut into tiles, keyed ``"x,y"`` (column, row of tiles); tiles that
    hold only ``centre`` (the masked half of causal attention) are left out."""
    out: dict[str, str] = {}
    rows, cols = grid.shape
    for y in range(0, rows, TILE):
        for x in range(0, cols, TILE):
            tile = grid[y : y + TILE, x : x + TILE]
            if np.any(tile != centre):
                out[f"{x // TILE},{y // TILE}"] = encode_tile(tile, encoding)
    return out


def encode_tile(values: np.ndarray, encoding: str) -> str:
    """A tile's cells (row by row) as the page stores them: see the module."""
    flat = np.ascontiguousarray(values, dtype=np.float32).ravel()
    if encoding == "f16":
        halves = flat.astype("<f2").view("<u2")
        raw = (halves & 0xFF).astype(np.uint8).tobytes() + (halves >> 8).astype(np.uint8).tobytes()
    elif encoding == "log8":
        raw = log8_codes(flat).tobytes()
    elif encoding == "lin8":
        raw = np.rint(np.clip(flat, 0.0, 1.0) * 255).astype(np.uint8).tobytes()
    else:
        raise ValueError(f"unknown tile encoding {encoding!r}")
    # zlib's level 1 for the noisy bytes of half floats and logs (level 6 saves 1 % for twice the time); 3 for
    # lin8, whose runs of zeros it finds (a 482-token page of 72 heads: 2.5 MB in 0.24 s; level 6: 2.0 MB in 0.68 s).
    level = 3 if encoding == "lin8" else 1
    return base64.b64encode(gzip.compress(raw, compresslevel=level, mtime=0)).decode("ascii")


def decode_tile(text: str, encoding: str, shape: tuple[int, int]) -> np.ndarray:
    """The inverse of :func:`encode_tile`, as the page's script does it."""
    raw = np.frombuffer(gzip.decompress(base64.b64decode(text)), dtype=np.uint8)
    if encoding == "f16":
        n = raw.size // 2
        halves = raw[:n].astype(np.uint16) | (raw[n:].astype(np.uint16) << 8)
        values = halves.view("<f2").astype(np.float64)
    elif encoding == "lin8":
        values = raw / 255.0
    else:
        values = log8_values()[raw]
    return values.reshape(shape)


def encode_lines(keys: np.ndarray, weights: np.ndarray) -> dict[str, str]:
    """One head's strongest keys per query (``[rows, k]`` each) as the page stores them: the keys as
    four byte planes of a 32-bit integer (the high ones compress to nothing below 65,536 tokens), the
    weights as half floats."""
    flat = np.ascontiguousarray(keys, dtype="<u4").ravel()
    planes = b"".join(((flat >> shift) & 0xFF).astype(np.uint8).tobytes() for shift in (0, 8, 16, 24))
    return {"keys": base64.b64encode(gzip.compress(planes, compresslevel=3, mtime=0)).decode("ascii"),
            "weights": encode_tile(weights, "f16")}


def decode_lines(lines: dict[str, str], shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of :func:`encode_lines`: keys ``[rows, k]`` and weights ``[rows, k]``."""
    planes = np.frombuffer(gzip.decompress(base64.b64decode(lines["keys"])), dtype=np.uint8).reshape(4, -1)
    keys = sum(planes[i].astype(np.uint32) << (8 * i) for i in range(4))
    return np.asarray(keys).reshape(shape), decode_tile(lines["weights"], "f16", shape)


def log8_codes(values: np.ndarray) -> np.ndarray:
    """``log8``: 0 for values below :data:`LOG_FLOOR` (and 0), else 1 … 255 evenly over log10 from
    −6 to 0 (values above 1 are stored as 1)."""
    steps = 254 / -math.log10(LOG_FLOOR)
    with np.errstate(divide="ignore", invalid="ignore"):
        codes = np.rint((np.log10(np.maximum(values, LOG_FLOOR)) - math.log10(LOG_FLOOR)) * steps) + 1
    codes = np.clip(codes, 1, 255)
    return np.where(values >= LOG_FLOOR * 10 ** (-0.5 / steps), codes, 0).astype(np.uint8)


def log8_values() -> np.ndarray:
    """The value of each ``log8`` code (what the page's script builds too)."""
    codes = np.arange(256, dtype=np.float64)
    values = 10 ** (math.log10(LOG_FLOOR) * (1 - (codes - 1) / 254))
    values[0] = 0.0
    return values

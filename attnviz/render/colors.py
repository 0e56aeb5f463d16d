"""Colour scaling, computed once upstream of both renderers.

The terminal renderer colours cells from the anchors below (sampled from matplotlib's colormaps
at 17 evenly spaced points, interpolated linearly), so it needs no matplotlib import; the image
renderer uses matplotlib's own colormap of the same name with the same limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError

_ANCHORS: dict[str, list[tuple[int, int, int]]] = {
    "viridis": [
        (68, 1, 84), (72, 24, 106), (71, 45, 123), (66, 64, 134), (59, 82, 139), (51, 99, 141),
        (44, 114, 142), (38, 130, 142), (33, 145, 140), (31, 160, 136), (40, 174, 128),
        (63, 188, 115), (94, 201, 98), (132, 212, 75), (173, 220, 48), (216, 226, 25), (253, 231, 37),
    ],
    "magma": [
        (0, 0, 4), (10, 8, 34), (29, 17, 71), (54, 16, 107), (81, 18, 124), (106, 28, 129),
        (131, 38, 129), (156, 46, 127), (183, 55, 121), (208, 65, 111), (231, 82, 99),
        (245, 107, 92), (252, 137, 97), (254, 167, 114), (254, 196, 136), (253, 226, 163), (252, 253, 191),
    ],
    # Diverging, for signed values (attention × gradient): blue below zero, grey at zero, red above.
    "coolwarm": [
        (59, 76, 192), (78, 104, 216), (98, 130, 234), (119, 154, 247), (141, 176, 254), (163, 194, 254),
        (185, 208, 249), (204, 217, 237), (221, 220, 220), (236, 211, 197), (245, 196, 172), (247, 176, 147),
        (244, 152, 122), (235, 125, 98), (221, 95, 75), (202, 59, 55), (180, 4, 38),
    ],
}
COLORMAPS = tuple(_ANCHORS)
# Shades for terminals without colour, lightest to darkest ink.
SHADES = " ░▒▓█"
SIGNED_SHADES = "-=≡■"
"""Without colour, a signed scale (vmin < 0 < vmax) shades by magnitude: :data:`SHADES` above 0 and
these below it, so a view of mostly small signed values is not one field of the middle shade."""


LOG_DECADES = 4
"""A log scale's span below its top: the page's matrix's log scale (4 decades below the largest weight)."""


@dataclass(frozen=True)
class ColorScale:
    """Linear map from values in ``[vmin, vmax]`` to a colormap; values outside are clipped. ``log``: the
    map is linear in log10 of the value over the :data:`LOG_DECADES` below ``vmax`` (lower values, 0
    included, take the bottom colour), as the page's matrix colours a long text."""

    vmin: float
    vmax: float
    cmap: str = "viridis"
    log: bool = False

    def __post_init__(self) -> None:
        if self.cmap not in _ANCHORS:
            raise UsageError(f"unknown colormap {self.cmap!r}; use one of {', '.join(COLORMAPS)}")

    @classmethod
    def for_values(cls, values: np.ndarray, *, vmax: float | None = None, cmap: str = "viridis") -> ColorScale:
        """From 0 to ``vmax`` (default: the largest value shown, so weak heads still show contrast)."""
        top = float(np.nanmax(values)) if vmax is None else float(vmax)
        if vmax is not None and not (math.isfinite(vmax) and vmax > 0):
            raise UsageError(f"[[vmax={vmax}]] must be a positive number")
        return cls(0.0, top if top > 0 else 1.0, cmap)

    @classmethod
    def symmetric(cls, values: np.ndarray, *, cmap: str = "coolwarm") -> ColorScale:
        """From −m to m, m the largest magnitude shown: zero sits in the middle of a diverging map."""
        top = float(np.nanmax(np.abs(values))) if np.size(values) else 0.0
        top = top if top > 0 and math.isfinite(top) else 1.0
        return cls(-top, top, cmap)

    def logarithmic(self) -> ColorScale:
        """This scale on a log scale: :data:`LOG_DECADES` decades below ``vmax`` (values are weights: not signed)."""
        if self.vmin < 0:
            raise UsageError("a log colour scale needs values of one sign; this view has negative ones")
        return ColorScale(0.0, self.vmax, self.cmap, log=True)

    @property
    def floor(self) -> float:
        """The bottom of a log scale: :data:`LOG_DECADES` decades below its top."""
        return self.vmax * 10.0 ** -LOG_DECADES

    def normalize(self, values: np.ndarray) -> np.ndarray:
        """Values mapped to ``[0, 1]``."""
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.log10(np.clip(np.asarray(values, dtype=np.float64), self.floor, self.vmax) / self.floor)
            return np.clip(np.nan_to_num(ratio / LOG_DECADES, nan=0.0), 0.0, 1.0)
        span = self.vmax - self.vmin
        return np.clip((np.asarray(values, dtype=np.float64) - self.vmin) / span, 0.0, 1.0)

    def rgb(self, values: np.ndarray) -> np.ndarray:
        """``uint8 [..., 3]`` colours for ``values``."""
        anchors = np.array(_ANCHORS[self.cmap], dtype=np.float64)
        pos = self.normalize(values) * (len(anchors) - 1)
        lo = np.floor(pos).astype(int).clip(0, len(anchors) - 2)
        frac = (pos - lo)[..., None]
        return np.rint(anchors[lo] * (1 - frac) + anchors[lo + 1] * frac).astype(np.uint8)

    @property
    def signed(self) -> bool:
        return self.vmin < 0 < self.vmax

    def shade(self, values: np.ndarray) -> np.ndarray:
        """Index into :data:`SHADES` for each value (0 = blank … 4 = full block). On a signed scale, by
        magnitude against the larger end: 0 blank, 1…4 positive, −1…−4 negative (:data:`SIGNED_SHADES`)."""
        if self.signed:
            top = max(-self.vmin, self.vmax)
            level = np.minimum(np.ceil(np.abs(values) / top * 4 - 1e-9).astype(int), 4)
            level[np.abs(values) < top / 8] = 0  # the smallest magnitudes stay blank
            return np.where(values < 0, -level, level)
        return np.minimum((self.normalize(values) * len(SHADES)).astype(int), len(SHADES) - 1)

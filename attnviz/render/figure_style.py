"""What every matplotlib and raster figure of attnviz shares: resolution, label density, stable output,
and writing a matplotlib figure atomically. A leaf: the figure modules import it, it imports none of them."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fileio import atomic_write

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

DPI = 150
MAX_TICKS = 64  # labels per axis; beyond, every n-th label is drawn
# The same figure gives the same bytes: no creation dates, fixed SVG ids, glyphs as paths.
_STABLE_METADATA = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}
STABLE_RC: dict[RcKeyType, Any] = {"svg.fonttype": "path", "svg.hashsalt": "attnviz"}


def save_figure(fig, path: Path) -> None:
    def write(tmp: str) -> None:
        with warnings.catch_warnings():
            # Missing glyphs were already reported once, by name, as a MissingGlyphsWarning.
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            fmt = path.suffix.lower().lstrip(".")
            fig.savefig(tmp, format=fmt, metadata=_STABLE_METADATA.get(fmt))

    atomic_write(path, write)

"""PNG files from a figure's pixels, encoded for figures: in a quarter of the time of Pillow's default.

A heatmap figure is mostly cells of one colour, many pixels tall: with PNG's "Up" filter (each byte
minus the byte above it, PNG spec §9.2) their rows become zeros, which deflate compresses at once.
Pillow tries every filter on every row instead. zlib's level 3 is its fastest that still searches
for repeats well: on the 72-panel grid of MiniLM (4500 × 3504 pixels) it writes 397 KB in 0.17 s,
where level 6 writes 222 KB in 0.40 s and Pillow's default 225 KB in 0.60 s (the size of a PNG file
matters less than the wait for it; this machine, medians). An opaque figure is written as RGB,
without its alpha channel.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping

import numpy as np

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_UP = 2  # PNG filter type "Up"
_LEVEL = 3  # level 4 and above search twice as long for a file half the size


def encode_png(rgba: np.ndarray, *, dpi: float, text: Mapping[str, str | None] | None = None) -> bytes:
    """The PNG file of ``rgba`` (``uint8 [height, width, 4]``, or ``[height, width, 3]`` for opaque
    RGB, top row first): 8 bits per channel, RGB when every pixel is opaque, else RGBA; ``dpi`` in a
    pHYs chunk; ``text`` as tEXt chunks (Latin-1, as PNG requires; keys with a None value are left out)."""
    if rgba.dtype != np.uint8 or rgba.ndim != 3 or rgba.shape[2] not in (3, 4):
        raise ValueError(f"expected uint8 pixels [height, width, 3 or 4], got {rgba.dtype} {rgba.shape}")
    height, width = rgba.shape[:2]
    opaque = rgba.shape[2] == 3 or bool((rgba[..., 3] == 255).all())
    pixels = rgba[..., :3] if opaque else rgba
    rows = np.ascontiguousarray(pixels).reshape(height, -1)
    filtered = np.empty((height, rows.shape[1] + 1), dtype=np.uint8)
    filtered[:, 0] = _UP
    filtered[0, 1:] = rows[0]  # the row above the first is zeros
    np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])  # modulo 256, as the filter is defined
    header = struct.pack(">IIBBBBB", width, height, 8, 2 if opaque else 6, 0, 0, 0)
    per_metre = round(dpi / 0.0254)
    chunks = [_chunk(b"IHDR", header), _chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1))]
    for key, value in (text or {}).items():
        if value is not None:
            chunks.append(_chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1", "replace")))
    chunks.append(_chunk(b"IDAT", zlib.compress(filtered.data, _LEVEL)))  # the array's buffer, not a copy of it
    chunks.append(_chunk(b"IEND", b""))
    return _SIGNATURE + b"".join(chunks)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

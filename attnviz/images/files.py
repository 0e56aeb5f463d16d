"""A picture read as untrusted input: a regular file of at most 64 MiB, a PNG, JPEG or WebP by its content (not its
name), at most :data:`MAX_PIXELS` pixels by its header (a decompression bomb is refused before it is decoded), and
decoded whole (a truncated file is refused, not padded with grey)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ..errors import InputError, ResourceError

MAX_PIXELS = 50_000_000  # a 7,000 × 7,000 photo; a processor resizes it to a few hundred pixels a side anyway
MAX_BYTES = 64 << 20
FORMATS = ("PNG", "JPEG", "WEBP")


def read_image(path: str | Path, *, max_pixels: int = MAX_PIXELS) -> Any:
    """The picture at ``path`` as an RGB ``PIL.Image`` (see the module); each refusal is one line naming the file."""
    from PIL import Image, UnidentifiedImageError

    from ..limits import read_small

    path = Path(path)
    try:
        data = read_small(path, limit=MAX_BYTES, what="picture")
    except FileNotFoundError:
        raise InputError(f"picture {path} does not exist; check the path") from None
    try:
        with Image.open(io.BytesIO(data)) as probe:  # the header only: its format and size
            kind, (width, height) = probe.format, probe.size
    except (UnidentifiedImageError, OSError, ValueError):
        raise InputError(f"{path} is not a picture attnviz reads (PNG, JPEG or WebP)") from None
    if kind not in FORMATS:
        raise InputError(f"{path} is a {kind} image; attnviz reads PNG, JPEG or WebP")
    if width * height > max_pixels:
        raise ResourceError(f"{path} is {width:,} × {height:,} pixels, more than the {max_pixels:,} a picture may be "
                            "(a decompression bomb, or a photo to shrink first)")
    previous = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise InputError(f"{path} is damaged or truncated ({first}); it cannot be decoded whole") from None
    finally:
        Image.MAX_IMAGE_PIXELS = previous

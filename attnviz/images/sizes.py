"""What pictures will cost, told from their headers before anything is decoded or processed: the size a processor
resizes each to (refused past :data:`MAX_PROCESSED_PIXELS`: a 4 KB PNG of 1 × 1,000,000 pixels, its shortest edge
resized to 32, would be 32 × 32,000,000), and the memory of the decoded pictures and the processor's copies of them,
checked against the memory budget (:func:`attnviz.limits.check_memory`) with whatever else the caller adds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ResourceError
from .files import PictureHeader

MAX_PROCESSED_PIXELS = 16_000_000
"""Pixels a picture may become in a processor's hands (resized, before its crop or tiles): Qwen2-VL's largest,
12.8 million, fits; a thin picture whose short side is resized up does not."""

HELD_BYTES = 3
"""Bytes per pixel of a decoded picture, held while the model reads it (RGB)."""

COPY_BYTES = 12
"""Bytes per pixel of the largest picture's copies while it is decoded and while the processor takes it: Pillow's
decoded picture and its RGB copy; the processor's RGB copy, its bytes (in pieces, then joined) and its array (a
49-million-pixel picture read by LLaVA's processor peaked at 13.4 bytes a pixel, with the decoded picture)."""

FLOAT_BYTES = 24
"""Bytes per processed pixel: the processor's float32 copies (three channels, rescaled, then normalised)."""


def resized_size(image_processor: Any, width: int, height: int) -> tuple[int, int] | None:
    """The ``(width, height)`` ``image_processor`` resizes a picture of ``width`` × ``height`` to (before its centre
    crop or tiles), by its ``size``: a shortest edge (CLIP's, LLaVA's, DINOv2's; with a longest edge, the smaller
    scale), a longest edge (Idefics3's), a height and width (ViT's, SigLIP's, Gemma 3's), or Qwen2-VL's pixel count
    between ``min_pixels`` and ``max_pixels``; the picture's own size where it does not resize; None where its
    ``size`` says nothing known."""
    from .layouts import sizes_of

    if not getattr(image_processor, "do_resize", True):
        return width, height
    raw = getattr(image_processor, "size", None)
    size = {key: value for key, value in _entries(raw).items() if isinstance(value, (int, float)) and value > 0}
    if getattr(image_processor, "merge_size", None) is not None:  # Qwen2-VL: size holds pixel counts
        low = size.get("shortest_edge") or getattr(image_processor, "min_pixels", None) or 1
        high = size.get("longest_edge") or getattr(image_processor, "max_pixels", None) or width * height
        scale = math.sqrt(min(max(width * height, low), high) / (width * height))
        return max(1, round(width * scale)), max(1, round(height * scale))
    if "height" in size and "width" in size:
        return int(size["width"]), int(size["height"])
    if "shortest_edge" in size:
        scale = size["shortest_edge"] / min(width, height)
        if "longest_edge" in size:
            scale = min(scale, size["longest_edge"] / max(width, height))
        return max(1, round(width * scale)), max(1, round(height * scale))
    if "longest_edge" in size:
        scale = size["longest_edge"] / max(width, height)
        return max(1, round(width * scale)), max(1, round(height * scale))
    fallback = sizes_of(raw)
    if "height" in fallback and "width" in fallback:
        return fallback["width"], fallback["height"]
    return None


def _entries(raw: Any) -> dict[str, Any]:
    """A ``size`` as a dict: a dict, transformers' ``SizeDict`` (its fields, None where unset) or one number (a
    shortest edge)."""
    if isinstance(raw, (int, float)):
        return {"shortest_edge": raw}
    if isinstance(raw, dict):
        return dict(raw)
    keys = ("height", "width", "shortest_edge", "longest_edge", "max_height", "max_width")
    return {key: getattr(raw, key, None) for key in keys}


def check_processed(headers: Sequence[PictureHeader], image_processor: Any, model_name: str) -> list[int]:
    """Each picture's pixels as ``image_processor`` resizes it (0 where that cannot be told), each refused in one
    line naming its file and the limit past :data:`MAX_PROCESSED_PIXELS`, before the processor is called."""
    found = []
    for header in headers:
        size = resized_size(image_processor, header.width, header.height)
        if size is not None and size[0] * size[1] > MAX_PROCESSED_PIXELS:
            raise ResourceError(f"{header.path} is {header.width:,} × {header.height:,} pixels: the processor of "
                                f"{model_name} would resize it to {size[0]:,} × {size[1]:,}, more than the "
                                f"{MAX_PROCESSED_PIXELS:,} pixels a processed picture may be; crop it nearer to "
                                "square")
        found.append(0 if size is None else size[0] * size[1])
    return found


def pictures_memory(headers: Sequence[PictureHeader], processed: Sequence[int]) -> int:
    """Bytes the pictures cost while they are read: each decoded (:data:`HELD_BYTES`), the largest's copies
    (:data:`COPY_BYTES`) and the processor's float copies of each (:data:`FLOAT_BYTES` per processed pixel)."""
    if not headers:
        return 0
    pixels = [header.pixels for header in headers]
    return HELD_BYTES * sum(pixels) + COPY_BYTES * max(pixels) + FLOAT_BYTES * sum(processed)

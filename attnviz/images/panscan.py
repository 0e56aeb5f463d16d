"""Gemma 3's layout with pan-and-scan (Gemma Team 2025): SigLIP's patches of a picture resized to the tower's square
are average-pooled to ``mm_tokens_per_image`` tokens, a ``side × side`` grid, row-major, between the start- and
end-of-image tokens. With pan-and-scan on (the image processor's ``do_pan_and_scan``), a picture wider or taller
than ``pan_and_scan_min_ratio_to_activate`` is also cut along its long side into 2 to ``pan_and_scan_max_num_crops``
crops of equal width (or height), none under ``pan_and_scan_min_crop_size`` pixels, each resized to the square and
pooled the same way; the prompt reads "Here is the original image", the whole picture's block, "and here are some
crops", then each crop's block (the words and markers are text tokens).

The whole picture's tokens are labelled ``<img o r0c0>`` when it has crops; the overlay draws the crops side by side
(``side`` rows × ``crops × side`` columns for a wide picture), which cover the picture, labelled by their place there
(``<img r0c5>``), each box in the original picture. Without crops the layout is the pooled grid alone, labelled
``<img r0c0>``. Each block's count is checked against the processor's.

For a 64 × 40 picture, 16 tokens a block, crops of at least 16 pixels and a ratio of 1.2: 64 / 40 = 1.6, two crops
of 32 × 40 (x 0–32 and 32–64); three blocks of 4 × 4, the canvas 4 × 8."""

from __future__ import annotations

import math
from typing import Any

from ..result.placement import Tiles
from .layouts import Grid, boxes, sizes_of, token_blocks

OPTIONS = ("do_pan_and_scan", "pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops",
           "pan_and_scan_min_ratio_to_activate")


def options(processor: Any) -> dict[str, Any]:
    """The pan-and-scan options the processor hands its image processor: the image processor's own, overridden by
    the processor's ``images_kwargs`` (as transformers merges them for a call without keywords)."""
    found = {key: getattr(processor.image_processor, key, None) for key in OPTIONS}
    given = getattr(processor, "images_kwargs", None) or {}
    found.update({key: given[key] for key in OPTIONS if key in given})
    return found


def crops(size: tuple[int, int], found: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    """The crops ``(x0, y0, x1, y1)`` of a picture of ``size`` ``(width, height)``, in the picture's pixels, row by
    row (transformers' ``Gemma3ImageProcessor.pan_and_scan``); none where pan-and-scan is off or does not apply."""
    width, height = size
    if not found["do_pan_and_scan"]:
        return []
    smallest, most, ratio = (found[key] for key in OPTIONS[1:])
    long, short, wide = (width, height, True) if width >= height else (height, width, False)
    if long / short < ratio:
        return []
    count = min(most, max(2, min(math.floor(long / smallest), math.floor(long / short + 0.5))))
    n_w, n_h = (count, 1) if wide else (1, count)
    crop_w, crop_h = math.ceil(width / n_w), math.ceil(height / n_h)
    if min(crop_w, crop_h) < smallest:
        return []
    return [(x, y, min(x + crop_w, width), min(y + crop_h, height))
            for y in range(0, crop_h * n_h, crop_h) for x in range(0, crop_w * n_w, crop_w)]


def gemma3_place(config: dict[str, Any], processor: Any, inputs: Any, positions: list[int], index: int = 0, *,
                 picture: Any) -> Tiles:
    """Picture ``index``'s tokens, the first of ``positions``: the whole picture's pooled grid, then each crop's,
    and the crops side by side (the finest grid, last); each token's box in the original ``picture``."""
    side = math.isqrt(int(config.get("mm_tokens_per_image") or 256))
    processed = sizes_of(getattr(processor.image_processor, "size", None))
    height = processed.get("height") or int(inputs["pixel_values"].shape[-2])
    grid = Grid((), side, side, height // side)
    cut = crops(picture.size, options(processor))
    blocks = token_blocks(positions, [side * side] * (1 + len(cut)), "gemma3", index)
    whole = {"name": "patches", "rows": side, "cols": side, "positions": blocks[0],
             "boxes": boxes(grid, processor.image_processor, picture.size)}
    if not cut:
        return Tiles.of(grid.labels(), 0, [whole], grid.patch)
    across = sum(1 for box in cut if box[1] == 0)  # crops in a row
    labels = [f"o {label}" for label in grid.labels()]
    grids = [{**whole, "name": "original"}]
    canvas: dict[tuple[int, int], tuple[int, tuple[float, float, float, float]]] = {}
    for number, ((x0, y0, x1, y1), block) in enumerate(zip(cut, blocks[1:], strict=True)):
        dx, dy = (x1 - x0) / side, (y1 - y0) / side
        cells = [(r, c) for r in range(side) for c in range(side)]
        found = [(x0 + c * dx, y0 + r * dy, x0 + (c + 1) * dx, y0 + (r + 1) * dy) for r, c in cells]
        top, left = divmod(number, across)
        at = [(top * side + r, left * side + c) for r, c in cells]
        canvas.update(zip(at, zip(block, found, strict=True), strict=True))
        labels += [f"r{r}c{c}" for r, c in at]
        grids.append({"name": f"crop {number + 1}", "rows": side, "cols": side, "positions": block, "boxes": found})
    order = sorted(canvas)
    grids.append({"name": "crops", "rows": len(cut) // across * side, "cols": across * side,
                  "positions": [canvas[cell][0] for cell in order], "boxes": [canvas[cell][1] for cell in order]})
    return Tiles.of(labels, 0, grids, grid.patch)

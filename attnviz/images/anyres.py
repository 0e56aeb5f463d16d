"""LLaVA-NeXT's any-resolution layout (Liu et al. 2024): a picture becomes the base grid (the whole picture resized
and centre-cropped to the vision tower's size) followed by the high-resolution canvas (the picture resized to the
best of the config's ``image_grid_pinpoints``, padded, cut into tiles, each tile the tower's grid), unpadded back to
the picture's aspect ratio, with one newline token after each of its rows. Everything is derived from the
processor's outputs (``image_sizes``) and the config, as transformers' ``pack_image_features`` orders the tokens,
and the count is checked against the processor's.

For a 48 × 64 picture, a 32-pixel tower of 8-pixel patches and pinpoints 32×64, 64×32, 64×64: the base grid is
4 × 4 (16 tokens); the canvas is 64 × 64 (8 × 8 patches), unpadded to 6 rows × 8 columns, each row followed by a
newline: 16 + 6 × 9 = 70 tokens."""

from __future__ import annotations

import math
from typing import Any

from ..result.placement import PatchGrid, Tiles
from .layouts import Grid, boxes, vision_config


def canvas_size(original: tuple[int, int], pinpoints: list[list[int]]) -> tuple[int, int]:
    """The best ``(height, width)`` among ``pinpoints`` for a picture of ``original`` ``(height, width)``: the most
    of the picture's pixels kept, then the least waste (transformers' ``select_best_resolution``)."""
    height, width = original
    best, best_kept, best_waste = (0, 0), -1, math.inf
    for target_h, target_w in pinpoints:
        scale = min(target_w / width, target_h / height)
        kept = min(int(width * scale) * int(height * scale), width * height)
        waste = target_w * target_h - kept
        if kept > best_kept or (kept == best_kept and waste < best_waste):
            best, best_kept, best_waste = (target_h, target_w), kept, waste
    return best


def unpadded(rows: int, cols: int, original: tuple[int, int]) -> tuple[range, range]:
    """The canvas rows and columns that hold the picture (transformers' ``unpad_image`` on a ``rows × cols`` grid)."""
    height, width = original
    if width / height > cols / rows:
        new_height = int(round(height * (cols / width), 7))
        pad = (rows - new_height) // 2
        return range(pad, rows - pad), range(cols)
    new_width = int(round(width * (rows / height), 7))
    pad = (cols - new_width) // 2
    return range(rows), range(pad, cols - pad)


def llava_next_place(config: dict[str, Any], processor: Any, inputs: Any, positions: list[int],
                     index: int = 0) -> Tiles:
    """Where picture ``index``'s tokens are, the first of ``positions`` (the prompt's image tokens not yet placed):
    the base grid, then the canvas rows and their newline tokens; each patch's box in the original picture."""
    from ..errors import ModelNotFoundError

    tower = vision_config(config)
    patch, size = int(tower["patch_size"]), int(tower["image_size"])
    side = size // patch
    height, width = (int(v) for v in inputs["image_sizes"][index])
    pinpoints = config.get("image_grid_pinpoints") or getattr(processor.image_processor, "image_grid_pinpoints", None)
    if not pinpoints:
        raise ModelNotFoundError("a LLaVA-NeXT model without image_grid_pinpoints (its config's or its processor's)")
    best_h, best_w = canvas_size((height, width), pinpoints)
    rows, cols = unpadded(best_h // patch, best_w // patch, (height, width))
    strategy = config.get("vision_feature_select_strategy", "default")
    base = Grid(("[vCLS]",) if strategy == "full" else (), side, side, patch)
    expected = base.n_tokens + len(rows) * (len(cols) + 1)
    if len(positions) < expected:
        raise ModelNotFoundError(f"the llava_next layout gives {expected} image tokens for a {width}×{height} picture, "
                                 f"the processor put {len(positions)}")
    labels: list[str] = [f"b {label}" for label in base.labels()]
    canvas: list[int] = []
    for r in rows:
        for c in cols:
            labels.append(f"r{r - rows.start}c{c - cols.start}")
            canvas.append(len(labels) - 1)
        labels.append(f"⏎{r - rows.start}")
    # The canvas: the picture resized into best_h × best_w keeping its aspect (ceil), centred with padding.
    scale_w, scale_h = best_w / width, best_h / height
    if scale_w < scale_h:
        new_w, new_h = best_w, min(math.ceil(height * scale_w), best_h)
    else:
        new_h, new_w = best_h, min(math.ceil(width * scale_h), best_w)
    left, top = (best_w - new_w) // 2, (best_h - new_h) // 2
    sx, sy = width / new_w, height / new_h
    canvas_boxes = [((c * patch - left) * sx, (r * patch - top) * sy, ((c + 1) * patch - left) * sx,
                     ((r + 1) * patch - top) * sy) for r in rows for c in cols]
    base_start = len(base.specials)
    return Tiles(tuple(labels), len(base.specials), (
        PatchGrid.of("base", side, side, [positions[i] for i in range(base_start, base_start + side * side)],
                     boxes(base, processor.image_processor, (width, height))),
        PatchGrid.of("canvas", len(rows), len(cols), [positions[i] for i in canvas], canvas_boxes)), patch)

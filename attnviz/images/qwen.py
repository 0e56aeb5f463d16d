"""Qwen2-VL's and Qwen2.5-VL's layout (Wang et al. 2024): the processor resizes a picture (``smart_resize``) to a
multiple of ``patch × merge`` pixels on each side, keeping its pixel count between its minimum and maximum, and
reports the patch grid it made as ``image_grid_thw[k] = (t, h, w)``; the vision tower merges each ``merge × merge``
block of patches (``spatial_merge_size``, 2) into one token, so the picture is ``h / merge`` rows × ``w / merge``
columns of tokens, row-major, each covering ``merge × patch`` pixels of the resized picture, between the prompt's
``<|vision_start|>`` and ``<|vision_end|>``. The resize stretches the whole picture, so each token's box in the
original picture is its box in the resized one scaled back.

For a 64 × 48 picture, 8-pixel patches and a merge of 2: the resize keeps 64 × 48 (multiples of 16), the grid is
6 × 8 patches, the tokens 3 rows × 4 columns (12), each 16 × 16 pixels."""

from __future__ import annotations

from typing import Any

from ..result.placement import PatchGrid, Tiles
from .layouts import token_blocks, vision_config


def qwen2_vl_place(config: dict[str, Any], processor: Any, inputs: Any, positions: list[int], index: int = 0, *,
                   picture: Any) -> Tiles:
    """Picture ``index``'s tokens, the first of ``positions``: its merged grid, row-major, from the processor's
    ``image_grid_thw`` and the vision config's ``spatial_merge_size`` and ``patch_size``; each token's box in the
    original ``picture``."""
    from ..errors import ModelNotFoundError

    name = str(config.get("model_type") or "qwen2_vl")
    tower = vision_config(config)
    merge = int(tower.get("spatial_merge_size") or 2)
    patch = int(tower.get("patch_size") or processor.image_processor.patch_size)
    frames, height, width = (int(v) for v in inputs["image_grid_thw"][index])
    rows, cols = height // merge, width // merge
    theirs = frames * height * width // int(getattr(processor.image_processor, "merge_size", merge)) ** 2
    if frames != 1 or rows * merge != height or cols * merge != width or rows * cols != theirs:
        raise ModelNotFoundError(f"the {name} layout gives {rows * cols} tokens for picture {index + 1} "
                                 f"({frames} × {height} × {width} patches, merged {merge} × {merge}); its processor "
                                 f"gives {theirs}")
    token_blocks(positions, [rows * cols], name, index, closed=False)  # the user may put pictures side by side
    original_w, original_h = picture.size
    sx, sy = original_w / (width * patch), original_h / (height * patch)
    side = merge * patch  # one token's pixels in the resized picture
    found = [(c * side * sx, r * side * sy, (c + 1) * side * sx, (r + 1) * side * sy)
             for r in range(rows) for c in range(cols)]
    return Tiles(tuple(f"r{r}c{c}" for r in range(rows) for c in range(cols)), 0,
                 (PatchGrid.of("patches", rows, cols, positions[: rows * cols], found),), side)

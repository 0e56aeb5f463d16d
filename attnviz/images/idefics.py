"""Idefics3's and SmolVLM's layout (Laurençon et al. 2024): the processor resizes a picture (its longest edge to
``size``, then each side up to a multiple of the tile, ``max_image_size``), cuts it into ``rows × cols`` tiles and
adds the whole picture squeezed to one tile; the vision tower reads each tile and the connector's pixel shuffle folds
each ``scale × scale`` block of its patches into one token: a tile is ``side × side`` tokens, ``side = (tile /
patch) / scale_factor``, row-major. In the prompt each tile's tokens follow its ``<row_i_col_j>`` marker, row by
row, and the whole picture's follow ``<global-img>`` (those markers, and the ``<fake_token_around_image>`` between
blocks, are text tokens: the labels are the tokenizer's). A picture the processor does not split (splitting off) is
the whole picture's block alone.

The overlay draws the tiles stitched into one canvas, ``rows × side`` by ``cols × side`` tokens, which covers the
picture (the resize stretches the whole picture, so a token's box is its share of the canvas scaled back); the tiles'
tokens are labelled by their place on that canvas (``<img r3c5>``), the whole picture's ``<img g r0c0>``. Rows and
columns are the image processor's own (``return_row_col_info``); every block's count is checked against the
processor's.

For a 64 × 48 picture, 48-pixel tiles of 8-pixel patches, a scale of 2 and ``size`` 64: the picture becomes
64 × 48, then 96 × 96, two rows of two tiles of 3 × 3 tokens, the canvas 6 × 6, then the whole picture's 3 × 3:
5 × 9 = 45 image tokens."""

from __future__ import annotations

from typing import Any

from ..result.placement import Tiles
from .layouts import token_blocks, vision_config


def idefics3_place(config: dict[str, Any], processor: Any, inputs: Any, positions: list[int], index: int = 0, *,
                   picture: Any) -> Tiles:
    """Picture ``index``'s tokens, the first of ``positions``: each tile's grid, the whole picture's, and the
    stitched canvas (the finest grid, last); each token's box in the original ``picture``."""
    from ..errors import ModelNotFoundError

    name = str(config.get("model_type") or "idefics3")
    size = getattr(processor.image_processor, "max_image_size", None) or {}
    tile = int((size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)) or 0)
    patch = int(vision_config(config).get("patch_size") or 0)
    scale = int(config.get("scale_factor") or 1)
    side = tile // patch // scale if tile and patch else 0
    if not side or side * scale * patch != tile:
        raise ModelNotFoundError(f"the {name} layout cannot fold {tile}-pixel tiles of {patch}-pixel patches by "
                                 f"{scale} (its vision config and processor disagree)")
    asked = {**(getattr(processor, "images_kwargs", None) or {}), "return_row_col_info": True}  # as the processor
    split = processor.image_processor(images=[[picture]], **asked)
    rows, cols = int(split["rows"][0][0]), int(split["cols"][0][0])
    blocks = token_blocks(positions, [side * side] * (rows * cols + 1), name, index)
    width, height = picture.size
    labels: list[str] = []
    grids: list[dict[str, Any]] = []
    if rows and cols:
        dx, dy = width / (cols * side), height / (rows * side)  # one canvas token's share of the picture
        canvas: dict[tuple[int, int], int] = {}
        for number, block in enumerate(blocks[:-1]):
            tile_r, tile_c = divmod(number, cols)
            cells = [(tile_r * side + r, tile_c * side + c) for r in range(side) for c in range(side)]
            canvas.update(zip(cells, block, strict=True))
            labels += [f"r{r}c{c}" for r, c in cells]
            grids.append({"name": f"tile r{tile_r}c{tile_c}", "rows": side, "cols": side, "positions": block,
                          "boxes": [(c * dx, r * dy, (c + 1) * dx, (r + 1) * dy) for r, c in cells]})
        order = sorted(canvas)  # the canvas row-major
        whole = _whole(width, height, side, blocks[-1], "global")
        labels += [f"g r{r}c{c}" for r in range(side) for c in range(side)]
        grids += [whole, {"name": "canvas", "rows": rows * side, "cols": cols * side,
                          "positions": [canvas[cell] for cell in order],
                          "boxes": [(c * dx, r * dy, (c + 1) * dx, (r + 1) * dy) for r, c in order]}]
    else:
        labels += [f"r{r}c{c}" for r in range(side) for c in range(side)]
        grids.append(_whole(width, height, side, blocks[-1], "global"))
    return Tiles.of(labels, 0, grids, patch * scale)


def _whole(width: int, height: int, side: int, block: list[int], name: str) -> dict[str, Any]:
    """The whole picture squeezed to one tile: ``side × side`` tokens, each an equal share of the picture."""
    dx, dy = width / side, height / side
    return {"name": name, "rows": side, "cols": side, "positions": block,
            "boxes": [(c * dx, r * dy, (c + 1) * dx, (r + 1) * dy) for r in range(side) for c in range(side)]}

"""Attention over a picture: one query's weights on the image tokens, as heat over the original image, a panel per
layer × head (PNG), and as coloured half-blocks at the patch grid (the terminal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# title, layer, head, query (None: a mean), picture (its index in the result's metadata["images"])
Panel = tuple[str, "int | None", "int | None", "int | None", int]

PANEL_ASPECT = 4.0
"""A panel is at most this many times taller than wide, or wider than tall, whatever the picture's shape."""

MAX_CANVAS_PIXELS = 64_000_000
"""Pixels of a PNG of panels (192 MB as RGB): past it the panels are drawn smaller, down to :data:`MIN_PANEL`
pixels wide, and beyond that the drawing is refused."""

MIN_PANEL = 32


def patch_weights(result: Any, layer: int | None, head: int | None, query: int | None,
                  picture: int = 0) -> np.ndarray:
    """``[rows, cols]``: the weights of ``query`` (a token index: a text token's, CLS's, a patch's; None: the mean
    over the patches' own queries) on each patch of picture ``picture`` (its finest grid), in ``layer`` and ``head``
    (None: the mean of the layers, of the heads)."""
    import torch

    image = result.pictures[picture]
    rows, cols = image.rows, image.cols
    at = torch.tensor(image.positions)  # the grid's tokens
    attn = result.attentions.double().mean(0) if layer is None else result.attentions[layer].double()  # [H, T, T]
    attn = attn.mean(0) if head is None else attn[head]
    row = attn[row_of(result, at.tolist())].mean(0) if query is None else attn[row_of(result, [query])[0]]
    return row[at].reshape(rows, cols).numpy()


def strongest_patches(result: Any, layer: int | None, head: int | None, query: int) -> list[tuple[np.ndarray, str]]:
    """Per picture: ``query``'s weights over its grid (:func:`patch_weights`) and the place it reads most
    (``r1c2``)."""
    found = []
    for picture in range(len(result.pictures)):
        weights = patch_weights(result, layer, head, query, picture)
        index, cols = int(weights.argmax()), weights.shape[1]
        found.append((weights, f"r{index // cols}c{index % cols}"))
    return found


def row_of(result: Any, queries: list[int]) -> list[int]:
    """Where the rows of ``queries`` (token positions) are in ``result.attentions``: themselves, or their places
    among ``metadata["rows"]`` where the result holds some rows only (a vision-language model's text rows)."""
    held = result.metadata.get("rows")
    if held is None:
        return list(queries)
    place = {position: n for n, position in enumerate(held)}
    missing = [q for q in queries if q not in place]
    if missing:
        from ..errors import UsageError

        raise UsageError(f"the result holds the text's rows only; {result.tokens[missing[0]]} (token {missing[0]}) "
                         "is not among them: ask for every row (rows='all')")
    return [place[q] for q in queries]


def _heat(image: Any, weights: np.ndarray, boxes: list[list[float]], size: tuple[int, int], cmap: str, *,
          original: tuple[int, int] | None = None) -> Any:
    """The picture at ``size`` in grey, each patch's box coloured by its weight (scaled to the largest). ``boxes``
    are in the pixels of a picture of ``original`` ``(width, height)`` (default: ``image``'s own size; ``image`` may
    be the picture already shrunk to ``size``). Everything is made at ``size``: a 50-million-pixel picture costs no
    array of its own size."""
    from matplotlib import colormaps

    width, height = original or image.size
    sx, sy = size[0] / width, size[1] / height
    heat = np.zeros((size[1], size[0]))
    top = float(weights.max()) or 1.0
    for weight, (x0, y0, x1, y1) in zip(weights.reshape(-1), boxes, strict=True):
        heat[max(0, int(y0 * sy)) : max(0, int(np.ceil(y1 * sy))),
             max(0, int(x0 * sx)) : max(0, int(np.ceil(x1 * sx)))] = weight / top
    shown = image if image.size == tuple(size) else image.resize(size)
    grey = np.asarray(shown.convert("L").convert("RGB"), dtype=np.float64) / 255.0
    colour = colormaps[cmap]((heat * 255).astype(np.uint8) / 255.0)[..., :3]
    blended = 0.45 * grey + 0.55 * colour
    from PIL import Image

    return Image.fromarray((blended * 255).round().astype(np.uint8))


def panel_size(picture_size: tuple[int, int], panel: int) -> tuple[int, int]:
    """A panel's ``(width, height)`` for a picture of ``picture_size``: ``panel`` wide, as tall as the picture's
    aspect makes it, within :data:`PANEL_ASPECT` of square (a thin picture is drawn squeezed, not 80,000 pixels
    tall; its boxes are squeezed with it)."""
    width, height = picture_size
    tall = panel * height / max(1, width)
    return panel, max(1, round(min(panel * PANEL_ASPECT, max(panel / PANEL_ASPECT, tall))))


def overlay_png(result: Any, pictures: list[Any], path: str | Path, *, layers: list[int], heads: list[int] | None,
                query: int | None, cmap: str = "magma", panel: int = 160) -> Path:
    """A PNG of panels, a row per layer and a column per head (``heads`` None: one panel, the heads' mean) and
    picture, each picture (``pictures``: the RGB ``PIL.Image``s the result was computed on) with ``query``'s weights
    on its patches as heat."""
    several = len(pictures) > 1
    grid: list[list[Panel]] = [[((f"{n + 1}: " if several else "") + f"L{layer} "
                                 + ("mean" if head is None else f"H{head}"), layer, head, query, n)
                                for head in (heads if heads is not None else [None]) for n in range(len(pictures))]
                               for layer in layers]
    return panels_png(result, pictures, path, grid, cmap=cmap, panel=panel)


def panels_png(result: Any, pictures: list[Any], path: str | Path, grid: list[list[Panel]], *, cmap: str = "magma",
               panel: int = 160) -> Path:
    """A PNG of panels in rows, each ``(title, layer, head, query, picture)`` (None: the mean of the layers, of the
    heads, of the patches' queries): picture ``pictures[picture]`` with those weights on its patches as heat."""
    from PIL import Image, ImageDraw

    from ..fileio import atomic_write

    metas = result.pictures
    label = 14
    columns = max(len(row) for row in grid)

    def canvas_of(side: int) -> tuple[list[tuple[int, int]], int, tuple[int, int]]:
        sizes = [panel_size(p.size, side) for p in pictures]
        tall = max(size[1] for size in sizes)
        return sizes, tall, (columns * (side + 4) + 4, len(grid) * (tall + label + 4) + 4)

    sizes, tall, whole = canvas_of(panel)
    if whole[0] * whole[1] > MAX_CANVAS_PIXELS:  # many panels: each drawn smaller
        panel = max(MIN_PANEL, int(panel * (MAX_CANVAS_PIXELS / (whole[0] * whole[1])) ** 0.5))
        sizes, tall, whole = canvas_of(panel)
    if whole[0] * whole[1] > MAX_CANVAS_PIXELS:
        from ..errors import ResourceError

        raise ResourceError(f"{path}: {len(grid):,} rows of {columns:,} panels make a picture of "
                            f"{whole[0]:,} × {whole[1]:,} pixels even {panel} pixels a panel, more than the "
                            f"{MAX_CANVAS_PIXELS:,} it may be; draw fewer layers, heads, pictures or tokens")
    shown = [picture.resize(size) for picture, size in zip(pictures, sizes, strict=True)]  # each once, small
    canvas = Image.new("RGB", whole, "white")
    draw = ImageDraw.Draw(canvas)
    for r, row in enumerate(grid):
        for c, (title, layer, head, query, index) in enumerate(row):
            x, y = 4 + c * (panel + 4), 4 + r * (tall + label + 4)
            draw.text((x, y), title, fill="black")
            weights = patch_weights(result, layer, head, query, index)
            canvas.paste(_heat(shown[index], weights, metas[index].boxes, sizes[index], cmap,
                               original=pictures[index].size), (x, y + label))
    path = Path(path)
    atomic_write(path, lambda tmp: canvas.save(tmp, format="PNG"))
    return path


def terminal_grid(weights: np.ndarray, cmap: str = "magma") -> Any:
    """A rich ``Text`` of the grid, two patch rows per line (upper half-block ▀ in the upper row's colour on the
    lower row's), each weight scaled to the largest."""
    from matplotlib import colormaps
    from rich.style import Style
    from rich.text import Text

    top = float(weights.max()) or 1.0
    colours = colormaps[cmap](weights / top)[..., :3]
    out = Text()
    def hex_of(rgb: np.ndarray) -> str:
        red, green, blue = (int(v * 255) for v in rgb)
        return f"#{red:02x}{green:02x}{blue:02x}"

    for r in range(0, weights.shape[0], 2):
        for c in range(weights.shape[1]):
            lower = hex_of(colours[r + 1, c]) if r + 1 < weights.shape[0] else None
            out.append("▀", style=Style(color=hex_of(colours[r, c]), bgcolor=lower))
        out.append("\n")
    return out

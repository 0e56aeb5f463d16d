"""Every file a picture command writes, as the text side writes them (issue 59, item 4): the heat over the picture
(.png, .svg, .pdf), the picture page (.html, as ``view --image`` makes it), the result (.npz, every row) and the
view's numbers with each picture's grid and boxes (.json)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PICTURE_OUTPUTS = (".png", ".svg", ".pdf", ".html", ".npz", ".json")
"""What ``--out`` writes beside ``--image``, by extension."""


def picture_document(view: Any) -> dict[str, Any]:
    """The view's numbers (.json): its title, scale and notes, each panel's weights over its grid, and each picture's
    placement (its grid, tokens and every patch's box in the original picture)."""
    return {"title": view.title, "value": view.value_name, "scale": {"min": view.scale.vmin, "max": view.scale.vmax,
                                                                    "per_panel": view.per_panel},
            "notes": list(view.notes),
            "pictures": [picture.to_dict() for picture in view.pictures],
            "panels": [{"title": panel.title, "picture": panel.picture,
                        "weights": [[round(float(w), 8) for w in row] for row in panel.weights]}
                       for panel in view.panels]}


def write_picture_outputs(result: Any, view: Any, pictures: list[Path], paths: list[Path], *, text: str | None = None,
                          layer: int | None = None, head: int = 0, cmap: str = "magma") -> list[Path]:
    """Each of ``paths`` (kinds of :data:`PICTURE_OUTPUTS`), written atomically; returns them in order."""
    written = []
    images = None
    for path in paths:
        suffix = path.suffix.lower()
        if suffix == ".npz":
            written.append(result.save(path))
        elif suffix == ".json":
            from ..fileio import write_json

            written.append(write_json(path, picture_document(view)))
        elif suffix == ".html":
            from ..render.html import render_html
            from .picture_page import encode_pictures, picture_page

            page = picture_page(result, encode_pictures(pictures), text=text, layer=layer, head=head, view="picture")
            written.append(render_html(page, path, cmap=cmap))
        else:
            from ..images.files import read_image
            from ..render.picture_figure import render_picture_figure

            images = images if images is not None else [read_image(picture) for picture in pictures]
            written.append(render_picture_figure(view, images, path))
    return written

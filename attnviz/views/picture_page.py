"""The interactive page of a picture result (``attnviz view --image``, ``attnviz serve --image``): the page every
text gets (:func:`attnviz.views.pages.page_view`, made from the result as a fixed input), with

* the picture view's data (:func:`picture_data`): each picture, downscaled and embedded in the page, its finest
  grid's patch boxes and tokens, and per layer each head's and the heads' mean weights of the tokens listed beside
  the pictures (a vision-language model's text; an encoder's every token) on every patch;
* the matrix with each picture's tokens as one labelled row and column (:func:`collapsed`: ``<image 1: 4×4>``, the
  sum of a row's weights on the picture's tokens, the mean of the picture's rows), which the matrix view shows unless
  asked to expand them (``--expand-images``; a box on the page switches).

The result comes from :mod:`attnviz.images` (``result.pictures``: a typed placement per picture); this module runs no model.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..result.placement import Placement
from .picture_parts import (
    COLLAPSED_KIND,
    PICTURE_CELLS,
    PictureParts,
    PictureRows,
    collapse_into,
    collapse_plan,
    collapsed_of,
    listed_tokens,
    placements_of,
)

__all__ = ["COLLAPSED_KIND", "PICTURE_CELLS", "Pictures", "collapsed", "collapsed_result", "encode_picture",
           "encode_pictures", "listed_tokens", "picture_data", "picture_page"]

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..render.page import Page
    from ..result import AttentionResult

PICTURE_SIDE = 512
"""Pixels of a picture's long side at most, as the page embeds it (a larger one is downscaled)."""


def encode_picture(image: Any, side: int = PICTURE_SIDE) -> dict[str, Any]:
    """An RGB ``PIL.Image`` as the page embeds it: at most ``side`` pixels on its long side, as the smaller of a JPEG
    and a PNG, a ``data:`` URL (``src``) with its ``width`` and ``height``."""
    from PIL import Image

    shown = image.convert("RGB")
    if max(shown.size) > side:
        shown = shown.copy()
        shown.thumbnail((side, side), Image.Resampling.LANCZOS)
    found = []
    for kind, options in (("jpeg", {"quality": 85}), ("png", {"optimize": True})):
        buffer = io.BytesIO()
        shown.save(buffer, format=kind.upper(), **options)
        found.append((len(buffer.getvalue()), kind, buffer.getvalue()))
    _, kind, data = min(found)
    return {"src": f"data:image/{kind};base64," + base64.b64encode(data).decode("ascii"),
            "width": int(shown.size[0]), "height": int(shown.size[1])}


def encode_pictures(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Each picture at ``paths`` read as untrusted input (:func:`attnviz.images.files.read_image`) and encoded."""
    from ..images.files import read_image

    return [encode_picture(read_image(path)) for path in paths]


def collapsed(result: AttentionResult, positions: Sequence[int] | None = None) -> dict[str, Any]:
    """The attention with each picture's tokens (less the special tokens its layout puts first: an encoder's [CLS])
    as one row and column labelled ``<image N: rows×cols>``: a row's weight on the picture is the sum of its weights
    on the picture's tokens, the picture's row the mean of its tokens' rows. ``positions``: the result's layers
    (default: all). Returns ``layer(position)`` (one layer's ``[H, T', T']`` float32, made when asked: a page adds
    one layer at a time, so a 10,000-token text never holds a second copy of every layer), ``tokens``, ``special``,
    ``index`` (each token's row), ``first`` (each row's first token), ``pictures`` (each picture's row) and
    ``positions``."""
    import torch

    plan = collapse_plan(result)
    size = len(plan["first"])
    at = torch.tensor(plan["index"])
    counts = torch.bincount(at, minlength=size).float()

    def layer(position: int) -> torch.Tensor:
        """One layer collapsed (its columns summed, then its rows averaged)."""
        attn = result.attentions[position]  # [H, T, T], no copy
        out = torch.zeros(attn.shape[0], size, size)
        collapse_into(out, 0, attn, at)
        return out.div_(counts[:, None])

    return {**plan, "layer": layer,
            "positions": list(range(result.attentions.shape[0])) if positions is None else list(positions)}


def collapsed_result(result: AttentionResult) -> AttentionResult:
    """``result`` with each picture's tokens one token (:func:`collapsed`), every layer: what a terminal's matrices
    show of it. ``metadata["collapsed"]["first"]``: each token's first token in ``result``. (A result read a layer
    at a time for the terminal carries it made already: :class:`~attnviz.views.picture_parts.PictureRows`.)"""
    import torch

    if isinstance(result, PictureRows) and result.collapsed is not None:
        return result.collapsed
    plan = collapsed(result)
    weights = torch.stack([plan["layer"](position) for position in plan["positions"]])
    return collapsed_of(result, plan, weights)


def picture_data(result: AttentionResult, pictures: Sequence[dict[str, Any]], *, positions: Sequence[int],
                 layers: Sequence[int], expand: bool = False) -> dict[str, Any]:
    """What the picture view reads (see the module): ``pictures`` as :func:`encode_picture` made them (one per
    of the result's pictures, in order); ``positions``: the result's layers the page holds, ``layers`` their
    model numbers. The weights of the listed tokens (``queries``) on every picture's patches (each picture's
    ``positions``, in order: picture n's start at its ``at``), a ``[queries, patches]`` tile per head and per layer's
    mean (:func:`attnviz.render.pyramid.encode_tile`)."""
    return _parts(result, pictures, positions=positions, layers=layers, expand=expand).data()


def _parts(result: AttentionResult, pictures: Sequence[dict[str, Any]], *, positions: Sequence[int],
           layers: Sequence[int], expand: bool) -> PictureParts:
    """The picture parts of a whole result's layers (:class:`~attnviz.views.picture_parts.PictureParts`)."""
    parts = PictureParts(result, pictures, layers=layers, heads=int(result.attentions.shape[1]), expand=expand)
    for position, number in zip(positions, layers, strict=True):
        parts.add_layer(number, result.attentions[position])
    return parts


def picture_page(result: AttentionResult, pictures: Sequence[dict[str, Any]], *, text: str | None = None,
                 layer: int | None = None, head: int = 0, view: str = "picture", stats: bool = True,
                 expand: bool = False, **build: Any) -> Page:
    """The page of a picture ``result`` (see the module): ``pictures`` as :func:`encode_picture` made them;
    ``text``: what the model read beside them (for the title); ``layer``: one layer (default: every one);
    ``head``, ``view``, ``stats`` as :func:`~attnviz.views.pages.page_view`'s, and ``build`` passed on to it (a
    server's ``hold``, ``layers_out``, ``checkpoint``); ``expand``: the matrix view opens on every image token.
    A vision-language model's long prompt: :func:`attnviz.views.picture_stream.streamed_picture_page` builds the
    same page as the model computes each layer, never holding the result."""
    from ..render.page_views import check_view
    from ..sources.saved import SavedSource
    from .pages import page_view

    check_view(view)
    placements_of(result)
    source = SavedSource(result, result.model_name or "pictures")
    n_layers = len(source.layer_numbers)
    if layer is not None:
        from ..layer_range import check_layer

        check_layer(layer, owner=source.name, count=n_layers)
    # The page every text gets, opened on its head view where the picture view is asked (the views are the same).
    page = page_view(source, None, layer=layer, head=head, stats=stats, view="head" if view == "picture" else view,
                     **build)
    page.initial["view"] = view
    layers = list(page.kinds["self"]["layers"])
    positions = [source.layer_numbers.index(number) for number in layers]
    _parts(result, pictures, positions=positions, layers=layers, expand=expand).finish(page)
    page.title = picture_title(result.model_name, text, placements_of(result))
    return page


def picture_title(model: str, text: str | None, metas: Sequence[Placement]) -> str:
    """A picture page's title: the model, and what it read (the text, beside the pictures)."""
    names = ", ".join(meta.file_name or f"picture {n + 1}" for n, meta in enumerate(metas))
    read = f"{_quoted(text)} beside {names}" if text is not None else names
    return f"{model} · {read}"


def _quoted(text: str, limit: int = 60) -> str:
    one_line = " ".join(text.split())
    return repr(one_line if len(one_line) <= limit else one_line[: limit - 1] + "…")


@dataclass
class Pictures:
    """A server's pictures, fixed at its start (``attnviz serve --image``): ``read(text)`` runs the model over a text
    beside them (an :class:`~attnviz.result.AttentionResult` with ``metadata["images"]``), ``images`` as
    :func:`encode_picture` made them (once), ``name`` the model's."""

    read: Callable[[str], AttentionResult]
    images: list[dict[str, Any]]
    name: str
    expand: bool = False

    def page(self, text: str, **build: Any) -> Page:
        """The page of ``text`` read beside the pictures, opened on the picture view."""
        return picture_page(self.read(text), self.images, text=text, expand=self.expand, **build)

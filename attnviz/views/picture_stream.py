"""A vision-language model's picture page, and the terminal's picture result, built as the model computes each layer
(issue 59, item 5): nothing holds every layer, and on the fused engine nothing holds one layer's ``[H, T, T]``.

A 1,344-pixel picture on LLaVA-NeXT is ~10,000 image tokens: every layer's weights are gigabytes (4 layers × 8 heads
of 10,017 tokens: 12.8 GB). :func:`streamed_picture_page` runs the model once (:meth:`~attnviz.images.vlm.
VisionLanguageModel.stream`) and reads each layer a block of query rows at a time, as the long-text page does: each
block goes to the page's every-token matrix (a pyramid of max-pooled tiles) and head statistics
(:class:`~attnviz.views.page_parts.PageCollector`), and to the picture parts (:class:`~attnviz.views.picture_parts.
PictureParts`: the matrix with each picture collapsed, the listed tokens' weights on the patches), then is let go.
The page is the one :func:`attnviz.views.picture_page.picture_page` makes of the whole result.

:class:`StreamedPictures` is what ``tui --image`` reads a text through: the collapsed result (every layer, each
picture one token) and, of the full one, only the rows its picture view can show (one per row of the collapsed
matrix), made in the same single pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..result import AttentionResult
from .picture_parts import PictureParts, PictureRows, collapse_into, collapse_plan, collapsed_of

if TYPE_CHECKING:  # pragma: no cover

    from ..render.page import Page


def streamed_picture_page(model: Any, text: str, paths: Sequence[str | Path], pictures: Sequence[dict[str, Any]], *,
                          layer: int | None = None, head: int = 0, view: str = "picture", stats: bool = True,
                          expand: bool = False) -> Page:
    """The page of ``text`` read beside the pictures at ``paths`` by ``model`` (a loaded
    :class:`~attnviz.images.vlm.VisionLanguageModel`), ``pictures`` as
    :func:`~attnviz.views.picture_page.encode_picture` made them; the other arguments as
    :func:`~attnviz.views.picture_page.picture_page`'s. Built layer by layer as the model computes them (see the
    module)."""
    from ..render.page_views import check_view
    from .page_parts import PageCollector, with_steps
    from .picture_page import picture_title

    check_view(view)
    stream = model.stream(text, paths)
    header = stream.header
    from ..layer_range import check_head, check_layer

    if layer is not None:
        check_layer(layer, owner=header.model_name, count=stream.layers)
    check_head(head, owner=header.model_name, count=stream.heads)
    layers = list(range(stream.layers)) if layer is None else [layer]
    collector = PageCollector(layers, stats, "the config's input")
    parts = PictureParts(header, pictures, layers=layers, heads=stream.heads, expand=expand)

    def each(number: int, item: Any, causal: bool) -> None:
        if number not in layers:
            return
        # the page's every-token matrix and statistics read the layer's blocks; each is collapsed on the way
        collector.add(replace(header, causal=causal), layers.index(number), parts.blocks(item))
        parts.end(number)

    stream.run(each)
    shown = "head" if view in ("picture", "qk") else view
    if view == "qk":  # (a command refuses it first): as the page of a whole result does
        from ..errors import AttnvizWarning

        warnings.warn("[[view=qk]]: the picture models' engines hand out no query and key vectors; the page opens "
                      "on the head view", AttnvizWarning, stacklevel=2)
    page = with_steps(collector.finish(head=head, kind="self", view=shown), header)
    page.initial["view"] = shown if view == "qk" else view
    parts.finish(page)
    page.title = picture_title(header.model_name, text, header.pictures)
    return page


@dataclass
class StreamedPictures:
    """A loaded vision-language model (``model``) read for ``tui --image``: :meth:`read` as the model's own ``read``
    but keeping, of the full result, only what the terminal shows (see :class:`~attnviz.views.picture_parts.PictureRows`)."""

    model: Any

    @property
    def name(self) -> str:
        return str(self.model.name)

    @property
    def engine(self) -> str:
        return str(self.model.engine)

    def read(self, text: str, pictures: Sequence[str | Path]) -> PictureRows:
        """``text`` read beside ``pictures``, a layer at a time."""
        import torch

        stream = self.model.stream(text, pictures)
        header = stream.header
        plan = collapse_plan(header)
        size, n = len(plan["first"]), len(header.tokens)
        rows = sorted({*plan["first"], n - 1})  # each collapsed row's first token, and the last (shown first)
        at = torch.tensor(plan["index"])
        counts = torch.bincount(at, minlength=size).float()
        kept = torch.zeros(stream.layers, stream.heads, len(rows), n)
        sums = torch.zeros(stream.layers, stream.heads, size, size)
        place = torch.full((n,), -1, dtype=torch.long)
        place[torch.tensor(rows)] = torch.arange(len(rows))

        def each(number: int, item: Any, causal: bool) -> None:
            for first, block in item.row_blocks():
                collapse_into(sums[number], first, block, at)
                here = place[first : first + block.shape[1]]
                local = torch.nonzero(here >= 0).flatten()
                kept[number][:, here[local], : block.shape[2]] = block[:, local].float()

        stream.run(each)
        collapsed = collapsed_of(header, plan, sums.div_(counts[:, None]))
        return PictureRows(**{**_fields(header), "attentions": kept, "metadata": {**header.metadata, "rows": rows}},
                           collapsed=collapsed)


def _fields(result: AttentionResult) -> dict[str, Any]:
    """A result's fields, as its constructor takes them."""
    from dataclasses import fields

    return {f.name: getattr(result, f.name) for f in fields(AttentionResult)}

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

from ..errors import UsageError
from ..result.placement import Placement, image_token_positions

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..render.page import Page
    from ..result import AttentionResult

PICTURE_SIDE = 512
"""Pixels of a picture's long side at most, as the page embeds it (a larger one is downscaled)."""

PICTURE_CELLS = 16_000_000
"""Weights (layers × heads × tokens listed × patches) up to which the picture view holds each head's; beyond, each
layer's mean of the heads only (the page says so)."""

COLLAPSED_KIND = "pictures"
"""The page's kind holding the matrix with each picture's tokens collapsed (hidden from the kind chooser)."""


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


def _metas(result: AttentionResult) -> list[Placement]:
    metas = result.pictures
    if not metas:
        raise UsageError("the picture page needs a result of attnviz.images (with pictures): none here")
    if result.attentions.shape[-2] != len(result.tokens):
        raise UsageError("the picture page reads every token's row; this result holds only some "
                         "(metadata['rows']): compute it with rows='all'")
    return list(metas)


def listed_tokens(result: AttentionResult) -> list[int]:
    """The tokens the picture view lists (its queries): those outside every picture (a vision-language model's
    text), or every token where all are a picture's (an image encoder's [CLS] and patches)."""
    inside = set(image_token_positions(_metas(result)))
    outside = [i for i in range(len(result.tokens)) if i not in inside]
    return outside or list(range(len(result.tokens)))


def collapsed(result: AttentionResult, positions: Sequence[int] | None = None) -> dict[str, Any]:
    """The attention with each picture's tokens (less the special tokens its layout puts first: an encoder's [CLS])
    as one row and column labelled ``<image N: rows×cols>``: a row's weight on the picture is the sum of its weights
    on the picture's tokens, the picture's row the mean of its tokens' rows. ``positions``: the result's layers
    (default: all). Returns ``layer(position)`` (one layer's ``[H, T', T']`` float32, made when asked: a page adds
    one layer at a time, so a 10,000-token text never holds a second copy of every layer), ``tokens``, ``special``,
    ``index`` (each token's row), ``first`` (each row's first token), ``pictures`` (each picture's row) and
    ``positions``."""
    import torch

    metas = _metas(result)
    n = len(result.tokens)
    block = {p: number for number, meta in enumerate(metas) for p in meta.patch_positions}
    special = list(result.special or [False] * n)
    index: list[int] = [0] * n
    first: list[int] = []
    tokens: list[str] = []
    flags: list[bool] = []
    rows_of: dict[int, int] = {}  # each picture's row
    for t in range(n):
        number = block.get(t)
        if number is not None and number in rows_of:
            index[t] = rows_of[number]
            continue
        index[t] = len(first)
        first.append(t)
        if number is None:
            tokens.append(result.tokens[t])
            flags.append(bool(special[t]))
        else:
            rows_of[number] = index[t]
            tokens.append(f"<image {number + 1}: {metas[number].rows}×{metas[number].cols}>")
            flags.append(False)
    at = torch.tensor(index)
    size = len(first)
    counts = torch.bincount(at, minlength=size).float()

    def layer(position: int) -> torch.Tensor:
        """One layer collapsed, a head at a time (its columns summed, then its rows averaged)."""
        attn = result.attentions[position]  # [H, T, T], no copy
        out = torch.empty(attn.shape[0], size, size)
        for head in range(attn.shape[0]):
            columns = torch.zeros(n, size).index_add_(1, at, attn[head].float())
            out[head] = torch.zeros(size, size).index_add_(0, at, columns).div_(counts[:, None])
        return out

    return {"layer": layer, "tokens": tokens, "special": flags, "index": index, "first": first,
            "pictures": list(rows_of.values()),
            "positions": list(range(result.attentions.shape[0])) if positions is None else list(positions)}


def collapsed_result(result: AttentionResult) -> AttentionResult:
    """``result`` with each picture's tokens one token (:func:`collapsed`), every layer: what a terminal's matrices
    show of it. ``metadata["collapsed"]["first"]``: each token's first token in ``result``."""
    from collections import Counter

    import torch

    from ..result import AttentionResult

    plan = collapsed(result)
    weights = torch.stack([plan["layer"](position) for position in plan["positions"]])
    metadata = {k: v for k, v in result.metadata.items() if k not in ("images", "rows")}
    sizes = Counter(plan["index"])  # a row made of several tokens (a picture) has no one token id
    return AttentionResult(tokens=plan["tokens"], attentions=weights, special=plan["special"],
                           token_ids=[result.token_ids[t] if sizes[plan["index"][t]] == 1 else -1
                                      for t in plan["first"]],
                           causal=all(bool((layer[h].triu(1) == 0).all()) for layer in weights
                                      for h in range(weights.shape[1])),
                           model_name=result.model_name, metadata={**metadata, "collapsed": {"first": plan["first"]}})


def picture_data(result: AttentionResult, pictures: Sequence[dict[str, Any]], *, positions: Sequence[int],
                 layers: Sequence[int], expand: bool = False, plan: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the picture view reads (see the module): ``pictures`` as :func:`encode_picture` made them (one per
    of the result's pictures, in order); ``positions``: the result's layers the page holds, ``layers`` their
    model numbers. The weights of the listed tokens (``queries``) on every picture's patches (each picture's
    ``positions``, in order: picture n's start at its ``at``), a ``[queries, patches]`` tile per head and per layer's
    mean (:func:`attnviz.render.pyramid.encode_tile`). ``plan``: :func:`collapsed`'s of these layers, where made."""
    from ..render.pyramid import FLOAT16_CELLS, encode_tile

    metas = _metas(result)
    if len(pictures) != len(metas):
        raise UsageError(f"{len(pictures)} pictures for a result of {len(metas)}")
    images: list[dict[str, Any]] = []
    keys: list[int] = []
    for number, (meta, shown) in enumerate(zip(metas, pictures, strict=True)):
        images.append({"label": f"picture {number + 1}", "name": meta.file_name,
                       "src": shown["src"], "width": shown["width"], "height": shown["height"],
                       "size": list(meta.size), "layout": meta.layout, "rows": meta.rows, "cols": meta.cols,
                       "patch": meta.patch, "boxes": [[float(v) for v in box] for box in meta.boxes],
                       "positions": list(meta.positions), "tokens": list(meta.image_positions), "at": len(keys)})
        keys += list(meta.positions)
    queries = listed_tokens(result)
    heads = int(result.attentions.shape[1])
    cells = len(positions) * heads * len(queries) * len(keys)
    encoding = "f16" if cells <= FLOAT16_CELLS else "log8"
    each = cells <= PICTURE_CELLS
    weights, mean = [], []
    for position in positions:
        layer = result.attentions[position].float()[:, queries][:, :, keys]  # [H, Q, P]
        mean.append(encode_tile(layer.double().mean(0).float().numpy(), encoding))
        if each:
            weights.append([encode_tile(layer[h].numpy(), encoding) for h in range(heads)])
    plan = collapsed(result, positions) if plan is None else plan
    return {"images": images, "queries": queries, "layers": [int(v) for v in layers], "heads": heads,
            "encoding": encoding, "weights": weights if each else None, "mean": mean,
            "collapsed": {"kind": COLLAPSED_KIND, "index": plan["index"], "first": plan["first"]},
            "expand": bool(expand)}


def picture_page(result: AttentionResult, pictures: Sequence[dict[str, Any]], *, text: str | None = None,
                 layer: int | None = None, head: int = 0, view: str = "picture", stats: bool = True,
                 expand: bool = False, **build: Any) -> Page:
    """The page of a picture ``result`` (see the module): ``pictures`` as :func:`encode_picture` made them;
    ``text``: what the model read beside them (for the title); ``layer``: one layer (default: every one);
    ``head``, ``view``, ``stats`` as :func:`~attnviz.views.pages.page_view`'s, and ``build`` passed on to it (a
    server's ``hold``, ``layers_out``, ``checkpoint``); ``expand``: the matrix view opens on every image token."""
    from ..render.page import PageBuilder
    from ..render.page_views import check_view
    from ..sources.saved import SavedSource
    from .page_parts import page_sinks
    from .pages import page_view

    check_view(view)
    metas = _metas(result)
    source = SavedSource(result, result.model_name or "pictures")
    n_layers = len(source.layer_numbers)
    if layer is not None and layer not in source.layer_numbers:
        raise UsageError(f"[[layer={layer}]] is out of range; {source.name} has layers 0 to {n_layers - 1}")
    # The page every text gets, opened on its head view where the picture view is asked (the views are the same).
    page = page_view(source, None, layer=layer, head=head, stats=stats, view="head" if view == "picture" else view,
                     **build)
    page.initial["view"] = view
    layers = list(page.kinds["self"]["layers"])
    positions = [source.layer_numbers.index(number) for number in layers]
    plan = collapsed(result, positions)
    page.pictures = picture_data(result, pictures, positions=positions, layers=layers, expand=expand, plan=plan)
    size = len(plan["tokens"])
    builder = PageBuilder(page.title, page.model, cells=int(result.attentions.shape[1]) * size * size * len(layers),
                          layers=len(layers), sinks=page_sinks)
    for position, number in zip(positions, layers, strict=True):
        weights = plan["layer"](position)  # causal as its weights are (Gemma 3's picture block is one cell here)
        causal = all(bool((weights[head].triu(1) == 0).all()) for head in range(weights.shape[0]))
        builder.add_layer(number, weights, rows=plan["tokens"], cols=plan["tokens"], causal=causal,
                          row_special=plan["special"], col_special=plan["special"])
        del weights
    kind = page.kinds[COLLAPSED_KIND] = builder.finish().kinds["self"]
    for row in plan["pictures"]:  # its label as written (a page shows a token's spaces as ␣)
        kind["rows"][row] = kind["cols"][row] = plan["tokens"][row]
    names = ", ".join(meta.file_name or f"picture {n + 1}" for n, meta in enumerate(metas))
    read = f"{_quoted(text)} beside {names}" if text is not None else names
    page.title = f"{result.model_name} · {read}"
    if page.pictures["weights"] is None:
        page.notes.append(f"the picture view holds each layer's mean of the heads only: each head's weights on the "
                          f"{sum(m.rows * m.cols for m in metas):,} patches would be over "
                          f"{PICTURE_CELLS:,} (give one [[layer]] for each head's)")
    return page


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

"""What a picture page holds beside the page every text gets, made a layer at a time from blocks of query rows
(:class:`PictureParts`): the matrix with each picture's tokens as one row and column (a page kind,
:data:`COLLAPSED_KIND`), and the picture view's ``[queries, patches]`` tiles. A layer given whole is one block; a
long prompt's layer comes a block of rows at a time as the model computes it (:mod:`.picture_stream`), and each
block is reduced and let go, so the parts cost what they keep: the collapsed sums (text tokens + one row a picture)
and the listed tokens' rows on the patches, never a layer's ``[H, T, T]``.

The numbers are those of the whole layer: a row's weights on a picture are summed key by key in order and the
picture's rows added row by row in order (``index_add_``), as for the whole layer at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..result import AttentionResult
from ..result.placement import Placement, image_token_positions

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..render.page import Page

PICTURE_CELLS = 16_000_000
"""Weights (layers × heads × tokens listed × patches) up to which the picture view holds each head's; beyond, each
layer's mean of the heads only (the page says so)."""

COLLAPSED_KIND = "pictures"
"""The page's kind holding the matrix with each picture's tokens collapsed (hidden from the kind chooser)."""


def placements_of(result: AttentionResult) -> list[Placement]:
    """The pictures of a result every row of which the page reads (refused, one line, otherwise)."""
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
    inside = set(image_token_positions(placements_of(result)))
    outside = [i for i in range(len(result.tokens)) if i not in inside]
    return outside or list(range(len(result.tokens)))


def collapse_plan(result: AttentionResult) -> dict[str, Any]:
    """Which row of the collapsed matrix each token is (each picture's tokens, less the special ones its layout
    puts first, one row labelled ``<image N: rows×cols>``): ``tokens``, ``special``, ``index`` (each token's row),
    ``first`` (each row's first token), ``pictures`` (each picture's row)."""
    metas = placements_of(result)
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
    return {"tokens": tokens, "special": flags, "index": index, "first": first, "pictures": list(rows_of.values())}


def collapse_into(sums: torch.Tensor, first: int, block: torch.Tensor, at: torch.Tensor) -> None:
    """Query rows ``first …`` of a layer (``block`` ``[H, rows, width]``; keys from ``width`` on are 0) added to its
    collapsed sums ``[H, size, size]``: each row's weights summed per row of the collapsed matrix (``at``: each
    token's), then added to its own token's row."""
    import torch

    rows, width = int(block.shape[1]), int(block.shape[2])
    columns = torch.zeros(block.shape[0], rows, sums.shape[-1]).index_add_(2, at[:width], block.float())
    sums.index_add_(1, at[first : first + rows], columns)


def collapsed_of(result: AttentionResult, plan: dict[str, Any], weights: torch.Tensor) -> AttentionResult:
    """``result``'s tokens collapsed as ``plan`` (:func:`collapse_plan`) says, with ``weights`` ``[L, H, T', T']``
    (its layers collapsed): what a terminal's matrices show. ``metadata["collapsed"]["first"]``: each token's first
    token in ``result``."""
    from collections import Counter

    metadata = {k: v for k, v in result.metadata.items() if k not in ("images", "rows")}
    sizes = Counter(plan["index"])  # a row made of several tokens (a picture) has no one token id
    return AttentionResult(tokens=plan["tokens"], attentions=weights, special=plan["special"],
                           token_ids=[result.token_ids[t] if sizes[plan["index"][t]] == 1 else -1
                                      for t in plan["first"]],
                           causal=all(bool((layer[h].triu(1) == 0).all()) for layer in weights
                                      for h in range(weights.shape[1])),
                           model_name=result.model_name, metadata={**metadata, "collapsed": {"first": plan["first"]}})


@dataclass
class PictureRows(AttentionResult):
    """A vision-language model's result read for the terminal (:class:`attnviz.views.picture_stream.
    StreamedPictures`): the rows its picture view shows (``metadata["rows"]``: the first token of each row of the
    collapsed matrix, and the last token), over every token, and the ``collapsed`` result (each picture one token,
    every layer), both made in one pass over the model's layers."""

    collapsed: AttentionResult | None = field(default=None, repr=False)


class PictureParts:
    """The collapsed matrix and the picture view's tiles of ``header``'s tokens (a result, or its tokens and
    pictures alone), for the page's layers: ``positions`` (the result's; only for the data's record) and ``layers``
    (the model's numbers). Each layer: :meth:`begin`, :meth:`add` each block of rows in order, :meth:`end`; or
    :meth:`add_layer` for a whole one, :meth:`blocks` to read an engine's layer through. Then :meth:`finish`."""

    def __init__(self, header: AttentionResult, pictures: Sequence[dict[str, Any]], *, layers: Sequence[int],
                 heads: int, expand: bool = False) -> None:
        import torch

        from ..render.page import PageBuilder
        from ..render.pyramid import FLOAT16_CELLS
        from .page_parts import page_sinks

        metas = placements_of(header)
        if len(pictures) != len(metas):
            raise UsageError(f"{len(pictures)} pictures for a result of {len(metas)}")
        self.metas, self.layers, self.heads, self.expand = metas, [int(v) for v in layers], int(heads), bool(expand)
        self.images: list[dict[str, Any]] = []
        keys: list[int] = []
        for number, (meta, shown) in enumerate(zip(metas, pictures, strict=True)):
            self.images.append({"label": f"picture {number + 1}", "name": meta.file_name,
                                "src": shown["src"], "width": shown["width"], "height": shown["height"],
                                "size": list(meta.size), "layout": meta.layout, "rows": meta.rows, "cols": meta.cols,
                                "patch": meta.patch, "boxes": [[float(v) for v in box] for box in meta.boxes],
                                "positions": list(meta.positions), "tokens": list(meta.image_positions),
                                "at": len(keys)})
            keys += list(meta.positions)
        self.queries = listed_tokens(header)
        self.plan = collapse_plan(header)
        n, size = len(header.tokens), len(self.plan["tokens"])
        self.at = torch.tensor(self.plan["index"])
        self.counts = torch.bincount(self.at, minlength=size).float()
        self.keys = torch.tensor(keys, dtype=torch.long)
        self.query_at = torch.full((n,), -1, dtype=torch.long)  # each token's place among the queries (-1: none)
        self.query_at[torch.tensor(self.queries, dtype=torch.long)] = torch.arange(len(self.queries))
        cells = len(self.layers) * self.heads * len(self.queries) * len(keys)
        self.encoding = "f16" if cells <= FLOAT16_CELLS else "log8"
        self.each = cells <= PICTURE_CELLS
        self.weights: list[list[str]] = []
        self.mean: list[str] = []
        self.builder = PageBuilder("", "", cells=self.heads * size * size * len(self.layers), layers=len(self.layers),
                                   sinks=page_sinks)
        self._sums: torch.Tensor | None = None
        self._picked: torch.Tensor | None = None

    def begin(self, heads: int) -> None:
        """A layer of ``heads`` heads begins."""
        import torch

        size = len(self.plan["tokens"])
        self._sums = torch.zeros(heads, size, size)
        self._picked = torch.zeros(heads, len(self.queries), len(self.keys))

    def add(self, first: int, block: torch.Tensor) -> None:
        """The layer's query rows ``first …`` (``[H, rows, width]``, in order; keys from ``width`` on are 0)."""
        import torch

        if self._sums is None or self._picked is None:
            raise ValueError("a block of rows before its layer began")
        collapse_into(self._sums, first, block, self.at)
        places = self.query_at[first : first + block.shape[1]]
        local = torch.nonzero(places >= 0).flatten()
        if local.numel():
            seen = torch.nonzero(self.keys < block.shape[2]).flatten()  # the keys these rows may see (the rest: 0)
            self._picked[:, places[local][:, None], seen[None, :]] = block[:, local][:, :, self.keys[seen]].float()

    def end(self, layer: int) -> None:
        """The layer (the model's number ``layer``) done: its collapsed matrix added to the page's kind, its tiles
        encoded; nothing of it kept but those."""
        from ..render.pyramid import encode_tile

        if self._sums is None or self._picked is None:
            raise ValueError("a layer ended before it began")
        weights = self._sums.div_(self.counts[:, None])
        picked, self._sums, self._picked = self._picked, None, None
        self.mean.append(encode_tile(picked.double().mean(0).float().numpy(), self.encoding))
        if self.each:
            self.weights.append([encode_tile(picked[h].numpy(), self.encoding) for h in range(picked.shape[0])])
        del picked
        # causal as its weights are (Gemma 3's picture block is one cell here)
        causal = all(bool((weights[head].triu(1) == 0).all()) for head in range(weights.shape[0]))
        tokens, flags = self.plan["tokens"], self.plan["special"]
        self.builder.add_layer(layer, weights, rows=tokens, cols=tokens, causal=causal, row_special=flags,
                               col_special=flags)

    def add_layer(self, layer: int, attentions: torch.Tensor) -> None:
        """A whole layer ``[H, T, T]`` (one block)."""
        self.begin(int(attentions.shape[0]))
        self.add(0, attentions)
        self.end(layer)

    def blocks(self, layer: Any) -> _Blocks:
        """``layer`` (anything with ``n_heads`` and ``row_blocks(rows)``: an engine's
        :class:`~attnviz.sources.stream.ItemLayer`) read through: each block its reader gets is added here too."""
        self.begin(int(layer.n_heads))
        return _Blocks(layer, self)

    def data(self) -> dict[str, Any]:
        """What the picture view reads (:func:`attnviz.views.picture_page.picture_data`)."""
        return {"images": self.images, "queries": self.queries, "layers": self.layers, "heads": self.heads,
                "encoding": self.encoding, "weights": self.weights if self.each else None, "mean": self.mean,
                "collapsed": {"kind": COLLAPSED_KIND, "index": self.plan["index"], "first": self.plan["first"]},
                "expand": self.expand}

    def finish(self, page: Page) -> None:
        """The parts put on ``page``: its collapsed kind and its picture view's data."""
        page.pictures = self.data()
        kind = page.kinds[COLLAPSED_KIND] = self.builder.finish().kinds["self"]
        for row in self.plan["pictures"]:  # its label as written (a page shows a token's spaces as ␣)
            kind["rows"][row] = kind["cols"][row] = self.plan["tokens"][row]
        if not self.each:
            page.notes.append(f"the picture view holds each layer's mean of the heads only: each head's weights on the "
                              f"{sum(m.rows * m.cols for m in self.metas):,} patches would be over "
                              f"{PICTURE_CELLS:,} (give one [[layer]] for each head's)")


class _Blocks:
    """A layer's blocks of rows, each also added to :class:`PictureParts` as its reader takes it."""

    def __init__(self, layer: Any, parts: PictureParts) -> None:
        self.layer, self.parts, self.n_heads = layer, parts, int(layer.n_heads)

    def row_blocks(self, rows: int | None = None) -> Iterator[tuple[int, Any]]:
        for first, block in self.layer.row_blocks(rows):
            self.parts.add(first, block)
            yield first, block

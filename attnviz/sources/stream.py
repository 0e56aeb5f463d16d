"""Layers one at a time: what an engine computes per layer, cut per text, and collected when wanted.

An engine yields each layer of a padded batch as soon as it is computed (:class:`LayerOut`);
a :class:`LayerStream` cuts it per text (:class:`ItemLayer`, views, no copies) and hands it on.
A consumer that keeps only what it needs of each layer (statistics, an image, a file) never holds
every layer's ``[H, T, T]`` matrices at once: that is how long inputs fit in memory.
:func:`collect` stores every layer instead, for a whole :class:`AttentionResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..errors import NumericalError
from ..result import AttentionResult

if TYPE_CHECKING:  # pragma: no cover
    from ..attention.rows import AttentionRows


@dataclass(frozen=True)
class Capture:
    """What one run builds: which layers' attention matrices (``None``: every layer), and whether it
    keeps their pre-softmax scores and value vectors (``details``). Passed to every run, so a
    result depends on its arguments alone, never on what an earlier call set.

    ``grad`` runs with autograd recording (every layer's weights built, none through a fused kernel),
    so gradients with respect to the attention weights can be taken
    (:mod:`attnviz.sources.gradients`); by default no graph is built.

    ``rows`` hands each captured layer's weights over as blocks of query rows computed on demand
    (:class:`attnviz.attention.rows.AttentionRows`) instead of one ``[B, H, T, T]`` tensor: engines
    that can set it for inputs too long to hold a layer (:data:`ROWS_FROM_BYTES`)."""

    layers: frozenset[int] | None = None
    details: bool = False
    grad: bool = False
    rows: bool = False
    queries_keys: bool = False  # hand on each layer's queries and keys (without the rest of ``details``)
    values: bool = False  # hand on each layer's value vectors (without the rest of ``details``)

    def wants(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers


@dataclass
class LayerOut:
    """One layer of one padded batch, as an engine computed it: its weights whole, or as row blocks."""

    layer: int  # the model's number for it
    weights: Tensor | None  # [B, H, T, T]; None when given as ``rows``
    scores: Tensor | None = None  # [B, H, T, T], with details
    values: Tensor | None = None  # [B, H, T, d], with details
    value_norms: Tensor | None = None  # [B, H, T]: ‖f(x_j)‖ for norm-based attention (native engine)
    queries: Tensor | None = None  # [B, H, T, d], with details
    keys: Tensor | None = None  # [B, H, T, d], with details
    rows: AttentionRows | None = None  # the weights as row blocks on demand (``Capture.rows``)


# A layer whose [B, H, T, T] float32 weights would pass this many bytes is handed over as row blocks
# by engines that can (the native engine): consumers reduce block by block, so memory grows with T, not T².
ROWS_FROM_BYTES = 512 * 2**20

# ``Capture.rows`` (a server keeping each layer) asks for row blocks from this many tokens on; a shorter
# input's whole weights are small, and are extract's own numbers.
ROWS_ASKED_FROM_TOKENS = 512


class ItemLayer:
    """One layer of one text, cut out of its padded batch (views of the batch's tensors, no copies).

    Its weights ``[H, n, n]`` are either whole or made on demand from an engine's
    :class:`~attnviz.attention.rows.AttentionRows`. :meth:`row_blocks` reads them a block of query
    rows at a time either way, which is what long inputs need; ``attentions`` builds the whole
    matrix when a consumer needs every number at once (kept once built).
    """

    def __init__(self, layer: int, attentions: Tensor | None = None, scores: Tensor | None = None,
                 values: Tensor | None = None, value_norms: Tensor | None = None, queries: Tensor | None = None,
                 keys: Tensor | None = None, *, rows: tuple[AttentionRows, int, int] | None = None,
                 check: Callable[[Tensor], None] | None = None) -> None:
        if attentions is None and rows is None:
            raise ValueError("an ItemLayer needs its attentions or the rows to make them from")
        self.layer, self._attentions, self.scores, self.values = layer, attentions, scores, values
        self.value_norms, self.queries, self.keys = value_norms, queries, keys
        self._rows, self._check = rows, check

    @property
    def lazy(self) -> bool:
        """True while the weights are made block by block (never built whole yet)."""
        return self._attentions is None

    @property
    def made_from(self) -> tuple[AttentionRows, int, int] | None:
        """What weights made on demand come from: ``(rows, item, n)``, the layer's queries and keys
        (O(T·d), not O(T²)), this text's index in the batch and its length; None for whole weights."""
        return self._rows

    @property
    def n_tokens(self) -> int:
        return int(self.attentions.shape[-1]) if self._rows is None else self._rows[2]

    @property
    def n_heads(self) -> int:
        return int(self.attentions.shape[0]) if self._rows is None else self._rows[0].n_heads

    def _made(self) -> tuple[AttentionRows, int, int]:
        """``made_from``, for weights not held whole (a layer holds its weights whole, or what makes them)."""
        if self._rows is None:
            raise ValueError("this layer holds its weights whole")
        return self._rows

    @property
    def attentions(self) -> Tensor:
        """``[H, n, n]``, built whole from the row blocks the first time it is asked for."""
        if self._attentions is None:
            rows, item, n = self._made()
            self._attentions = rows.dense(item, n)  # on the CPU, as a consumer stores it
            if self._check is not None:
                self._check(self._attentions)
        return self._attentions

    def rows(self, first: int, stop: int, cols: tuple[int, int] | None = None) -> Tensor:
        """Query rows ``first … stop − 1`` of every head over keys ``cols`` (default all),
        ``[H, rows, keys]`` on the CPU: of weights made on demand, those rows alone are computed, a
        block at a time, each cut to those keys at once (a region of a long input stays small)."""
        low, high = (0, self.n_tokens) if cols is None else cols
        if self._attentions is not None:
            return self._attentions[:, first:stop, low:high].cpu()
        from ..attention.rows import rows_per_block

        source, item, n = self._made()
        out = torch.zeros(self.n_heads, stop - first, high - low)
        step = rows_per_block(self.n_heads, n)
        for start in range(first, stop, step):
            block = source.block(item, start, min(stop, start + step), n)
            if self._check is not None:
                self._check(block)
            seen = block[:, :, low:high].cpu()  # causal blocks leave out the keys after their last row (0)
            out[:, start - first : start - first + block.shape[1], : seen.shape[2]] = seen
        return out

    def row_blocks(self, rows: int | None = None) -> Iterator[tuple[int, Tensor]]:
        """``(first row, block [H, rows, width])`` over every query row in order, on the CPU (where the
        statistics and pictures are reduced; a block computed on a GPU is copied over). Columns from
        ``width`` on are exactly 0 for those rows and left out (causal attention), so a block costs
        what its rows can see. Whole weights are cut into views; row-block weights are computed per block."""
        from ..attention.rows import rows_per_block

        if self._attentions is not None:
            from ..analysis.row_statistics import blocks_of

            for first, block in blocks_of(self._attentions, rows or rows_per_block(self.n_heads, self.n_tokens),
                                          causal_trim=True):
                yield first, block.cpu()
            return
        source, item, n = self._made()
        for first, block in source.blocks(item, n, rows):
            if self._check is not None:
                self._check(block)
            yield first, block.cpu()


class LayerStream:
    """The captured layers of one padded batch, computed one at a time as they are iterated.

    ``results`` describe each text (tokens, ids, flags, metadata) and hold no attentions yet
    (``[0, 0, n, n]``); each step yields one :class:`ItemLayer` per text. A consumer that keeps
    only what it needs of each layer (statistics, an image, a file) never holds every layer's
    ``[H, T, T]`` matrices at once: that is how long inputs fit in memory. A stream is iterated once.
    """

    def __init__(self, results: list[AttentionResult], layers: list[int], outs: Iterator[LayerOut]) -> None:
        self.results, self.layers, self._outs = results, layers, outs
        self.whole = False  # True when ``results`` already hold every layer (see :meth:`of_results`)
        # Row-block layers keep each row's normaliser as whole blocks are read (a server keeping the layers:
        # its tiles then compute only their own columns); set where the layers are kept (``Capture.rows``).
        self.keep_normalisers = False

    def __iter__(self) -> Iterator[tuple[int, list[ItemLayer]]]:
        """``(position, parts)``: the layer's index among ``layers``, and one :class:`ItemLayer` per text.

        (Not ``enumerate``: it keeps its last item until the next one is computed, which would
        hold two layers at once.)
        """
        lengths = [len(r.tokens) for r in self.results]
        position = 0
        name = self.results[0].model_name
        try:
            for out in self._outs:
                if out.weights is not None:
                    check_finite(out.weights, out.layer, name)
                if out.rows is not None and self.keep_normalisers and out.rows.memo is None:
                    out.rows.memo = {}
                yield position, [_cut(out, b, n, name) for b, n in enumerate(lengths)]
                del out  # before the next layer is computed: one layer's matrices at a time
                position += 1  # (not enumerate: it would keep the last layer alive)
        finally:  # a consumer that stops early (or fails) ends the engine's run now, not when collected
            close = getattr(self._outs, "close", None)
            if close is not None:
                close()

    @classmethod
    def of_results(cls, results: list[AttentionResult]) -> LayerStream:
        """A stream over results computed whole (config models, encoder-decoder models): the same
        consumers work on them; ``results`` keep everything (cross-attentions too), ``whole`` is True."""
        layers = results[0].metadata.get("layers") or list(range(results[0].n_layers))
        same = all(r.attentions.shape[-1] == results[0].attentions.shape[-1] for r in results)
        width = results[0].attentions.shape[-1] if same else max(r.attentions.shape[-1] for r in results)

        def outs() -> Iterator[LayerOut]:
            for position, layer in enumerate(layers):
                padded = torch.zeros(len(results), results[0].n_heads, width, width)
                norms = None if any(r.value_norms is None for r in results) else torch.zeros(len(results), results[0].n_heads, width)
                for b, r in enumerate(results):
                    n = r.attentions.shape[-1]
                    padded[b, :, :n, :n] = r.attentions[position]
                    if norms is not None and r.value_norms is not None:  # every text's, or no norms at all
                        norms[b, :, :n] = r.value_norms[position]
                yield LayerOut(layer=layer, weights=padded, value_norms=norms)

        stream = cls(results, list(layers), outs())
        stream.whole = True
        return stream


def check_finite(weights: Tensor, layer: int | str, model_name: str) -> None:
    """Refuse NaN attention where it arises. A softmax row holding a NaN or infinite score is NaN
    throughout, so the first key's column ([..., 0], one number per row) finds every such row."""
    if weights.numel() and not torch.isfinite(weights[..., 0]).all():
        raise NumericalError(f"{model_name or 'the model'} computed NaN attention weights in layer {layer}: its "
                             "scores overflowed. Check the model's weights (a config's init_scale, say) or its dtype")


def _cut(out: LayerOut, b: int, n: int, model_name: str = "") -> ItemLayer:
    def square(t: Tensor | None) -> Tensor | None:
        return None if t is None else t[b, :, :n, :n]

    def rows(t: Tensor | None) -> Tensor | None:
        return None if t is None else t[b, :, :n]

    whole = None if out.weights is None else out.weights[b, :, :n, :n]
    layer = out.layer
    return ItemLayer(layer, whole, square(out.scores), rows(out.values), rows(out.value_norms), rows(out.queries),
                     rows(out.keys), rows=None if out.rows is None else (out.rows, b, n),
                     check=lambda block: check_finite(block, layer, model_name))


def collect(stream: LayerStream, *, float16: bool = False) -> list[AttentionResult]:
    """Every layer of a stream, stored per text as it arrives (float16 halves the memory of long inputs)."""
    dtype = torch.float16 if float16 else torch.float32
    count = len(stream.layers)
    stores: list[Tensor | None] = [None] * len(stream.results)
    extras: list[dict[str, list[Tensor]]] = [{"scores": [], "values": [], "value_norms": [], "queries": [], "keys": []}
                                             for _ in stream.results]
    for position, parts in stream:
        _store(parts, position, count, dtype, stores, extras)
        del parts  # drop this layer before the stream computes the next
    def stacked(kept: list[Tensor]) -> Tensor | None:
        return torch.stack(kept) if kept else None

    return [
        replace(result, attentions=_stored(store), scores=stacked(extra["scores"]), values=stacked(extra["values"]),
                value_norms=stacked(extra["value_norms"]), queries=stacked(extra["queries"]),
                keys=stacked(extra["keys"]))
        for result, store, extra in zip(stream.results, stores, extras, strict=True)
    ]


def _stored(store: Tensor | None) -> Tensor:
    if store is None:  # a stream has one layer at least (check_layers refuses none), so every text has storage
        raise ValueError("a layer stream stored no layer")
    return store


def _store(parts: list[ItemLayer], position: int, count: int, dtype: torch.dtype, stores: list[Tensor | None],
           extras: list[dict[str, list[Tensor]]]) -> None:
    """Copy one layer into each text's storage (a function, so no loop variable outlives the layer)."""
    for b, part in enumerate(parts):
        store = stores[b]
        if store is None:
            store = stores[b] = torch.empty((count, *part.attentions.shape), dtype=dtype)
        store[position] = part.attentions  # cast on the way in
        for name, kept in extras[b].items():
            value = getattr(part, name)
            if value is not None:
                kept.append(value.float().clone())

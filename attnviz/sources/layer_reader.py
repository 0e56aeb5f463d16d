"""One way to read layers: the layers a view asks for, one at a time, read as a :class:`Reading` says.

Every view that goes through a model's layers (the head table, the head comparison, rollout and
flow, the page, the pooled heatmap, the batch export) iterates a :class:`LayerReader`:

- the layers asked for are checked once (:func:`attnviz.layer_range.check_layers`) against the kind
  of attention read: the model's self-attention, or an encoder-decoder's decoder;
- each step yields ``(position, parts)``: the layer's index among :attr:`LayerReader.layers` and one
  :class:`~attnviz.sources.stream.ItemLayer` per text, on the source's device, whole or as row
  blocks computed on demand (a long input's layer is never built whole by a reader that reduces
  block by block);
- with a reading that drops special tokens or joins word pieces, each part is that layer as read,
  and :attr:`LayerReader.results` describe the tokens as read (filled in as layers arrive).

A reader is iterated once; it holds one layer at a time. It sits with the sources, below the methods
(rollout, flow) and the views that read layers through it (docs/development.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..analysis.reading import Reading
from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from ..result import AttentionResult
    from .stream import ItemLayer, LayerStream


class LayerReader:
    """The layers of one padded batch of texts, as :func:`read_layers` asks for them (see the module)."""

    def __init__(self, stream: LayerStream, reading: Reading) -> None:
        self._stream, self.reading = stream, reading
        self.results: list[AttentionResult] = list(stream.results)
        self.unread: list[AttentionResult] = list(stream.results)  # as the source gave them (whole ones hold every layer)
        self.layers: list[int] = list(stream.layers)

    @property
    def whole(self) -> bool:
        """True when the results hold every layer already (models computed whole: configs, encoder-decoders)."""
        return self._stream.whole

    def __iter__(self) -> Iterator[tuple[int, list[ItemLayer]]]:
        for position, parts in self._stream:
            if not self.reading.plain:
                parts = [self._read(i, part) for i, part in enumerate(parts)]
            yield position, parts
            del parts  # before the next layer is computed

    def _read(self, index: int, part: ItemLayer) -> ItemLayer:
        from .stream import ItemLayer

        read = self.reading.layer(self._stream.results[index], part.attentions)
        self.results[index] = replace(read, attentions=read.attentions[:0])  # the tokens as read, no weights
        return ItemLayer(part.layer, read.attentions[0])


def read_layers(source: Any, texts: Sequence[str | None], *, reading: Reading = Reading(),
                layers: Sequence[int] | None = None, kind: str = "self", target: str | None = None,
                truncate: bool = False, pairs: Sequence[str | None] | None = None, float16: bool = False,
                purpose: str = "this", rows: bool = False) -> LayerReader:
    """The :class:`LayerReader` of ``texts`` through a loaded ``source``: ``layers`` (model numbers;
    None: every one) of one kind of square attention, the input's (``self``/``encoder``) or an
    encoder-decoder model's ``decoder`` self-attention over ``target`` (its tokens then stand in for
    the text's). ``purpose`` names the caller in the errors for ``cross``, which is not square. ``rows``:
    layers as row blocks made on demand wherever the engine can (:class:`~attnviz.sources.base.ExtractOptions`)."""
    from ..analysis.transforms import KINDS

    if kind not in KINDS:
        raise UsageError(f"[[kind={kind!r}]] is unknown; use one of {', '.join(KINDS)}")
    if not source.capabilities.self_attention:  # one cross-attention layer (a matrices config with a context)
        from ..analysis.transforms import no_self_attention

        raise UsageError(no_self_attention(source.name, kind, purpose, explain=source.engine == "config"))
    if kind in ("self", "encoder"):
        stream = source.stream_batch(list(texts), truncate=truncate, layers=layers, pairs=pairs, target=target,
                                     float16=float16, **({"rows": True} if rows else {}))
        return LayerReader(stream, reading)
    if not source.capabilities.cross:
        raise UsageError(f"[[kind={kind}]] needs an encoder-decoder model (T5, BART); {source.name} has only "
                         "self-attention")
    from ..analysis.transforms import refuse_cross, self_attention
    from ..layer_range import check_layers
    from .stream import LayerStream

    if kind == "cross":
        refuse_cross(purpose)  # before running the model
    results = [self_attention(r, kind, purpose=purpose)
               for r in source.extract_batch(list(texts), truncate=truncate, pairs=pairs, target=target)]
    if layers is not None:
        chosen = check_layers(layers, owner=f"the decoder of {source.name}", count=results[0].n_layers)
        results = [r.select_layers(chosen) for r in results]
    return LayerReader(LayerStream.of_results(results), reading)


def check_through(source: Any, layer: int | None, kind: str, what: str) -> None:
    """For what chains layers from the first (rollout, flow): ``layer`` exists, and (a saved result
    that kept only some layers) every layer from 0 through it is held."""
    from ..layer_range import check_layer

    if layer is not None and (layer < 0 or kind in ("self", "encoder")):
        check_layer(layer, owner=source.name, count=source.n_layers)
    held = source.layer_numbers
    missing = [la for la in range(source.n_layers if layer is None else layer + 1) if la not in held]
    if kind in ("self", "encoder") and missing:
        raise UsageError(f"{what} chains every layer from 0; {source.name} holds only layers "
                         f"{', '.join(map(str, held))}, not layer {missing[0]}")

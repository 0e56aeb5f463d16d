"""The one Source protocol: what every kind of model (config models, the native engine, transformers)
offers the layers above it, with the options of an extraction passed as one object.

A source says what it can do in :class:`Capabilities`; asking for something it cannot do is an
:class:`~attnviz.errors.UsageError` naming the option, never silently ignored. The signatures of
``extract``, ``extract_batch`` and ``stream_batch`` are written once, here; a source implements
:meth:`Source._extract_batch` (and, where it can hand layers on as they are computed,
:meth:`Source._stream_batch`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from ..errors import InputError, UsageError
from ..result import AttentionResult
from .stream import LayerStream, check_finite

if TYPE_CHECKING:  # pragma: no cover
    from .contracts import ExplainInputs


@dataclass(frozen=True)
class ExtractOptions:
    """What one extraction computes, the same for every source.

    Attributes:
        truncate: cut a text longer than the model's maximum positions instead of failing.
        details: also return the pre-softmax ``scores`` and each head's ``values``.
        layers: keep only these layers (model numbering); None keeps every layer.
        float16: store the attentions in half precision (long inputs: half the memory).
        target: the decoder's input, for encoder-decoder models (one text at a time).
        rows: hand each layer of an input longer than ``stream.ROWS_ASKED_FROM_TOKENS`` over as row blocks
            made on demand from its queries and keys (O(T·d)) wherever the engine can, not only those too
            long to hold a layer (a server keeps them to answer tiles).
        queries_keys: also return each head's query and key vectors (after RoPE and q/k norms; under
            grouped-query attention a key head is repeated for each query head that reads it) as
            ``result.queries`` and ``result.keys``: the engines that see them (``Capabilities.queries_keys``).
        values: also hand on each layer's value vectors (``ItemLayer.values``; the native engine repeats a key/value
            head for each query head that reads it, the fused engine does not), where the engine sees them (as
            ``queries_keys``): what a KV-cache policy's output error is computed from.
    """

    truncate: bool = False
    details: bool = False
    layers: tuple[int, ...] | None = None
    float16: bool = False
    target: str | None = None
    rows: bool = False
    queries_keys: bool = False
    values: bool = False

    @classmethod
    def build(cls, options: ExtractOptions | None = None, **changes: Any) -> ExtractOptions:
        """``options`` (default: the defaults) with ``changes`` applied; unknown names are a TypeError."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown extraction option {unknown[0]!r}; the options are {', '.join(sorted(known))}")
        if "layers" in changes and changes["layers"] is not None:
            changes["layers"] = tuple(changes["layers"])
        return replace(options or cls(), **changes)


@dataclass(frozen=True)
class Capabilities:
    """What a source can do beyond self-attention weights of every layer."""

    details: bool = False  # pre-softmax scores and value vectors (details=True)
    value_norms: bool = False  # ‖f(x_j)‖ per head, for norm-based attention
    pairs: bool = False  # sentence pairs through a real tokenizer
    cross: bool = False  # encoder-decoder: a target text, decoder and cross-attention
    streaming: bool = False  # layers handed on as they are computed (long inputs)
    token_ids: bool = False  # runs token ids given directly (probes)
    generation: bool = False  # a causal language model that can generate
    fixed_input: bool = False  # its input is fixed (a matrices config): no text is given
    self_attention: bool = True  # False: one cross-attention layer alone (a matrices config with a context)
    queries_keys: bool = False  # each head's query and key vectors alone (queries_keys=True)


class Source(ABC):
    """A model that turns text into :class:`AttentionResult` objects."""

    name: str
    engine: str
    causal: bool
    capabilities: Capabilities = Capabilities()

    @property
    @abstractmethod
    def n_layers(self) -> int:
        """How many attention layers the model has (the encoder's, for encoder-decoder models)."""

    @property
    def layer_numbers(self) -> list[int]:
        """The model's numbers of the layers this source gives: every one, unless it holds only some
        (a result saved with some layers)."""
        return list(range(self.n_layers))

    def describe(self) -> str:
        return f"engine {self.engine}, model {self.name}"

    def explain_inputs(self, text: str | None, layer: int = 0) -> ExplainInputs:
        """What ``attnviz explain`` walks through for ``text`` at ``layer``: config models and the
        native engine's checkpoints give it; any other source says so."""
        raise UsageError(f"explain walks through config models (.toml) and checkpoints the native engine runs; "
                         f"{self.name} is {self.kind_text()}, so use attnviz heatmap for it")

    # --- the one signature ----------------------------------------------------------------------

    def extract(self, text: str | None, options: ExtractOptions | None = None, *, pair: str | None = None,
                **changes: Any) -> AttentionResult:
        """Attention of every head for one text. Options come as an :class:`ExtractOptions`, and/or as
        keyword changes to it (``truncate=True``, ``layers=[0, 2]``…); ``pair`` is a second sentence."""
        opts = ExtractOptions.build(options, **changes)
        self.check(opts, pairs=[pair])
        if text is None and not self.capabilities.fixed_input:
            raise InputError("no text given; pass the text to inspect")
        return _finite(self._extract_batch([text], [pair], opts))[0]

    def extract_batch(self, texts: Sequence[str], options: ExtractOptions | None = None, *,
                      pairs: Sequence[str | None] | None = None, **changes: Any) -> list[AttentionResult]:
        """One result per text (one padded forward pass where the engine batches)."""
        opts = ExtractOptions.build(options, **changes)
        pairs = self._pairs(texts, pairs)
        self.check(opts, pairs=pairs, batch=True)
        return _finite(self._extract_batch(list(texts), pairs, opts)) if texts else []

    def stream_batch(self, texts: Sequence[str], options: ExtractOptions | None = None, *,
                     pairs: Sequence[str | None] | None = None, **changes: Any) -> LayerStream:
        """Like :meth:`extract_batch`, but the layers come one at a time (see :class:`LayerStream`).
        Sources that compute whole results hand those on layer by layer (``stream.whole``)."""
        opts = ExtractOptions.build(options, **changes)
        pairs = self._pairs(texts, pairs)
        self.check(opts, pairs=pairs, batch=True)
        if not texts:
            raise InputError("no texts given")
        return self._stream_batch(list(texts), pairs, opts)

    # --- what a source implements --------------------------------------------------------------

    @abstractmethod
    def _extract_batch(self, texts: Sequence[str | None], pairs: list[str | None], options: ExtractOptions) -> list[AttentionResult]:
        """Results for ``texts`` (already checked against the capabilities)."""

    def _stream_batch(self, texts: list[str], pairs: list[str | None], options: ExtractOptions) -> LayerStream:
        return LayerStream.of_results(self._extract_batch(texts, pairs, options))

    # --- checks, in the library's terms ---------------------------------------------------------

    def check(self, options: ExtractOptions, *, pairs: Sequence[str | None] = (), batch: bool = False) -> None:
        """An option this source cannot honour is an error naming it, never silently ignored."""
        can = self.capabilities
        if any(p is not None for p in pairs) and not can.pairs:
            raise UsageError(f"[[pair]] and [[target]] need a model with a real tokenizer; {self.name} is {self.kind_text()}")
        if options.target is not None and not can.cross:
            if not can.pairs:
                raise UsageError(f"[[pair]] and [[target]] need a model with a real tokenizer; {self.name} is {self.kind_text()}")
            raise UsageError(f"[[target]] is for encoder-decoder models; {self.name} is {getattr(self, 'family', self.engine)}")
        if options.target is not None and batch and len(pairs) > 1:
            raise UsageError("[[target]]: give the decoder's input with one text at a time, not a batch")
        if options.details and not can.details:
            raise UsageError(f"[[details=True]]: the {self.engine} engine gives no pre-softmax scores or value vectors; "
                             "use the native engine or a config model")
        if (options.queries_keys or options.values) and not can.queries_keys:
            raise UsageError(f"[[queries_keys=True]]: {self.name} on the {self.engine} engine does not show its query and "
                             "key vectors; use the native or fused engine")
        if options.layers is not None:
            self.check_layers(options.layers)

    def check_layers(self, layers: Sequence[int]) -> list[int]:
        """``layers`` sorted and without repeats; one out of range (or none at all) is an error."""
        from ..layer_range import check_layers

        return check_layers(layers, owner=self.name, count=self.n_layers)

    def _pairs(self, texts: Sequence[str], pairs: Sequence[str | None] | None) -> list[str | None]:
        pairs = list(pairs) if pairs is not None else [None] * len(texts)
        if len(pairs) != len(texts):
            raise UsageError(f"{len(texts)} texts but {len(pairs)} pairs; give one pair (or None) per text")
        return pairs

    def kind_text(self) -> str:
        return "a config model" if self.engine == "config" else f"a {getattr(self, 'family', self.engine)} model"


def _finite(results: list[AttentionResult]) -> list[AttentionResult]:
    """Results whose attention weights are finite; NaN (an overflow in the model) is an error here."""
    for result in results:
        numbers = result.metadata.get("layers") or list(range(result.n_layers))
        for name in ("attentions", "decoder_attentions", "cross_attentions"):
            tensor = getattr(result, name)
            for position in range(0 if tensor is None else tensor.shape[0]):
                where = numbers[position] if name == "attentions" and position < len(numbers) else position
                check_finite(tensor[position], where if name == "attentions" else f"{where} ({name})",
                             result.model_name)
    return results


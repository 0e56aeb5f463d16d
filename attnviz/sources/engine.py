"""What the native and transformers engines share: encoding, padding, and cutting results apart.

A batch is padded on the right with an attention mask, so every real token keeps the positions
it has when run alone; each item's padded rows and columns are then cut off, and its attentions
equal those of the item run by itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError, UsageError
from ..result import AttentionResult
from .tokens import TokenInfo, encode, label_from_piece, unknown_token_id


@dataclass(frozen=True)
class Capture:
    """What one run builds: which layers' attention matrices (``None``: every layer), and whether it
    keeps their pre-softmax scores and value vectors (``details``). Passed to every run, so a
    result depends on its arguments alone, never on what an earlier call set."""

    layers: frozenset[int] | None = None
    details: bool = False

    def wants(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers


@dataclass
class LayerOut:
    """One layer of one padded batch, as an engine computed it."""

    layer: int  # the model's number for it
    weights: Tensor  # [B, H, T, T]
    scores: Tensor | None = None  # [B, H, T, T], with details
    values: Tensor | None = None  # [B, H, T, d], with details
    value_norms: Tensor | None = None  # [B, H, T]: ‖f(x_j)‖ for norm-based attention (native engine)


@dataclass
class ItemLayer:
    """One layer of one text, cut out of its padded batch (views of the batch's tensors, no copies)."""

    layer: int
    attentions: Tensor  # [H, n, n]
    scores: Tensor | None = None  # [H, n, n]
    values: Tensor | None = None  # [H, n, d]
    value_norms: Tensor | None = None  # [H, n]


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

    def __iter__(self) -> Iterator[tuple[int, list[ItemLayer]]]:
        """``(position, parts)``: the layer's index among ``layers``, and one :class:`ItemLayer` per text.

        (Not ``enumerate``: it keeps its last item until the next one is computed, which would
        hold two layers at once.)
        """
        lengths = [len(r.tokens) for r in self.results]
        position = 0
        for out in self._outs:
            yield position, [_cut(out, b, n) for b, n in enumerate(lengths)]
            del out  # before the next layer is computed: one layer's matrices at a time
            position += 1  # noqa: SIM113 (enumerate would keep the last layer alive)

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
                    if norms is not None:
                        norms[b, :, :n] = r.value_norms[position]
                yield LayerOut(layer=layer, weights=padded, value_norms=norms)

        stream = cls(results, list(layers), outs())
        stream.whole = True
        return stream


def layer_stream(source: Any, texts: list[str], *, truncate: bool = False, layers: list[int] | None = None,
                 float16: bool = False) -> LayerStream:
    """The layers of ``texts`` one at a time, from any source: engines stream them as computed;
    config models and encoder-decoder models compute whole results, which are then handed on layer by layer."""
    if isinstance(source, ModelSource) and not getattr(source, "encoder_decoder", False):
        return source.stream_batch(texts, truncate=truncate, layers=layers)
    return LayerStream.of_results(source.extract_batch(texts, truncate=truncate, layers=layers, float16=float16))


def _cut(out: LayerOut, b: int, n: int) -> ItemLayer:
    def square(t: Tensor | None) -> Tensor | None:
        return None if t is None else t[b, :, :n, :n]

    def rows(t: Tensor | None) -> Tensor | None:
        return None if t is None else t[b, :, :n]

    return ItemLayer(out.layer, out.weights[b, :, :n, :n], square(out.scores), rows(out.values), rows(out.value_norms))


def collect(stream: LayerStream, *, float16: bool = False) -> list[AttentionResult]:
    """Every layer of a stream, stored per text as it arrives (float16 halves the memory of long inputs)."""
    dtype = torch.float16 if float16 else torch.float32
    count = len(stream.layers)
    stores: list[Tensor | None] = [None] * len(stream.results)
    extras: list[dict[str, list[Tensor]]] = [{"scores": [], "values": [], "value_norms": []} for _ in stream.results]
    for position, parts in stream:
        _store(parts, position, count, dtype, stores, extras)
        del parts  # drop this layer before the stream computes the next
    return [
        replace(result, attentions=store,
                **{name: torch.stack(kept) if kept else None for name, kept in extra.items()})
        for result, store, extra in zip(stream.results, stores, extras, strict=True)
    ]


def _store(parts: list[ItemLayer], position: int, count: int, dtype: torch.dtype, stores: list[Tensor | None],
           extras: list[dict[str, list[Tensor]]]) -> None:
    """Copy one layer into each text's storage (a function, so no loop variable outlives the layer)."""
    for b, part in enumerate(parts):
        if stores[b] is None:
            stores[b] = torch.empty((count, *part.attentions.shape), dtype=dtype)
        stores[b][position] = part.attentions  # cast on the way in
        for name, kept in extras[b].items():
            value = getattr(part, name)
            if value is not None:
                kept.append(value.float().clone())


class ModelSource:
    """An engine on a tokenizer: subclasses set ``engine`` and implement ``forward_layers`` and ``n_layers``."""

    engine = "?"

    def __init__(
        self,
        *,
        name: str,
        tokenizer: Any,
        causal: bool,
        max_positions: int | None,
        family: str,
        device: str = "cpu",
        pad_id: int | None = None,
        bos_id: int | None = None,
    ) -> None:
        self.name, self.tokenizer, self.causal, self.family = name, tokenizer, causal, family
        self.bos_id = bos_id if isinstance(bos_id, int) else None
        self.max_positions = max_positions
        self.device = device
        self.pad_id = pad_id if pad_id is not None else _tokenizer_pad_id(tokenizer)

    @property
    def n_layers(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward_layers(self, ids: Tensor, mask: Tensor, types: Tensor, capture: Capture) -> Iterator[LayerOut]:
        """One padded batch: each layer ``capture`` wants, in order, as soon as it is computed."""
        raise NotImplementedError  # pragma: no cover - abstract

    def check_layers(self, layers: list[int] | None) -> list[int] | None:
        if layers is None:
            return None
        bad = [la for la in layers if not 0 <= la < self.n_layers]
        if bad or not layers:
            raise UsageError(f"--layer {bad[0] if bad else '(none)'} is out of range; {self.name} has layers 0 to "
                             f"{self.n_layers - 1}")
        return sorted(set(layers))

    def describe(self) -> str:
        return f"engine {self.engine} ({self.family}) on {self.device}, model {self.name}"

    def encode(self, text: str, pair: str | None = None, *, truncate: bool = False) -> TokenInfo:
        return encode(self.tokenizer, text, pair, max_length=self.max_positions, truncate=truncate,
                      model_name=self.name, special_ids=frozenset(self.special_ids()))

    def extract(
        self,
        text: str | None,
        *,
        pair: str | None = None,
        target: str | None = None,
        truncate: bool = False,
        details: bool = False,
        layers: list[int] | None = None,
        float16: bool = False,
    ) -> AttentionResult:
        """Attention of every head for one text (a batch of one); ``layers`` keeps only those layers."""
        if target is not None:
            raise UsageError(f"--target is for encoder-decoder models; {self.name} is {self.family}")
        if text is None:
            raise InputError("no text given; pass the text to inspect")
        return self.extract_batch([text], pairs=[pair], truncate=truncate, details=details, layers=layers,
                                  float16=float16)[0]

    def extract_batch(
        self,
        texts: list[str],
        *,
        pairs: list[str | None] | None = None,
        truncate: bool = False,
        details: bool = False,
        layers: list[int] | None = None,
        float16: bool = False,
    ) -> list[AttentionResult]:
        """One result per text, from a single padded forward pass.

        ``float16`` stores the attentions in half precision, each layer as soon as it is computed:
        for long inputs, half the memory.

        With ``layers``, only those layers' attention matrices are built (the native engine runs
        the others through a fused kernel and stops after the last one asked for); each result
        then holds those layers, listed in its ``metadata["layers"]``.
        """
        if not texts:
            return []
        return collect(self.stream_batch(texts, pairs=pairs, truncate=truncate, details=details, layers=layers),
                       float16=float16)

    def stream_batch(
        self,
        texts: list[str],
        *,
        pairs: list[str | None] | None = None,
        truncate: bool = False,
        details: bool = False,
        layers: list[int] | None = None,
    ) -> LayerStream:
        """Like :meth:`extract_batch`, but the layers come one at a time (see :class:`LayerStream`)."""
        layers = self.check_layers(layers)
        if not texts:
            raise InputError("no texts given")
        pairs = pairs or [None] * len(texts)
        if len(pairs) != len(texts):
            raise UsageError(f"{len(texts)} texts but {len(pairs)} pairs; give one pair (or None) per text")
        infos = [self.encode(t, p, truncate=truncate) for t, p in zip(texts, pairs, strict=True)]
        return self._stream(infos, layers, details)

    def _stream(self, infos: list[TokenInfo], layers: list[int] | None, details: bool) -> LayerStream:
        width = max(len(info.ids) for info in infos)
        ids = torch.full((len(infos), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(infos), width), dtype=torch.long)
        types = torch.zeros((len(infos), width), dtype=torch.long)
        for b, info in enumerate(infos):
            n = len(info.ids)
            ids[b, :n] = torch.tensor(info.ids)
            mask[b, :n] = 1
            types[b, :n] = torch.tensor(info.segment_ids)
        dev = torch.device(self.device)
        capture = Capture(None if layers is None else frozenset(layers), details)
        kept = list(range(self.n_layers)) if layers is None else list(layers)
        unk = unknown_token_id(self.tokenizer)  # recorded, so result.unknown can say which tokens it replaced
        metadata = {"engine": self.engine, "family": self.family, "device": self.device,
                    **({"unk_token_id": unk} if unk is not None else {}),
                    **({"layers": kept} if layers is not None else {})}
        results = [
            AttentionResult(tokens=info.labels, token_ids=info.ids, special=info.special, word_ids=info.word_ids,
                            segment_ids=info.segment_ids, attentions=torch.zeros(0, 0, len(info.ids), len(info.ids)),
                            causal=self.causal, model_name=self.name, metadata=dict(metadata))
            for info in infos
        ]
        outs = self.forward_layers(ids.to(dev), mask.to(dev), types.to(dev), capture)
        return LayerStream(results, kept, outs)

    def special_ids(self) -> set[int]:
        """Ids of the tokenizer's special tokens ([CLS], <s>, <|endoftext|>, …), not the unknown token:
        an <unk> stands for real text and stays in view."""
        decoder = self.tokenizer.get_added_tokens_decoder()
        unk = getattr(self.tokenizer.model, "unk_token", None)
        return {i for i, token in decoder.items() if getattr(token, "special", False) and token.content != unk}

    def extract_ids(self, ids: list[int], *, details: bool = False, float16: bool = False) -> AttentionResult:
        """Attention on token ids given directly (probes of random tokens), labelled by the vocabulary."""
        if not ids:
            raise InputError("no token ids given")
        if self.max_positions is not None and len(ids) > self.max_positions:
            raise InputError(f"{len(ids)} token ids but {self.name} takes at most {self.max_positions}")
        specials = self.special_ids()
        info = TokenInfo(
            ids=list(ids),
            labels=[label_from_piece(self.tokenizer.id_to_token(i) or f"<{i}>") for i in ids],
            special=[i in specials for i in ids],
            word_ids=[-1 if i in specials else n for n, i in enumerate(ids)],
            segment_ids=[0] * len(ids),
        )
        return collect(self._stream([info], None, details), float16=float16)[0]


def _tokenizer_pad_id(tokenizer: Any) -> int:
    padding = getattr(tokenizer, "padding", None)
    if padding and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    return 0  # any id works: padded positions are masked and cut away

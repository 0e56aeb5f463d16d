"""What the native and transformers engines share: encoding, padding, and cutting results apart.

A batch is padded on the right with an attention mask, so every real token keeps the positions
it has when run alone; each item's padded rows and columns are then cut off, and its attentions
equal those of the item run by itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

from ..errors import InputError, ModelNotFoundError
from ..result import AttentionResult
from .base import Capabilities, ExtractOptions, Source
from .stream import Capture, LayerOut, LayerStream, collect
from .tokens import TokenInfo, encode, label_from_piece, unknown_token_id


def given_texts(texts: Sequence[str | None]) -> list[str]:
    """``texts`` as a model reads them: a text each (no text, None, is a fixed-input source's, and
    :meth:`Source.extract` refuses it for a model before it gets here)."""
    if any(text is None for text in texts):
        raise InputError("no text given; pass the text to inspect")
    return [text for text in texts if text is not None]

class ModelSource(Source):
    """An engine on a tokenizer: subclasses set ``engine`` and implement ``forward_layers`` and ``n_layers``."""

    engine = "?"
    capabilities = Capabilities(pairs=True, streaming=True, token_ids=True)  # queries_keys: where the engine sees them

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
        vocab_rows: int | None = None,
    ) -> None:
        self.name, self.tokenizer, self.causal, self.family = name, tokenizer, causal, family
        self.bos_id = bos_id if isinstance(bos_id, int) else None
        self.max_positions = max_positions
        self.device = device
        self.pad_id = pad_id if pad_id is not None else _tokenizer_pad_id(tokenizer)
        self.vocab_rows = vocab_rows  # rows of the input embedding: a token id past them is refused

    @property
    def n_layers(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward_layers(self, ids: Tensor, mask: Tensor, types: Tensor, capture: Capture) -> Iterator[LayerOut]:
        """One padded batch: each layer ``capture`` wants, in order, as soon as it is computed."""
        raise NotImplementedError  # pragma: no cover - abstract

    def describe(self) -> str:
        return f"engine {self.engine} ({self.family}) on {self.device}, model {self.name}"

    def encode(self, text: str, pair: str | None = None, *, truncate: bool = False, what: str = "text") -> TokenInfo:
        return encode(self.tokenizer, text, pair, max_length=self.max_positions, truncate=truncate,
                      model_name=self.name, special_ids=frozenset(self.special_ids()), what=what)

    def _extract_batch(self, texts: Sequence[str | None], pairs: list[str | None], options: ExtractOptions) -> list[AttentionResult]:
        """One padded forward pass; each layer stored per text as it is computed (in float16 with
        ``options.float16``). With ``options.layers`` only those layers' matrices are built (the
        native engine runs the others through a fused kernel and stops after the last one asked
        for); each result then lists them in ``metadata["layers"]``."""
        return collect(self._stream_batch(given_texts(texts), pairs, options), float16=options.float16)

    def _stream_batch(self, texts: list[str], pairs: list[str | None], options: ExtractOptions) -> LayerStream:
        infos = [self.encode(t, p, truncate=options.truncate) for t, p in zip(texts, pairs, strict=True)]
        layers = None if options.layers is None else self.check_layers(options.layers)
        return self.stream_infos(infos, layers, options.details, rows=options.rows, queries_keys=options.queries_keys,
                                 values=options.values)

    def stream_infos(self, infos: list[TokenInfo], layers: list[int] | None, details: bool, *,
                     rows: bool = False, queries_keys: bool = False, values: bool = False) -> LayerStream:
        if self.vocab_rows is not None:
            top = max(max(info.ids) for info in infos)
            if top >= self.vocab_rows or min(min(info.ids) for info in infos) < 0:
                raise ModelNotFoundError(f"{self.name}: the tokenizer gives token id {top} but the model's embedding "
                                         f"has {self.vocab_rows} rows; its tokenizer and weights do not belong together")
        ids, mask, types = padded(infos, self.pad_id)
        dev = torch.device(self.device)
        capture = Capture(None if layers is None else frozenset(layers), details, rows=rows and not details,
                          queries_keys=queries_keys, values=values)
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
        stream = LayerStream(results, kept, outs)
        stream.keep_normalisers = capture.rows
        return stream

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
        return collect(self.stream_infos([info], None, details), float16=float16)[0]


def padded(infos: list[TokenInfo], pad_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """Texts padded on the right, as every engine pads them: ``ids``, ``mask`` (1 = a real token) and the
    segment ids ``types``, each ``[texts, longest]``. Each real token keeps the position it has alone."""
    width = max(len(info.ids) for info in infos)
    ids = torch.full((len(infos), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(infos), width), dtype=torch.long)
    types = torch.zeros((len(infos), width), dtype=torch.long)
    for b, info in enumerate(infos):
        n = len(info.ids)
        ids[b, :n] = torch.tensor(info.ids)
        mask[b, :n] = 1
        types[b, :n] = torch.tensor(info.segment_ids)
    return ids, mask, types


def _tokenizer_pad_id(tokenizer: Any) -> int:
    padding = getattr(tokenizer, "padding", None)
    if padding and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    return 0  # any id works: padded positions are masked and cut away

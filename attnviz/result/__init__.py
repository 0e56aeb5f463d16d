"""AttentionResult: the one currency of attnviz, and its ``.npz`` file format.

Every source (config model, native engine, transformers) produces one; metrics and renderers
consume it. The file format stores plain arrays only and is read with ``allow_pickle=False``,
so loading a result never runs code.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import ResultFileError
from ..fileio import atomic_write
from .placement import Placement, placements

FORMAT_VERSION = 1
_OPTIONAL_TENSORS = ("cross_attentions", "decoder_attentions", "scores", "values", "value_norms", "queries", "keys")


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` with fixed zip timestamps, so the same arrays always give the same bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with archive.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(array), allow_pickle=False)


@dataclass
class AttentionResult:
    """Attention of every head for one input.

    Attributes:
        tokens: display labels, one per position.
        token_ids: the tokenizer's ids (``-1`` where a source has no ids, e.g. given matrices).
        attentions: float32 ``[layers, heads, q, k]`` (float16 when extracted with ``float16=True``);
            row i is where query i looks.
        special: True for special tokens ([CLS], [SEP], BOS, …), one per position.
        attention_mask: 1 for real tokens, 0 for padding, one per position of ``tokens``. Where a
            source pads texts to batch them (native engine, transformers) it removes the padded
            positions from every result, so the mask is all ones; a ``type = "matrices"`` config with
            ``[input] padding`` keeps its padded key positions, as columns of weight 0 marked 0 here.
        causal: whether a causal mask was applied.
        model_name: what produced it, for titles.
        cross_attentions: ``[layers, heads, q_target, k_source]`` for encoder-decoder models, and for
            a matrices config with a context (see :attr:`cross_only`).
        decoder_attentions: ``[layers, heads, q_target, k_target]``, the decoder's self-attention.
        target_tokens: the labels of the decoder's input (query axis of ``cross_attentions``).
        target_special: which of ``target_tokens`` are special tokens.
        word_ids: which word each token belongs to (−1 for special tokens); pieces share an id.
        segment_ids: 0 for the text, 1 for the second sentence of a pair (``--pair``).
        scores: pre-softmax scores ``[layers, heads, q, k]`` (native engine, ``details=True``).
        values: each head's value vectors ``[layers, heads, k, d_head]`` (native engine, ``details=True``).
        value_norms: ‖f(x_j)‖ ``[layers, heads, k]`` for norm-based attention (Kobayashi et al. 2020).
        queries, keys: each head's query and key vectors ``[layers, heads, q or k, d_head]`` (after
            RoPE; keys repeated under grouped-query attention), with ``details=True``: their dot
            products, scaled, are ``scores``.
        metadata: anything else worth saving (JSON-serialisable).
    """

    tokens: list[str]
    attentions: torch.Tensor
    token_ids: list[int] = field(default_factory=list)
    special: list[bool] = field(default_factory=list)
    attention_mask: list[int] = field(default_factory=list)
    causal: bool = False
    model_name: str = ""
    cross_attentions: torch.Tensor | None = None
    decoder_attentions: torch.Tensor | None = None
    target_tokens: list[str] | None = None
    target_special: list[bool] | None = None
    word_ids: list[int] = field(default_factory=list)
    segment_ids: list[int] = field(default_factory=list)
    scores: torch.Tensor | None = None
    values: torch.Tensor | None = None
    value_norms: torch.Tensor | None = None
    queries: torch.Tensor | None = None
    keys: torch.Tensor | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        attn = torch.as_tensor(self.attentions).detach()
        # float32, or float16 when a long input asked for it (extract(..., float16=True)): half the memory.
        self.attentions = attn.to("cpu", torch.float16 if attn.dtype == torch.float16 else torch.float32)
        if self.attentions.dim() != 4:
            raise ValueError(f"attentions must be [layers, heads, q, k], got {tuple(self.attentions.shape)}")
        n = len(self.tokens)
        if self.attentions.shape[-1] != n:
            raise ValueError(f"{n} tokens but attentions have {self.attentions.shape[-1]} key positions")
        self.token_ids = list(self.token_ids) or [-1] * n
        self.special = list(self.special) or [False] * n
        self.attention_mask = list(self.attention_mask) or [1] * n
        self.word_ids = list(self.word_ids) or list(range(n))
        self.segment_ids = list(self.segment_ids) or [0] * n
        for name in _OPTIONAL_TENSORS:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, torch.as_tensor(value).detach().to("cpu", torch.float32))

    @property
    def n_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def n_heads(self) -> int:
        return self.attentions.shape[1]

    @property
    def cross_only(self) -> bool:
        """Cross-attention alone, with no self-attention layer: ``attentions`` is ``[0, H, S, S]`` and the
        layers are those of ``cross_attentions`` (a matrices config with a context,
        :func:`attnviz.sources.own._cross_result`). ``n_layers`` counts self-attention layers: 0 here."""
        return self.cross_attentions is not None and self.attentions.shape[0] == 0

    @property
    def layers_held(self) -> int:
        """How many layers the result holds: ``n_layers``, or a cross-only result's cross-attention layers."""
        cross = self.cross_attentions
        return cross.shape[0] if cross is not None and self.cross_only else self.n_layers

    @property
    def pictures(self) -> list[Placement]:
        """Where each picture's tokens sit (:class:`~attnviz.result.placement.Placement`, typed), in order; none for
        a text. Read from ``metadata["images"]``, the form a result saves."""
        return placements(self.metadata)

    @property
    def unknown(self) -> list[bool]:
        """True where the tokenizer replaced text it has no token for by its unknown token (``[UNK]``,
        labelled ``[UNK:🍕]``), one per position: where ``token_ids`` is ``metadata["unk_token_id"]``,
        which sources record (so it survives :meth:`save`, :meth:`load` and every transform)."""
        unk = self.metadata.get("unk_token_id")
        return [unk is not None and i == unk for i in self.token_ids]

    def _repr_html_(self) -> str:
        """Jupyter shows a result as the interactive page (:func:`attnviz.show`); the notebook protocol
        asks the class itself. The page reads the result by its fields alone (nothing it imports imports this)."""
        from ..notebook import result_display

        return result_display(self)._repr_html_()

    def save(self, path: str | os.PathLike[str], *, layers: list[int] | None = None, float16: bool = False) -> Path:
        """Write the result to ``path`` as ``.npz``, atomically, and byte-for-byte the same for the same result.

        ``layers`` keeps only those layers' attentions (recorded in the metadata as ``layers``);
        ``float16`` halves the file (:meth:`load` reads it back as float32).
        """
        self.check_square("saved")
        path = Path(path)
        if path.suffix != ".npz":
            path = path.with_name(path.name + ".npz")
        kept = self if layers is None else self.select_layers(layers)
        return kept._write(path, float16)

    def check_square(self, what: str) -> None:
        """Refuse, in one line, a result that holds some query rows only (a vision-language model's text rows,
        ``metadata["rows"]``) where every row is needed (``what``: what was asked of it)."""
        if self.attentions.shape[-2] != self.attentions.shape[-1]:
            from ..errors import UsageError

            raise UsageError(f"this result holds {self.attentions.shape[-2]} of its {self.attentions.shape[-1]} rows "
                             f"(the text's, metadata['rows']) and cannot be {what}: read it with rows='all'")

    def select_layers(self, layers: list[int]) -> AttentionResult:
        """The same result with only ``layers`` (in that order); the choice is kept in the metadata."""
        held = self.layers_held
        bad = [la for la in layers if not 0 <= la < held]
        if bad:
            raise ValueError(f"layers {bad} are out of range 0..{held - 1}")
        idx = torch.tensor(layers, dtype=torch.long)

        def pick(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.index_select(0, idx)

        from dataclasses import replace

        chosen = [self.metadata.get("layers", list(range(held)))[la] for la in layers]
        metadata = {**self.metadata, "layers": chosen}
        decoder_side = self.cross_attentions if self.cross_attentions is not None else self.decoder_attentions
        decoder_count = None if decoder_side is None or self.cross_only else int(decoder_side.shape[0])

        def pick_decoder(t: torch.Tensor | None) -> torch.Tensor | None:
            """A decoder with fewer layers than the encoder (Whisper large-v3-turbo's 4 under 32, distil-whisper's
            2, distilbart's 6 under 12): its layers picked where each chosen one is among them, else left out
            (its count kept in the metadata, so asking for it says which layers the decoder has)."""
            if t is None or decoder_count is None or decoder_count == held:
                return pick(t)
            return pick(t) if all(la < decoder_count for la in layers) else None

        if decoder_count is not None and decoder_count != held:
            metadata["decoder_layer_count"] = decoder_count
        return replace(
            self,
            attentions=self.attentions if self.cross_only else self.attentions.index_select(0, idx),  # cross-only: no layer to pick
            cross_attentions=pick_decoder(self.cross_attentions),
            decoder_attentions=pick_decoder(self.decoder_attentions),
            scores=pick(self.scores),
            values=pick(self.values),
            value_norms=pick(self.value_norms),
            queries=pick(self.queries),
            keys=pick(self.keys),
            metadata=metadata,
        )

    def narrowed(self, layers: list[int] | None = None, *, float16: bool = False) -> AttentionResult:
        """What a source returns when asked for some ``layers`` and/or float16 storage.

        Layers out of range are a :class:`UsageError` naming the model's range.
        """
        result = self
        if layers is not None:
            from ..layer_range import check_layers

            result = result.select_layers(check_layers(layers, owner=self.model_name, count=self.layers_held))
        if float16:
            from dataclasses import replace

            result = replace(result, attentions=result.attentions.half())
        return result

    def token_arrays(self) -> dict[str, np.ndarray]:
        return {
            "tokens": np.array(self.tokens, dtype=np.str_),
            "token_ids": np.array(self.token_ids, dtype=np.int64),
            "special": np.array(self.special, dtype=np.bool_),
            "attention_mask": np.array(self.attention_mask, dtype=np.int8),
            "word_ids": np.array(self.word_ids, dtype=np.int64),
            "segment_ids": np.array(self.segment_ids, dtype=np.int8),
        }

    def meta_array(self) -> np.ndarray:
        return np.array(json.dumps(self._meta(), ensure_ascii=False, allow_nan=False, sort_keys=True))

    def _write(self, path: Path, float16: bool) -> Path:
        dtype = np.float16 if float16 else np.float32
        arrays: dict[str, np.ndarray] = {
            **self.token_arrays(),
            "attentions": self.attentions.numpy().astype(dtype),
            "meta": self.meta_array(),
        }
        for name in _OPTIONAL_TENSORS:
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name).numpy().astype(dtype)
        if self.target_tokens is not None:
            arrays["target_tokens"] = np.array(self.target_tokens, dtype=np.str_)
            arrays["target_special"] = np.array(self.target_special or [False] * len(self.target_tokens), dtype=np.bool_)
        return atomic_write(path, lambda tmp: write_npz(tmp, arrays))

    def _meta(self) -> dict[str, Any]:
        return {
            "format": "attnviz-result",
            "version": FORMAT_VERSION,
            "causal": self.causal,
            "model_name": self.model_name,
            "metadata": self.metadata,
        }

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AttentionResult:
        """Read a result written by :meth:`save`, as untrusted input: sizes are checked before anything
        is read (:mod:`attnviz.result.file`), and every failure is a :class:`ResultFileError`."""
        from .file import check_consistent, read_arrays, read_meta

        path = Path(path)
        data = read_arrays(path)
        meta = read_meta(data, path)
        check_consistent(data, path, meta)
        try:
            optional = {
                name: torch.from_numpy(data[name].astype(np.float32)) for name in _OPTIONAL_TENSORS if name in data
            }
            return cls(
                tokens=[str(t) for t in data["tokens"]],
                attentions=torch.from_numpy(data["attentions"].astype(np.float32)),
                token_ids=[int(i) for i in data["token_ids"]] if "token_ids" in data else [],
                special=[bool(s) for s in data["special"]] if "special" in data else [],
                attention_mask=[int(m) for m in data["attention_mask"]] if "attention_mask" in data else [],
                causal=bool(meta.get("causal", False)),
                model_name=str(meta.get("model_name", "")),
                target_tokens=[str(t) for t in data["target_tokens"]] if "target_tokens" in data else None,
                target_special=[bool(t) for t in data["target_special"]] if "target_special" in data else None,
                word_ids=[int(i) for i in data["word_ids"]] if "word_ids" in data else [],
                segment_ids=[int(i) for i in data["segment_ids"]] if "segment_ids" in data else [],
                metadata=dict(meta.get("metadata", {})),
                **optional,
            )
        except (KeyError, ValueError, TypeError, RuntimeError) as exc:
            raise ResultFileError(f"{path} is not an attnviz result file ({type(exc).__name__}: {exc}); "
                                  "re-create it with AttentionResult.save") from None


"""Greedy decoding one token at a time, keeping only the newest token's attention row.

``attnviz generate`` keeps every row it computes (``[layers, heads, T, T]``); a needle-in-a-haystack
run at 32,768 tokens cannot. A :class:`Stepper` runs a long prompt once with no weights at all (the
fused kernel's speed and memory), then feeds one token at a time on the key/value cache and hands back
that token's next-token logits and its row of attention in every layer and head, ``[layers, heads, T]``:
memory O(T) per step, never O(T²).

Three engines step, as they generate: the native engine (attnviz's own attention, GPT-2 and the LLaMA
family), transformers on attnviz's attention function (``fused``: the prompt through SDPA, each step's
weights from the queries and keys transformers hands over), and transformers' eager attention (``hf``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from ..errors import UsageError
from .cache import cache_of, with_cache


class Stepper(Protocol):
    """A causal model decoding on a key/value cache (see the module's docs)."""

    name: str
    engine: str
    n_layers: int
    n_heads: int
    max_positions: int | None

    def prefill(self, ids: list[int]) -> None:
        """Run ``ids`` on a fresh cache, computing no attention weights and no logits."""

    def step(self, token: int) -> tuple[Tensor, Tensor]:
        """Feed ``token`` after everything so far: its next-token logits (``[vocab]``, float32) and its
        attention over every token so far, itself included (``[layers, heads, T]``, float32, CPU)."""
        ...  # pragma: no cover - a protocol


@dataclass
class Codec:
    """A model's text ↔ ids, as a prompt is built: ``encode`` without special tokens, ``start`` the ids
    an ordinary encoding puts first (a BOS), ``chat`` the model's chat template cut around the user's
    message (None: the model has none), ``eos`` the ids that end generation."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    label: Callable[[int], str]
    start: list[int]
    chat: tuple[str, str] | None
    eos: list[int]


CHAT_MARK = "\x00attnviz-message\x00"


def codec_from_tokenizer(tokenizer: Any, eos: list[int]) -> Codec:
    """The :class:`Codec` of a transformers tokenizer."""
    from .tokens import label_from_piece

    def encode(text: str) -> list[int]:
        return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]

    plain, full = encode("a"), [int(i) for i in tokenizer("a")["input_ids"]]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    # The specials an ordinary encoding puts before the text (a BOS), even where "a" is itself unknown and
    # its id the BOS's: the latest place the text can start with only special tokens before it.
    starts = [i for i in range(len(full) - len(plain) + 1)
              if full[i : i + len(plain)] == plain and all(t in special for t in full[:i])]
    start = full[: max(starts)] if starts else []
    chat: tuple[str, str] | None = None
    if getattr(tokenizer, "chat_template", None):
        try:
            rendered = tokenizer.apply_chat_template([{"role": "user", "content": CHAT_MARK}], tokenize=False,
                                                     add_generation_prompt=True)
        except Exception:  # a template that cannot render a plain message: use none
            rendered = ""
        if isinstance(rendered, str) and rendered.count(CHAT_MARK) == 1:
            before, after = rendered.split(CHAT_MARK)
            chat = (before, after)

    def label(i: int) -> str:
        piece = tokenizer.convert_ids_to_tokens(i)
        return label_from_piece(piece) if piece is not None else f"<{i}>"

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=True))

    return Codec(encode, decode, label, start, chat, eos)


class NativeStepper:
    """Stepping on the native engine (:class:`attnviz.sources.native.NativeSource`)."""

    engine = "native"

    def __init__(self, source: Any) -> None:
        if not source.capabilities.generation:
            raise UsageError(f"{source.name} is not a causal language model; it cannot generate")
        self.source, self.model = source, source.model
        norm, head = source.model.language_model_head(source.weights)
        self.norm, self.head = norm.to(source.device), head.to(source.device)
        self.name, self.max_positions = source.name, source.max_positions
        self.n_layers = source.model.n_layers
        self.n_heads = int(source.model.layers[0]["attn"].n_heads)
        self.device = torch.device(source.device)
        self.cache: Any = None

    def _run(self, ids: list[int], weights: bool) -> list[Tensor]:
        from .decoding import KVCache
        from .stream import Capture

        if self.cache is None:
            self.cache = KVCache()
        new = torch.tensor([ids], device=self.device)
        mask = torch.ones(1, self.cache.length + len(ids), dtype=torch.long, device=self.device)
        capture = Capture() if weights else Capture(layers=frozenset())
        outs = self.model.run(new, mask, None, self.n_layers, capture, self.cache)
        return [out.weights[0, :, -1].float().cpu() for out in outs if weights and out.weights is not None]

    @torch.no_grad()
    def prefill(self, ids: list[int]) -> None:
        from .decoding import KVCache

        self.cache = KVCache()
        if ids:
            self._run(ids, weights=False)

    @torch.no_grad()
    def step(self, token: int) -> tuple[Tensor, Tensor]:
        rows = self._run([token], weights=True)
        logits = self.norm(self.cache.hidden[0, -1]) @ self.head.T
        return logits.float().cpu(), torch.stack(rows)


class TransformersStepper:
    """Stepping on transformers: the prompt through the base model alone (no language-model head, no
    weights), each step through the whole model with ``output_attentions``."""

    def __init__(self, model: Any, name: str) -> None:
        from .hf_attention import is_fused

        self.model, self.name = model, name
        self.engine = "fused" if is_fused(model) else "hf"
        cfg = getattr(model.config, "get_text_config", lambda: model.config)()
        self.n_layers = int(getattr(cfg, "num_hidden_layers", None) or cfg.n_layer)
        self.n_heads = int(getattr(cfg, "num_attention_heads", None) or cfg.n_head)
        self.max_positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
        self.past: Any = None
        self.length = 0

    @torch.no_grad()
    def prefill(self, ids: list[int]) -> None:
        from .hf_attention import weights_mode

        self.past, self.length = None, 0
        if not ids:
            return
        if self.engine == "hf":  # eager attention builds each layer's [H, T, T] even when it returns none
            from ..limits import check_memory

            check_memory(3 * 4 * self.n_heads * len(ids) ** 2,
                         f"eager attention over {len(ids):,} tokens ({self.n_heads} heads); the fused engine "
                         "([[engine=fused]]) computes no weights for the prompt")
        with weights_mode("none"):
            out = self.model.base_model(input_ids=torch.tensor([ids], device=self.model.device), use_cache=True)
        self.past, self.length = cache_of(out), len(ids)

    @torch.no_grad()
    def step(self, token: int) -> tuple[Tensor, Tensor]:
        from .hf_attention import whole_weights

        with whole_weights(self.model):
            out = self.model(input_ids=torch.tensor([[token]], device=self.model.device), use_cache=True,
                             output_attentions=True, **with_cache(self.model, self.past))
        self.past, self.length = cache_of(out), self.length + 1
        rows = torch.zeros(self.n_layers, self.n_heads, self.length)
        for layer, weights in enumerate(out.attentions):
            width = weights.shape[-1]  # a sliding-window layer's cache keeps only its last keys
            rows[layer, :, self.length - width:] = weights[0, :, -1].float().cpu()
        return out.logits[0, -1].float().cpu(), rows



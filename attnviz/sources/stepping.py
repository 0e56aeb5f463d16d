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
from pathlib import Path
from typing import Any, Literal, Protocol

import torch
from torch import Tensor

from ..errors import UsageError
from .cache import cache_of, with_cache

Rows = Literal["none", "last", "all"]
"""What a feed returns of attention: nothing, the last new token's row ``[layers, heads, T]``, or every new
token's rows ``[layers, heads, n, T]`` (``T`` every token so far)."""


class Stepper(Protocol):
    """A causal model decoding on a key/value cache (see the module's docs): every decoding loop in attnviz
    (:func:`attnviz.sources.decoding.decode`) runs on one."""

    name: str
    engine: str
    n_layers: int
    n_heads: int
    max_positions: int | None
    length: int  # positions fed so far (a cut cache holds fewer keys; the next token's position is this)

    def reset(self) -> None:
        """Forget every token fed: the next feed starts a fresh cache."""

    def feed(self, ids: list[int], *, rows: Rows = "none", every_logit: bool = False) -> tuple[Tensor, Tensor | None]:
        """Run ``ids`` after everything so far: the next-token logits of the last one (``[vocab]``; of each one,
        ``[n, vocab]``, with ``every_logit``), float32 on the CPU, and the attention ``rows`` asks for."""
        ...  # pragma: no cover - a protocol


@dataclass
class CausalModel:
    """A causal model loaded once (:func:`attnviz.sources.causal.load_causal`): ``source`` for extraction,
    ``stepper`` for decoding, ``eos`` the ids that end generation, ``folder`` where its files are (None for a config
    model)."""

    source: Any
    stepper: Stepper
    eos: list[int]
    folder: Path | None

    @property
    def name(self) -> str:
        return str(self.source.name)


def prefill(stepper: Stepper, ids: list[int]) -> None:
    """A fresh cache holding ``ids``, computing no attention weights."""
    stepper.reset()
    if ids:
        stepper.feed(ids)


def step(stepper: Stepper, token: int) -> tuple[Tensor, Tensor]:
    """Feed ``token``: its next-token logits and its attention row over every token so far, itself included
    (``[layers, heads, T]``)."""
    logits, rows = stepper.feed([token], rows="last")
    assert rows is not None  # rows="last" returns them
    return logits, rows


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
    """Stepping on the native engine (:class:`attnviz.sources.native.NativeSource`): the family's own forward pass
    on a :class:`~attnviz.sources.kv_cache.KVCache`, the language-model head read from the checkpoint."""

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
        self.length = 0

    def reset(self) -> None:
        self.cache, self.length = None, 0

    def hold(self) -> Any:
        """The cache as it is (to feed again from here: :meth:`restore`): a snapshot sharing its tensors, which no
        feed writes into (:class:`~attnviz.sources.kv_cache.KVCache`), so holding a context costs no memory."""
        return None if self.cache is None else self.cache.snapshot()

    def take_context(self, length: int) -> Any:
        """The cache's first ``length`` positions, each key/value head once (1/group of the keys under grouped-query
        attention), to :meth:`cut` from or :meth:`restore`: the context it held before more was fed, taken back a
        layer at a time as the cache is let go (the stepper starts afresh after), so the two are never held whole."""
        from .kv_cache import KVCache

        cache, self.cache, self.length = self.cache, None, 0
        if cache is None:
            return KVCache()
        groups = [self.model.attention(i).n_heads // self.model.attention(i).n_kv_heads for i in range(self.n_layers)]
        return cache.taken(length, groups)

    def restore(self, state: Any) -> None:
        """Feed from ``state`` next (one :meth:`hold` or :meth:`cut` gave; a snapshot of it is fed, so it can be
        restored twice)."""
        if state is None:
            self.reset()
            return
        self.cache = None  # the cache fed before is let go first
        self.cache = state.snapshot()
        self.length = self.cache.length

    def cut(self, state: Any, keep: list[Tensor]) -> Any:
        """``state`` (a held context) keeping in each layer and key/value head only the keys ``keep[layer]`` marks
        (:class:`~attnviz.sources.kv_cache.CutKVCache`)."""
        from .kv_cache import cut_kv_cache

        return cut_kv_cache(state, keep, getattr(self.model, "window", None))

    @torch.no_grad()
    def feed(self, ids: list[int], *, rows: Rows = "none", every_logit: bool = False) -> tuple[Tensor, Tensor | None]:
        from .kv_cache import KVCache
        from .stream import Capture

        if self.cache is None:
            self.cache = KVCache()
        new = torch.tensor([ids], device=self.device)
        mask = torch.ones(1, self.cache.length + len(ids), dtype=torch.long, device=self.device)
        capture = Capture() if rows != "none" else Capture(layers=frozenset())
        outs = self.model.run(new, mask, None, self.n_layers, capture, self.cache)
        weights = [out.weights[0] for out in outs if rows != "none" and out.weights is not None]
        self.length = self.cache.length
        hidden = self.cache.hidden[0] if every_logit else self.cache.hidden[0, -1]
        logits = (self.norm(hidden) @ self.head.T).float().cpu()
        if rows == "none":
            return logits, None
        stacked = torch.stack(weights).float()
        return logits, (stacked[:, :, -1] if rows == "last" else stacked).cpu()


class TransformersStepper:
    """Stepping on transformers (a ``...ForCausalLM``): a feed without weights runs through the base model alone
    where no logits are wanted (a prompt: no language-model head over every position), each step through the whole
    model, ``output_attentions`` when rows are asked for. Positions are passed explicitly, so a cut cache
    (:mod:`attnviz.sources.cut_cache`: fewer keys than positions) continues at the right one."""

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
        self.cutting: Any = None  # the plan of a cut cache being fed (:class:`attnviz.sources.cut_cache.Cut`)

    def reset(self) -> None:
        self.past, self.length, self.cutting = None, 0, None

    def hold(self) -> Any:
        """A copy of the cache as it is (to feed again from here: :meth:`restore`)."""
        import copy

        return copy.deepcopy(self.past), self.length

    def restore(self, state: Any) -> None:
        """Feed from ``state`` next: one :meth:`hold` gave (copied again, so it can be restored twice), or a cut
        (:func:`attnviz.sources.cut_cache.cut_cache`), which it then holds."""
        import copy

        from .cut_cache import Cut

        self.past = None  # the cache fed before is let go before its successor is copied
        if isinstance(state, Cut):
            self.past, self.length, self.cutting = copy.deepcopy(state.cache), state.n_context, state
        else:
            self.past, self.length, self.cutting = copy.deepcopy(state[0]), state[1], None

    def cut(self, state: Any, keep: list[Tensor]) -> Any:
        """``state`` (a held context) keeping in each layer and key/value head only the keys ``keep[layer]`` marks
        (:func:`attnviz.sources.cut_cache.cut_cache`)."""
        from .cut_cache import cut_cache

        return cut_cache(state[0], state[1], keep)

    @torch.no_grad()
    def feed(self, ids: list[int], *, rows: Rows = "none", every_logit: bool = False) -> tuple[Tensor, Tensor | None]:
        if self.cutting is not None and len(ids) > 1:  # a cut cache's keys are not in position order: one at a time
            fed = [self.feed([token], rows=rows, every_logit=every_logit) for token in ids]
            if rows == "all":
                raise UsageError("a cut cache gives no matrix of rows")  # pragma: no cover - no caller asks
            return (torch.stack([f[0] for f in fed]) if every_logit else fed[-1][0]), fed[-1][1]
        if rows == "none" and self.past is None and len(ids) > 1 and not every_logit:
            return self._prefill(ids)
        from .cut_cache import feeding
        from .hf_attention import weights_mode, whole_weights

        device = self.model.device
        at = torch.arange(self.length, self.length + len(ids), device=device)
        with feeding(self.model, self.cutting), (whole_weights(self.model) if rows != "none" else weights_mode("none")):
            out = self.model(input_ids=torch.tensor([ids], device=device), use_cache=True, cache_position=at,
                             position_ids=at[None], output_attentions=rows != "none",
                             **with_cache(self.model, self.past))
        self.past, self.length = cache_of(out), self.length + len(ids)
        logits = (out.logits[0] if every_logit else out.logits[0, -1]).float().cpu()
        if rows == "none":
            return logits, None
        n = 1 if rows == "last" else len(ids)
        found = torch.zeros(self.n_layers, self.n_heads, n, self.length)
        for layer, weights in enumerate(out.attentions):
            width = weights.shape[-1]  # a sliding-window layer's cache keeps only its last keys
            found[layer, :, :, self.length - width:] = weights[0, :, -n:].float().cpu()
        return logits, (found[:, :, 0] if rows == "last" else found)

    def _prefill(self, ids: list[int]) -> tuple[Tensor, Tensor | None]:
        """A prompt through the base model alone, no weights and no language-model head over every position; its
        last token through the whole model, for its next-token logits (as the model computes them: a final
        soft-cap or scale included)."""
        from .hf_attention import weights_mode

        if self.engine == "hf":  # eager attention builds each layer's [H, T, T] even when it returns none
            from ..limits import check_memory

            check_memory(3 * 4 * self.n_heads * len(ids) ** 2,
                         f"eager attention over {len(ids):,} tokens ({self.n_heads} heads); the fused engine "
                         "([[engine=fused]]) computes no weights for the prompt")
        with weights_mode("none"):
            out = self.model.base_model(input_ids=torch.tensor([ids[:-1]], device=self.model.device), use_cache=True)
        self.past, self.length = cache_of(out), len(ids) - 1
        return self.feed(ids[-1:])

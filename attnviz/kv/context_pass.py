"""One forward pass over the prompt and its future tokens, read layer by layer for the KV-cache policies.

The context (the prompt whose cache a policy would cut) and the future tokens (the question, or the model's own
continuation) run as one causal sequence, so each layer gives, as row blocks computed on demand from its queries
and keys (:class:`~attnviz.attention.rows.AttentionRows`; never ``[H, T, T]`` at 32,768 tokens):

- the context's rows over the context's keys (what H2O, SnapKV and TOVA read),
- the future rows over every key (what recall, the output error and the oracle read),
- the layer's value vectors (the output error's ``o = A v``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..errors import UsageError


class LayerRows:
    """Rows ``first … stop − 1`` of one layer over its first ``n_keys`` keys, served as
    :class:`attnviz.analysis.kv_policies.RowBlocks` (row r at position ``first + r``, causal)."""

    causal = True

    def __init__(self, part: Any, first: int, stop: int, n_keys: int, q: Tensor | None = None,
                 k: Tensor | None = None, *, narrow: bool = False) -> None:
        self.part, self.first, self.narrow = part, first, narrow
        self.n_heads, self.n_rows, self.n_keys, self.offset = int(part.n_heads), stop - first, n_keys, first
        self.q, self.k = q, k

    def block(self, start: int, stop: int) -> Tensor:
        made = self.part.made_from
        if made is None:  # weights held whole (a short input)
            return self.part.rows(self.first + start, self.first + stop, cols=(0, self.n_keys)).float()
        rows, item, n = made
        # The rows straight from the queries and keys (no copy into a second buffer); a causal block stops at
        # its last row's key, the rest of its keys are 0.
        block = rows.block(item, self.first + start, self.first + stop, n)[..., : self.n_keys].float().cpu()
        if self.narrow or block.shape[-1] == self.n_keys:  # narrow: a reader that takes the zeros as read (H2O)
            return block
        return torch.nn.functional.pad(block, (0, self.n_keys - block.shape[-1]))


@dataclass
class LayerParts:
    """One layer as the policies read it (see the module)."""

    layer: int
    context: LayerRows
    future: LayerRows
    values: Tensor  # [Hkv, T + F, d]
    n_kv_heads: int


def kv_heads(source: Any) -> int:
    """How many key/value heads each layer of ``source`` has (grouped-query attention: fewer than query heads)."""
    config: Any = getattr(getattr(source, "model", None), "config", None) or {}
    if not isinstance(config, dict):  # transformers' config object (the native engine keeps config.json's dict)
        config = getattr(config, "get_text_config", lambda: config)().to_dict()
    heads = config.get("num_attention_heads") or config.get("n_head")
    return int(config.get("num_key_value_heads") or heads or 1)


def layer_windows(source: Any) -> list[int | None]:
    """Each layer's sliding window (a query at position i sees keys i − W + 1 … i), or None for a layer that sees
    every earlier key: Mistral's every layer, Gemma 2/3's and gpt-oss's local layers. Read as the engine runs it:
    the native engine's own window, else transformers' rule (``layer_types`` where the config has them, else
    every layer when ``sliding_window`` is set). Chunked attention (Llama 4) is refused: its cache is no window."""
    n_layers = int(source.n_layers)
    model = getattr(source, "model", None)
    if hasattr(model, "window"):  # the native engine: one window for every layer (Mistral), or None
        window = model.window  # type: ignore[union-attr]
        return [int(window) if window else None] * n_layers
    config: Any = getattr(model, "config", None) or {}
    if not isinstance(config, dict):
        config = getattr(config, "get_text_config", lambda: config)().to_dict()
    width = config.get("sliding_window")
    types = config.get("layer_types")
    if not types:
        return [int(width) if width else None] * n_layers
    if "chunked_attention" in types:
        raise UsageError(f"{source.name} has chunked-attention layers, whose cache is cut by chunk, not by a "
                         "policy; kv reads full and sliding-window layers only")
    return [int(width) if kind == "sliding_attention" and width else None for kind in types][:n_layers]


def read_sequence(source: Any, ids: list[int], labels: list[str], n_context: int, *,
                  queries_keys: bool = False, narrow: bool = False) -> Iterator[LayerParts]:
    """Every layer of ``ids`` (the context's ``n_context`` tokens, then the future's) through ``source``, one
    at a time (see the module); ``queries_keys``: the context's rows carry its queries and keys too (what
    block-sparse pooling reads); ``narrow``: the context's causal blocks stop at their last row's key."""
    from ..sources.base import ExtractOptions
    from ..sources.tokens import TokenInfo

    if not source.causal:
        raise UsageError(f"{source.name} is not a causal model: a KV cache belongs to a decoder")
    info = TokenInfo(ids=list(ids), labels=list(labels), special=[False] * len(ids), word_ids=list(range(len(ids))),
                     segment_ids=[0] * len(ids))
    eager: list[Tensor] | None = None
    if not source.capabilities.queries_keys:  # transformers' eager attention: whole weights, values from its cache
        if queries_keys:
            raise UsageError(f"the {source.engine} engine does not hand on the queries and keys that block-sparse "
                             "pooling or a policy scoring keys needs; use [[engine=native]] or fused")
        eager = _cache_values(source, ids)
        stream = source.stream_infos([info], None, False)
    else:
        source.check(ExtractOptions(values=True, rows=True, queries_keys=queries_keys))
        stream = source.stream_infos([info], None, False, rows=True, values=True, queries_keys=queries_keys)
    n_kv = None
    total = len(ids)
    for position, parts in stream:
        part = parts[0]
        values = part.values if eager is None else eager[stream.layers[position]]
        if values is None:
            raise UsageError(f"the {source.engine} engine handed on no value vectors for layer {position}")
        heads = int(part.n_heads)
        n_kv = n_kv or kv_heads(source)
        if values.shape[0] == heads and heads != n_kv:  # the native engine repeats each KV head for its group
            values = values[:: heads // n_kv]
        q = k = None
        if queries_keys and part.queries is not None and part.keys is not None:
            q = part.queries[:, :n_context].float().cpu()
            k = part.keys[:: max(1, part.keys.shape[0] // n_kv), :n_context].float().cpu()  # one per KV head
        yield LayerParts(stream.layers[position], LayerRows(part, 0, n_context, n_context, q, k, narrow=narrow),
                         LayerRows(part, n_context, total, total), values[:, :total].float().cpu(), n_kv)


def _cache_values(source: Any, ids: list[int]) -> list[Tensor]:
    """Each layer's value vectors ``[Hkv, T, d]``, from the key/value cache of one forward pass of transformers'
    model (the eager engine hands over weights alone)."""
    from transformers import DynamicCache

    from ..sources.cache import cache_of, with_cache

    model = source.model
    # A cache built without the config keeps every key of every layer: a sliding-window layer's own cache would hold
    # only its last W − 1 values, and the rows read here reach back to the first key.
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], device=model.device), use_cache=True,
                    **with_cache(model, DynamicCache()))
    cache = cache_of(out)
    if cache is None or not hasattr(cache, "layers"):
        raise UsageError(f"{source.name} on the {source.engine} engine keeps no key/value cache to read its values "
                         "from; use [[engine=native]] or fused")
    return [layer.values[0].float().cpu() for layer in cache.layers]

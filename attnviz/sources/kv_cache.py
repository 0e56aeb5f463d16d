"""The key/value cache of attnviz's own attention (the native engine, config models): each layer's keys and values
so far, and a copy cut to the keys a policy keeps (kv's end-to-end check)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from ..attention import AttentionOutput
    from ..attention.rows import RowMask


@dataclass
class KVCache:
    """Incremental decoding's state: each layer's keys and values so far (``[B, H, T, d]``, after RoPE,
    repeated under grouped-query attention), how many tokens they cover, and the last layer's
    output for the newest tokens (``hidden``, ``[B, n, d]``), from which the next token is read.

    A feed never writes into the tensors a cache holds: it replaces each layer's keys and values with new
    ones (the old ones and the new token's, concatenated), and ``length`` and ``hidden`` with new values. So
    :meth:`snapshot`, which shares the tensors, is as good as a copy, for no memory."""

    layers: list[tuple[Tensor, Tensor]] = field(default_factory=list)
    length: int = 0
    hidden: Tensor | None = None
    # Held compact (:meth:`compact`): each layer's key/value heads once, each standing for ``group`` query heads.
    group: int = 1

    def snapshot(self) -> KVCache:
        """The cache as it is now, to feed from again: its own list of layers, the tensors shared (see the class);
        a compact cache's heads repeated again (a copy)."""
        if self.group > 1:
            layers = [(keys.repeat_interleave(self.group, dim=1), values.repeat_interleave(self.group, dim=1))
                      for keys, values in self.layers]
            return replace(self, layers=layers, group=1)
        return replace(self, layers=list(self.layers))

    def taken(self, length: int, groups: list[int]) -> KVCache:
        """The first ``length`` positions, each layer's key/value heads once (``groups[layer]`` query heads share
        one under grouped-query attention; their keys were repeated): a context held to be cut, in 1/group of the
        memory (feeding from it, :meth:`snapshot` repeats them again). This cache gives up each layer as it is
        taken (it is left empty), so the two are never held whole at once."""
        group = max(groups, default=1)
        compact = group > 1 and all(g == group for g in groups)
        step = group if compact else 1
        layers = []
        for i, (keys, values) in enumerate(self.layers):
            if compact:
                keys, values = keys[:, ::step, :length].contiguous(), values[:, ::step, :length].contiguous()
            else:  # views of the first positions
                keys, values = keys[:, :, :length], values[:, :, :length]
            layers.append((keys, values))
            self.layers[i] = (keys, values)  # (this layer's whole keys let go now)
        self.layers, self.length, self.hidden = [], 0, None
        return KVCache(layers, length, group=step)

    def past(self, layer: int) -> tuple[Tensor, Tensor] | None:
        return self.layers[layer] if layer < len(self.layers) else None

    def mask_of(self, layer: int, mask: RowMask, t: int) -> RowMask | Tensor:
        """The mask layer ``layer``'s ``t`` new queries run under: the family's own (a cut cache's differs)."""
        return mask

    def keep(self, layer: int, out: AttentionOutput) -> None:
        if out.keys is None:  # pragma: no cover - MultiHeadAttention always returns its keys
            raise ValueError("the attention returned no keys to cache")
        entry = (out.keys, out.values)
        if layer < len(self.layers):
            self.layers[layer] = entry
        else:
            self.layers.append(entry)



@dataclass
class CutKVCache(KVCache):
    """A :class:`KVCache` cut to the keys a policy keeps (kv's end-to-end check on the native engine): each layer
    holds, per query head, only its key/value head's kept keys (``positions[layer]`` ``[H, b]``, ascending), then
    the keys fed after the context; ``length`` counts positions (the next token's), not keys. A query sees a kept
    key at or before its position, within the layer's ``window``."""

    positions: list[Tensor] = field(default_factory=list)
    n_context: int = 0
    window: int | None = None

    def mask_of(self, layer: int, mask: RowMask, t: int) -> RowMask | Tensor:
        kept = self.positions[layer]
        queries = torch.arange(self.length, self.length + t, device=kept.device)
        fed = torch.arange(self.n_context, self.length + t, device=kept.device)
        keys = torch.cat([kept, fed.expand(kept.shape[0], -1)], dim=1)  # [H, L]
        allowed = keys[:, None, :] <= queries[None, :, None]
        if self.window is not None:
            allowed &= queries[None, :, None] - keys[:, None, :] < self.window
        return allowed[None]  # [1, H, t, L]


def cut_kv_cache(cache: KVCache, keep: list[Tensor], window: int | None) -> CutKVCache:
    """A copy of ``cache`` (the context's, every key held) keeping in each layer and key/value head only the keys
    ``keep[layer]`` (``[Hkv, T]`` bool, the same count in every head) marks (see :class:`CutKVCache`)."""
    layers, positions = [], []
    for (keys, values), kept in zip(cache.layers, keep, strict=True):
        at = torch.stack([row.nonzero()[:, 0] for row in kept]).to(keys.device)  # [Hkv, b]
        if cache.group > 1:  # a compact cache: each key/value head's kept keys, then repeated per query head
            index = at[None, :, :, None]
            layers.append((keys.gather(2, index.expand(keys.shape[0], -1, -1, keys.shape[-1])).repeat_interleave(
                               cache.group, dim=1),
                           values.gather(2, index.expand(values.shape[0], -1, -1, values.shape[-1])).repeat_interleave(
                               cache.group, dim=1)))
            positions.append(at.repeat_interleave(cache.group, dim=0))
            continue
        at = at.repeat_interleave(keys.shape[1] // at.shape[0], dim=0)  # per query head (keys repeated under GQA)
        index = at[None, :, :, None]
        layers.append((keys.gather(2, index.expand(keys.shape[0], -1, -1, keys.shape[-1])),
                       values.gather(2, index.expand(values.shape[0], -1, -1, values.shape[-1]))))
        positions.append(at)
    return CutKVCache(layers=layers, length=cache.length, hidden=cache.hidden, positions=positions,
                      n_context=cache.length, window=window)

"""Attention one block of query rows at a time, for inputs too long to hold a layer's ``[H, T, T]``.

FlashAttention (Dao et al. 2022) never builds the attention matrix; an inspector needs it, but
seldom all of it at once. Here a mask is *described* (:class:`RowMask`: key padding, causal with
an offset, a sliding window) instead of built as a ``[T, T]`` tensor (1 GiB of booleans at
32,768 tokens), a layer's output is computed a block of rows at a time, and its weights are
handed on as :class:`AttentionRows`: the queries and keys, from which any block of rows is
computed on demand (``softmax(q_rows kᵀ · scale + mask_rows)``, the same function as the whole
matrix) and freed by whoever reads it. Statistics, pooled pictures and rollout reduce each
block as it comes (:mod:`attnviz.analysis.row_statistics`), so memory grows with T, not T².
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .buffers import weights_buffer
from .ops import attention_weights, combine_masks, decoding_mask

ROW_BLOCK = 256  # query rows per block: a block of 12 heads × 256 rows × 32,768 keys is 400 MB of float32
BLOCK_ELEMENTS = 12 * 256 * 4096  # about 50 MB of float32 per block: the rows per block shrink as keys grow


def rows_per_block(n_heads: int, n_keys: int, batch: int = 1) -> int:
    """Query rows per block so a block of weights stays near :data:`BLOCK_ELEMENTS` numbers
    (at most :data:`ROW_BLOCK`, at least 16)."""
    return max(16, min(ROW_BLOCK, BLOCK_ELEMENTS // max(1, batch * n_heads * n_keys)))


@dataclass(frozen=True)
class RowMask:
    """Which keys each query may see, described rather than built (True = may attend, as in torch).

    ``padding`` ``[B, Tk]`` flags real keys (a tokenizer's ``attention_mask``; None: all real).
    ``start`` makes it causal: query i sits at position ``start + i`` and sees keys j ≤ start + i
    (None: every key). ``window`` limits a causal query to its last ``window`` keys (Mistral).
    :meth:`rows` builds the mask of some query rows; :meth:`dense` all of it, as
    ``combine_masks(padding_mask(…), decoding_mask(…))`` does.
    """

    t_q: int
    t_k: int
    padding: Tensor | None = None
    start: int | None = None
    window: int | None = None
    device: torch.device | str | None = None  # where the masks are built (the model's device)
    _dense: list[Tensor | None] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def of(cls, attention_mask: Tensor | None, t_q: int, *, start: int | None = None,
           window: int | None = None) -> RowMask:
        """From a tokenizer's ``attention_mask`` ``[B, Tk]`` (1 = real token), for ``t_q`` new queries."""
        padding = None if attention_mask is None else attention_mask.bool()
        t_k = t_q + (start or 0) if padding is None else padding.shape[-1]
        device = None if padding is None else padding.device
        if padding is not None and bool(padding.all()):
            padding = None  # nothing to mask: the fused paths apply
        return cls(t_q, t_k, padding, start, window, device)

    @property
    def causal(self) -> bool:
        return self.start is not None

    def visible(self, stop: int, first: int = 0) -> int:
        """How many keys (from the first) rows ``first … stop − 1`` may see at most: the rest are masked."""
        return self.t_k if self.start is None else min(self.t_k, self.start + stop)

    def rows(self, first: int, stop: int, width: int | None = None) -> Tensor | None:
        """The mask of query rows ``first … stop − 1`` over the first ``width`` keys (default all),
        ``[B, 1, rows, width]`` or broadcastable to it; None when nothing is masked."""
        width = self.t_k if width is None else width
        mask = None if self.padding is None else self.padding[:, None, None, :width]
        if self.start is not None:
            i = torch.arange(self.start + first, self.start + stop, device=self.device)[:, None]
            j = torch.arange(width, device=self.device)[None, :]
            allowed = j <= i
            if self.window is not None:
                allowed &= i - j < self.window
            mask = combine_masks(mask, allowed)
        return mask

    def dense(self) -> Tensor | None:
        """The whole mask, ``[B, 1, Tq, Tk]`` or broadcastable; built once and kept."""
        if not self._dense:
            causal = None if self.start is None else decoding_mask(self.start, self.t_q, window=self.window,
                                                                    device=self.device)
            padding = None if self.padding is None else self.padding[:, None, None, :]
            self._dense.append(combine_masks(padding, causal))
        return self._dense[0]


def causal_weights(q: Tensor, k: Tensor, mask: RowMask, *, scale: float | None = None) -> Tensor:
    """The whole weights ``[B, H, Tq, Tk]`` of ``q`` over ``k`` under a causal ``mask`` (a :class:`RowMask`),
    computed :data:`ROW_BLOCK` query rows at a time (``Tq`` ≥ that many) over the keys the block sees: the keys
    after them are 0 and never multiplied (about half the products of a square layer, and half its softmax).
    Each block is :func:`~attnviz.attention.ops.attention_weights` of ``(q · scale) kᵀ`` under its rows' mask
    (without padding, the mask filled in only over the block's own square: every earlier key is seen), so every
    weight is the number the whole matrix gives (``attention_weights(attention_scores(q, k),
    mask=mask.dense())``), bit for bit with torch's CPU kernels: each score is the same product (every block has
    ``ROW_BLOCK`` rows, the last one overlapping the one before: a product of 1–3 rows takes another kernel, whose
    sums round differently), and a row's softmax over its visible keys adds the same terms as over all of them
    (the rest are exp(−inf) = 0)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    t_q, t_k = q.shape[-2], k.shape[-2]
    weights = weights_buffer((*q.shape[:-1], t_k), q)
    queries = q * scale  # as attention_scores scales them
    lead = q.shape[:-2]
    scratch = q.new_empty(math.prod(lead) * ROW_BLOCK * t_k)  # every block's scores in turn
    for end in range(ROW_BLOCK, t_q + ROW_BLOCK, ROW_BLOCK):
        stop = min(t_q, end)
        first = stop - ROW_BLOCK
        width = mask.visible(stop, first)
        block = scratch[: math.prod(lead) * ROW_BLOCK * width].view(*lead, ROW_BLOCK, width)
        torch.matmul(queries[..., first:stop, :], k[..., :width, :].transpose(-2, -1), out=block)
        rows = mask.rows(first, stop, width)
        if mask.padding is None and rows is not None:  # every key before the block's rows is seen: its square masked
            block[..., first:].masked_fill_(~rows[..., first:], float("-inf"))
            weights[..., first:stop, :width] = torch.softmax(block, dim=-1, out=block)
        else:
            weights[..., first:stop, :width] = attention_weights(block, mask=rows, inplace=True)
        weights[..., first:stop, width:] = 0
    return weights


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, mask: RowMask | None, *, scale: float | None = None) -> Tensor:
    """``softmax(q kᵀ · scale + mask) v`` ``[B, H, Tq, dv]`` without building a ``[Tq, Tk]`` mask or matrix.

    Unmasked and plainly causal attention go through torch's fused kernel whole; padding or a
    window through it a block of rows at a time, each with its rows' mask. A row that may see no
    key gives 0 (the fused kernel gives NaN there), as :func:`attnviz.attention.attention_weights` does.
    """
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if mask is None or (mask.padding is None and mask.window is None and mask.start in (None, 0)
                        and mask.t_q == mask.t_k):
        return sdpa(q, k, v, is_causal=mask is not None and mask.causal, scale=scale)
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    step = rows_per_block(q.shape[1], k.shape[-2], q.shape[0])
    for first in range(0, q.shape[-2], step):
        stop = min(q.shape[-2], first + step)
        width = mask.visible(stop, first)
        rows = mask.rows(first, stop, width)
        block = sdpa(q[..., first:stop, :], k[..., :width, :], v[..., :width, :], attn_mask=rows, scale=scale)
        if rows is not None:
            seen = rows.any(-1, keepdim=True)  # [B, 1, rows, 1]
            block = block.masked_fill(~seen, 0.0) if not bool(seen.all()) else block
        out[..., first:stop, :] = block
    return out


@dataclass
class AttentionRows:
    """One layer's attention weights for a padded batch, computed a block of query rows at a time.

    Holds what the weights are made from: the queries ``[B, H, Tq, d]`` and keys ``[B, H_kv, Tk, d]``
    (after RoPE; under grouped-query attention ``H_kv`` divides ``H`` and query head ``h`` reads key head
    ``h // (H / H_kv)``, never repeated in memory), the mask (a :class:`RowMask` or any object with its
    ``rows``/``visible``) and the scale, and what some models add to the scores: ``softcap``
    (``c · tanh(s / c)``, Gemma 2), a ``bias`` broadcastable to ``[B, H, Tq, Tk]`` (T5's relative
    positions) and ``sinks`` ``[H]`` (a learned logit in each row's softmax that takes no key, gpt-oss).
    A block is the same function as the whole matrix (``softmax(q kᵀ · scale + …)`` under the mask),
    so its numbers equal those rows of the whole matrix up to float rounding.
    """

    queries: Tensor
    keys: Tensor
    mask: RowMask | None
    scale: float | None = None
    softcap: float | None = None
    bias: Tensor | None = None
    sinks: Tensor | None = None
    # The layer's value vectors ``[B, H_kv, Tk, d_v]``, where the engine that made these rows hands them on too.
    values: Tensor | None = field(default=None, repr=False, compare=False)
    # Set to a dict to keep each row's normaliser as whole blocks are computed (a server keeping a layer:
    # a later tile over any rows needs only its own columns); ``{(item, n): (values [H, n], known [n])}``.
    memo: dict[tuple[int, int], tuple[Tensor, Tensor]] | None = field(default=None, repr=False, compare=False)

    @property
    def n_heads(self) -> int:
        return int(self.queries.shape[1])

    @property
    def plain(self) -> bool:
        """True when the weights are a softmax of scaled scores alone (no softcap, bias or sinks)."""
        return self.softcap is None and self.bias is None and self.sinks is None

    def _width(self, first: int, stop: int, n: int) -> int:
        return n if self.mask is None else min(n, self.mask.visible(stop, first))

    def _heads(self, heads: slice | None) -> range:
        return range(self.n_heads) if heads is None else range(*heads.indices(self.n_heads))

    def _products(self, item: int, first: int, stop: int, c0: int, c1: int, heads: slice | None) -> Tensor:
        """``q kᵀ · scale`` for heads ``heads``, rows ``first … stop − 1``, keys ``c0 … c1 − 1``: ``[h, rows, keys]``."""
        scale = 1.0 / math.sqrt(self.queries.shape[-1]) if self.scale is None else self.scale
        chosen = self._heads(heads)
        groups = self.n_heads // int(self.keys.shape[1])
        keys = self.keys[item, :, c0:c1].transpose(-2, -1)  # (H_kv, d, keys)
        if keys.dtype in (torch.float16, torch.bfloat16):  # a model run in half precision: weights in float32
            return self._products32(item, first, stop, keys.float(), heads, scale, groups)
        if groups == 1:
            return (self.queries[item, chosen.start : chosen.stop : chosen.step, first:stop] * scale) @ keys[
                chosen.start : chosen.stop : chosen.step]
        if heads is None:  # each key head once for its group of query heads: (H_kv, G·rows, d) @ (H_kv, d, keys)
            q = self.queries[item, :, first:stop] * scale
            rows = q.shape[-2]
            out = q.reshape(keys.shape[0], groups * rows, q.shape[-1]) @ keys
            return out.view(self.n_heads, rows, -1)
        return torch.stack([(self.queries[item, h, first:stop] * scale) @ keys[h // groups] for h in chosen])

    def _products32(self, item: int, first: int, stop: int, keys: Tensor, heads: slice | None, scale: float,
                    groups: int) -> Tensor:
        chosen = self._heads(heads)
        q = self.queries[item, chosen.start : chosen.stop : chosen.step, first:stop].float() * scale
        return torch.stack([q[i] @ keys[h // groups] for i, h in enumerate(chosen)])

    def _logits(self, item: int, first: int, stop: int, c0: int, c1: int, heads: slice | None,
                mask: Tensor | None) -> Tensor:
        """The scores the softmax takes, float32: products, soft-capped, plus the bias; −inf where masked."""
        out = self._products(item, first, stop, c0, c1, heads).float()
        if self.softcap is not None:
            out = torch.tanh(out / self.softcap) * self.softcap
        if self.bias is not None:
            chosen = self._heads(heads)
            bias = self.bias[item if self.bias.shape[0] > 1 else 0]
            bias = bias[chosen.start : chosen.stop : chosen.step] if bias.shape[0] > 1 else bias
            out = out + bias[:, first:stop, c0:c1].float()
        if mask is not None:
            mask = (mask[item if mask.shape[0] > 1 else 0] if mask.dim() == 4 else mask)[..., c0:c1]
            out.masked_fill_(~mask, float("-inf"))
        return out

    def _sinks(self, sinks: Tensor, heads: slice | None) -> Tensor:
        """``sinks`` (``self.sinks``, where there are some) of the ``heads`` chosen, in float32."""
        chosen = self._heads(heads)
        return sinks.float()[chosen.start : chosen.stop : chosen.step]

    def block(self, item: int, first: int, stop: int, n: int | None = None, heads: slice | None = None) -> Tensor:
        """Weights of text ``item``'s query rows ``first … stop − 1`` over its first ``n`` keys
        (default all), ``[H, rows, width]`` float32 (``heads``: only those). For causal attention
        ``width`` stops where every later key is masked for these rows (those columns are 0 and left out)."""
        n = self.keys.shape[-2] if n is None else n
        width = self._width(first, stop, n)
        mask = None if self.mask is None else self.mask.rows(first, stop, width)
        if self.memo is not None and heads is None:  # the row's normaliser kept on the way (see ``memo``)
            # The softmax in place on the fresh logits, its normaliser kept: max, exp, sum, divide (4 passes over
            # the block; logsumexp, then exp(logits − lse) into new tensors, took 2.5× as long at 8,192 keys).
            logits = self._logits(item, first, stop, 0, width, None, mask)
            top = logits.amax(-1, keepdim=True)
            sink = None if self.sinks is None else self._sinks(self.sinks, None)[:, None, None]
            if sink is not None:
                top = torch.maximum(top, sink)
            top = torch.where(torch.isfinite(top), top, 0.0)  # a row that sees no key (and has no sink): all 0
            total = logits.sub_(top).exp_().sum(-1, keepdim=True)
            if sink is not None:
                total = total + torch.exp(sink - top)
            lse = (top + total.log())[..., 0]  # −inf where the row sees nothing
            values, known = self.memo.setdefault((item, n), (torch.zeros(self.n_heads, n), torch.zeros(n, dtype=torch.bool)))
            values[:, first:stop], known[first:stop] = lse.cpu(), True
            return logits.div_(torch.where(total > 0, total, 1.0))
        if self.plain:
            scores = self._products(item, first, stop, 0, width, heads)
            if mask is not None:
                mask = mask[item if mask.shape[0] > 1 else 0] if mask.dim() == 4 else mask
            return attention_weights(scores, mask=mask, inplace=True).float()
        logits = self._logits(item, first, stop, 0, width, heads, mask)
        if self.sinks is None:
            seen = torch.isfinite(logits).any(-1, keepdim=True)
            return torch.where(seen, torch.softmax(logits, dim=-1), 0.0)
        sink = self._sinks(self.sinks, heads)[:, None, None]  # a logit in every row's softmax that takes no key
        top = torch.maximum(logits.amax(-1, keepdim=True), sink)
        exp = torch.exp(logits - top)
        return exp / (exp.sum(-1, keepdim=True) + torch.exp(sink - top))

    def scores(self, item: int, first: int, stop: int, c0: int, c1: int, heads: slice | None = None) -> Tensor:
        """The scores the softmax takes (``q kᵀ · scale``, soft-capped, plus any bias) of text ``item``'s rows
        ``first … stop − 1`` over keys ``c0 … c1 − 1``, ``[H, rows, c1 − c0]`` float32, −inf where the mask
        hides a key (``heads``: only those)."""
        mask = None if self.mask is None else self.mask.rows(first, stop, c1)
        return self._logits(item, first, stop, c0, c1, heads, mask)

    def normalisers(self, item: int, first: int, stop: int, n: int | None = None, heads: slice | None = None) -> Tensor:
        """Each row's log-sum-exp of its scores over the keys it sees (among the first ``n``), and its sink
        if the model has one, ``[H, rows]``: with it, any columns of those rows are ``exp(scores − normaliser)``
        (:meth:`columns`), without the rest of the row. −inf for a row that sees no key (and has no sink)."""
        n = self.keys.shape[-2] if n is None else n
        kept = None if self.memo is None else self.memo.get((item, n))
        if kept is not None and bool(kept[1][first:stop].all()):
            chosen = self._heads(heads)
            return kept[0][chosen.start : chosen.stop : chosen.step, first:stop].to(self.queries.device)
        heads_n = len(self._heads(heads))
        step = rows_per_block(heads_n, max(1, self._width(first, stop, n)))
        out = []
        for start in range(first, stop, step):
            end = min(stop, start + step)
            out.append(torch.logsumexp(self.scores(item, start, end, 0, self._width(start, end, n), heads), dim=-1))
        lse = torch.cat(out, dim=-1)
        return lse if self.sinks is None else torch.logaddexp(lse, self._sinks(self.sinks, heads)[:, None])

    def columns(self, item: int, first: int, stop: int, c0: int, c1: int, normalisers: Tensor,
                heads: slice | None = None) -> Tensor:
        """Weights of rows ``first … stop − 1`` over keys ``c0 … c1 − 1`` from their :meth:`normalisers`
        ``[H, rows]``: equal to those cells of :meth:`block` to float rounding, for a fraction of the work."""
        scores = self.scores(item, first, stop, c0, c1, heads)
        seen = torch.isfinite(normalisers)[..., None]
        return torch.where(seen, torch.exp(scores - torch.where(seen, normalisers[..., None], 0.0)), 0.0)

    def blocks(self, item: int, n: int | None = None, rows: int | None = None) -> Iterator[tuple[int, Tensor]]:
        """``(first row, block)`` for every block of text ``item``'s rows, in order (see :meth:`block`):
        its first ``n`` queries over its first ``n`` keys, or every query over every key (default)."""
        n_rows = self.queries.shape[-2] if n is None else n
        step = rows or rows_per_block(self.n_heads, self.keys.shape[-2] if n is None else n)
        for first in range(0, n_rows, step):
            yield first, self.block(item, first, min(n_rows, first + step), n)

    def dense(self, item: int, n: int | None = None, device: torch.device | str | None = None) -> Tensor:
        """Text ``item``'s whole ``[H, n, n]`` (default ``[H, Tq, Tk]``): what a consumer that needs every number
        gets, on the CPU (or ``device``)."""
        shape = (self.queries.shape[-2], self.keys.shape[-2]) if n is None else (n, n)
        out = torch.zeros(self.n_heads, *shape, device=device)
        for first, block in self.blocks(item, n):
            out[:, first : first + block.shape[1], : block.shape[2]] = block
        return out

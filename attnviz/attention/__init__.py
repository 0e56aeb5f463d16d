"""Our own attention, in torch: the multi-head module, built from the pure functions of
:mod:`attnviz.attention.ops` (named here too: ``attnviz.attention.attention_weights`` and the rest).

Scaled dot-product attention follows Vaswani et al. 2017, "Attention Is All You Need":
``softmax(Q Kᵀ / √d_k + mask) V``. Unlike fused kernels (torch's SDPA, FlashAttention) every
function here returns the attention weights, because an inspector exists to look at them.

Shapes are written where they change: B batch, H heads, T sequence, d head width.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

import torch
from torch import Tensor, nn

from .ops import (
    apply_rotary,
    attention_scores,
    attention_weights,
    causal_mask,
    combine_masks,
    decoding_mask,
    head_value_norms,
    merge_heads,
    padding_mask,
    repeat_kv,
    rotary_tables,
    scaled_dot_product_attention,
    sliding_window_mask,
    split_heads,
)

if TYPE_CHECKING:  # pragma: no cover
    from .rows import AttentionRows, RowMask

__all__ = [
    "AttentionOutput",
    "MultiHeadAttention",
    "apply_rotary",
    "causal_mask",
    "combine_masks",
    "decoding_mask",
    "head_value_norms",
    "merge_heads",
    "padding_mask",
    "repeat_kv",
    "rotary_tables",
    "scaled_dot_product_attention",
    "sliding_window_mask",
    "split_heads",
]

def _rows_causal(mask: Tensor | RowMask | None, q: Tensor, causal: bool, keep_scores: bool) -> bool:
    """Whether a layer's whole weights go through :func:`attnviz.attention.rows.causal_weights`: a causal mask
    described from the first position (no cache before it, no window), float32, no scores kept, no gradient, and
    more query rows than one block."""
    from .rows import ROW_BLOCK

    return (mask is not None and not isinstance(mask, Tensor) and mask.start == 0 and mask.window is None and not causal
            and not keep_scores and q.dtype == torch.float32 and q.shape[-2] > ROW_BLOCK
            and not (torch.is_grad_enabled() and q.requires_grad))


class AttentionOutput(NamedTuple):
    """What :class:`MultiHeadAttention` returns."""

    output: Tensor  # [B, Tq, d_out]
    weights: Tensor | None  # [B, H, Tq, Tk], per head (None with need_weights=False)
    scores: Tensor | None  # [B, H, Tq, Tk], pre-softmax, scaled, before masking (None unless kept)
    values: Tensor  # [B, H, Tk, d], each head's value vectors (shared ones repeated under GQA)
    queries: Tensor | None = None  # [B, H, Tq, d], each head's query vectors (after RoPE)
    keys: Tensor | None = None  # [B, H, Tk, d], each head's key vectors (after RoPE; repeated under GQA)
    rows: AttentionRows | None = None  # the weights as blocks of rows on demand (need_weights="rows")


def built(part: Tensor | None, what: str = "attention weights") -> Tensor:
    """A part of an :class:`AttentionOutput` the call asked for (``weights``, ``scores``, …), which is never
    None then; an error naming it, should a change of the call leave it out."""
    if part is None:
        raise RuntimeError(f"the layer's {what} were not built")
    return part


class MultiHeadAttention(nn.Module):
    """Multi-head attention with per-head weights, for self- and cross-attention.

    Projections use ``nn.Linear`` (weight ``[out, in]``, so ``Q = x Wᵀ + b``). ``n_kv_heads``
    below ``n_heads`` gives grouped-query attention; ``d_context`` is the width of the sequence
    attended to in cross-attention; ``d_out`` the width after W_O (default ``d_model``).
    ``d_value`` is each head's value width, d_v (default ``d_head``, the query/key width d_k): V is
    then ``n_kv_heads · d_value`` wide and W_O reads ``n_heads · d_value`` columns.
    ``out_proj=False`` leaves out W_O and returns
    the concatenated heads, as in seed 002's worked example.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        d_head: int | None = None,
        n_kv_heads: int | None = None,
        d_context: int | None = None,
        d_out: int | None = None,
        bias: bool = True,
        out_proj: bool = True,
        d_value: int | None = None,
    ) -> None:
        super().__init__()
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
            d_head = d_model // n_heads
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads {n_heads} is not divisible by n_kv_heads {n_kv_heads}")
        d_context = d_model if d_context is None else d_context
        d_value = d_head if d_value is None else d_value
        self.n_heads, self.n_kv_heads, self.d_head, self.d_value = n_heads, n_kv_heads, d_head, d_value
        self.q_proj = nn.Linear(d_model, n_heads * d_head, bias=bias)
        self.k_proj = nn.Linear(d_context, n_kv_heads * d_head, bias=bias)
        self.v_proj = nn.Linear(d_context, n_kv_heads * d_value, bias=bias)
        d_out = d_model if d_out is None else d_out
        self.o_proj = nn.Linear(n_heads * d_value, d_out, bias=bias) if out_proj else None

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        mask: Tensor | RowMask | None = None,
        causal: bool = False,
        rotary: tuple[Tensor, Tensor] | None = None,
        scale: float | None = None,
        need_weights: bool | Literal["rows"] = True,
        keep_scores: bool = True,
        past: tuple[Tensor, Tensor] | None = None,
    ) -> AttentionOutput:
        """Attend from ``x`` ``[B, Tq, d_model]`` to ``context`` ``[B, Tk, d_context]`` (default: ``x``).

        ``mask`` is boolean, broadcastable to ``[B, H, Tq, Tk]``, True = may attend; combine a
        :func:`padding_mask` and a :func:`causal_mask` with :func:`combine_masks`. ``rotary`` is a
        ``(cos, sin)`` pair from :func:`rotary_tables`, applied to queries and keys (RoPE).

        ``need_weights=False`` computes only the output, with torch's fused kernel: the
        ``[Tq, Tk]`` matrices are never built (``weights`` and ``scores`` are None). That is how a
        layer nobody asked to see costs no attention-matrix memory. ``keep_scores=False`` drops
        the pre-softmax scores as soon as the weights exist. ``need_weights="rows"`` computes the
        output the same way and returns the weights as :class:`attnviz.attention.rows.AttentionRows`
        (``rows``), blocks of query rows made on demand: how inputs too long for one ``[H, T, T]`` are read.
        ``mask`` may be a :class:`attnviz.attention.rows.RowMask`, a mask described rather than built.

        ``past`` is a key/value cache for incremental decoding: the ``(keys, values)`` an earlier call
        returned (``[B, H, T_past, d]``, after RoPE, repeated under GQA). The new keys and values are
        appended to them, so ``x`` holds only the new tokens (``rotary`` and ``mask`` then describe
        the new queries' positions, see :func:`decoding_mask`); the returned ``keys`` and ``values``
        are the whole cache for the next call.

        Warning: True means "may attend", as in torch's ``scaled_dot_product_attention``. A mask where
        True means "masked" (seed 000's ``torch.triu(ones, diagonal=1).bool()``, any mask written for
        ``masked_fill(mask, -inf)``) must be inverted first (``~mask``); passed as it is, every query
        attends only to the positions it meant to hide, e.g. only to the future.
        """
        context = x if context is None else context
        q = split_heads(self.q_proj(x), self.n_heads)  # (B, H, Tq, d)
        k = split_heads(self.k_proj(context), self.n_kv_heads)  # (B, H_kv, Tk, d)
        v = split_heads(self.v_proj(context), self.n_kv_heads)  # (B, H_kv, Tk, d)
        n_rep = self.n_heads // self.n_kv_heads
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, Tk, d)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=-2), torch.cat((past[1], v), dim=-2)  # (B, H, T_past + Tk, d)
        scores: Tensor | None
        weights: Tensor | None
        rows: AttentionRows | None = None
        if need_weights == "rows" or (not need_weights and not isinstance(mask, Tensor)):
            from .rows import AttentionRows, RowMask, blocked_attention

            if isinstance(mask, Tensor):
                raise ValueError('need_weights="rows" takes a RowMask (a mask described, not built), not a tensor')
            described = mask
            if causal:
                described = RowMask(q.shape[-2], k.shape[-2], None if described is None else described.padding, 0,
                                    None if described is None else described.window, q.device)
            heads = blocked_attention(q, k, v, described, scale=scale)  # (B, H, Tq, d)
            rows = AttentionRows(q, k, described, scale) if need_weights == "rows" else None
            scores = weights = None
        elif need_weights:
            if _rows_causal(mask, q, causal, keep_scores):
                from .rows import causal_weights

                assert mask is not None and not isinstance(mask, Tensor)
                scores, weights = None, causal_weights(q, k, mask, scale=scale)  # the keys each row sees only
            else:
                if mask is not None and not isinstance(mask, Tensor):
                    mask = mask.dense()
                scores = attention_scores(q, k, scale=scale)  # (B, H, Tq, Tk)
                # Scores nobody keeps become the weights in place: one [Tq, Tk] buffer per head, not three.
                weights = attention_weights(scores, mask=mask, causal=causal, inplace=not keep_scores)
                if not keep_scores:
                    scores = None
            heads = weights.to(v.dtype) @ v  # (B, H, Tq, d)
        else:
            assert isinstance(mask, Tensor)  # no mask, or a RowMask, took the first branch
            allowed = combine_masks(mask, causal_mask(q.shape[-2], k.shape[-2], device=q.device) if causal else None)
            heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
            scores = weights = None
        out = merge_heads(heads)  # (B, Tq, H·d)
        if self.o_proj is not None:
            out = self.o_proj(out)  # (B, Tq, d_out)
        return AttentionOutput(out, weights, scores, v, q, k, rows)
